//! Goal: `rally server` runs the host from a config file, serves its metrics, logs JSON lines,
//! and on SIGTERM drains: its client is told the server is shutting down and the process exits
//! cleanly; a config with a misspelled field is refused with the field named. Its `/metrics`
//! carries every series docs/operating.md documents, with its type, and every series the
//! Grafana dashboard (deploy/grafana/rally.json) queries; histogram counts match the room-ticks;
//! a refused token is counted with its reason; the telemetry endpoint survives scrapers that
//! never finish, floods of connections and bytes that are not HTTP, without stopping ticks.
//! A generated key is never printed: it is in a file only its owner reads.
//! Method: the real binary in a child process on loopback, a client session in the test with a
//! token from the config's key, the metrics read over plain HTTP, `kill -TERM`. Each wait is
//! for what it needs (snapshots, a published figure, the goodbye) with a generous deadline.

use rally_driver::{backend, Clock, UdpDriver};
use rally_engine::{connection_config, ClientEvent, ClientSession, Delivery};
use rally_proto::{DisconnectReason, EndpointConfig, Event, Instant, TokenKey};
use rally_scene::{SceneMessage, SceneState, Scope, WriteScope};
use rally_sim::sandbox::HandInput;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod support;
use support::config_file;

const KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
const PROTOCOL: u64 = 9;

/// How long the test waits for something that must happen: seconds where an idle machine takes
/// milliseconds, so that a loaded one makes the test slower, not red.
const PATIENCE: Duration = Duration::from_secs(30);

/// A server process, killed if a test fails before stopping it.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the server, logging JSON lines; returns it with the lines it prints, as they come.
fn start(config: &std::path::Path) -> (Server, mpsc::Receiver<String>) {
    start_with(config, &[])
}

/// Starts the server with more arguments after its config.
fn start_with(config: &std::path::Path, more: &[&str]) -> (Server, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["server", "--log-format", "json", "--config"])
        .arg(config)
        .args(more)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().expect("piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    (Server(child), received)
}

/// The next log event whose message starts with `prefix`, within [`PATIENCE`]; every line
/// on the way must be a JSON object with the documented fields.
fn event(lines: &mpsc::Receiver<String>, prefix: &str) -> serde_json::Value {
    loop {
        let line = lines.recv_timeout(PATIENCE).expect("the server says more");
        let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        for field in ["timestamp", "level", "target"] {
            assert!(event[field].is_string(), "{field} in {line}");
        }
        let message = event["fields"]["message"].as_str().expect("a message");
        if message.starts_with(prefix) {
            return event["fields"].clone();
        }
    }
}

/// The first event of each of `prefixes`, in whatever order they come.
fn events<const N: usize>(
    lines: &mpsc::Receiver<String>,
    prefixes: [&str; N],
) -> [serde_json::Value; N] {
    let mut found: [Option<serde_json::Value>; N] = std::array::from_fn(|_| None);
    while found.iter().any(Option::is_none) {
        let line = lines.recv_timeout(PATIENCE).expect("the server says more");
        let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        let message = event["fields"]["message"].as_str().expect("a message");
        for (k, prefix) in prefixes.iter().enumerate() {
            if found[k].is_none() && message.starts_with(prefix) {
                found[k] = Some(event["fields"].clone());
            }
        }
    }
    found.map(|f| f.expect("found"))
}

