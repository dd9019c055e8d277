//! Goal: the host runs many rooms on worker threads over real sockets: each connection reaches
//! the room its token names on the worker that owns it; a room whose game code panics is closed
//! alone, its clients told why, while the other rooms tick on; a shutdown delivers every
//! reliable message already sent, through loss, before telling clients the server is going.
//! Method: a host on loopback with sealed connections, players that are real client sessions
//! on their own sockets, all in this process; a lossy relay thread where loss matters. Every
//! wait is for a condition (players joined, a report showing the rooms) with a generous
//! deadline, never a fixed sleep, so a loaded machine makes these tests slower, not red.

use rally_driver::backend;
use rally_driver::host::HostReport;
use rally_driver::host::{Game, Scope};
use rally_driver::{Clock, Host, HostConfig, UdpDriver};
use rally_engine::{connection_config, ClientEvent, ClientSession, Delivery, Entity, EntityId};
use rally_engine::{ClientId, Room, RoomConfig, Simulation, Target, Transform, World};
use rally_proto::{DisconnectReason, EndpointConfig, Event, TokenKey};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PROTOCOL: u64 = 0x7e57;

/// How long a test waits for something that must happen: seconds where an idle machine takes
/// milliseconds.
const PATIENCE: Duration = Duration::from_secs(30);

/// Each client's input moves its hand; the game panics at its first step with
/// `panic_with_clients` clients if set, and sleeps `slow` in each step.
#[derive(Default)]
struct Hands {
    hands: BTreeMap<ClientId, EntityId>,
    panic_with_clients: Option<usize>,
    slow: Duration,
}

impl Simulation for Hands {
    type Input = [f32; 3];
    type Message = u32;

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &[f32; 3]) {
        if let Some(hand) = self.hands.get(&client).and_then(|id| world.get_mut(*id)) {
            hand.transform.position = glam::Vec3::from_array(*input);
        }
    }

    fn step(&mut self, _world: &mut World, _dt: Duration) {
        std::thread::sleep(self.slow);
        if self.panic_with_clients == Some(self.hands.len()) {
            panic!("the game's own bug (a test of containment)");
        }
    }

    fn joined(&mut self, world: &mut World, client: ClientId) {
        if let Ok(id) = world.spawn(Entity::at(Transform::IDENTITY)) {
            self.hands.insert(client, id);
        }
    }
}

/// A player: a client session on its own socket.
struct Player {
    driver: UdpDriver,
    session: ClientSession<[f32; 3], u32>,
    joined: bool,
    snapshots: u64,
    messages: Vec<u32>,
    ended: Option<DisconnectReason>,
}

impl Player {
    /// Connects with a token for `room` naming `servers` (the first is where it sends).
    fn join(key: &TokenKey, client: u64, room: u64, servers: Vec<SocketAddr>) -> Self {
        let config = EndpointConfig { connection: connection_config(), ..Default::default() };
        let mut driver = UdpDriver::bind("127.0.0.1:0", config).expect("binds");
        let token = backend::issue(key, PROTOCOL, client, room, servers, 60).expect("issued");
        driver.connect_with_token(token).expect("a valid token");
        let session = ClientSession::new(Default::default()).expect("the default config is valid");
        Self { driver, session, joined: false, snapshots: 0, messages: Vec::new(), ended: None }
    }

    /// One frame: what arrived, then an input.
    fn frame(&mut self, length: Duration) {
        let clock = self.driver.clock();
        let (session, ended) = (&mut self.session, &mut self.ended);
        self.driver
            .run_for(length, |_, connection, event| match event {
                Event::Connected => session.connected(connection),
                Event::Message { channel, payload } => {
                    session.receive(clock.now(), channel, &payload)
                }
                Event::Disconnected { reason } => {
                    *ended = Some(reason);
                    session.disconnected();
                }
            })
            .expect("the player's loop runs");
        while let Some(event) = self.session.poll_event() {
            match event {
                ClientEvent::Joined { .. } => self.joined = true,
                ClientEvent::Snapshot { .. } => self.snapshots += 1,
                ClientEvent::Message(k) => self.messages.push(k),
                _ => {}
            }
        }
        if self.ended.is_none() {
            let now = self.driver.now();
            self.session.send_input(now, [now.as_secs_f64() as f32, 1.0, 0.0]);
            self.session.transmit(self.driver.endpoint());
        }
    }
}

