//! A minimal Rally server: one room where each client's hand follows its inputs.
//!
//! Run `cargo run --release --example server`, then `cargo run --release --example client` in
//! another terminal (as many as you like). Ctrl-C stops it.
//!
//! It lets in only clients with a connect token sealed under `EXAMPLE_KEY`, and every packet
//! is encrypted. In a real game your backend holds the key (as do your servers: load it from
//! a secret store, or make one with `rally token keygen`) and hands each client a token.

use rally_driver::UdpDriver;
use rally_engine::{connection_config, ClientId, Entity, EntityId, Room, RoomConfig};
use rally_engine::{Simulation, Transform, World};
use rally_proto::{EndpointConfig, TokenKey};
use std::collections::HashMap;
use std::time::Duration;

/// The game: a hand per client, placed where the client's input says.
#[derive(Default)]
struct Hands(HashMap<ClientId, EntityId>);

impl Simulation for Hands {
    type Input = [f32; 3];
    type Message = String;

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &[f32; 3]) {
        if let Some(hand) = self.0.get(&client).and_then(|id| world.get_mut(*id)) {
            hand.transform.position = (*input).into();
        }
    }

    fn step(&mut self, _world: &mut World, _dt: Duration) {}

    fn joined(&mut self, world: &mut World, client: ClientId) {
        if let Ok(id) = world.spawn(Entity::at(Transform::IDENTITY)) {
            self.0.insert(client, id);
        }
    }

    fn left(&mut self, world: &mut World, client: ClientId) {
        if let Some(id) = self.0.remove(&client) {
            let _ = world.despawn(id);
        }
    }
}

/// The key this example's server and its clients' "backend" share. Never ship a key in code.
pub const EXAMPLE_KEY: [u8; 32] = *b"example key: replace in your app";
/// The example game's protocol id.
pub const EXAMPLE_PROTOCOL: u64 = 7;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let key = TokenKey(EXAMPLE_KEY);
    let mut driver = UdpDriver::bind_secure("127.0.0.1:7777", config, key, EXAMPLE_PROTOCOL)?;
    let mut room = Room::new(RoomConfig::default(), Hands::default(), 1)?;
    let clock = driver.clock();
    println!("room listening on {}", driver.local_addr()?);
    loop {
        // Datagrams reach the room the moment they arrive; the room ticks at 128 Hz.
        driver.run_for(room.config().dt(), |endpoint, connection, event| {
            // Connections join, inputs are applied and RPCs arrive at once.
            room.handle_event(clock.now(), connection, event);
            // Whatever the room answered goes now, not at the next tick.
            room.transmit(endpoint);
        })?;
        room.tick(driver.now(), driver.endpoint());
        while let Some(event) = room.poll_event() {
            println!("{event:?}");
        }
    }
}