/// The server's first worker's address and its telemetry's, from its start events.
fn addresses(lines: &mpsc::Receiver<String>) -> (SocketAddr, String) {
    let started = event(lines, "rally server starting");
    assert_eq!(started["version"].as_str(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!((started["workers"].as_u64(), started["tick_rate"].as_u64()), (Some(1), Some(128)));
    let worker = event(lines, "worker listening");
    assert_eq!(worker["worker"], 0);
    let address = worker["address"].as_str().expect("an address").parse().expect("an address");
    let telemetry = event(lines, "telemetry listening");
    (address, telemetry["address"].as_str().expect("an address").to_string())
}

fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("the telemetry endpoint listens");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
        .expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    response
}

/// A player of the reference room (inputs `HandInput`) or of a scene room (`XrInput`, and the
/// scene's messages).
struct Client<I = HandInput, M = ()> {
    driver: UdpDriver,
    session: ClientSession<I, M>,
    /// The room's messages so far, in order.
    messages: Vec<M>,
    /// This frame's input, from the time in seconds.
    input: fn(f64) -> I,
    snapshots: u32,
    ended: Option<DisconnectReason>,
}

impl Client {
    fn join(token: rally_proto::ConnectToken) -> Self {
        Self::join_with(token, |t| HandInput::on_circle(0, t))
    }
}

impl<I: serde::Serialize + Clone, M: serde::Serialize + serde::de::DeserializeOwned> Client<I, M> {
    fn join_with(token: rally_proto::ConnectToken, input: fn(f64) -> I) -> Self {
        let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
        let mut driver = UdpDriver::bind("127.0.0.1:0", endpoint).expect("binds");
        driver.connect_with_token(token).expect("a valid token");
        let session = ClientSession::new(Default::default()).expect("valid");
        Self { driver, session, messages: Vec::new(), input, snapshots: 0, ended: None }
    }

    /// Steps until `done` holds; fails naming `what` if it does not within [`PATIENCE`].
    fn step_until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let clock = Clock::start();
        while !done(self) {
            let waited = clock.now() >= rally_proto::Instant::ZERO + PATIENCE;
            assert!(!waited, "{what}: not within {PATIENCE:?}");
            self.step();
        }
    }

    /// One frame: what arrived, then an input.
    fn step(&mut self) {
        let clock = self.driver.clock();
        let (session, ended) = (&mut self.session, &mut self.ended);
        self.driver
            .run_for(Duration::from_millis(8), |_, connection, event| match event {
                Event::Connected => session.connected(connection),
                Event::Message { channel, payload } => {
                    session.receive(clock.now(), channel, &payload)
                }
                Event::Disconnected { reason } => *ended = Some(reason),
            })
            .expect("the client runs");
        while let Some(event) = self.session.poll_event() {
            match event {
                ClientEvent::Snapshot { .. } => self.snapshots += 1,
                ClientEvent::Message(message) => self.messages.push(message),
                _ => {}
            }
        }
        let now = self.driver.now();
        self.session.send_input(now, (self.input)(now.as_secs_f64()));
        self.session.transmit(self.driver.endpoint());
    }
}

#[test]
fn sigterm_drains_the_server_and_its_client_is_told_why() {
    let config = format!(
        "[host]\nworkers = 1\nport = 0\ndrain_timeout_ms = 30000\n[security]\nkey = \"{KEY}\"\n\
         protocol_id = {PROTOCOL}\n[telemetry]\nlisten = \"127.0.0.1:0\"\n"
    );
    let (mut server, lines) = start(&config_file("sigterm", &config));
    let (address, telemetry) = addresses(&lines);

    let key = TokenKey(rally_wire::hex::decode(KEY).expect("hex").try_into().expect("32 bytes"));
    let token = backend::issue(&key, PROTOCOL, 1, 0, vec![address], 60).expect("issued");
    let mut client = Client::join(token);
    client.step_until("the client joins its room and gets snapshots", |c| {
        c.snapshots > 20 || c.ended.is_some()
    });
    assert_eq!(client.ended, None);
    // Figures are published ten times a second: wait for the first that counts the client.
    let mut metrics = String::new();
    client.step_until("the metrics count the connection", |_| {
        metrics = http_get(&telemetry, "/metrics");
        metrics.contains("rally_connections{worker=\"0\"} 1")
    });
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("rally_room_ticks_total{worker=\"0\"}"), "{metrics}");
    assert!(http_get(&telemetry, "/stats").contains("\"room_ticks\""));

    let pid = server.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(killed.success());
    client.step_until("the client is told why", |c| c.ended.is_some());
    assert_eq!(client.ended, Some(DisconnectReason::ServerShutdown));
    let status = server.0.wait().expect("the server exits");
    assert!(status.success(), "a drained server exits cleanly: {status}");
    let stopped = event(&lines, "stopped");
    assert_eq!(stopped["connections"].as_u64(), Some(1), "{stopped}");
}

