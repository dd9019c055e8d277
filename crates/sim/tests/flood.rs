//! Goal: while honest clients exchange reliable messages with a token-secured server over a
//! lossy link, an attacker's 100,000 datagrams (random, truncated, replayed, forged, spoofed)
//! change nothing for them: no panic, every message delivered once and in order, round trips
//! as without the attack, the server's state within its limits, and no connection for the
//! attacker.
//! Method: three clients echoing 60 messages a second for five seconds of virtual time; the
//! attacker taps the clients' datagrams and injects its own straight into the server, 20 a
//! millisecond. The same run without the attacker gives the round trips to compare with.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::packet::{Cookie, Packet, SealedToken, CLIENT_HANDSHAKE_SIZE};
use rally_proto::token::{self, Grant, TokenRandomness, SEALED_LEN, USER_DATA_LEN};
use rally_proto::TokenKey;
use rally_proto::{ConnectToken, DisconnectReason, EndpointConfig, Event, Instant, Security};
use rally_sim::{Net, VirtualClock};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

const CLIENTS: usize = 3;
const PROTOCOL: u64 = 9;
const EPOCH: u64 = 1_800_000_000;
const SECONDS: u64 = 5;
const ATTACK: usize = 100_000;

fn server_addr() -> SocketAddr {
    "10.0.0.2:7777".parse().unwrap()
}

fn token_for(client: usize, key: &TokenKey) -> ConnectToken {
    let grant = Grant {
        client_id: client as u64,
        room_id: 1,
        user_data: [0; USER_DATA_LEN],
        server_addresses: vec![server_addr()],
        timeout_s: 5,
    };
    let seed = client as u8 + 1;
    let random = TokenRandomness {
        nonce: [seed; 24],
        client_to_server_key: [seed.wrapping_mul(3); 32],
        server_to_client_key: [seed.wrapping_mul(7); 32],
    };
    token::issue(key, PROTOCOL, &grant, EPOCH, 600, &random).unwrap()
}

/// What the honest clients saw.
struct Outcome {
    /// Each client's echoes, in arrival order (their sequence numbers).
    echoes: Vec<Vec<u32>>,
    round_trips_ms: Vec<f64>,
    net: Net,
}

fn run(attack: bool) -> Outcome {
    let key = TokenKey([42; 32]);
    let security = Security::Tokens {
        key: key.clone(),
        protocol_id: PROTOCOL,
        address: server_addr(),
        unix_at_zero: EPOCH,
    };
    let config = EndpointConfig { security, ..EndpointConfig::default() };
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        loss: LossModel::Bernoulli { probability: 0.05 },
        ..LinkConfig::default()
    };
    let mut net = Net::new(config, link, CLIENTS, 3);
    assert!(net.connect_all_with_tokens(Duration::from_secs(5), |i| token_for(i, &key)));
    net.tap = Some(VecDeque::new());
    let handles: Vec<_> = net.clients.iter().map(|c| c.handle.unwrap()).collect();
    let mut attacker = Attacker { rng: Xoshiro256PlusPlus::seed_from_u64(7), sent: 0 };
    let mut sent_at: Vec<Vec<Instant>> = vec![Vec::new(); CLIENTS];
    let mut echoes = vec![Vec::new(); CLIENTS];
    let mut round_trips_ms = Vec::new();
    let (mut seen_server, mut seen_client) = (net.server_events.len(), vec![0; CLIENTS]);
    let start = net.now();
    let end = start + Duration::from_secs(SECONDS);
    let mut next_send = start;
    let mut next_attack = start;
    while net.now() < end {
        let now = net.now();
        if now >= next_send {
            for (i, handle) in handles.iter().enumerate() {
                let seq = sent_at[i].len() as u32;
                let mut payload = vec![i as u8];
                payload.extend_from_slice(&seq.to_le_bytes());
                net.clients[i].endpoint.send(*handle, 0, &payload).expect("room to send");
                sent_at[i].push(now);
            }
            next_send += Duration::from_micros(16_667);
            net.drive();
        }
        if attack && now >= next_attack {
            // Twenty a millisecond, straight into the server as if from the network.
            for _ in 0..ATTACK / (SECONDS as usize * 1000) {
                attacker.inject(&mut net, &key);
            }
            next_attack += Duration::from_millis(1);
            net.drive();
        }
        // The server echoes every message at once.
        while seen_server < net.server_events.len() {
            let (handle, event) = net.server_events[seen_server].clone();
            seen_server += 1;
            if let Event::Message { payload, .. } = event {
                net.server.send(handle, 0, &payload).expect("room to echo");
            }
        }
        net.drive();
        for (i, client) in net.clients.iter().enumerate() {
            for (_, event) in &client.events[seen_client[i]..] {
                if let Event::Message { payload, .. } = event {
                    assert_eq!(usize::from(payload[0]), i, "an echo reached the wrong client");
                    let seq = u32::from_le_bytes(payload[1..5].try_into().unwrap());
                    echoes[i].push(seq);
                    let rtt = net.now() - sent_at[i][seq as usize];
                    round_trips_ms.push(rtt.as_secs_f64() * 1e3);
                }
            }
            seen_client[i] = client.events.len();
        }
        let next = if attack { next_send.min(next_attack) } else { next_send };
        net.step_until(next.min(end));
    }
    if attack {
        assert_eq!(attacker.sent, ATTACK, "the attacker sent its whole flood");
    }
    Outcome { echoes, round_trips_ms, net }
}

/// Injects one hostile datagram of a random kind.
struct Attacker {
    rng: Xoshiro256PlusPlus,
    sent: usize,
}

