//! Goal: `rally demo` as a newcomer meets it: it plays, serves its dashboard's page and live
//! figures, stops on its own after `--duration` and on Ctrl-C; a port in use and a bad value
//! get a one-line error that says what to do.
//! Method: the real binary in a child process on loopback; the page and `/api/live` read over
//! plain HTTP; SIGINT sent with `kill`. (The browser's view is scripts/browser-test.sh's.)
//! Waits are for what they need, polled with a generous deadline.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long the test waits for something that must happen: seconds where an idle machine takes
/// milliseconds, so that a loaded one makes the test slower, not red.
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `/api/live` every 100 ms until `ready` holds, or [`PATIENCE`] passes; the last figures.
fn live_when(address: &str, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let clock = rally_driver::Clock::start();
    loop {
        let live = serde_json::from_str(&get(address, "/api/live")).expect("JSON");
        if ready(&live) || clock.now() >= rally_proto::Instant::ZERO + PATIENCE {
            return live;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn rally(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rally"));
    command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// A plain HTTP GET; the response's body.
fn get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("the dashboard accepts");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a header and a body");
    assert!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"), "{head}");
    body.to_string()
}

#[test]
fn the_demo_plays_serves_its_dashboard_and_stops_on_ctrl_c() {
    let mut child = rally(&["demo", "--port", "0", "--bots", "2"]).spawn().expect("starts");
    let stdout = child.stdout.take().expect("piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let next = || received.recv_timeout(PATIENCE).expect("the demo prints");
    let address = loop {
        let line = next();
        if let Some(url) = line.strip_prefix("dashboard: http://") {
            break url.split('/').next().expect("an address").to_string();
        }
    };
    let page = get(&address, "/");
    assert!(page.contains("<canvas id=\"sandbox\"") && page.contains("dashboard.js"));
    assert!(get(&address, "/dashboard.js").contains("/api/live"));
    // Once both players have joined and the host has reported a second, the figures hold
    // players, phases, latency samples and the table's entities.
    let live = live_when(&address, |live| {
        let joined =
            live["clients"].as_array().is_some_and(|c| c.iter().all(|c| c["client"].is_u64()));
        joined
            && live["phases"].as_array().is_some_and(|p| p.len() == 5)
            && live["latency"]["samples"].as_u64() > Some(50)
    });
    assert_eq!(live["clients"].as_array().map(Vec::len), Some(2), "{live}");
    assert_eq!(live["phases"].as_array().map(Vec::len), Some(5), "{live}");
    assert!(live["latency"]["samples"].as_u64() > Some(50), "{live}");
    let entities = live["sandbox"]["entities"].as_array().expect("entities");
    let roles: Vec<&str> = entities.iter().filter_map(|e| e["role"].as_str()).collect();
    for role in ["table", "net", "ball", "hand", "paddle"] {
        assert!(roles.contains(&role), "no {role} in {roles:?}");
    }
    let version = live["version"].as_u64();
    let later = live_when(&address, |later| later["version"].as_u64() > version);
    assert!(later["version"].as_u64() > version, "the figures move on");
    // Ctrl-C: a clean exit, soon.
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().expect("kill runs").success());
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    let status = finished.recv_timeout(PATIENCE).expect("exits soon");
    assert!(status.expect("waited").success());
}

#[test]
fn the_demo_stops_after_its_duration_headless() {
    let output =
        rally(&["demo", "--headless", "--duration", "3", "--bots", "2"]).output().expect("runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("dashboard:"), "headless serves no page: {stdout}");
    assert!(stdout.contains("2/2 players"), "{stdout}");
    assert!(stdout.contains("tick us mean/p99 (budget): ingest"), "{stdout}");
}

#[test]
fn a_port_in_use_and_bad_values_get_one_line_with_the_fix() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().unwrap().port().to_string();
    let output = rally(&["demo", "--port", &port, "--duration", "5"]).output().expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(&port) && stderr.contains("--port 0"), "{stderr}");
    for bad in [&["--hz", "5"][..], &["--bots", "0"], &["--duration=0"], &["--pipeline", "x"]] {
        let output = rally(&[&["demo", "--headless"][..], bad].concat()).output().expect("runs");
        assert!(!output.status.success(), "{bad:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{bad:?}: {stderr}");
        assert!(stderr.contains("such as") || stderr.contains("use "), "{bad:?}: {stderr}");
    }
}