/// Runs every player's frames for `length` in all.
fn play(players: &mut [Player], length: Duration) {
    let frames = (length.as_millis() / 4).max(1);
    let each = Duration::from_millis(4) / players.len() as u32;
    for _ in 0..frames {
        for player in players.iter_mut() {
            player.frame(each);
        }
    }
}

/// Plays until `done` holds; fails naming `what` if it still does not after [`PATIENCE`].
fn play_until(players: &mut [Player], what: &str, mut done: impl FnMut(&[Player]) -> bool) {
    let clock = Clock::start();
    while !done(players) {
        assert!(clock.now() < rally_proto::Instant::ZERO + PATIENCE, "{what}: not in {PATIENCE:?}");
        play(players, Duration::from_millis(20));
    }
}

/// Plays until the host publishes a report for which `ready` holds, and returns it; fails
/// naming `what`, with the last report, if none does within [`PATIENCE`].
fn report_when(
    host: &Host,
    players: &mut [Player],
    what: &str,
    ready: impl Fn(&HostReport) -> bool,
) -> HostReport {
    let clock = Clock::start();
    loop {
        let report = host.report();
        if ready(&report) {
            return report;
        }
        let waited = clock.now() >= rally_proto::Instant::ZERO + PATIENCE;
        assert!(!waited, "{what}: not in {PATIENCE:?}; the last report: {report:#?}");
        play(players, Duration::from_millis(20));
    }
}

fn host_config(workers: usize, key: &TokenKey) -> HostConfig {
    HostConfig { workers, key: Some(key.clone()), protocol_id: PROTOCOL, ..HostConfig::default() }
}

fn room(panic_with_clients: Option<usize>) -> Room<Hands> {
    Room::new(RoomConfig::default(), Hands { panic_with_clients, ..Hands::default() }, 1)
        .expect("the default config is valid")
}

#[test]
fn connections_reach_the_room_their_token_names_on_its_worker() {
    let key = backend::random_key().expect("randomness");
    let host = Host::start(host_config(2, &key), |_| room(None)).expect("starts");
    let mut players: Vec<Player> = (0..6u64)
        .map(|k| Player::join(&key, k, k % 3 + 1, vec![host.room_address(k % 3 + 1)]))
        .collect();
    play_until(&mut players, "every player joins and gets snapshots", |players| {
        players.iter().all(|p| (p.joined && p.snapshots > 0) || p.ended.is_some())
    });
    for (k, player) in players.iter().enumerate() {
        assert_eq!(player.ended, None, "player {k} stays connected");
    }
    // Figures are published ten times a second: wait for one that shows all six clients and
    // every scope timed, then check where each room is.
    let timed = [Scope::Receive, Scope::Decrypt, Scope::Replicate, Scope::Encrypt];
    let report = report_when(&host, &mut players, "a report of 3 rooms of 2", |report| {
        report.rooms.iter().map(|r| r.clients).sum::<usize>() == 6
            && report.workers.iter().all(|w| timed.iter().all(|s| w.scope_nanos[s.index()] > 0))
            && report.workers.iter().all(|w| w.cpu_us > 0)
    });
    let mut rooms: Vec<(u64, usize, usize)> =
        report.rooms.iter().map(|r| (r.room_id, r.worker, r.clients)).collect();
    rooms.sort();
    assert_eq!(rooms, vec![(1, 1, 2), (2, 0, 2), (3, 1, 2)], "(room, worker, clients)");
    assert_eq!(report.workers.len(), 2);
    assert!(report.room_ticks() > 0);
    host.shutdown(Duration::from_millis(200)).expect("drains");
}

#[test]
fn a_room_whose_game_panics_is_closed_alone() {
    let key = backend::random_key().expect("randomness");
    // Room 2's game panics once both its players are in; room 1's never does. One worker
    // runs both.
    let game = |id: u64| room((id == 2).then_some(2));
    let host = Host::start(host_config(1, &key), game).expect("starts");
    let address = host.room_address(1);
    let mut players: Vec<Player> =
        (0..4u64).map(|k| Player::join(&key, k, k % 2 + 1, vec![address])).collect();
    play_until(&mut players, "room 2's players are let go", |p| {
        p[1].ended.is_some() && p[3].ended.is_some()
    });
    assert_eq!(players[1].ended, Some(DisconnectReason::RoomFailed));
    assert_eq!(players[3].ended, Some(DisconnectReason::RoomFailed));
    let before: Vec<u64> = players.iter().map(|p| p.snapshots).collect();
    play_until(&mut players, "room 1 ticks on", |p| {
        [0, 2].iter().all(|&k| p[k].snapshots > before[k] || p[k].ended.is_some())
    });
    for k in [0, 2] {
        assert_eq!(players[k].ended, None, "player {k} in the sound room stays");
    }
    let report = report_when(&host, &mut players, "a report of the failure", |report| {
        report.workers.iter().any(|w| w.rooms_failed > 0)
    });
    assert_eq!(report.workers[0].rooms_failed, 1);
    assert_eq!(report.rooms.iter().map(|r| r.room_id).collect::<Vec<_>>(), vec![1]);
    host.shutdown(Duration::from_millis(200)).expect("drains");
}

