//! Goal: a server with `Security::Tokens` lets in exactly the holders of valid connect tokens,
//! and nobody else can read, forge, replay or close their connections. Each refusal is
//! counted with its reason.
//! Method: a server and clients on emulated links in virtual time; datagrams taken from an
//! endpoint by hand where the test plays the attacker.

use rally_netem::LinkConfig;
use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::{
    ConnectToken, DisconnectReason, EndpointConfig, EndpointRandomness, Event, Instant, Security,
    TokenKey,
};
use rally_sim::{Net, VirtualClock};
use std::net::SocketAddr;
use std::time::Duration;

const PROTOCOL: u64 = 77;
/// Unix seconds at the start of virtual time.
const EPOCH: u64 = 1_800_000_000;

fn key() -> TokenKey {
    TokenKey([5; 32])
}

fn server_addr() -> SocketAddr {
    "10.0.0.2:7777".parse().unwrap()
}

fn config() -> EndpointConfig {
    let security = Security::Tokens {
        key: key(),
        protocol_id: PROTOCOL,
        address: server_addr(),
        unix_at_zero: EPOCH,
    };
    EndpointConfig { security, ..EndpointConfig::default() }
}

/// A token for client `client`, valid for `ttl` seconds from the start, naming `server`.
fn token_for(client: u64, ttl: u64, server: SocketAddr) -> ConnectToken {
    let grant = Grant {
        client_id: client,
        room_id: 1,
        user_data: [0; USER_DATA_LEN],
        server_addresses: vec![server],
        timeout_s: 5,
    };
    let seed = client as u8;
    let random = TokenRandomness {
        nonce: [seed; 24],
        client_to_server_key: [seed.wrapping_add(100); 32],
        server_to_client_key: [seed.wrapping_add(200); 32],
    };
    token::issue(&key(), PROTOCOL, &grant, EPOCH, ttl, &random).unwrap()
}

fn net(clients: usize) -> Net {
    let link = LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() };
    Net::new(config(), link, clients, 1)
}

