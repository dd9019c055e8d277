//! A minimal Rally client: joins the example server's room, moves its hand in a circle at
//! 90 Hz for five seconds, and prints what it sees.
//!
//! Run `cargo run --release --example client [SERVER_ADDRESS]` (default 127.0.0.1:7777).
//!
//! It issues its own connect token, playing the part of your game's backend (which in a real
//! game is a service of yours that holds the key, so that clients never see it).

use rally_driver::UdpDriver;
use rally_engine::{connection_config, ClientConfig, ClientEvent, ClientSession};
use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::{ConnectToken, EndpointConfig, Event, TokenKey};
use std::net::SocketAddr;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:7777".into()).parse()?;
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let mut driver = UdpDriver::bind("127.0.0.1:0", config)?;
    let connection = driver.connect_with_token(backend_token(server)?)?;
    let clock = driver.clock();
    let mut session: ClientSession<[f32; 3], String> = ClientSession::new(ClientConfig::default())?;
    let frame = Duration::from_secs(1) / 90;
    for n in 0..450u32 {
        // Sample the hand and send it at once; then take what arrives until the next frame.
        let t = n as f32 * frame.as_secs_f32();
        session.send_input(driver.now(), [t.cos() * 0.3, 1.2, t.sin() * 0.3]);
        session.transmit(driver.endpoint());
        driver.run_for(frame, |_, connection, event| match event {
            Event::Connected => session.connected(connection),
            Event::Message { channel, payload } => session.receive(clock.now(), channel, &payload),
            Event::Disconnected { reason } => {
                session.disconnected();
                println!("disconnected: {reason:?}");
            }
        })?;
        session.transmit(driver.endpoint());
        while let Some(event) = session.poll_event() {
            if let ClientEvent::Joined { client, .. } = event {
                println!("joined as client {client}");
            }
        }
        if n % 90 == 89 {
            let rtt = session.connection_stats(driver.endpoint()).map(|s| s.rtt);
            let hands: Vec<_> = session.entities().map(|e| e.position).collect();
            println!(
                "rtt {rtt:?}, last input applied {:?}, hands {hands:?}",
                session.last_applied_input()
            );
        }
    }
    // Say goodbye, so that the room hears it now rather than after the idle timeout.
    driver.endpoint().disconnect(connection, rally_proto::DisconnectReason::Closed);
    driver.run_for(Duration::from_millis(50), |_, _, _| {})?;
    Ok(())
}

/// What your backend does when a player is matched to a server: a token for that server.
fn backend_token(server: SocketAddr) -> Result<ConnectToken, Box<dyn std::error::Error>> {
    // The example server's key and protocol id (see examples/server.rs).
    let key = TokenKey(*b"example key: replace in your app");
    let grant = Grant {
        client_id: u64::from(std::process::id()),
        room_id: 0,
        user_data: [0; USER_DATA_LEN],
        server_addresses: vec![server],
        timeout_s: 5,
    };
    let mut random = TokenRandomness {
        nonce: [0; 24],
        client_to_server_key: [0; 32],
        server_to_client_key: [0; 32],
    };
    getrandom::fill(&mut random.nonce)?;
    getrandom::fill(&mut random.client_to_server_key)?;
    getrandom::fill(&mut random.server_to_client_key)?;
    #[allow(clippy::disallowed_methods)] // tokens expire on the wall clock
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    Ok(token::issue(&key, 7, &grant, now, 30, &random)?)
}