#[test]
fn a_room_over_its_budget_is_counted_on_every_tick() {
    let key = backend::random_key().expect("randomness");
    let mut config = host_config(1, &key);
    let budget = Duration::from_millis(5);
    config.budgets.simulate = budget;
    // Room 2's game sleeps twice its budget in every step: a sleep lasts at least as long as
    // asked on the monotonic clock the host times scopes with, so each of its ticks is over
    // budget however fast or loaded the machine. Room 1's game does nothing: for its step to
    // take 5 ms on every tick, the machine would have to stall the worker at that instant
    // every time.
    let game = move |id: u64| {
        let slow = if id == 2 { 2 * budget } else { Duration::ZERO };
        Room::new(RoomConfig::default(), Hands { slow, ..Hands::default() }, 1).expect("valid")
    };
    let host = Host::start(config, game).expect("starts");
    let address = host.room_address(1);
    let mut players: Vec<Player> =
        (0..2u64).map(|k| Player::join(&key, k, k + 1, vec![address])).collect();
    let ticked = |report: &HostReport, id: u64| {
        report.rooms.iter().find(|r| r.room_id == id).is_some_and(|r| r.ticks > 10)
    };
    let report = report_when(&host, &mut players, "both rooms tick 10 times", |report| {
        ticked(report, 1) && ticked(report, 2)
    });
    let room = |id: u64| report.rooms.iter().find(|r| r.room_id == id).expect("open").clone();
    let simulate = 2; // the index of simulate in ROOM_SCOPES
    assert_eq!(rally_driver::host::telemetry::ROOM_SCOPES[simulate], Scope::Simulate);
    let (sound, slow) = (room(1), room(2));
    assert_eq!(slow.overruns[simulate], slow.ticks, "every slow tick is over budget: {slow:?}");
    assert!(slow.scope_max_nanos[simulate] >= 2 * budget.as_nanos() as u64, "{slow:?}");
    assert!(sound.overruns[simulate] < sound.ticks, "the slow room's overruns are its own");
    assert_eq!(
        report.workers[0].overruns[simulate],
        slow.overruns[simulate] + sound.overruns[simulate]
    );
    host.shutdown(Duration::from_millis(200)).expect("drains");
}

/// Sends every client of every room a counter, reliably, after each tick; counts what it sent.
struct Counter {
    sent: Arc<AtomicU32>,
}

impl Game for Counter {
    type Simulation = Hands;

    fn open(&self, _room_id: u64) -> Room<Hands> {
        room(None)
    }

    fn after_tick(&self, room: &mut Room<Hands>) {
        if room.clients().next().is_none() {
            return;
        }
        let next = self.sent.load(Ordering::Relaxed);
        if room.send(Target::All, Delivery::Reliable, &next).is_ok() {
            self.sent.store(next + 1, Ordering::Relaxed);
        }
    }
}

/// A relay that passes everything to the server and drops every third datagram back, and
/// every one while `dark` is set.
fn lossy_relay(server: SocketAddr, stop: Arc<AtomicBool>, dark: Arc<AtomicBool>) -> SocketAddr {
    relay(UdpSocket::bind("127.0.0.1:0").expect("binds"), server, stop, dark, 3)
}

