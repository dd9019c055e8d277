//! Goal: every named limit of a room and a client session holds where a user meets it: the call
//! past the limit gets a typed error (or the surplus is dropped and counted), what was within
//! it is delivered, and the session works again once the queue drains; a config outside its
//! ranges is refused naming the field.
//! Method: the sandbox game in a room with one or two clients over a clean emulated link, in
//! virtual time, with each limit set small. The room's per-message limits (clients, inputs per
//! frame, events, the fast path) are tested in crates/engine/src/room.rs.

use rally_engine::{
    ClientConfig, ClientEvent, ClientSession, ConfigError, Delivery, Entity, Room, RoomConfig,
    RoomEvent, RpcError, Target, Transform, WorldError,
};
use rally_netem::LinkConfig;
use rally_sim::sandbox::{HandInput, Sandbox, SandboxMessage};
use rally_sim::RoomNet;
use std::time::Duration;

/// A room of `config` with `clients` clients of `client` config, all joined.
fn joined(config: RoomConfig, client: ClientConfig, clients: usize) -> RoomNet<Sandbox> {
    let room = Room::new(config, Sandbox::default(), 1).unwrap();
    let link = LinkConfig { delay: Duration::from_millis(10), ..LinkConfig::default() };
    let mut net = RoomNet::new(room, clients, link, 1);
    for i in 0..clients {
        net.sessions[i] = ClientSession::new(client.clone()).unwrap();
        net.connect(i);
    }
    net.run_for(Duration::from_millis(500));
    assert!(net.sessions.iter().all(|s| s.client_id().is_some()), "every client joined");
    net
}

fn counts_received(events: &[RoomEvent<SandboxMessage>]) -> Vec<u32> {
    let counts = events.iter().filter_map(|e| match e {
        RoomEvent::Message { message: SandboxMessage::Count(n), .. } => Some(*n),
        _ => None,
    });
    counts.collect()
}

#[test]
fn the_rooms_outbox_refuses_past_outbox_max_and_delivers_what_it_took() {
    // Two messages fit an outbox of two between transmits; the third is refused as full and
    // counted; the client gets exactly the two, and the next send after the transmit works.
    let config = RoomConfig { clients_max: 1, outbox_max: 2, ..RoomConfig::default() };
    let mut net = joined(config, ClientConfig::default(), 1);
    let client = net.sessions[0].client_id().unwrap();
    let failed = net.room.stats().sends_failed;
    for n in 0..2 {
        let message = SandboxMessage::Count(n);
        net.room.send(Target::One(client), Delivery::Reliable, &message).unwrap();
    }
    let third = net.room.send(Target::One(client), Delivery::Reliable, &SandboxMessage::Count(2));
    assert!(matches!(third, Err(RpcError::Full)), "{third:?}");
    assert_eq!(net.room.stats().sends_failed, failed + 1);
    net.flush();
    net.room.send(Target::One(client), Delivery::Reliable, &SandboxMessage::Count(3)).unwrap();
    net.run_for(Duration::from_millis(200));
    let received: Vec<u32> = net.client_events[0]
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Message(SandboxMessage::Count(n)) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(received, [0, 1, 3]);
}

#[test]
fn the_rooms_requests_stop_at_requests_max_until_one_times_out() {
    // Two requests to a client that never answers fill a limit of two; the third is refused
    // as full; once both time out (reported as events) a new request is taken.
    let config = RoomConfig {
        requests_max: 2,
        request_timeout: Duration::from_millis(100),
        ..RoomConfig::default()
    };
    let mut net = joined(config, ClientConfig::default(), 1);
    let client = net.sessions[0].client_id().unwrap();
    let now = net.net.now;
    for n in 0..2 {
        net.room.request(now, client, &SandboxMessage::Count(n)).unwrap();
    }
    let third = net.room.request(now, client, &SandboxMessage::Count(2));
    assert!(matches!(third, Err(RpcError::Full)), "{third:?}");
    net.run_for(Duration::from_millis(200));
    let timeouts =
        net.room_events.iter().filter(|e| matches!(e, RoomEvent::RequestTimedOut { .. }));
    assert_eq!(timeouts.count(), 2);
    assert!(net.room.request(net.net.now, client, &SandboxMessage::Count(3)).is_ok());
}