#[test]
fn a_misspelled_field_is_refused_by_name() {
    let path = config_file("misspelled", "[host]\nwrkers = 2\n");
    let output = Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["server", "--config"])
        .arg(&path)
        .output()
        .expect("the server runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("host.wrkers") && error.contains("workers"), "{error}");
}

/// A config for one worker on any port, sealed with [`KEY`], telemetry on any port.
fn sealed_config() -> String {
    format!(
        "[host]\nworkers = 1\nport = 0\n[security]\nkey = \"{KEY}\"\nprotocol_id = {PROTOCOL}\n\
         [telemetry]\nlisten = \"127.0.0.1:0\"\n"
    )
}

fn key() -> TokenKey {
    TokenKey(rally_wire::hex::decode(KEY).expect("hex").try_into().expect("32 bytes"))
}

/// Stops the server with SIGTERM and waits for it.
fn stop(mut server: Server) {
    let pid = server.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(killed.success());
    assert!(server.0.wait().expect("the server exits").success());
}

/// A scrape: each family's `# TYPE`, and each sample's value by its name and labels.
struct Scrape {
    types: BTreeMap<String, String>,
    samples: BTreeMap<String, f64>,
}

impl Scrape {
    fn parse(response: &str) -> Self {
        let body = response.split("\r\n\r\n").nth(1).expect("a body");
        let (mut types, mut samples) = (BTreeMap::new(), BTreeMap::new());
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                types.insert(name.to_string(), kind.to_string());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (series, value) = line.rsplit_once(' ').expect("a series and its value");
                samples.insert(series.to_string(), value.parse().expect("a number"));
            }
        }
        Self { types, samples }
    }

    fn value(&self, series: &str) -> f64 {
        *self.samples.get(series).unwrap_or_else(|| panic!("{series} is not in the scrape"))
    }

    /// The family a sample's name belongs to (a histogram's `_bucket`, `_sum`, `_count`).
    fn family<'a>(&self, name: &'a str) -> &'a str {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(family) = name.strip_suffix(suffix) {
                if self.types.get(family).map(String::as_str) == Some("histogram") {
                    return family;
                }
            }
        }
        name
    }

    /// Whether a sample of `family` is there.
    fn has_samples(&self, family: &str) -> bool {
        self.samples.keys().any(|series| {
            let name = series.split('{').next().unwrap_or(series);
            self.family(name) == family
        })
    }
}

/// The series docs/operating.md documents: `| `name` | type | ...` rows.
fn documented_series() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operating.md");
    let text = std::fs::read_to_string(path).expect("docs/operating.md");
    text.lines()
        .filter_map(|line| {
            let mut cells = line.strip_prefix("| `rally_")?.split('|');
            let name = format!("rally_{}", cells.next()?.trim().trim_end_matches('`'));
            Some((name, cells.next()?.trim().to_string()))
        })
        .collect()
}

/// The series every query of the Grafana dashboard names.
fn dashboard_series() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/grafana/rally.json");
    let text = std::fs::read_to_string(path).expect("deploy/grafana/rally.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut names = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for target in panels.iter().flat_map(|p| p["targets"].as_array().expect("targets")) {
        let expr = target["expr"].as_str().expect("a query");
        let mut rest = expr;
        while let Some(at) = rest.find("rally_") {
            let name: String =
                rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &rest[at + name.len()..];
            names.push(name);
        }
    }
    names
}

