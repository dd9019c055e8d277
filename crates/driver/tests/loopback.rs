//! Goal: the driver carries a real connection over real sockets: a client on loopback
//! connects, sends reliable messages, and gets every echo back in order. Method: a server
//! driver in a thread echoing, a client driver in the test, both on 127.0.0.1. The tests wait
//! for what they need with a generous deadline and assert no duration: a loaded machine makes
//! them slower, not red.

use rally_driver::{Clock, UdpDriver};
use rally_proto::{EndpointConfig, Event, Instant};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a test waits for something that must happen: seconds where an idle machine takes
/// milliseconds.
const PATIENCE: Duration = Duration::from_secs(30);

#[test]
fn a_client_gets_every_echo_back_in_order_over_loopback() {
    let (server_addr, stop, thread) = echo_server();
    let mut client = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    let handle = client.connect(server_addr);
    let mut echoes = Vec::new();
    let mut connected = false;
    let mut next = 0u32;
    let clock = Clock::start();
    while echoes.len() < 100 && clock.now() < Instant::ZERO + PATIENCE {
        if connected && next < 100 {
            client.endpoint().send(handle, 0, &next.to_le_bytes()).expect("queue has room");
            next += 1;
        }
        echo_client_for(&mut client, Duration::from_millis(5), &mut connected, &mut echoes);
    }
    stop.store(true, Ordering::Relaxed);
    thread.join().expect("the server thread ends");
    assert_eq!(echoes, (0..100).collect::<Vec<u32>>(), "all echoes within {PATIENCE:?}");
    // Round trips were measured on the OS clock (a driver that passed the endpoint a frozen
    // time would measure none, or zero); how long they took is the machine's business.
    let stats = client.endpoint().connection(handle).expect("open").stats();
    assert!(stats.rtt_min > Duration::ZERO && stats.rtt_min <= stats.rtt, "{stats:?}");
}

/// Runs the echo client's loop for `wait`: notes the connection, and collects each echoed
/// number in arrival order.
fn echo_client_for(
    client: &mut UdpDriver,
    wait: Duration,
    connected: &mut bool,
    echoes: &mut Vec<u32>,
) {
    client
        .run_for(wait, |_, _, event| match event {
            Event::Connected => *connected = true,
            Event::Message { payload, .. } => {
                echoes.push(u32::from_le_bytes(payload[..4].try_into().expect("4 bytes")))
            }
            Event::Disconnected { reason } => panic!("disconnected: {reason:?}"),
        })
        .expect("the client loop runs");
}

/// A server in a thread that echoes every message on its channel, until told to stop.
fn echo_server() -> (std::net::SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let mut server = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    let server_addr = server.local_addr().expect("bound");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_server = stop.clone();
    let thread = std::thread::spawn(move || {
        while !stop_server.load(Ordering::Relaxed) {
            server
                .run_for(Duration::from_millis(20), |endpoint, handle, event| {
                    if let Event::Message { channel, payload } = event {
                        endpoint.send(handle, channel, &payload).expect("room to echo");
                    }
                })
                .expect("the server loop runs");
        }
    });
    (server_addr, stop, thread)
}

