//! Receive-side limits against an authenticated peer: what a connection may make the server
//! hold is bounded by `receive_bytes_max`, a message announced larger than `message_bytes_max`
//! closes the connection, and a piece refused for want of room is never acked, so that an
//! honest sender past the limit loses nothing.
//!
//! The attacker holds a real connect token and completes the real handshake; its packets are
//! then built with the protocol's own encoders (`Packet::encode`, `Frame::encode`) and sealed
//! with its key (`danger_seal`), so the server takes them as authentic.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::packet::{DataHeader, Frame, Packet};
use rally_proto::{
    danger_seal, ConnectionConfig, ConnectionHandle, DisconnectReason, Endpoint, EndpointConfig,
    EndpointRandomness, Event, Instant, Security,
};
use rally_sim::{secure, Net, VirtualClock};
use std::net::SocketAddr;
use std::time::Duration;

const HONEST: usize = 3;
const SECONDS: u64 = 3;
/// Messages the withholding attacker starts on each of its two channels (none completes).
const ATTACK_MESSAGES: u16 = 100;

fn server_addr() -> SocketAddr {
    "10.0.0.2:7777".parse().unwrap()
}

/// A token-secured server and `clients` clients on `link`, all connected.
fn secured(clients: usize, link: LinkConfig, connection: ConnectionConfig) -> Net {
    let plain = EndpointConfig { connection, ..EndpointConfig::default() };
    let config = secure::server_config(plain, server_addr());
    let mut net = Net::new(config, link, clients, 3);
    let token = |i: usize| secure::token(i as u64, 0, server_addr());
    assert!(net.connect_all_with_tokens(Duration::from_secs(5), token));
    net
}

/// A peer that holds a token and crafts its own sealed packets after the handshake.
struct Crafter {
    addr: SocketAddr,
    key: [u8; 32],
    /// The next packet number: far past the few its real endpoint used in the handshake.
    number: u64,
}

impl Crafter {
    /// Takes over client `i` of `net`: its real endpoint is replaced by one that sends nothing,
    /// so that no packet number is used twice.
    fn take_over(net: &mut Net, i: usize) -> Self {
        let idle = EndpointConfig { security: Security::DangerPlaintext, ..Default::default() };
        net.clients[i].endpoint =
            Endpoint::new(idle, EndpointRandomness::danger_from_seed(99)).unwrap();
        Self { addr: net.clients[i].addr, key: secure::client_key(i as u64, 0), number: 1_000 }
    }

    /// Seals `frame` in a data packet (no acks) and hands it straight to the server.
    fn send(&mut self, net: &mut Net, frame: &Frame<'_>) {
        let mut frames = [0u8; 1500];
        let frames_len = frame.encode(&mut frames).unwrap();
        let header = DataHeader { seq: self.number as u16, narrow: false, acks: None };
        let mut buf = [0u8; 1500];
        let len = Packet::Data { header, frames: &frames[..frames_len] }.encode(&mut buf).unwrap();
        let header_len = len - frames_len;
        let sealed = danger_seal(&self.key, self.number, &mut buf, header_len, len).unwrap();
        self.number += 1;
        net.server.handle_datagram(net.now(), self.addr, &buf[..sealed]);
    }
}

/// The attacker's plan: every fragment but the first of message `1..=ATTACK_MESSAGES` on the
/// reliable-ordered channel 0 and the unreliable channel 1, withholding message 0 so that the
/// ordered channel never delivers; each message announces the largest allowed size.
fn attack_frames(config: &ConnectionConfig) -> Vec<(u8, u16, u8)> {
    let count = config.message_bytes_max.div_ceil(config.piece_bytes()) as u8;
    let mut plan = Vec::new();
    for seq in 1..=ATTACK_MESSAGES {
        for channel in [0, 1] {
            plan.extend((1..count).map(|index| (channel, seq, index)));
        }
    }
    plan
}

/// What the honest clients saw, and what the server held for the attacker at its worst.
struct Outcome {
    echoes: Vec<Vec<u32>>,
    round_trips_ms: Vec<f64>,
    attacker_held_max: usize,
    net: Net,
}