#[test]
fn a_sessions_outbox_and_requests_refuse_past_their_limits() {
    // A session with an outbox of two refuses a third message as full, and the room gets the
    // two; a session allowing one pending request refuses a second until the first is
    // answered (the sandbox does not answer, so it times out).
    let client = ClientConfig {
        outbox_max: 2,
        requests_max: 1,
        request_timeout: Duration::from_millis(100),
        ..ClientConfig::default()
    };
    let mut net = joined(RoomConfig::default(), client, 1);
    let session = &mut net.sessions[0];
    for n in 0..2 {
        session.send(Delivery::Reliable, &SandboxMessage::Count(n)).unwrap();
    }
    let third = session.send(Delivery::Reliable, &SandboxMessage::Count(2));
    assert!(matches!(third, Err(RpcError::Full)), "{third:?}");
    net.run_for(Duration::from_millis(100));
    assert_eq!(counts_received(&net.room_events), [0, 1]);
    let now = net.net.now;
    net.sessions[0].request(now, &SandboxMessage::Count(5)).unwrap();
    let second = net.sessions[0].request(now, &SandboxMessage::Count(6));
    assert!(matches!(second, Err(RpcError::Full)), "{second:?}");
    net.run_for(Duration::from_millis(200));
    assert!(net.client_events[0].iter().any(|e| matches!(e, ClientEvent::RequestTimedOut(_))));
    assert!(net.sessions[0].request(net.net.now, &SandboxMessage::Count(7)).is_ok());
}

#[test]
fn a_session_keeps_inputs_kept_inputs_and_counts_the_older_ones_dropped() {
    // Six inputs sampled before any goes out, with room for four: the two oldest are dropped
    // and counted, and the room applies the four newest, once each.
    let client = ClientConfig { inputs_kept: 4, ..ClientConfig::default() };
    let mut net = joined(RoomConfig::default(), client, 1);
    let now = net.net.now;
    let mut last = 0;
    for n in 0..6 {
        let position = [n as f32, 1.0, 0.0];
        last =
            net.sessions[0].send_input(now, HandInput { position, rotation: [0.0, 0.0, 0.0, 1.0] });
    }
    assert_eq!(net.sessions[0].stats().inputs_dropped, 2);
    net.flush();
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.room.stats().inputs_applied, 4);
    let client = net.sessions[0].client_id().unwrap();
    assert_eq!(net.room.last_input(client), Some(last));
}

#[test]
fn the_world_refuses_spawns_past_entities_max_and_the_room_replicates_what_it_holds() {
    // A room whose snapshots hold three entities: with one client's controller in it, two
    // more spawn and the third is refused as full; a despawn makes room again, and the client
    // sees exactly the entities the room holds.
    let mut config = RoomConfig::default();
    config.snapshot.entities_max = 3;
    let client = ClientConfig { snapshot: config.snapshot, ..ClientConfig::default() };
    let mut net = joined(config, client, 1);
    let world = net.room.world_mut();
    assert_eq!(world.len(), 1, "the controller");
    let a = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    assert_eq!(world.spawn(Entity::at(Transform::IDENTITY)), Err(WorldError::Full(3)));
    world.despawn(a).unwrap();
    world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    net.run_for(Duration::from_millis(100));
    let seen = net.sessions[0].snapshot().unwrap().entities().len();
    assert_eq!(seen, 3);
}

#[test]
fn configs_outside_their_ranges_are_refused_naming_the_field() {
    // Each constructor refuses a config its validation refuses, with the field and its range;
    // the defaults pass.
    assert!(RoomConfig::default().validate().is_ok());
    assert!(ClientConfig::default().validate().is_ok());
    let room = RoomConfig { clients_max: 0, ..RoomConfig::default() };
    let refused = Room::new(room, Sandbox::default(), 1).unwrap_err();
    assert!(matches!(refused, ConfigError::OutOfRange { field: "clients_max", min: 1, .. }));
    // The outbox must hold a tick's snapshots for every client.
    let room = RoomConfig { clients_max: 64, outbox_max: 63, ..RoomConfig::default() };
    let refused = room.validate().unwrap_err();
    let expected =
        ConfigError::OutOfRange { field: "outbox_max", value: 63, min: 64, max: 1 << 20 };
    assert_eq!(refused, expected);
    assert_eq!(refused.to_string(), "outbox_max is 63, outside its range 64..=1048576");
    for room in [
        RoomConfig { tick_rate: 0, ..RoomConfig::default() },
        RoomConfig { inputs_per_frame_max: 0, ..RoomConfig::default() },
        RoomConfig { requests_max: 0, ..RoomConfig::default() },
        RoomConfig { events_max: 0, ..RoomConfig::default() },
        RoomConfig { views_kept: 1, ..RoomConfig::default() },
        RoomConfig { snapshot_budget_bytes: 10, ..RoomConfig::default() },
        RoomConfig { request_timeout: Duration::ZERO, ..RoomConfig::default() },
    ] {
        assert!(room.validate().is_err(), "{room:?}");
    }
    let client = ClientConfig { views_kept: 1, ..ClientConfig::default() };
    type Session = ClientSession<HandInput, SandboxMessage>;
    let refused = Session::new(client).unwrap_err();
    assert!(matches!(refused, ConfigError::OutOfRange { field: "views_kept", min: 2, .. }));
    let mut client = ClientConfig::default();
    client.interpolation.jitter_quantile = f64::NAN;
    assert!(matches!(client.validate(), Err(ConfigError::FractionOutOfRange { .. })));
}
