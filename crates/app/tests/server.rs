//! Goal: `rally server` runs the host from a config file, serves its metrics, and on SIGTERM
//! drains: its client is told the server is shutting down and the process exits cleanly; a
//! config with a misspelled field is refused with the field named.
//! Method: the real binary in a child process on loopback, a client session in the test with a
//! token from the config's key, the metrics read over plain HTTP, `kill -TERM`. Each wait is
//! for what it needs (snapshots, a published figure, the goodbye) with a generous deadline.

use rally_driver::{backend, Clock, UdpDriver};
use rally_engine::{connection_config, ClientEvent, ClientSession, Delivery};
use rally_proto::{DisconnectReason, EndpointConfig, Event, TokenKey};
use rally_scene::{SceneMessage, SceneState, Scope, WriteScope};
use rally_sim::sandbox::HandInput;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
const PROTOCOL: u64 = 9;

/// How long the test waits for something that must happen: seconds where an idle machine takes
/// milliseconds, so that a loaded one makes the test slower, not red.
const PATIENCE: Duration = Duration::from_secs(30);

/// Writes `text` as a config file in a fresh directory under the target directory.
fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("server.toml");
    std::fs::write(&path, text).expect("the config is written");
    path
}

/// Starts the server; returns it with the lines it prints, as they come.
fn start(config: &std::path::Path) -> (Child, mpsc::Receiver<String>) {
    start_with(config, &[])
}

/// Starts the server with more arguments after its config.
fn start_with(config: &std::path::Path, more: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["server", "--config"])
        .arg(config)
        .args(more)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().expect("piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    (child, received)
}

/// The next line that starts with `prefix`, within [`PATIENCE`].
fn line_starting(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    loop {
        let line = lines.recv_timeout(PATIENCE).expect("the server says more");
        if line.starts_with(prefix) {
            return line;
        }
    }
}

fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("the telemetry endpoint listens");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
        .expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    response
}

/// A player of the reference room (inputs `HandInput`) or of a scene room (`XrInput`).
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

impl Client<HandInput> {
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
    let worker = line_starting(&lines, "worker 0 on ");
    let address: SocketAddr =
        worker.split_whitespace().nth(3).expect("an address").parse().expect("an address");
    let telemetry = line_starting(&lines, "telemetry on http://");
    let telemetry = telemetry.trim_start_matches("telemetry on http://");
    let telemetry = telemetry.split('/').next().expect("host and port").to_string();

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

    let pid = server.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(killed.success());
    client.step_until("the client is told why", |c| c.ended.is_some());
    assert_eq!(client.ended, Some(DisconnectReason::ServerShutdown));
    let status = server.wait().expect("the server exits");
    assert!(status.success(), "a drained server exits cleanly: {status}");
    let drained = line_starting(&lines, "drained:");
    assert!(drained.starts_with("drained: 1 clients"), "{drained}");
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

/// Parses a "worker 0 on ADDRESS ..." line.
fn worker_address(lines: &mpsc::Receiver<String>) -> SocketAddr {
    let worker = line_starting(lines, "worker 0 on ");
    worker.split_whitespace().nth(3).expect("an address").parse().expect("an address")
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
    let (mut server, lines) = start_with(&config_file("scene", &config), &["--scene", sandbox]);
    let said = line_starting(&lines, "scene ");
    assert!(said.contains("3 colliders, 16 bodies; rooms at 120 Hz"), "{said}");
    let address = worker_address(&lines);

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
    let _ = server.kill();
    let _ = server.wait();
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