fn run(attack: bool) -> Outcome {
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        loss: LossModel::Bernoulli { probability: 0.02 },
        ..LinkConfig::default()
    };
    let connection = ConnectionConfig::default();
    let mut net = secured(HONEST + 1, link, connection.clone());
    let mut crafter = Crafter::take_over(&mut net, HONEST);
    let handles: Vec<_> = net.clients[..HONEST].iter().map(|c| c.handle.unwrap()).collect();
    let plan = if attack { attack_frames(&connection) } else { Vec::new() };
    let piece = vec![0xA5; connection.piece_bytes()];
    let (mut next_frame, mut attacker_held_max) = (0, 0);
    let mut sent_at: Vec<Vec<Instant>> = vec![Vec::new(); HONEST];
    let mut echoes = vec![Vec::new(); HONEST];
    let mut round_trips_ms = Vec::new();
    let (mut seen_server, mut seen_client) = (net.server_events.len(), vec![0; HONEST]);
    let start = net.now();
    // Sending stops after SECONDS; one more second lets every echo arrive.
    let (stop, end) =
        (start + Duration::from_secs(SECONDS), start + Duration::from_secs(SECONDS + 1));
    let mut next_send = start;
    let per_ms = plan.len().div_ceil(SECONDS as usize * 1000);
    let mut next_attack = start;
    while net.now() < end {
        let now = net.now();
        if now >= next_send && now < stop {
            for (i, handle) in handles.iter().enumerate() {
                let seq = sent_at[i].len() as u32;
                let mut payload = vec![i as u8];
                payload.extend_from_slice(&seq.to_le_bytes());
                net.clients[i].endpoint.send(*handle, 0, &payload).expect("room to send");
                sent_at[i].push(now);
            }
            next_send += Duration::from_micros(16_667);
        }
        if now >= next_attack && next_frame < plan.len() {
            for &(channel, seq, index) in plan[next_frame..].iter().take(per_ms) {
                let count = connection.message_bytes_max.div_ceil(piece.len()) as u8;
                let frame = Frame::Fragment { channel, seq, index, count, payload: &piece };
                crafter.send(&mut net, &frame);
                let held = net.server.footprint().receive_bytes_connection_max;
                attacker_held_max = attacker_held_max.max(held);
            }
            next_frame += per_ms;
            next_attack += Duration::from_millis(1);
        }
        net.drive();
        echo(&mut net, &mut seen_server);
        for (i, client) in net.clients[..HONEST].iter().enumerate() {
            for (_, event) in &client.events[seen_client[i]..] {
                if let Event::Message { payload, .. } = event {
                    let seq = u32::from_le_bytes(payload[1..5].try_into().unwrap());
                    echoes[i].push(seq);
                    let rtt = net.now() - sent_at[i][seq as usize];
                    round_trips_ms.push(rtt.as_secs_f64() * 1e3);
                }
            }
            seen_client[i] = client.events.len();
        }
        let next_send = if next_send < stop { next_send } else { end };
        let next = if next_frame < plan.len() { next_send.min(next_attack) } else { next_send };
        net.step_until(next.min(end));
    }
    assert!(next_frame >= plan.len(), "the attacker sent its whole plan");
    Outcome { echoes, round_trips_ms, attacker_held_max, net }
}