fn messages(events: &[(rally_proto::ConnectionHandle, Event)]) -> Vec<Vec<u8>> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Message { payload, .. } => Some(payload.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn token_holders_connect_and_their_packets_are_sealed() {
    let mut net = net(1);
    assert!(net.connect_all_with_tokens(Duration::from_secs(1), |i| token_for(
        i as u64 + 1,
        30,
        server_addr()
    )));
    let client = net.clients[0].handle.unwrap();
    assert!(net.clients[0].endpoint.connection(client).unwrap().is_encrypted());
    // The server knows what the backend granted the connection: a host routes it by room.
    let (server_side, _) = net.server_events.first().expect("the server saw the connection");
    let grant = net.server.grant(*server_side).expect("a token connection carries its grant");
    assert_eq!((grant.client_id, grant.room_id), (1, 1));
    assert!(net.clients[0].endpoint.grant(client).is_none(), "a client's side holds no grant");
    // The test takes the client's next datagram off the wire: the payload is not in it.
    let now = net.now();
    net.clients[0].endpoint.send(client, 0, b"attack at dawn").unwrap();
    let mut buf = vec![0u8; 1500];
    let transmit = net.clients[0].endpoint.poll_transmit(now, &mut buf).unwrap();
    let datagram = buf[..transmit.len].to_vec();
    assert!(!datagram.windows(14).any(|w| w == b"attack at dawn"));
    let from = net.clients[0].addr;
    net.server.handle_datagram(now, from, &datagram);
    net.drive();
    assert_eq!(messages(&net.server_events), vec![b"attack at dawn".to_vec()]);
    // Replayed, it is dropped and counted, and delivers nothing twice.
    net.server.handle_datagram(now, from, &datagram);
    net.drive();
    assert_eq!(net.server.stats().replayed, 1);
    assert_eq!(messages(&net.server_events).len(), 1);
    // A new datagram altered in flight does not authenticate, and costs the real one nothing.
    net.clients[0].endpoint.send(client, 0, b"retreat").unwrap();
    let transmit = net.clients[0].endpoint.poll_transmit(now, &mut buf).unwrap();
    let datagram = buf[..transmit.len].to_vec();
    let mut altered = datagram.clone();
    altered[transmit.len - 1] ^= 1;
    net.server.handle_datagram(now, from, &altered);
    assert_eq!(net.server.stats().unauthenticated, 1);
    net.server.handle_datagram(now, from, &datagram);
    net.drive();
    assert_eq!(messages(&net.server_events).last().unwrap(), b"retreat");
}

#[test]
fn nobody_else_gets_in() {
    let mut forged = token_for(1, 30, server_addr());
    forged.sealed[40] ^= 1;
    let other_game = {
        let mine = token_for(1, 30, server_addr());
        let random = TokenRandomness {
            nonce: mine.nonce,
            client_to_server_key: mine.client_to_server_key,
            server_to_client_key: mine.server_to_client_key,
        };
        let grant = Grant {
            client_id: 1,
            room_id: 1,
            user_data: [0; USER_DATA_LEN],
            server_addresses: vec![server_addr()],
            timeout_s: 5,
        };
        token::issue(&key(), PROTOCOL + 1, &grant, EPOCH, 30, &random).unwrap()
    };
    // Another game's token relabelled with this game's id: the seal binds the id.
    let mut relabelled = other_game.clone();
    relabelled.protocol_id = PROTOCOL;
    let cases = [
        ("missing", None),
        ("expired", Some(token_for(1, 0, server_addr()))),
        ("wrong server", Some(token_for(1, 30, "10.0.0.9:7777".parse().unwrap()))),
        ("wrong protocol", Some(other_game)),
        ("forged", Some(forged)),
        ("relabelled", Some(relabelled)),
    ];
    for (name, token) in cases {
        let mut net = net(1);
        let connected = match token {
            // A client without a token connects in plaintext, which this server refuses.
            None => net.connect_all(Duration::from_secs(2)),
            Some(mut token) => {
                // Present it at this server even when it names another.
                token.server_addresses = vec![server_addr()];
                net.connect_all_with_tokens(Duration::from_secs(2), |_| token.clone())
            }
        };
        assert!(!connected, "{name}: got in");
        let refused = net.server.stats().tokens_refused;
        let counted = match name {
            "missing" => refused.missing,
            "expired" => refused.expired,
            "wrong server" => refused.wrong_server,
            "wrong protocol" => refused.wrong_protocol,
            _ => refused.forged,
        };
        assert!(counted > 0, "{name}: not counted: {refused:?}");
        // Strangers cost the server nothing: no connection, no reply.
        assert_eq!(net.server_wire_bytes, 0, "{name}: the server answered");
        assert!(net.server_events.is_empty(), "{name}");
    }
}

#[test]
fn a_token_works_from_one_address_only() {
    let mut net = net(2);
    let token = token_for(1, 30, server_addr());
    assert!(!net.connect_all_with_tokens(Duration::from_secs(2), |_| token.clone()));
    let connected = net.server_events.iter().filter(|(_, e)| *e == Event::Connected).count();
    assert_eq!(connected, 1, "the first address keeps it");
    assert!(net.server.stats().tokens_refused.reused > 0);
}

#[test]
fn only_the_peer_can_close_a_sealed_connection() {
    let mut net = net(1);
    assert!(net.connect_all_with_tokens(Duration::from_secs(1), |_| token_for(
        1,
        30,
        server_addr()
    )));
    let (now, from) = (net.now(), net.clients[0].addr);
    // A spoofed plaintext disconnect, and garbage, from the client's address: ignored.
    let mut buf = [0u8; 64];
    let len = rally_proto::packet::Packet::Disconnect { reason: DisconnectReason::Closed }
        .encode(&mut buf)
        .unwrap();
    net.server.handle_datagram(now, from, &buf[..len]);
    net.server.handle_datagram(now, from, &[0x13, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9]);
    net.step_until(now + Duration::from_millis(200));
    assert!(net.server.stats().unauthenticated >= 2);
    let closed =
        |net: &Net| net.server_events.iter().any(|(_, e)| matches!(e, Event::Disconnected { .. }));
    assert!(!closed(&net), "a stranger closed the connection");
    // The client's own (sealed) disconnect closes it.
    let client = net.clients[0].handle.unwrap();
    net.clients[0].endpoint.disconnect(client, DisconnectReason::Closed);
    net.drive();
    let later = net.now() + Duration::from_millis(200);
    net.step_until(later);
    assert!(closed(&net));
    assert!(net.now() >= Instant::ZERO);
}

#[test]
fn a_source_flooding_handshakes_is_rate_limited_before_any_token_is_opened() {
    let mut server = rally_proto::Endpoint::new(config(), EndpointRandomness::danger_from_seed(1))
        .expect("a valid config");
    let mut forged = token_for(1, 30, server_addr());
    forged.sealed[0] ^= 1;
    let sealed = rally_proto::packet::SealedToken {
        protocol_id: forged.protocol_id,
        expires_at: forged.expires_at,
        nonce: &forged.nonce,
        sealed: &forged.sealed,
    };
    let mut buf = vec![0u8; rally_proto::packet::CLIENT_HANDSHAKE_SIZE];
    let request = rally_proto::packet::Packet::ConnectRequest { nonce: 1, token: Some(sealed) };
    let len = request.encode(&mut buf).unwrap();
    let from: SocketAddr = "192.168.1.1:5000".parse().unwrap();
    // Ten thousand requests in one second from one address.
    for i in 0..10_000u64 {
        let now = Instant::ZERO + Duration::from_micros(i * 100);
        server.handle_datagram(now, from, &buf[..len]);
    }
    let stats = server.stats();
    let config = EndpointConfig::default();
    let allowed = config.handshake_rate.burst + config.handshake_rate.per_second;
    assert!(stats.tokens_refused.forged as f64 <= allowed, "{stats:?}");
    assert_eq!(stats.tokens_refused.forged + stats.rate_limited, 10_000);
    assert_eq!(server.footprint().slots, 0);
}

#[test]
fn the_server_never_answers_an_unverified_address_with_more_than_it_received() {
    let mut server = rally_proto::Endpoint::new(config(), EndpointRandomness::danger_from_seed(1))
        .expect("a valid config");
    let token = token_for(1, 30, server_addr());
    let sealed = rally_proto::packet::SealedToken {
        protocol_id: token.protocol_id,
        expires_at: token.expires_at,
        nonce: &token.nonce,
        sealed: &token.sealed,
    };
    let mut request = vec![0u8; 1500];
    let packet = rally_proto::packet::Packet::ConnectRequest { nonce: 1, token: Some(sealed) };
    let len = packet.encode(&mut request).unwrap();
    let mut reply = vec![0u8; 1500];
    // A valid request is answered with a challenge no larger than itself.
    let from: SocketAddr = "192.168.1.2:5000".parse().unwrap();
    server.handle_datagram(Instant::ZERO, from, &request[..len]);
    let challenge = server.poll_transmit(Instant::ZERO, &mut reply).expect("a challenge");
    assert!(challenge.len <= len, "challenge {} bytes for a request of {len}", challenge.len);
    // The same request without its padding, from a spoofed victim, gets no answer at all: a
    // reflector must send as much as it would make the server send.
    let victim: SocketAddr = "192.168.1.3:5000".parse().unwrap();
    let unpadded = request[..len].iter().rposition(|b| *b != 0).unwrap() + 1;
    assert!(unpadded < len, "the request was padded");
    server.handle_datagram(Instant::ZERO, victim, &request[..unpadded]);
    assert!(server.poll_transmit(Instant::ZERO, &mut reply).is_none());
    assert_eq!(server.stats().malformed, 1);
}
