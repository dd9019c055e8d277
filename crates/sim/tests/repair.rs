//! Goal: a loss is repaired in about one round trip, and the repair machinery sends no packet
//! that does not help: on a path whose delays vary without reordering, every extra packet is
//! one more chance to hold back the data behind it.
//! Method: a fixed 10 ms each way, no jitter, and losses placed by hand (the link loses every
//! packet while told to), in virtual time; each case compares the time of delivery with what
//! the slower mechanism it replaces would give.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::{ConnectionConfig, ConnectionHandle, EndpointConfig, Instant, Redundancy};
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

const ONE_WAY: Duration = Duration::from_millis(10);

fn link() -> LinkConfig {
    LinkConfig { delay: ONE_WAY, ..LinkConfig::default() }
}

/// A connected pair with `connection`, after two seconds of pings that the server answers on
/// arrival (so that its acks ride at once, and the client measures the path's 20 ms), each
/// followed by 50 ms in which every ack arrived.
fn connected(connection: ConnectionConfig) -> (Pair, ConnectionHandle, ConnectionHandle) {
    let config = EndpointConfig { connection, ..EndpointConfig::default() };
    let mut pair = Pair::new(config, link(), 7);
    let (client, server) = pair.connect(Duration::from_secs(5)).expect("connects");
    for _ in 0..40 {
        let arrived = pair.server_messages(1).len() + 1;
        pair.client().send(client, 1, b"ping").expect("room");
        while pair.server_messages(1).len() < arrived {
            let next = pair.now() + Duration::from_micros(100);
            pair.run_until(next);
        }
        pair.server().send(server, 1, b"pong").expect("room");
        let next = pair.now() + Duration::from_millis(50);
        pair.run_until(next);
    }
    let rtt = pair.client().connection(client).expect("open").stats().rtt;
    assert!(rtt < Duration::from_millis(25), "the RTT did not settle: {rtt:?}");
    (pair, client, server)
}

/// Whether the uplink loses every packet from now on.
fn uplink_loses(pair: &mut Pair, lose: bool) {
    let loss = if lose { LossModel::Bernoulli { probability: 1.0 } } else { LossModel::None };
    let config = LinkConfig { loss, ..*pair.up().config() };
    pair.up().set_config(config);
}

/// Sends `payload` on the reliable channel now while the uplink loses both its sends (the copy
/// goes 2 ms after the first); returns 3 ms later with the uplink whole again.
fn send_every_copy_lost(pair: &mut Pair, client: ConnectionHandle, payload: &[u8]) {
    let copies_gone = pair.now() + Duration::from_millis(3);
    uplink_loses(pair, true);
    pair.client().send(client, 0, payload).expect("room");
    pair.run_until(copies_gone);
    uplink_loses(pair, false);
}

/// Runs until the server has received `count` messages in all, 1 ms at a time; returns when.
fn until_server_has(pair: &mut Pair, count: usize) -> Instant {
    let limit = pair.now() + Duration::from_secs(2);
    while server_messages(pair) < count {
        assert!(pair.now() < limit, "never delivered");
        let next = pair.now() + Duration::from_millis(1);
        pair.run_until(next);
    }
    pair.now()
}

/// Messages the server received on the reliable channel.
fn server_messages(pair: &Pair) -> usize {
    pair.server_messages(0).len()
}

fn packets_sent(pair: &mut Pair, server: ConnectionHandle) -> u64 {
    pair.server().connection(server).expect("open").stats().packets_sent
}

