//! A scene room's client: joins a room of `rally server --scene FILE`, sends the standard XR
//! input (head, two hands, grip) at 90 Hz for five seconds, and prints what it sees. No game
//! code on either side: the scene file is the whole game.
//!
//! Run `cargo run --release --example scene_client -- KEY [SERVER_ADDRESS]`, with the server's
//! token key (the file its log names when it generated one, `path=...`, or its `security.key`
//! in hex) and the address of its worker 0 (default 127.0.0.1:7777).
//!
//! It issues its own connect token with that key, playing the part of your game's backend
//! (which in a real game holds the key, so that clients never see it).

use glam::Vec3;
use rally_driver::{backend, UdpDriver};
use rally_engine::{connection_config, ClientConfig, ClientEvent, ClientSession};
use rally_proto::{EndpointConfig, Event, TokenKey};
use rally_scene::{SceneMessage, XrHand, XrInput, XrPose};
use std::collections::BTreeMap;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let key = args.next().ok_or("give the server's key: scene_client KEY_FILE|HEX [ADDRESS]")?;
    // The server writes a key it generates to a file (never to its output): take a path or hex.
    let key = match std::fs::read_to_string(&key) {
        Ok(text) => text.trim().to_string(),
        Err(_) => key,
    };
    let key = TokenKey(rally_wire::hex::decode(&key)?.try_into().map_err(|_| "32-byte key")?);
    let server = args.next().unwrap_or_else(|| "127.0.0.1:7777".into()).parse()?;
    // Protocol id 1 is `rally server`'s default; room 0 lives on worker 0.
    let client_id = u64::from(std::process::id());
    let token = backend::issue(&key, 1, client_id, 0, vec![server], 30)?;
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let mut driver = UdpDriver::bind("127.0.0.1:0", config)?;
    let connection = driver.connect_with_token(token)?;
    let clock = driver.clock();
    // A scene room's input is the standard XR input; its messages are relays and key-values.
    let mut session: ClientSession<XrInput, SceneMessage> =
        ClientSession::new(ClientConfig::default())?;
    let frame = Duration::from_secs(1) / 90;
    let mut seen: BTreeMap<u32, Vec3> = BTreeMap::new();
    for n in 0..450u32 {
        // Stand at the sandbox's first spawn point, sway both hands, press the right grip
        // every other second.
        let t = n as f32 * frame.as_secs_f32();
        let pose =
            |x: f32, y: f32, z: f32| XrPose { position: [x, y, z], rotation: [0., 0., 0., 1.] };
        let hand =
            |x: f32, grip: u8| XrHand { pose: pose(x, 1.1 + 0.1 * t.sin(), 3.2), grip, trigger: 0 };
        let grip = if (t as u32) % 2 == 1 { 255 } else { 0 };
        let input = XrInput {
            head: pose(0.0, 1.6, 3.5),
            hands: [hand(-0.25, 0), hand(0.25, grip)],
            game: Default::default(),
        };
        session.send_input(driver.now(), input);
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
                println!("joined as client {client}, at {:?} Hz", session.tick_rate());
            }
        }
        if n % 90 == 89 {
            // Entity ids follow the scene file: its colliders, then its bodies.
            let now: BTreeMap<u32, Vec3> = session.entities().map(|e| (e.id, e.position)).collect();
            let moved = now.iter().filter(|(id, at)| seen.get(*id) != Some(*at)).count();
            println!("{} entities, {moved} of them new or moved since the last line", now.len());
            seen = now;
        }
    }
    // Say goodbye, so that the room hears it now rather than after the idle timeout.
    driver.endpoint().disconnect(connection, rally_proto::DisconnectReason::Closed);
    driver.run_for(Duration::from_millis(50), |_, _, _| {})?;
    Ok(())
}
