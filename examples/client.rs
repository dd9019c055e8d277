//! A minimal Rally client: joins the example server's room, moves its hand in a circle at
//! 90 Hz for five seconds, and prints what it sees.
//!
//! Run `cargo run --release --example client [SERVER_ADDRESS]` (default 127.0.0.1:7777).

use rally_driver::UdpDriver;
use rally_engine::{connection_config, ClientConfig, ClientEvent, ClientSession};
use rally_proto::{EndpointConfig, Event};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:7777".into()).parse()?;
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let mut driver = UdpDriver::bind("127.0.0.1:0", config)?;
    let connection = driver.connect(server);
    let clock = driver.clock();
    let mut session: ClientSession<[f32; 3], String> = ClientSession::new(ClientConfig::default());
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