#[test]
fn a_message_ahead_of_a_hole_is_acked_at_once() {
    let connection = ConnectionConfig { redundancy: Redundancy::Off, ..Default::default() };
    let (mut pair, client, _) = connected(connection);
    let start = pair.now();
    uplink_loses(&mut pair, true);
    pair.client().send(client, 0, b"lost").expect("room");
    pair.drive();
    uplink_loses(&mut pair, false);
    let next = start + Duration::from_millis(5);
    pair.run_until(next);
    pair.client().send(client, 0, b"ahead").expect("room");
    pair.drive();
    let delivered = until_server_has(&mut pair, 2) - start;
    // "ahead" arrives at 15 ms and is acked at once (25 ms), so the client resends "lost" at
    // once (35 ms). Waiting for the ack delay (16 ms) would take until 51 ms, and the resend
    // timer (the RTT, four deviations and the peer's ack delay) until about 47 ms.
    assert!(delivered <= Duration::from_millis(37), "delivered after {delivered:?}");
    let messages: Vec<&[u8]> = pair.server_messages(0);
    assert_eq!(messages, [b"lost".as_slice(), b"ahead".as_slice()]);
}

#[test]
fn a_loss_the_copy_repaired_costs_no_extra_packet() {
    let connection = ConnectionConfig { redundancy: Redundancy::Always(2), ..Default::default() };
    let (mut pair, client, server) = connected(connection);
    let start = pair.now();
    let sent_before = packets_sent(&mut pair, server);
    // The first send is lost; its copy follows `repeat_interval` (2 ms) later and arrives.
    uplink_loses(&mut pair, true);
    pair.client().send(client, 0, b"copied").expect("room");
    pair.drive();
    uplink_loses(&mut pair, false);
    let delivered = until_server_has(&mut pair, 1) - start;
    assert!(delivered <= Duration::from_millis(13), "delivered after {delivered:?}");
    // The server saw a gap in packet numbers but no hole in the messages: its ack waits for
    // data to ride on (up to the ack delay, 16 ms) instead of going out alone at once.
    let check = start + Duration::from_millis(20);
    pair.run_until(check);
    assert_eq!(packets_sent(&mut pair, server), sent_before, "an ack went out alone at once");
}

#[test]
fn a_repair_is_copied_like_a_first_send() {
    let connection = ConnectionConfig { redundancy: Redundancy::Always(2), ..Default::default() };
    let (mut pair, client, _) = connected(connection);
    let start = pair.now();
    send_every_copy_lost(&mut pair, client, b"first");
    // "second" arrives ahead of the hole at 15 ms (its copy at 17 ms); the server acks at once.
    let next = start + Duration::from_millis(5);
    pair.run_until(next);
    pair.client().send(client, 0, b"second").expect("room");
    let copies_through = start + Duration::from_millis(8);
    pair.run_until(copies_through);
    // The repair's first send, at about 25 ms, is lost too; only its copy can deliver it soon.
    uplink_loses(&mut pair, true);
    let mut lost = 0;
    while lost == 0 {
        let next = pair.now() + Duration::from_micros(100);
        pair.run_until(next);
        lost = pair.client().connection(client).expect("open").stats().packets_lost;
        assert!(pair.now() < start + Duration::from_millis(40), "loss never detected");
    }
    uplink_loses(&mut pair, false);
    let delivered = until_server_has(&mut pair, 2) - start;
    // The copy follows the repair 2 ms later: about 37 ms. Without it the repair would wait
    // for its resend timer, backed off past 50 ms.
    assert!(delivered <= Duration::from_millis(40), "delivered after {delivered:?}");
}

/// When the server gets a lone message whose every copy was lost at first.
fn lone_message_delivery(tail_probe: bool) -> Duration {
    let connection = ConnectionConfig {
        redundancy: Redundancy::Always(2),
        tail_probe,
        ..ConnectionConfig::default()
    };
    let (mut pair, client, _) = connected(connection);
    let start = pair.now();
    send_every_copy_lost(&mut pair, client, b"alone");
    until_server_has(&mut pair, 1) - start
}

#[test]
fn the_tail_probe_finds_a_lone_messages_loss_before_the_resend_timer() {
    let probed = lone_message_delivery(true);
    let timed = lone_message_delivery(false);
    // Probe at 2 + 10 ms (half the RTT after the last copy), its ack back at 32 ms, the
    // repair in at 42 ms; the timer alone fires later.
    assert!(probed <= Duration::from_millis(45), "probed: {probed:?}");
    assert!(probed + Duration::from_millis(3) < timed, "probed {probed:?}, timed {timed:?}");
}