impl Attacker {
    fn inject(&mut self, net: &mut Net, key: &TokenKey) {
        self.sent += 1;
        let now = net.now();
        let stranger = SocketAddr::from((
            [192, 168, self.rng.next_u32() as u8, self.rng.next_u32() as u8],
            (self.rng.next_u32() % 60_000) as u16 + 1024,
        ));
        let tapped = net.tap.as_ref().and_then(|tap| {
            (!tap.is_empty()).then(|| tap[self.rng.next_u32() as usize % tap.len()].clone())
        });
        let (from, datagram) = match (self.rng.next_u32() % 8, tapped) {
            // Replayed, from its real source.
            (0, Some((source, bytes))) => (source, bytes),
            // Truncated.
            (1, Some((source, bytes))) => {
                let cut = self.rng.next_u32() as usize % bytes.len().max(1);
                (source, bytes[..cut].to_vec())
            }
            // Altered in flight.
            (2, Some((source, mut bytes))) => {
                let i = self.rng.next_u32() as usize % bytes.len().max(1);
                bytes[i] ^= 1 << (self.rng.next_u32() % 8);
                (source, bytes)
            }
            // A spoofed disconnect from a real client, plaintext or with a made-up tag.
            (3, Some((source, _))) => {
                let mut tag = [0u8; 16];
                self.rng.fill_bytes(&mut tag);
                let packet = if self.rng.next_u32() % 2 == 0 {
                    Packet::Disconnect { reason: DisconnectReason::Closed }
                } else {
                    let seq = self.rng.next_u32() as u16;
                    Packet::DisconnectSealed { reason: DisconnectReason::Closed, seq, tag }
                };
                (source, encode(&packet))
            }
            // A connect request with a token sealed under another key.
            (4, _) => {
                let forged = token_for(9, &TokenKey([1; 32]));
                (stranger, encode(&request(&forged, self.rng.next_u64(), None)))
            }
            // A challenge response with a made-up cookie, presenting a real client's token.
            (5, _) => {
                let real = token_for(0, key);
                let mut tag = [0u8; 16];
                self.rng.fill_bytes(&mut tag);
                let cookie = Cookie { expiry_ms: u64::MAX, tag };
                (stranger, encode(&request(&real, self.rng.next_u64(), Some(cookie))))
            }
            // Random bytes, from a stranger or from a real client.
            (kind, tapped) => {
                let mut bytes = vec![0u8; self.rng.next_u32() as usize % 1300];
                self.rng.fill_bytes(&mut bytes);
                let from = match tapped {
                    Some((source, _)) if kind == 6 => source,
                    _ => stranger,
                };
                (from, bytes)
            }
        };
        net.server.handle_datagram(now, from, &datagram);
    }
}

fn request(token: &ConnectToken, nonce: u64, cookie: Option<Cookie>) -> Packet<'_> {
    let sealed: &[u8; SEALED_LEN] = &token.sealed;
    let token = Some(SealedToken {
        protocol_id: token.protocol_id,
        expires_at: token.expires_at,
        nonce: &token.nonce,
        sealed,
    });
    match cookie {
        None => Packet::ConnectRequest { nonce, token },
        Some(cookie) => Packet::ChallengeResponse { nonce, cookie, token, short_tag: false },
    }
}

fn encode(packet: &Packet<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; CLIENT_HANDSHAKE_SIZE.max(64)];
    let len = packet.encode(&mut buf).unwrap();
    buf.truncate(len);
    buf
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

#[test]
fn a_flood_changes_nothing_for_honest_clients() {
    let calm = run(false);
    let flooded = run(true);
    let stats = flooded.net.server.stats();
    for (i, echoes) in flooded.echoes.iter().enumerate() {
        // Every message sent a round trip before the end came back once, in order.
        let expected: Vec<u32> = (0..echoes.len() as u32).collect();
        assert_eq!(echoes, &expected, "client {i}: lost, duplicated or reordered");
        assert!(echoes.len() as u64 >= SECONDS * 60 - 10, "client {i}: {} echoes", echoes.len());
        assert_eq!(echoes, &calm.echoes[i], "client {i}: the attack changed what arrived");
    }
    let (calm_rtt, flooded_rtt) = (mean(&calm.round_trips_ms), mean(&flooded.round_trips_ms));
    assert!(
        (flooded_rtt - calm_rtt).abs() <= 0.1 * calm_rtt,
        "round trips {calm_rtt:.2} ms calm, {flooded_rtt:.2} ms flooded"
    );
    // The attacker got no connection, and the server holds what its limits allow.
    let connected =
        flooded.net.server_events.iter().filter(|(_, e)| *e == Event::Connected).count();
    assert_eq!(connected, CLIENTS);
    let disconnected =
        flooded.net.server_events.iter().any(|(_, e)| matches!(e, Event::Disconnected { .. }));
    assert!(!disconnected, "the attacker closed a connection");
    let footprint = flooded.net.server.footprint();
    let config = EndpointConfig::default();
    assert_eq!(footprint.slots, CLIENTS);
    assert_eq!(footprint.tokens_used, CLIENTS);
    assert!(footprint.rate_sources <= 2 * config.rate_sources_max);
    assert!(footprint.replies <= config.replies_max);
    // And every kind of attack was seen and counted.
    assert!(stats.malformed > 10_000, "{stats:?}");
    assert!(stats.unauthenticated > 1_000, "{stats:?}");
    assert!(stats.replayed > 1_000, "{stats:?}");
    assert!(stats.tokens_refused.forged > 1_000, "{stats:?}");
    assert!(stats.bad_cookie > 1_000, "{stats:?}");
}
