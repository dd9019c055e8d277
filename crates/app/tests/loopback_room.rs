//! Goal: the engine works over real UDP sockets and the OS clock as the examples use it: a
//! client joins a room on loopback, its inputs move its hand, and it sees the move.
//! Method: the examples' server loop in a thread, a client in the test, about a second of
//! inputs, then a wait (with a generous deadline) for the snapshot that reflects the last one.

use rally_driver::{Clock, UdpDriver};
use rally_engine::{connection_config, ClientConfig, ClientSession, Entity, EntityId, Room};
use rally_engine::{ClientId, RoomConfig, Simulation, Transform, World};
use rally_proto::{EndpointConfig, Event};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Default)]
struct Hands(HashMap<ClientId, EntityId>);

impl Simulation for Hands {
    type Input = [f32; 3];
    type Message = ();
    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &[f32; 3]) {
        if let Some(hand) = self.0.get(&client).and_then(|id| world.get_mut(*id)) {
            hand.transform.position = (*input).into();
        }
    }
    fn step(&mut self, _world: &mut World, _dt: Duration) {}
    fn joined(&mut self, world: &mut World, client: ClientId) {
        let id = world.spawn(Entity::at(Transform::IDENTITY)).expect("room for a hand");
        self.0.insert(client, id);
    }
}

/// Plaintext: this test is of the room over real sockets, not of the security.
fn config() -> EndpointConfig {
    let security = rally_proto::Security::DangerPlaintext;
    EndpointConfig { connection: connection_config(), security, ..Default::default() }
}

#[test]
fn a_client_moves_its_hand_in_a_room_over_loopback() {
    let mut server = UdpDriver::bind("127.0.0.1:0", config()).unwrap();
    let address = server.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let room_thread = std::thread::spawn(move || {
        let mut room = Room::new(RoomConfig::default(), Hands::default(), 1).unwrap();
        let clock = server.clock();
        while !stopped.load(Ordering::Relaxed) {
            server
                .run_for(room.config().dt(), |_, connection, event| match event {
                    Event::Connected => room.accept(connection),
                    Event::Message { channel, payload } => {
                        room.receive(clock.now(), connection, channel, &payload)
                    }
                    Event::Disconnected { reason } => {
                        room.disconnected(clock.now(), connection, reason)
                    }
                })
                .unwrap();
            room.tick(server.now(), server.endpoint());
        }
        room.stats().inputs_applied
    });

    let mut client = UdpDriver::bind("127.0.0.1:0", config()).unwrap();
    let client_clock = client.clock();
    client.connect(address);
    let mut session: ClientSession<[f32; 3], ()> =
        ClientSession::new(ClientConfig::default()).unwrap();
    let mut last = None;
    for n in 0..90u32 {
        last = Some(session.send_input(client.now(), [n as f32 * 0.01, 1.0, 0.0]));
        session.transmit(client.endpoint());
        client
            .run_for(Duration::from_millis(11), |_, connection, event| match event {
                Event::Connected => session.connected(connection),
                Event::Message { channel, payload } => {
                    session.receive(client_clock.now(), channel, &payload)
                }
                Event::Disconnected { reason } => panic!("disconnected: {reason:?}"),
            })
            .unwrap();
        session.transmit(client.endpoint());
    }
    // Let the last inputs land and their snapshot come back, however long a loaded machine
    // takes.
    let clock = Clock::start();
    let patience = rally_proto::Instant::ZERO + Duration::from_secs(30);
    let moved = |session: &ClientSession<[f32; 3], ()>| {
        session.entities().next().is_some_and(|hand| (hand.position.x - 0.89).abs() < 0.002)
    };
    while !(session.last_applied_input() == last && moved(&session)) && clock.now() < patience {
        client
            .run_for(Duration::from_millis(10), |_, _, event| {
                if let Event::Message { channel, payload } = event {
                    session.receive(client_clock.now(), channel, &payload);
                }
            })
            .unwrap();
        session.transmit(client.endpoint());
    }
    stop.store(true, Ordering::Relaxed);
    let applied = room_thread.join().unwrap();
    assert!(session.client_id().is_some(), "joined");
    assert_eq!(session.last_applied_input(), last, "every input reached the room");
    assert!(applied >= 1);
    let hand = session.entities().next().expect("its hand");
    assert!((hand.position.x - 0.89).abs() < 0.002, "the hand is where the last input put it");
}
