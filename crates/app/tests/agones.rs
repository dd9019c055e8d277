//! Goal: a host under Agones tells the SDK sidecar what Agones needs and nothing false: Ready
//! once its workers are bound; the `rooms` and `players` counters equal to what it holds,
//! with its capacity; Health while every worker ticks on time, withheld while one overruns its
//! lateness budget or is stuck in a tick, and resumed after; back to Ready when allocated and
//! empty; allocations judged (a room it can host accepted, an id
//! that is not a room refused and marked); after SIGTERM and the drain, Shutdown, last. A
//! sidecar that refuses, answers garbage or vanishes, and a watch that breaks mid-object, are
//! counted and retried, and the host goes on.
//! Method: an in-process fake sidecar (real HTTP over loopback) records every call with its
//! body and plays allocations on its watch stream; a real host with two workers on the ports
//! the GameServer names (Passthrough), real clients with connect tokens naming those ports, a
//! game whose step can be made slow, a real SIGTERM raised in this process. Every wait is for
//! a condition with a generous deadline; no test asserts a duration. The timings the issue
//! targets are measured by the ignored `measure_agones_timings` (run it with `--ignored
//! --nocapture`), which prints them.

use rally_app::agones::{self, Agones, Call, Failure, PortPolicy, Sdk, Settings, Stats};
use rally_driver::{backend, Clock, Host, HostConfig, UdpDriver};
use rally_engine::{
    connection_config, ClientId, ClientSession, Room, RoomConfig, Simulation, World,
};
use rally_proto::{ConnectionHandle, DisconnectReason, EndpointConfig, Event, Instant, TokenKey};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;
use support::config_file;

const PROTOCOL: u64 = 0xa6;
/// How long a wait for something that must happen may take: seconds where milliseconds do.
const PATIENCE: Duration = Duration::from_secs(30);

/// One call the fake sidecar took.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    body: String,
    /// When it arrived, on the fake's clock.
    at: Instant,
}

/// What the fake sidecar answers and records.
#[derive(Default)]
struct SidecarState {
    calls: Vec<Recorded>,
    /// `GET /gameserver`'s answer; the watch's first line.
    game_server: String,
    /// Lines the watch sends after the first, in order (`BREAK` breaks the stream mid-object).
    updates: Vec<String>,
    /// Answer this many more calls (not watches) with 500.
    refuse: usize,
    /// Answer this many more calls (not watches) with bytes that are not HTTP.
    garbage: usize,
}

/// An in-process Agones SDK sidecar on loopback.
struct Sidecar {
    address: String,
    state: Arc<Mutex<SidecarState>>,
    stop: Arc<AtomicBool>,
    clock: Clock,
}

