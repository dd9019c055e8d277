//! Goal: the link relay carries datagrams both ways, never delivers one before its delay, and
//! applies the loss it was given, counting what it did per direction.
//! Method: a UDP echo behind the relay on loopback; a few round trips through a delay-only
//! link, then a stream through a link that loses half of what goes up, kept to a small window
//! in flight so that no socket buffer overflows (every loss is the link's), and counted until
//! every datagram is accounted for: echoed, or lost by the link. Nothing waits a fixed time:
//! the deadlines only end a test that would otherwise hang, and a loaded machine only makes it
//! slower.

use rally_bench::testbed::LinkRelay;
use rally_netem::{LinkConfig, LossModel};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// How long a test may take before it is called hung: far beyond what any run needs.
const DEADLINE: Duration = Duration::from_secs(60);

/// An echo server that answers `count` datagrams, on its own thread.
fn echo(count: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let address = socket.local_addr().unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..count {
            let Ok((len, from)) = socket.recv_from(&mut buf) else { return };
            socket.send_to(&buf[..len], from).unwrap();
        }
    });
    (address, thread)
}

#[test]
#[allow(clippy::disallowed_methods)] // a real-time test reads the clock
fn datagrams_cross_both_ways_no_sooner_than_the_delay() {
    let (server, echoing) = echo(3);
    let relay = LinkRelay::delay(server, Duration::from_millis(20)).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    for n in 0..3u8 {
        let sent = std::time::Instant::now();
        client.send_to(&[n; 8], relay.address()).unwrap();
        let mut buf = [0u8; 64];
        let (len, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], &[n; 8]);
        let rtt = sent.elapsed();
        // A floor, never a ceiling: a loaded machine only adds to the round trip, so this fails
        // only if the relay delivers early.
        assert!(rtt >= Duration::from_millis(40), "round trip {rtt:?} beat the relay's delay");
    }
    echoing.join().unwrap();
    let stats = relay.stop().unwrap();
    assert_eq!((stats.up.sent, stats.up.delivered, stats.down.delivered), (3, 3, 3));
    assert!(stats.up.delay_mean() >= Duration::from_millis(20));
}

#[test]
#[allow(clippy::disallowed_methods)] // the deadline that ends a hung run reads the clock
fn the_relay_loses_what_its_link_loses_and_says_so() {
    const COUNT: u16 = 400;
    /// Datagrams sent and not yet accounted for, at most.
    const WINDOW: u64 = 16;
    let (server, echoing) = echo(usize::from(COUNT));
    let lossy = LinkConfig {
        loss: LossModel::Bernoulli { probability: 0.5 },
        delay: Duration::from_millis(1),
        ..LinkConfig::default()
    };
    let clean = LinkConfig { delay: Duration::from_millis(1), ..LinkConfig::default() };
    let relay = LinkRelay::start(server, lossy, clean, 7).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    // A short wait per read keeps the loop looking at the relay's counts; it bounds nothing.
    client.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    let (mut sent, mut echoed) = (0u16, 0u64);
    let mut buf = [0u8; 8];
    let started = std::time::Instant::now();
    loop {
        while client.recv_from(&mut buf).is_ok() {
            echoed += 1;
        }
        let lost = relay.stats().up.lost;
        if u64::from(sent) == lost + echoed && sent == COUNT {
            break;
        }
        if sent < COUNT && u64::from(sent) < lost + echoed + WINDOW {
            client.send_to(&sent.to_le_bytes(), relay.address()).unwrap();
            sent += 1;
        }
        assert!(started.elapsed() < DEADLINE, "hung: {sent} sent, {echoed} echoed, {lost} lost");
    }
    let stats = relay.stop().unwrap();
    drop(echoing);
    assert_eq!(stats.up.sent, 400);
    assert_eq!(stats.up.lost + stats.up.delivered, 400, "every datagram lost or delivered");
    // 400 fair coin flips land within 130 of 200 with certainty for practical purposes.
    assert!((70..=330).contains(&stats.up.lost), "lost {} of 400", stats.up.lost);
    assert_eq!(echoed, stats.up.delivered, "what went up came back: the way down is clean");
    assert_eq!(stats.down.lost, 0);
}

/// Goal: `rally-bench relay`, the relay as a process (what the conformance client runs
/// through), says where it listens, carries datagrams both ways, and reports what it did when
/// its standard input closes.
#[test]
fn the_relay_command_relays_until_its_input_closes_and_reports() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    let (server, thread) = echo(3);
    let mut relay = Command::new(env!("CARGO_BIN_EXE_rally-bench"))
        .args(["relay", "--to", &server.to_string(), "--loss", "0", "--seed", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("rally-bench runs");
    let mut out = BufReader::new(relay.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let address: SocketAddr = line
        .trim()
        .strip_prefix("relay listening on ")
        .unwrap_or_else(|| panic!("the first line: {line:?}"))
        .parse()
        .unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..3u8 {
        client.send_to(&[i; 10], address).unwrap();
        let (len, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..len], from), (&[i; 10][..], address));
    }
    drop(relay.stdin.take()); // closing its input stops it
    let mut report = String::new();
    out.read_to_string(&mut report).unwrap();
    assert!(relay.wait().unwrap().success());
    let report: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
    for way in ["up", "down"] {
        assert_eq!(report[way]["sent"], 3, "{report}");
        assert_eq!(report[way]["delivered"], 3, "{report}");
        assert_eq!(report[way]["lost"], 0, "{report}");
    }
    thread.join().unwrap();
}