#[test]
fn metrics_carry_every_documented_and_dashboard_series_and_count_refusals() {
    let (server, lines) = start(&config_file("metrics", &sealed_config()));
    let (address, telemetry) = addresses(&lines);
    let mut client =
        Client::join(backend::issue(&key(), PROTOCOL, 1, 0, vec![address], 60).unwrap());
    // A token sealed with another key: refused as forged, and counted.
    let other = TokenKey([7; 32]);
    let mut forger =
        Client::join(backend::issue(&other, PROTOCOL, 2, 0, vec![address], 60).unwrap());
    let mut scrape = Scrape { types: BTreeMap::new(), samples: BTreeMap::new() };
    client.step_until("the metrics count the player, a refusal and a client sample", |c| {
        forger.step();
        scrape = Scrape::parse(&http_get(&telemetry, "/metrics"));
        let seen = |series: &str| scrape.samples.get(series).copied().unwrap_or(0.0);
        c.snapshots > 20
            && seen("rally_players{worker=\"0\"}") == 1.0
            && seen("rally_handshakes_refused_total{worker=\"0\",reason=\"forged\"}") >= 1.0
            && seen("rally_client_rtt_seconds_count{worker=\"0\"}") >= 1.0
    });
    assert_eq!(forger.ended, None, "a refused handshake gets no answer");
    let [opened, refused] = events(&lines, ["room opened", "handshakes refused"]);
    assert_eq!((opened["worker"].as_u64(), opened["room"].as_u64()), (Some(0), Some(0)));
    assert!(refused["forged"].as_u64() >= Some(1), "{refused}");

    let documented = documented_series();
    assert!(documented.len() >= 30, "the docs' table of series: {documented:?}");
    for (name, kind) in &documented {
        assert_eq!(scrape.types.get(name), Some(kind), "{name}'s type");
        assert!(scrape.has_samples(name), "{name} has no sample");
    }
    for name in scrape.types.keys() {
        assert!(documented.iter().any(|(n, _)| n == name), "{name} is not in docs/operating.md");
    }
    for name in dashboard_series() {
        assert!(scrape.types.contains_key(scrape.family(&name)), "the dashboard's {name}");
    }

    // Every room-tick is one sample of each phase and of lateness (one report, one moment).
    let ticks = scrape.value("rally_room_ticks_total{worker=\"0\"}");
    assert!(ticks > 20.0);
    for phase in ["ingest", "interact", "simulate", "replicate", "transmit"] {
        let series = format!("rally_tick_phase_seconds_count{{worker=\"0\",phase=\"{phase}\"}}");
        assert_eq!(scrape.value(&series), ticks, "{series}");
        let inf = format!(
            "rally_tick_phase_seconds_bucket{{worker=\"0\",phase=\"{phase}\",le=\"+Inf\"}}"
        );
        assert_eq!(scrape.value(&inf), ticks, "{inf}");
    }
    assert_eq!(scrape.value("rally_tick_lateness_seconds_count{worker=\"0\"}"), ticks);
    // Lateness splits into the wake-up's part and the work's: one sample of each per
    // room-tick, and the parts add up to the whole.
    let sum = |name: &str| scrape.value(&format!("{name}_sum{{worker=\"0\"}}"));
    let parts = ["rally_tick_wake_lateness_seconds", "rally_tick_lateness_busy_seconds"];
    for name in parts {
        assert_eq!(scrape.value(&format!("{name}_count{{worker=\"0\"}}")), ticks, "{name}");
    }
    let (whole, split) = (sum("rally_tick_lateness_seconds"), sum(parts[0]) + sum(parts[1]));
    assert!((whole - split).abs() <= 1e-9 + whole * 1e-6, "{split} against {whole}");
    assert_eq!(scrape.value("rally_connections{worker=\"0\"}"), 1.0);
    assert_eq!(scrape.value("rally_rooms{worker=\"0\"}"), 1.0);
    assert!(scrape.value("rally_handshakes_completed_total{worker=\"0\"}") >= 1.0);
    for series in
        ["rally_received_bytes_total", "rally_sent_bytes_total", "rally_datagrams_received_total"]
    {
        assert!(scrape.value(&format!("{series}{{worker=\"0\"}}")) > 0.0, "{series}");
    }
    stop(server);
}