/// Passes what arrives at `front` to `server` and back, dropping every `drop_every`-th
/// datagram back (0: none) and every one while `dark` is set; `front`'s address.
fn relay(
    front: UdpSocket,
    server: SocketAddr,
    stop: Arc<AtomicBool>,
    dark: Arc<AtomicBool>,
    drop_every: u64,
) -> SocketAddr {
    let back = UdpSocket::bind("127.0.0.1:0").expect("binds");
    let address = front.local_addr().expect("bound");
    for socket in [&front, &back] {
        socket.set_nonblocking(true).expect("settable");
    }
    std::thread::spawn(move || {
        let (mut buf, mut client, mut back_count) = (vec![0u8; 2048], None, 0u64);
        while !stop.load(Ordering::Relaxed) {
            while let Ok((len, from)) = front.recv_from(&mut buf) {
                client = Some(from);
                let _ = back.send_to(&buf[..len], server);
            }
            while let Ok((len, _)) = back.recv_from(&mut buf) {
                back_count += 1;
                let dropped = drop_every != 0 && back_count % drop_every == 0;
                let pass = !dropped && !dark.load(Ordering::Relaxed);
                if let (Some(client), true) = (client, pass) {
                    let _ = front.send_to(&buf[..len], client);
                }
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    });
    address
}

#[test]
fn a_worker_behind_a_port_mapping_takes_tokens_naming_its_public_address() {
    // Goal: behind a port mapping (Agones' Dynamic ports, a NAT) clients reach a worker at an
    // address it did not bind; tokens name that address and the worker takes them, and a
    // token naming the bound address is refused (the worker's public address is the one
    // tokens must name). Method: a relay on its own port stands for the mapping; the host is
    // told the relay's address as its worker's public address.
    let key = backend::random_key().expect("randomness");
    let front = UdpSocket::bind("127.0.0.1:0").expect("binds");
    let public = front.local_addr().expect("bound");
    let config = HostConfig { public_addresses: vec![public], ..host_config(1, &key) };
    let host = Host::start(config, |_| room(None)).expect("starts");
    assert_eq!(host.room_address(1), public, "tokens name the public address");
    assert_ne!(host.addresses()[0], public);
    let stop = Arc::new(AtomicBool::new(false));
    relay(front, host.addresses()[0], stop.clone(), Arc::new(AtomicBool::new(false)), 0);
    let mut players = vec![
        Player::join(&key, 1, 1, vec![public]),
        Player::join(&key, 2, 1, vec![host.addresses()[0]]),
    ];
    play_until(&mut players, "the mapped player joins", |p| p[0].joined && p[0].snapshots > 0);
    let report = report_when(&host, &mut players, "the bound address refused", |report| {
        report.workers[0].transport.refused_wrong_server > 0
    });
    assert!(!players[1].joined, "a token naming the bound address is not taken");
    assert_eq!(report.rooms.iter().map(|r| r.clients).sum::<usize>(), 1);
    stop.store(true, Ordering::Relaxed);
    host.shutdown(Duration::from_millis(100)).expect("drains");
}

#[test]
fn a_shutdown_delivers_what_was_sent_through_loss_then_says_why() {
    let key = backend::random_key().expect("randomness");
    let sent = Arc::new(AtomicU32::new(0));
    let host = Host::start(host_config(1, &key), Counter { sent: sent.clone() }).expect("starts");
    let (stop, dark) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let relay = lossy_relay(host.room_address(1), stop.clone(), dark.clone());
    // The token names the relay (where the player sends) and the worker (which checks it).
    let mut players = vec![Player::join(&key, 1, 1, vec![relay, host.room_address(1)])];
    play_until(&mut players, "counting starts", |p| {
        !p[0].messages.is_empty() || p[0].ended.is_some()
    });
    assert!(players[0].joined, "the player joined");
    // The way back goes dark: the messages sent now are lost, so they are still unacknowledged
    // when the host starts draining, on another thread, while the player plays on. Only
    // resends after the dark can deliver them; a goodbye that did not wait would be lost too.
    // The drain may take all the patience it needs: it ends as soon as all is acknowledged.
    dark.store(true, Ordering::Relaxed);
    let before_dark = sent.load(Ordering::Relaxed);
    play_until(&mut players, "messages are sent into the dark", |_| {
        sent.load(Ordering::Relaxed) >= before_dark + 3
    });
    let shutdown = std::thread::spawn(move || host.shutdown(PATIENCE));
    play(&mut players, Duration::from_millis(100));
    dark.store(false, Ordering::Relaxed);
    play_until(&mut players, "the player is told the server is going", |p| p[0].ended.is_some());
    let drained = shutdown.join().expect("no panic").expect("drains");
    stop.store(true, Ordering::Relaxed);
    assert_eq!(players[0].ended, Some(DisconnectReason::ServerShutdown));
    let sent = sent.load(Ordering::Relaxed);
    let expected: Vec<u32> = (0..sent).collect();
    assert_eq!(players[0].messages, expected, "every message sent arrived once, in order");
    assert_eq!(drained[0].connections, 1);
    assert_eq!((drained[0].drained, drained[0].undelivered), (1, 0));
}