impl Sidecar {
    fn start(game_server: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().unwrap().to_string();
        let state = Arc::new(Mutex::new(SidecarState { game_server, ..Default::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let clock = Clock::start();
        let (shared, stopped) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (state, stop) = (shared.clone(), stopped.clone());
                        std::thread::spawn(move || serve(stream, &state, &stop, clock));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { address, state, stop, clock }
    }

    fn calls(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().calls.clone()
    }

    fn push(&self, line: String) {
        self.state.lock().unwrap().updates.push(line);
    }

    /// The calls of `method path`.
    fn of(&self, method: &str, path: &str) -> Vec<Recorded> {
        self.calls().into_iter().filter(|c| c.method == method && c.path == path).collect()
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers one connection: records the request, then answers as the state says.
fn serve(stream: TcpStream, state: &Mutex<SidecarState>, stop: &AtomicBool, clock: Clock) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or(""));
    let path = path.to_string();
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let body = String::from_utf8_lossy(&body).into_owned();
    let mut s = state.lock().unwrap();
    s.calls.push(Recorded { method: method.clone(), path: path.clone(), body, at: clock.now() });
    let mut stream = stream;
    if path == "/watch/gameserver" {
        // Updates pushed from now on are this watch's: read under the lock that recorded it.
        let (first, sent) = (s.game_server.clone(), s.updates.len());
        drop(s);
        return watch(stream, state, stop, first, sent);
    }
    let answer = if s.refuse > 0 {
        s.refuse -= 1;
        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nnope\n".to_string()
    } else if s.garbage > 0 {
        s.garbage -= 1;
        "\u{0}\u{1}garbage that is not HTTP\r\n\r\n".to_string()
    } else {
        let json = if path == "/gameserver" { s.game_server.clone() } else { "{}".into() };
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{json}", json.len())
    };
    drop(s);
    let _ = stream.write_all(answer.as_bytes());
}

/// A watch: the GameServer, then each update as it is pushed, chunked, until stopped.
fn watch(
    mut stream: TcpStream,
    state: &Mutex<SidecarState>,
    stop: &AtomicBool,
    first: String,
    mut sent: usize,
) {
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream
        .write_all(format!("{head}{}", chunk(&format!("{{\"result\":{first}}}\n"))).as_bytes())
        .is_err()
    {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        let next = state.lock().unwrap().updates.get(sent).cloned();
        let Some(update) = next else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        sent += 1;
        if update == "BREAK" {
            // Half an object, its chunk cut short, then the connection closes.
            let _ = stream.write_all(b"40\r\n{\"result\":{\"object_meta\":");
            return;
        }
        let line = chunk(&format!("{{\"result\":{update}}}\n"));
        if stream.write_all(line.as_bytes()).is_err() {
            return;
        }
    }
}

/// A GameServer as the SDK's JSON has it.
fn game_server(state: &str, ports: &[u16], metadata: &str) -> String {
    let ports: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(k, p)| format!("{{\"name\":\"worker-{k}\",\"port\":{p}}}"))
        .collect();
    format!(
        "{{\"object_meta\":{{\"name\":\"rally-test\",\"annotations\":{{{metadata}}}}},\
         \"status\":{{\"state\":\"{state}\",\"address\":\"127.0.0.1\",\"ports\":[{}]}}}}",
        ports.join(",")
    )
}

/// A game whose every step sleeps while `slow` is set (a worker overrunning its budget), and
/// whose step does not return while `stall` is set (a worker stuck in a tick).
struct Sluggish {
    slow: Arc<AtomicBool>,
    stall: Arc<AtomicBool>,
}

impl Simulation for Sluggish {
    type Input = [f32; 3];
    type Message = u32;

    fn apply_input(&mut self, _world: &mut World, _client: ClientId, _input: &[f32; 3]) {}

    fn step(&mut self, _world: &mut World, _dt: Duration) {
        if self.slow.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let clock = Clock::start();
        while self.stall.load(Ordering::Relaxed) && clock.now() < Instant::ZERO + PATIENCE {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn joined(&mut self, _world: &mut World, _client: ClientId) {}
}

/// A client on its own socket, in a room once its session's hello is answered.
struct Player {
    driver: UdpDriver,
    session: ClientSession<[f32; 3], u32>,
    handle: ConnectionHandle,
    connected: bool,
    ended: Option<DisconnectReason>,
}

impl Player {
    fn join(key: &TokenKey, client: u64, room: u64, server: SocketAddr) -> Self {
        let config = EndpointConfig { connection: connection_config(), ..Default::default() };
        let mut driver = UdpDriver::bind("127.0.0.1:0", config).expect("binds");
        let token = backend::issue(key, PROTOCOL, client, room, vec![server], 60).expect("issued");
        let handle = driver.connect_with_token(token).expect("a valid token");
        let session = ClientSession::new(Default::default()).expect("the default config is valid");
        Self { driver, session, handle, connected: false, ended: None }
    }

    fn pump(&mut self) {
        let clock = self.driver.clock();
        let (session, connected, ended) = (&mut self.session, &mut self.connected, &mut self.ended);
        let _ = self.driver.run_for(Duration::from_millis(2), |_, connection, event| match event {
            Event::Connected => {
                *connected = true;
                session.connected(connection);
            }
            Event::Disconnected { reason } => {
                *ended = Some(reason);
                session.disconnected();
            }
            Event::Message { channel, payload } => session.receive(clock.now(), channel, &payload),
        });
        while self.session.poll_event().is_some() {}
        if self.ended.is_none() {
            self.session.transmit(self.driver.endpoint());
        }
    }

    fn leave(&mut self) {
        self.driver.endpoint().disconnect(self.handle, DisconnectReason::Closed);
        for _ in 0..10 {
            self.pump();
        }
    }
}

/// Pumps `players` until `done`; fails naming `what` after [`PATIENCE`].
fn until(players: &mut [&mut Player], what: &str, mut done: impl FnMut() -> bool) {
    let clock = Clock::start();
    while !done() {
        assert!(clock.now() < Instant::ZERO + PATIENCE, "{what}: not within {PATIENCE:?}");
        for player in players.iter_mut() {
            player.pump();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Two UDP ports free now: the ports "Agones chose" for the two workers (Passthrough).
fn free_ports() -> [u16; 2] {
    let sockets = [(); 2].map(|_| UdpSocket::bind("127.0.0.1:0").expect("a port"));
    sockets.map(|s| s.local_addr().unwrap().port())
}

fn settings(sdk: &str) -> Settings {
    Settings {
        sdk: sdk.to_string(),
        health_period: Duration::from_millis(100),
        late_ticks_ratio_max: 0.05,
        port_policy: PortPolicy::Passthrough,
        port_prefix: "worker-".into(),
        retry_max: Duration::from_millis(200),
        placement_wait: Duration::from_secs(10),
        workers: 2,
        rooms_per_worker_max: 4,
        connections_per_worker_max: 16,
        scene: None,
        ready_when_empty: Duration::from_millis(300),
    }
}

/// A fleet of one: the sidecar, the host on the ports it names, the integration running.
struct Fleet {
    sidecar: Sidecar,
    host: Host,
    agones: Agones,
    stats: Arc<Stats>,
    key: TokenKey,
    slow: Arc<AtomicBool>,
    stall: Arc<AtomicBool>,
    /// When the host had bound every worker, on the sidecar's clock.
    bound_at: Instant,
}

impl Fleet {
    fn start() -> Self {
        Self::start_with(|_| {})
    }

    /// A fleet whose integration's settings `tune` changes.
    fn start_with(tune: impl FnOnce(&mut Settings)) -> Self {
        let ports = free_ports();
        let sidecar = Sidecar::start(game_server("Scheduled", &ports, ""));
        let mut settings = settings(&sidecar.address);
        tune(&mut settings);
        let stats = Arc::new(Stats::default());
        let sdk = Sdk { authority: sidecar.address.clone(), stats: stats.clone() };
        let placing = agones::placement(&settings, &sdk, &AtomicBool::new(false));
        let placement = placing.expect("the GameServer places them");
        assert_eq!(placement.bind_ports, ports, "Passthrough: workers bind the host ports");
        let key = backend::random_key().expect("randomness");
        let (slow, stall) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let mut config = HostConfig {
            workers: 2,
            worker_ports: placement.bind_ports.clone(),
            public_addresses: placement.public.clone(),
            rooms_per_worker_max: 4,
            room_idle_close: Duration::from_millis(50),
            key: Some(key.clone()),
            protocol_id: PROTOCOL,
            ..HostConfig::default()
        };
        config.endpoint.connections_max = 16;
        let (game_slow, game_stall) = (slow.clone(), stall.clone());
        let host = Host::start(config, move |_| {
            let game = Sluggish { slow: game_slow.clone(), stall: game_stall.clone() };
            Room::new(RoomConfig::default(), game, 1).expect("a valid room")
        })
        .expect("the host starts on the GameServer's ports");
        let bound_at = sidecar.clock.now();
        let public = host.public_addresses().to_vec();
        let agones = Agones::start(settings, sdk, host.reporter(), public).expect("starts");
        Self { sidecar, host, agones, stats, key, slow, stall, bound_at }
    }

    /// The counts the `name` counter was set to, in order, with the capacity of each.
    fn counter(&self, name: &str) -> Vec<(u64, u64)> {
        let path = format!("/v1beta1/counters/{name}");
        let number = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse().ok()).unwrap();
        self.sidecar
            .of("PATCH", &path)
            .iter()
            .map(|c| {
                let body: serde_json::Value = serde_json::from_str(&c.body).expect("JSON");
                (number(&body["count"]), number(&body["capacity"]))
            })
            .collect()
    }

    /// A fleet that has sent Ready, and its workers' host ports.
    fn ready() -> (Self, Vec<u16>) {
        Self::ready_with(|_| {})
    }

    fn ready_with(tune: impl FnOnce(&mut Settings)) -> (Self, Vec<u16>) {
        let fleet = Self::start_with(tune);
        until(&mut [], "Ready", || !fleet.sidecar.of("POST", "/ready").is_empty());
        let ports = fleet.host.public_addresses().iter().map(|a| a.port()).collect();
        (fleet, ports)
    }

    fn counted(&self, name: &str) -> Vec<u64> {
        self.counter(name).into_iter().map(|(count, _)| count).collect()
    }
}

#[test]
fn a_host_walks_agones_through_its_life_in_order() {
    let (fleet, ports) = Fleet::ready();
    let sidecar = &fleet.sidecar;
    until(&mut [], "the counters start at 0", || {
        fleet.counted("rooms") == [0] && fleet.counted("players") == [0]
    });

    // Rooms open: room 3 on worker 1, room 4 on worker 0, each at the port Agones named.
    let mut a = Player::join(&fleet.key, 1, 3, fleet.host.room_address(3));
    assert_eq!(fleet.host.room_address(3).port(), ports[1]);
    until(&mut [&mut a], "room 3 counted", || fleet.counted("players") == [0, 1]);
    let mut b = Player::join(&fleet.key, 2, 4, fleet.host.room_address(4));
    until(&mut [&mut a, &mut b], "room 4 counted", || fleet.counted("players") == [0, 1, 2]);
    assert_eq!(fleet.counted("rooms"), [0, 1, 2]);
    assert!(a.connected && b.connected, "both players are in");

    // Allocation (with rooms open, so that the server does not go back to Ready): a room it
    // can host is accepted; an id that is not a room is refused, logged and marked.
    sidecar.push(game_server("Allocated", &ports, "\"rally.dev/room\":\"3\""));
    until(&mut [&mut a, &mut b], "the allocation is judged", || {
        fleet.stats.allocations_accepted.load(Ordering::Relaxed) == 1
    });
    sidecar.push(game_server("Allocated", &ports, "\"rally.dev/room\":\"lobby\""));
    until(&mut [&mut a, &mut b], "the bad room is refused", || {
        !sidecar.of("PUT", "/metadata/annotation").is_empty()
    });
    assert_eq!(fleet.stats.allocations_refused.load(Ordering::Relaxed), 1);
    let mark = &sidecar.of("PUT", "/metadata/annotation")[0].body;
    assert!(mark.contains("\"key\":\"rally-refused\"") && mark.contains("lobby"), "{mark}");

    // Worker 1 overruns its lateness budget: Health is withheld; then it recovers.
    until(&mut [&mut a, &mut b], "Health flows", || sidecar.of("POST", "/health").len() >= 2);
    fleet.slow.store(true, Ordering::Relaxed);
    until(&mut [&mut a, &mut b], "Health withheld", || {
        fleet.stats.health_withheld.load(Ordering::Relaxed) > 0
    });
    let sick = sidecar.clock.now();
    fleet.slow.store(false, Ordering::Relaxed);
    until(&mut [&mut a, &mut b], "Health resumes", || {
        sidecar.of("POST", "/health").iter().any(|c| c.at > sick)
    });

    // Rooms close as their players leave (idle for 50 ms).
    b.leave();
    until(&mut [&mut a], "room 4 closed", || fleet.counted("rooms") == [0, 1, 2, 1]);
    a.leave();
    until(&mut [], "room 3 closed", || fleet.counted("rooms") == [0, 1, 2, 1, 0]);
    until(&mut [], "no players", || fleet.counted("players") == [0, 1, 2, 1, 0]);
    // Allocated and empty for 300 ms: Ready again, after the last room closed.
    until(&mut [], "Ready again", || sidecar.of("POST", "/ready").len() == 2);
    let emptied = sidecar.of("PATCH", "/v1beta1/counters/rooms").last().unwrap().at;
    assert!(sidecar.of("POST", "/ready")[1].at > emptied);

    assert!(fleet.counter("rooms").iter().all(|(_, capacity)| *capacity == 8));
    assert!(fleet.counter("players").iter().all(|(_, capacity)| *capacity == 32));

    // SIGTERM: drain as always, then Shutdown.
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone()).expect("a handler");
    signal_hook::low_level::raise(signal_hook::consts::SIGTERM).expect("raised");
    until(&mut [], "SIGTERM arrives", || term.load(Ordering::Relaxed));
    fleet.agones.drain();
    let reports = fleet.host.shutdown(Duration::from_millis(200)).expect("drains");
    assert_eq!(reports.iter().map(|r| r.undelivered).sum::<usize>(), 0);
    assert!(fleet.agones.shutdown(Duration::from_secs(5)), "Shutdown taken");

    // The whole sequence: Ready first (and once more when empty), Shutdown last and once,
    // counters exact and at capacity, nothing after Shutdown.
    let calls: Vec<(String, String)> = sidecar
        .calls()
        .into_iter()
        .filter(|c| !c.path.contains("gameserver"))
        .map(|c| (c.method, c.path))
        .collect();
    let ready = ("POST".to_string(), "/ready".to_string());
    let shutdown = ("POST".to_string(), "/shutdown".to_string());
    assert_eq!(calls.first(), Some(&ready), "{calls:?}");
    assert_eq!(calls.last(), Some(&shutdown), "{calls:?}");
    assert_eq!(calls.iter().filter(|c| **c == ready).count(), 2);
    assert_eq!(calls.iter().filter(|c| **c == shutdown).count(), 1);
    assert_eq!(fleet.stats.failures(Call::Health, Failure::Refused), 0);
    let first = &sidecar.calls()[0];
    assert_eq!((first.method.as_str(), first.path.as_str()), ("GET", "/gameserver"));
}

#[test]
fn a_sidecar_that_refuses_babbles_or_breaks_its_watch_is_retried_and_counted() {
    let (fleet, ports) = Fleet::ready();
    let sidecar = &fleet.sidecar;
    // Refusals and garbage: counted by kind, and the calls go through once it behaves.
    {
        let mut state = sidecar.state.lock().unwrap();
        state.refuse = 2;
        state.garbage = 2;
    }
    let mut a = Player::join(&fleet.key, 1, 5, fleet.host.room_address(5));
    until(&mut [&mut a], "the counters reach 1 despite the errors", || {
        fleet.counted("rooms").last() == Some(&1) && fleet.counted("players").last() == Some(&1)
    });
    let failed: u64 = [Call::Counter, Call::Health]
        .iter()
        .flat_map(|call| {
            [Failure::Refused, Failure::Garbage].map(|f| fleet.stats.failures(*call, f))
        })
        .sum();
    assert_eq!(failed, 4, "two refusals and two garbage answers, each counted once");
    // A watch line that is not JSON is skipped; a stream broken mid-object is reopened.
    until(&mut [&mut a], "the watch is open", || {
        !sidecar.of("GET", "/watch/gameserver").is_empty()
    });
    sidecar.push("{not json".into());
    sidecar.push("BREAK".into());
    until(&mut [&mut a], "the watch is reopened", || {
        sidecar.of("GET", "/watch/gameserver").len() >= 2
    });
    assert!(fleet.stats.failures(Call::Watch, Failure::Garbage) >= 2, "both counted");
    sidecar.push(game_server("Allocated", &ports, "\"rally.dev/scene\":\"arena\""));
    until(&mut [&mut a], "the scene is refused", || {
        fleet.stats.allocations_refused.load(Ordering::Relaxed) == 1
    });
    // The sidecar vanishes: the host ticks on, the room stays.
    sidecar.stop.store(true, Ordering::Relaxed);
    let before = fleet.stats.failures(Call::Health, Failure::Unreachable);
    until(&mut [&mut a], "an unreachable sidecar counted", || {
        fleet.stats.failures(Call::Health, Failure::Unreachable) > before
    });
    assert!(a.ended.is_none(), "the player stays in its room");
    assert_eq!(fleet.host.report().rooms.len(), 1);
    fleet.agones.drain();
    let _ = fleet.host.shutdown(Duration::from_millis(100));
    assert!(!fleet.agones.shutdown(Duration::from_millis(300)), "nobody takes Shutdown");
}

#[test]
fn a_worker_stuck_in_a_tick_withholds_health_until_it_returns() {
    // A tick that does not return records no late tick until it does: health must see that
    // the worker stopped publishing. Late ticks are allowed here (a ratio of 1), so that
    // only the stuck worker can withhold health.
    let (fleet, _) = Fleet::ready_with(|settings| settings.late_ticks_ratio_max = 1.0);
    let mut a = Player::join(&fleet.key, 1, 2, fleet.host.room_address(2));
    until(&mut [&mut a], "the room is counted", || fleet.counted("rooms") == [0, 1]);
    let sidecar = &fleet.sidecar;
    until(&mut [&mut a], "Health flows", || sidecar.of("POST", "/health").len() >= 2);
    fleet.stall.store(true, Ordering::Relaxed);
    until(&mut [&mut a], "Health withheld", || {
        fleet.stats.health_withheld.load(Ordering::Relaxed) > 0
    });
    let stuck = sidecar.clock.now();
    fleet.stall.store(false, Ordering::Relaxed);
    until(&mut [&mut a], "Health resumes", || {
        sidecar.of("POST", "/health").iter().any(|c| c.at > stuck)
    });
}

#[test]
#[ignore = "a measurement, not a test: run with --ignored --nocapture"]
fn measure_agones_timings() {
    // Ready after the last bind; a counter set after a room opens (its player connected) and
    // after it closes (the host's report shows it); Health withheld after a worker starts
    // overrunning; Shutdown after the drain begins. Milliseconds, on the sidecar's clock.
    let fleet = Fleet::start();
    let sidecar = &fleet.sidecar;
    until(&mut [], "Ready", || !sidecar.of("POST", "/ready").is_empty());
    let ready = ms(sidecar.of("POST", "/ready")[0].at, fleet.bound_at);
    let last_set = || sidecar.of("PATCH", "/v1beta1/counters/rooms").last().unwrap().at;
    let (mut opened, mut closed, mut withheld) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..8u64 {
        let sets = fleet.counted("rooms").len();
        let mut a = Player::join(&fleet.key, k, 10 + k, fleet.host.room_address(10 + k));
        while !a.connected {
            a.pump();
        }
        let open_at = sidecar.clock.now();
        until(&mut [&mut a], "the counter follows", || fleet.counted("rooms").len() > sets);
        opened.push(ms(last_set(), open_at));
        until(&mut [&mut a], "Health flows", || sidecar.of("POST", "/health").len() >= 2);
        let before = fleet.stats.health_withheld.load(Ordering::Relaxed);
        fleet.slow.store(true, Ordering::Relaxed);
        let slow_at = sidecar.clock.now();
        until(&mut [&mut a], "withheld", || {
            fleet.stats.health_withheld.load(Ordering::Relaxed) > before
        });
        withheld.push(ms(sidecar.clock.now(), slow_at));
        fleet.slow.store(false, Ordering::Relaxed);
        let sets = fleet.counted("rooms").len();
        a.leave();
        until(&mut [], "the room closes", || fleet.host.report().rooms.is_empty());
        let close_at = sidecar.clock.now();
        until(&mut [], "the counter follows", || fleet.counted("rooms").len() > sets);
        closed.push(ms(last_set(), close_at));
    }
    let drain_at = sidecar.clock.now();
    fleet.agones.drain();
    let _ = fleet.host.shutdown(Duration::from_millis(200));
    let drained_at = sidecar.clock.now();
    fleet.agones.shutdown(Duration::from_secs(5));
    let shutdown = ms(sidecar.of("POST", "/shutdown")[0].at, drain_at);
    let after_drain = ms(sidecar.of("POST", "/shutdown")[0].at, drained_at);
    println!("ready_after_last_bind_ms {ready:.2}");
    println!("counter_after_open_ms {opened:.2?}");
    println!("counter_after_close_ms {closed:.2?}");
    println!("health_withheld_after_overrun_ms {withheld:.2?} (health period 100 ms)");
    println!("shutdown_after_drain_began_ms {shutdown:.2} (the drain of an idle host included)");
    println!("shutdown_after_drain_ended_ms {after_drain:.2}");
}

/// Milliseconds from `from` to `to` (0 if `to` came first).
fn ms(to: Instant, from: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e3
}

#[test]
fn rally_server_with_the_agones_flag_is_ready_then_shuts_down_on_sigterm() {
    // The real binary: the flag turns the integration on, AGONES_SDK_HTTP_PORT finds the
    // sidecar, workers bind the GameServer's ports (Passthrough), SIGTERM ends in Shutdown.
    let ports = free_ports();
    let sidecar = Sidecar::start(game_server("Scheduled", &ports, ""));
    let config = config_file(
        "agones-flag",
        "[host]\nworkers = 2\n[telemetry]\nlisten = \"\"\n\
         [agones]\nport_policy = \"passthrough\"\n",
    );
    let sdk_port = sidecar.address.rsplit(':').next().unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["server", "--agones", "--log-format", "json", "--config"])
        .arg(&config)
        .env("AGONES_SDK_HTTP_PORT", sdk_port)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("rally runs");
    until(&mut [], "Ready", || !sidecar.of("POST", "/ready").is_empty());
    // Its workers are on the ports the GameServer named: a second bind there fails.
    for port in ports {
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_err(), "port {port} is a worker's");
    }
    let pid = server.id().to_string();
    let killed = std::process::Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.expect("kill runs").success());
    let status = server.wait().expect("it exits");
    assert!(status.success(), "{status}");
    let last = sidecar.calls().into_iter().rfind(|c| !c.path.contains("gameserver"));
    assert_eq!(last.map(|c| c.path), Some("/shutdown".to_string()));
}

#[test]
fn agones_without_its_port_variable_uses_the_default_and_says_where_it_looked() {
    // Nothing listens on 9358 here: the server gives up placing its workers at once (a wait
    // of 0 s) and its error names the default port it tried.
    let config = config_file("agones-no-env", "[agones]\nenabled = true\nplacement_wait_s = 0\n");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["server", "--config"])
        .arg(&config)
        .env_remove("AGONES_SDK_HTTP_PORT")
        .output()
        .expect("rally runs");
    assert!(!output.status.success());
    let (out, err) =
        (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(out.contains("AGONES_SDK_HTTP_PORT is not set"), "{out}");
    assert!(err.contains("127.0.0.1:9358") && err.contains("no placement"), "{err}");
}