#[test]
fn the_telemetry_endpoint_bounds_its_connections_and_ticks_go_on() {
    let (server, lines) = start(&config_file("endpoint", &sealed_config()));
    let (address, telemetry) = addresses(&lines);
    let mut client =
        Client::join(backend::issue(&key(), PROTOCOL, 1, 0, vec![address], 60).unwrap());
    client.step_until("the client gets snapshots", |c| c.snapshots > 10);

    // Not HTTP: answered 400 and closed.
    let mut garbage = TcpStream::connect(&telemetry).expect("connects");
    garbage.write_all(b"\x16\x03\x01\x02\x00\x01\r\n\r\n").expect("sent");
    let mut answer = String::new();
    let _ = garbage.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    // A request that never finishes: answered 400 once its time is up, not held forever.
    let mut slow = TcpStream::connect(&telemetry).expect("connects");
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").expect("sent");
    slow.set_read_timeout(Some(PATIENCE)).expect("a timeout");
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");

    // A flood of connections that say nothing: the endpoint holds a bounded number and closes
    // the rest at once; the rooms tick on meanwhile.
    // What arrived while the test waited on the slow request is taken first.
    (0..10).for_each(|_| client.step());
    let before = client.snapshots;
    let flood: Vec<TcpStream> =
        (0..40).map(|_| TcpStream::connect(&telemetry).expect("the backlog takes it")).collect();
    flood.iter().for_each(|stream| stream.set_nonblocking(true).expect("nonblocking"));
    let closed = || {
        let closed = |stream: &&TcpStream| {
            let mut reader: &TcpStream = stream;
            let read = reader.read(&mut [0u8; 1]);
            !matches!(read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        };
        flood.iter().filter(closed).count()
    };
    // The endpoint holds at most 2 handlers' and 16 queued connections.
    client.step_until("the endpoint closes what it cannot hold; snapshots keep coming", |c| {
        closed() >= 40 - 18 && c.snapshots > before + 30
    });
    drop(flood);

    let mut scrape = Scrape { types: BTreeMap::new(), samples: BTreeMap::new() };
    client.step_until("a scrape answers once the flood is gone", |_| {
        let response = http_get(&telemetry, "/metrics");
        let ok = response.starts_with("HTTP/1.1 200");
        if ok {
            scrape = Scrape::parse(&response);
        }
        ok
    });
    assert!(scrape.value("rally_telemetry_connections_refused_total") >= 22.0);
    assert!(scrape.value("rally_telemetry_bad_requests_total") >= 2.0);
    stop(server);
}

#[test]
fn a_generated_key_is_never_printed_and_sits_in_an_owner_only_file() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated-key");
    std::fs::create_dir_all(&dir).expect("a directory");
    let key_file = dir.join("run.key");
    let config = format!(
        "[host]\nworkers = 1\nport = 0\n[security]\nkey_file = \"{}\"\nprotocol_id = {PROTOCOL}\n\
         [telemetry]\nlisten = \"\"\n",
        key_file.display()
    );
    let (server, lines) = start(&config_file("generated-key", &config));
    let generated = event(&lines, "generated a token key");
    assert_eq!(generated["path"].as_str(), Some(key_file.to_str().expect("UTF-8")));
    let mut printed = vec![generated.to_string()];
    let worker = loop {
        let line = lines.recv_timeout(PATIENCE).expect("the server says more");
        printed.push(line.clone());
        if line.contains("worker listening") {
            break line;
        }
    };
    let hex = std::fs::read_to_string(&key_file).expect("the key file");
    let hex = hex.trim();
    assert_eq!(hex.len(), 64);
    for line in &printed {
        assert!(!line.contains(hex), "the key was printed: {line}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).expect("metadata").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file is its owner's only");

    // The file holds the server's key: a token sealed with it gets in.
    let worker: serde_json::Value = serde_json::from_str(&worker).expect("JSON");
    let address = worker["fields"]["address"].as_str().expect("an address").parse().expect("one");
    let key = TokenKey(rally_wire::hex::decode(hex).expect("hex").try_into().expect("32 bytes"));
    let mut client = Client::join(backend::issue(&key, PROTOCOL, 1, 0, vec![address], 60).unwrap());
    client.step_until("a token from the key file connects", |c| c.snapshots > 5);
    stop(server);
    assert!(!key_file.exists(), "a generated key goes with its run");
}

#[test]
fn a_scene_server_hosts_the_sandbox_and_a_client_sees_its_entities() {
    // Goal: `rally server --scene scenes/sandbox.toml` needs no server code: it starts, says
    // the room settings are the scene's, and a sealed client with a token joins and is sent
    // every collider and body of the scene where the file puts them, and its avatar where its
    // input puts it. Method: the binary with the example sandbox, a client sending the standard
    // XR input, its snapshots read.
    let config = format!(
        "[host]\nworkers = 1\nport = 0\n[security]\nkey = \"{KEY}\"\nprotocol_id = {PROTOCOL}\n\
         [telemetry]\nlisten = \"\"\n"
    );
    let sandbox = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes/sandbox.toml");
    let (server, lines) = start_with(&config_file("scene", &config), &["--scene", sandbox]);
    let hosted = event(&lines, "scene hosted");
    let counts = ["colliders", "bodies", "tick_rate"].map(|field| hosted[field].as_u64());
    assert_eq!(counts, [Some(3), Some(16), Some(120)], "{hosted}");
    let worker = event(&lines, "worker listening");
    let address = worker["address"].as_str().expect("an address").parse().expect("an address");

    let key = TokenKey(rally_wire::hex::decode(KEY).expect("hex").try_into().expect("32 bytes"));
    let token = backend::issue(&key, PROTOCOL, 1, 7, vec![address], 60).expect("issued");
    let mut client: Client<_, SceneMessage> = Client::join_with(token, |t| {
        let mut input = rally_scene::XrInput::default();
        input.head.position = [0.0, 1.6, 3.5];
        input.head.rotation = [0.0, 0.0, 0.0, 1.0];
        input.hands[1].grip = if t.fract() < 0.5 { 255 } else { 0 };
        input
    });
    // The shelf is the third collider; the platform, the last body, is kinematic: both stay.
    // The client's avatar (head and two hands) follows its input: the head where it says.
    let placed = |c: &Client<rally_scene::XrInput, SceneMessage>, at: [f32; 3]| {
        c.session.entities().any(|e| e.position.distance(glam::Vec3::from(at)) < 0.01)
    };
    client.step_until("the client is sent the whole sandbox and its own avatar", |c| {
        c.ended.is_some()
            || (c.session.entities().count() >= 19 + 3
                && placed(c, [0.0, 1.2, -2.8])
                && placed(c, [3.0, 0.5, -1.0])
                && placed(c, [0.0, 1.6, 3.5]))
    });
    assert_eq!(client.ended, None);
    assert_eq!(client.session.tick_rate(), Some(120), "the scene's tick rate, not the config's");

    // The room's key-value state needs no server code either: a write comes back as the
    // room's broadcast of it, to the writer as to everyone.
    let write = SceneState::write(WriteScope::Room, "phase", Some(b"serve".to_vec()));
    client.session.send(Delivery::Reliable, &write).expect("queued");
    let mut mirror = SceneState::new();
    client.step_until("the room broadcasts the write", |c| {
        for message in c.messages.drain(..) {
            mirror.handle(&ClientEvent::Message(message));
        }
        mirror.get(Scope::Room, "phase") == Some(&b"serve"[..])
    });
    stop(server);
}

#[test]
fn a_bad_scene_stops_the_server_with_its_place_and_fix() {
    let scene = config_file("bad-scene", "[[bodies]]\nbox = [1, 1]\n").with_file_name("bad.toml");
    std::fs::write(&scene, "[room]\ntick_rate = 120\n[[bodies]]\nsphere = 0.1\nmass_kg = -1\n")
        .expect("written");
    let output = Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["server", "--scene"])
        .arg(&scene)
        .output()
        .expect("the server runs");
    assert!(!output.status.success(), "a bad scene must not be hosted");
    let error = String::from_utf8_lossy(&output.stderr);
    let place = format!("{}:5:11: bodies[0].mass_kg: -1 is out of range", scene.display());
    assert!(error.contains(&place), "{error}");
    assert!(error.contains("fix: give a value from 0.001 to 100000"), "{error}");
}