#[test]
fn a_loop_that_reads_once_a_frame_gets_each_datagram_at_its_arrival_time() {
    // Goal: with arrival stamps, a loop that reads the socket once a frame (a game's, through
    // rally-ffi) hands each datagram to the endpoint, and its events to the game, at the time
    // the kernel received it, not when the frame came round: the round trips it measures are
    // the network's, not the frame's. Method: an echo server; each 50 ms "frame" the client
    // sends a message and pumps once. Without stamps every echo is handed over at a pump's
    // time, never before it; with them, echoes that came back during a frame's sleep are
    // handed over before the pump that read them (the test asks it of one echo in ten frames,
    // so a loaded machine that echoes late makes it no less true).
    let (server_addr, stop, thread) = echo_server();
    let mut client = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    client.stamp_arrivals().expect("stamps");
    let handle = client.connect(server_addr);
    let (mut connected, mut sent, mut early) = (false, 0, 0);
    let clock = client.clock();
    while sent < 10 && clock.now() < Instant::ZERO + PATIENCE {
        if connected {
            client.endpoint().send(handle, 0, b"ping").expect("queue has room");
            sent += 1;
        }
        let pumped_at = clock.now();
        client
            .pump_arrivals(|at, _, _, event| match event {
                Event::Connected => connected = true,
                Event::Message { .. } => early += usize::from(at < pumped_at),
                Event::Disconnected { reason } => panic!("disconnected: {reason:?}"),
            })
            .expect("the client loop runs");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    thread.join().expect("the server thread ends");
    assert!(early > 0, "no echo of {sent} was handed over at its arrival time");
    let stats = client.endpoint().connection(handle).expect("open").stats();
    assert!(stats.rtt_min < Duration::from_millis(50), "a frame in the round trip: {stats:?}");
}

/// Plaintext: this test is of the driver's loop, not of the security.
fn plaintext() -> EndpointConfig {
    EndpointConfig { security: rally_proto::Security::DangerPlaintext, ..EndpointConfig::default() }
}

#[test]
fn datagrams_too_long_for_any_packet_are_dropped_and_counted_among_good_ones() {
    // Goal: the batched receive path reads a burst in one go and drops what no Rally packet
    // can be (longer than a receive slot) without losing the datagrams around it.
    let mut server = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    let address = server.local_addr().expect("bound");
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").expect("binds");
    for k in 0..40u32 {
        let len = if k % 10 == 3 { 4000 } else { 20 };
        sender.send_to(&vec![k as u8; len], address).expect("sent");
    }
    // Reads until all 40 are accounted for: the 4 too long in the driver, the 36 others in the
    // endpoint (being garbage from a stranger, dropped there with their reason).
    let clock = Clock::start();
    let counted = |server: &mut UdpDriver| {
        let stats = server.endpoint().stats();
        server.oversized + stats.malformed + stats.unknown_peer
    };
    while counted(&mut server) < 40 && clock.now() < Instant::ZERO + PATIENCE {
        server.run_for(Duration::from_millis(10), |_, _, _| {}).expect("runs");
    }
    assert_eq!(server.oversized, 4);
    let stats = server.endpoint().stats();
    assert_eq!(stats.malformed + stats.unknown_peer, 36, "{stats:?}");
}

#[test]
fn a_batched_loop_sleeps_in_steps_but_reads_only_at_its_wake_ups() {
    // Goal: near a deadline the batched loop wakes every step (to keep its core from being
    // handed away) but does not read the socket at each step: a read there finds nothing or
    // something that waits for the deadline anyway. Method: an idle server (no timers) runs
    // 20 ms with 200 us steps; it reads when it starts and at the deadline, and sleeps in
    // steps over the last 2 ms.
    let mut server = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    server.set_sleep_step(Duration::from_micros(200));
    server.run_batched(Duration::from_millis(20), |_, _, _, _| {}).expect("the loop runs");
    assert_eq!(server.traffic.reads, 2, "a read when it starts and one at the deadline");
    assert_eq!(server.traffic.empty_reads, 2, "nothing was sent to it");
    assert!(server.traffic.sleeps >= 1, "it slept: {}", server.traffic.sleeps);
}

#[test]
fn a_batched_loop_hands_each_message_over_at_its_datagram_s_time() {
    // Goal: the batched loop (a worker's) hands each message to its caller with the time its
    // datagram was read and handled at, not a later reading nor a stale one, and loses none.
    // Method: a batched echo server in a thread, the client on the test's thread; the client
    // notes the server clock's reading before it sends each message (the server's clock is a
    // copy), the server notes its reading in the callback; each message's time must lie
    // between the two, and every echo come back in order.
    let mut server = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    let server_addr = server.local_addr().expect("bound");
    let server_clock = server.clock();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_server = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut times = Vec::new();
        while !stop_server.load(Ordering::Relaxed) {
            let echo = |at: Instant, endpoint: &mut rally_proto::Endpoint, handle, event| {
                if let Event::Message { channel, payload } = event {
                    let value = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes"));
                    times.push((value, at, server_clock.now()));
                    endpoint.send(handle, channel, &payload).expect("room to echo");
                }
            };
            server.run_batched(Duration::from_millis(5), echo).expect("the loop runs");
        }
        times
    });
    let mut client = UdpDriver::bind("127.0.0.1:0", plaintext()).expect("binds");
    let handle = client.connect(server_addr);
    let (mut echoes, mut sent_at, mut connected) = (Vec::new(), Vec::new(), false);
    let clock = Clock::start();
    while echoes.len() < 20 && clock.now() < Instant::ZERO + PATIENCE {
        if connected && sent_at.len() < 20 {
            sent_at.push(server_clock.now());
            let value = sent_at.len() as u32 - 1;
            client.endpoint().send(handle, 0, &value.to_le_bytes()).expect("queue has room");
        }
        echo_client_for(&mut client, Duration::from_millis(2), &mut connected, &mut echoes);
    }
    stop.store(true, Ordering::Relaxed);
    let times = thread.join().expect("the server thread ends");
    assert_eq!(echoes, (0..20).collect::<Vec<u32>>(), "all echoes within {PATIENCE:?}");
    assert_eq!(times.len(), 20, "each message once");
    for (value, at, handed) in times {
        let sent = sent_at[value as usize];
        assert!(sent <= at && at <= handed, "message {value}: {sent:?} <= {at:?} <= {handed:?}");
    }
}