/// The server echoes every message at once.
fn echo(net: &mut Net, seen: &mut usize) {
    while *seen < net.server_events.len() {
        let (handle, event) = net.server_events[*seen].clone();
        *seen += 1;
        if let Event::Message { payload, .. } = event {
            net.server.send(handle, 0, &payload).expect("room to echo");
        }
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The server's handle of the connection from `addr`.
fn handle_of(net: &Net, addr: SocketAddr) -> ConnectionHandle {
    let connected = net.server_events.iter().filter(|(_, e)| *e == Event::Connected);
    connected.map(|(h, _)| *h).find(|h| net.server.peer(*h) == Some(addr)).unwrap()
}

/// Goal: an authenticated peer that sends every fragment but the first of 200 largest
/// messages (13 MB announced, 100 on each of two channels) makes the server hold at most
/// `receive_bytes_max`, and the honest clients on the same server lose nothing and keep their
/// round trips.
/// Method: the same seed run calm and attacked; three clients echo 60 messages a second for
/// three seconds over a 2%-lossy 10 ms link while the attacker's fragments go straight into
/// the server; the footprint is read after every attacking datagram.
#[test]
fn a_withholding_peer_is_held_to_its_receive_limit_and_nobody_else_notices() {
    let calm = run(false);
    let attacked = run(true);
    let limit = ConnectionConfig::default().receive_bytes_max;
    let attacker = handle_of(&attacked.net, attacked.net.clients[HONEST].addr);
    let stats = attacked.net.server.connection(attacker).expect("still connected").stats();
    let (calm_rtt, attacked_rtt) = (mean(&calm.round_trips_ms), mean(&attacked.round_trips_ms));
    println!(
        "attacker held at most {} of {limit} bytes ({} now, per channel {:?}); pieces refused \
         {}, packets unacked {}, unreliable assemblies dropped {}; honest mean RTT {calm_rtt:.3} \
         ms calm, {attacked_rtt:.3} ms attacked",
        attacked.attacker_held_max,
        attacked.net.server.footprint().receive_bytes_connection_max,
        stats.receive_bytes,
        stats.frames_deferred,
        stats.packets_deferred,
        stats.assemblies_evicted,
    );
    assert!(attacked.attacker_held_max <= limit, "{} > {limit}", attacked.attacker_held_max);
    assert!(attacked.attacker_held_max > limit / 2, "the attack did not reach the limit");
    assert!(stats.frames_deferred > 1_000 && stats.packets_deferred > 1_000, "{stats:?}");
    assert!(stats.assemblies_evicted > 0, "{stats:?}");
    for (i, echoes) in attacked.echoes.iter().enumerate() {
        let expected: Vec<u32> = (0..(SECONDS * 60) as u32).collect();
        assert_eq!(echoes, &expected, "client {i}: lost, duplicated or reordered");
        assert_eq!(echoes, &calm.echoes[i], "client {i}: the attack changed what arrived");
    }
    assert!(
        (attacked_rtt - calm_rtt).abs() <= 0.1 * calm_rtt,
        "round trips {calm_rtt:.2} ms calm, {attacked_rtt:.2} ms attacked"
    );
    let disconnected =
        attacked.net.server_events.iter().any(|(_, e)| matches!(e, Event::Disconnected { .. }));
    assert!(!disconnected, "a connection closed");
}

/// Goal: a fragment announcing a message larger than `message_bytes_max` (255 pieces: about
/// 297 KB against 64 KiB) closes the connection as misbehaved and leaves nothing held.
/// Method: an authenticated peer sends one such fragment; the server's events and footprint
/// are read right after.
#[test]
fn a_fragment_announcing_an_oversized_message_closes_the_connection() {
    let config = ConnectionConfig::default();
    let mut net = secured(2, LinkConfig::default(), config.clone());
    let mut crafter = Crafter::take_over(&mut net, 1);
    let attacker = handle_of(&net, crafter.addr);
    let piece = vec![1u8; config.piece_bytes()];
    let frame = Frame::Fragment { channel: 0, seq: 0, index: 1, count: 255, payload: &piece };
    crafter.send(&mut net, &frame);
    net.drive();
    let closed = net.server_events.iter().any(|(h, e)| {
        *h == attacker && *e == Event::Disconnected { reason: DisconnectReason::PeerMisbehaved }
    });
    assert!(closed, "{:?}", net.server_events);
    assert_eq!(net.server.footprint().receive_bytes, 0);
    // The smallest message of the largest allowed count is let in (and held).
    let mut net = secured(2, LinkConfig::default(), config.clone());
    let mut crafter = Crafter::take_over(&mut net, 1);
    let count = config.message_bytes_max.div_ceil(piece.len()) as u8;
    crafter
        .send(&mut net, &Frame::Fragment { channel: 0, seq: 0, index: 1, count, payload: &piece });
    net.drive();
    assert!(net.server.footprint().receive_bytes > config.message_bytes_max);
    assert!(!net.server_events.iter().any(|(_, e)| matches!(e, Event::Disconnected { .. })));
}

/// Goal: an honest sender whose messages outgrow the receiver's `receive_bytes_max` loses
/// nothing: refused pieces go unacked and are sent again.
/// Method: a client sends 16 messages of 60 KB at once on the reliable-ordered channel over a
/// 10%-lossy link to a server allowing the least valid receive limit; every message must
/// arrive once, in order, intact, and the server must have refused (and not acked) pieces.
#[test]
fn an_honest_sender_past_the_receive_limit_loses_nothing() {
    let base = ConnectionConfig::default();
    let least = ConnectionConfig { receive_bytes_max: 0, ..base.clone() };
    let Err(rally_proto::ConfigError::OutOfRange { min, .. }) = least.validate() else {
        panic!("a zero receive limit is refused");
    };
    let connection = ConnectionConfig { receive_bytes_max: min as usize, ..base };
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        loss: LossModel::Bernoulli { probability: 0.1 },
        ..LinkConfig::default()
    };
    let mut net = secured(1, link, connection.clone());
    let handle = net.clients[0].handle.unwrap();
    let messages: Vec<Vec<u8>> =
        (0..16u8).map(|i| (0..60_000).map(|j| (j as u8) ^ i).collect()).collect();
    for message in &messages {
        net.clients[0].endpoint.send(handle, 0, message).expect("room to send");
    }
    let deadline = net.now() + Duration::from_secs(60);
    let received = |net: &Net| {
        net.server_events.iter().filter(|(_, e)| matches!(e, Event::Message { .. })).count()
    };
    while received(&net) < messages.len() && net.now() < deadline {
        net.drive();
        let held = net.server.footprint().receive_bytes_connection_max;
        assert!(held <= connection.receive_bytes_max, "{held} held");
        if !net.step_until(deadline) {
            break;
        }
    }
    let got: Vec<&Vec<u8>> = net
        .server_events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Message { payload, .. } => Some(payload),
            _ => None,
        })
        .collect();
    let lengths: Vec<usize> = got.iter().map(|m| m.len()).collect();
    assert_eq!(got.len(), messages.len(), "messages delivered, by length: {lengths:?}");
    let wrong = got.iter().zip(&messages).position(|(got, sent)| *got != sent);
    assert_eq!(wrong, None, "the first message lost, reordered or corrupted");
    let server_handle = handle_of(&net, net.clients[0].addr);
    let stats = net.server.connection(server_handle).unwrap().stats();
    println!(
        "{} pieces refused, {} packets unacked",
        stats.frames_deferred, stats.packets_deferred
    );
    assert!(stats.packets_deferred > 0, "the limit never refused a piece: {stats:?}");
}