#[test]
fn web_starts_both_browser_gateways_and_counts_their_sessions() {
    // Goal: `rally server --web` starts the WebTransport and WebSocket gateways, logs where
    // they listen and the certificate's hash a backend hands to pages (also written to
    // web.certificate_hash_file), and counts their sessions in /metrics by transport.
    // Method: the real binary with both gateways on free loopback ports; a WebSocket session
    // opened and closed against worker 0; a path naming no worker refused.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("web");
    std::fs::create_dir_all(&dir).expect("a directory");
    let hash_file = dir.join("certificate.sha256");
    let _ = std::fs::remove_file(&hash_file);
    let config = format!(
        "{}[web]\nwebtransport = \"127.0.0.1:0\"\nwebsocket = \"127.0.0.1:0\"\n\
         certificate_hash_file = {:?}\n",
        sealed_config(),
        hash_file.display().to_string()
    );
    let (server, lines) = start_with(&config_file("web", &config), &["--web"]);
    let [transport, socket, telemetry] = events(
        &lines,
        [
            "web: WebTransport gateway listening",
            "web: WebSocket gateway listening",
            "telemetry listening",
        ],
    );
    let hash = transport["certificate_sha256"].as_str().expect("the certificate's hash");
    assert!(hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
    assert_eq!(std::fs::read_to_string(&hash_file).expect("the hash file"), format!("{hash}\n"));
    assert!(transport["url"].as_str().expect("a URL").starts_with("https://127.0.0.1:"));
    let url = socket["url"].as_str().expect("a URL").to_string();
    let telemetry = telemetry["address"].as_str().expect("an address").to_string();
    assert!(tungstenite::connect(format!("{url}7")).is_err(), "no worker 7: refused");
    let (mut page, _) = tungstenite::connect(format!("{url}0")).expect("worker 0");
    page.close(None).expect("a clean close");
    let series = |name: &str| format!("rally_web_{name}{{transport=\"websocket\"}}");
    let clock = Clock::start();
    let metrics = loop {
        let metrics = Scrape::parse(&http_get(&telemetry, "/metrics"));
        let done = metrics.value(&series("sessions_total")) == 1.0
            && metrics.value(&series("sessions_open")) == 0.0
            && metrics.value(&series("sessions_refused_total")) == 1.0;
        if done || clock.now().saturating_duration_since(Instant::ZERO) > PATIENCE {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(metrics.value(&series("sessions_total")), 1.0);
    assert_eq!(metrics.value(&series("sessions_refused_total")), 1.0);
    assert_eq!(metrics.value(&series("sessions_open")), 0.0);
    assert_eq!(metrics.value("rally_web_sessions_total{transport=\"webtransport\"}"), 0.0);
    drop(server);
}
