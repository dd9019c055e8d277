//! Goal: docs/protocol-vectors.json holds test vectors of the transport (a connect token, the
//! three handshake packets, sealed data packets and a sealed disconnect) that the real code
//! produced, so that an independent implementation can check itself against them and the file
//! cannot drift from the code. Method: the token and handshake packets are encoded from fixed
//! inputs; the sealed packets are captured from a sealed connection in virtual time and opened
//! with `open_captured`; the file must equal what this test generates.
//! `RALLY_BLESS=1 cargo test -p rally-sim --test protocol_vectors` rewrites the file.

use rally_netem::LinkConfig;
use rally_proto::packet::{Cookie, Packet, SealedToken};
use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::{open_captured, DisconnectReason, Event, TokenKey};
use rally_sim::{Net, VirtualClock};
use rally_wire::hex;
use std::time::Duration;

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol-vectors.json");

fn token_vectors(out: &mut Vec<String>) {
    let key = TokenKey([0x42; 32]);
    let mut user_data = [0u8; USER_DATA_LEN];
    user_data[..5].copy_from_slice(b"alice");
    let grant = Grant {
        client_id: 7,
        room_id: 3,
        user_data,
        server_addresses: vec!["127.0.0.1:7777".parse().unwrap()],
        timeout_s: 5,
    };
    let random = TokenRandomness {
        nonce: [0x01; 24],
        client_to_server_key: [0x02; 32],
        server_to_client_key: [0x03; 32],
    };
    let token = token::issue(&key, 1, &grant, 1_800_000_000, 30, &random).unwrap();
    out.push(format!(
        "  \"token\": {{\n    \"token_key\": \"{}\", \"game_id\": 1, \"created_at\": 1800000000, \
         \"expires_at\": 1800000030,\n    \"client_id\": 7, \"room_id\": 3, \"timeout_s\": 5, \
         \"user_data\": \"alice, then zeros\", \"server\": \"127.0.0.1:7777\",\n    \
         \"nonce\": \"{}\", \"client_to_server_key\": \"{}\", \
         \"server_to_client_key\": \"{}\",\n    \
         \"bytes\": \"{}\"\n  }}",
        hex::encode(&key.0),
        hex::encode(&random.nonce),
        hex::encode(&random.client_to_server_key),
        hex::encode(&random.server_to_client_key),
        hex::encode(&token.encode()),
    ));
    let sealed = SealedToken {
        protocol_id: token.protocol_id,
        expires_at: token.expires_at,
        nonce: &token.nonce,
        sealed: &token.sealed,
    };
    let nonce = 0x0123_4567_89ab_cdef;
    let cookie = Cookie { expiry_ms: 10_000, tag: [0xaa; 16] };
    let packets = [
        ("connect_request", Packet::ConnectRequest { nonce, token: Some(sealed) }),
        ("challenge", Packet::Challenge { nonce, cookie }),
        (
            "challenge_response",
            Packet::ChallengeResponse { nonce, cookie, token: Some(sealed), short_tag: false },
        ),
    ];
    for (name, packet) in packets {
        let mut buf = [0u8; 1200];
        let len = packet.encode(&mut buf).unwrap();
        out.push(format!("  \"{name}\": \"{}\"", hex::encode(&buf[..len])));
    }
}

/// Sealed datagrams from the client of a harness connection: its first data packet (a
/// message "hello" on channel 0) and its first sealed disconnect.
fn sealed_vectors(out: &mut Vec<String>) {
    let mut net = Net::secure(Default::default(), LinkConfig::default(), 1, 1);
    net.tap = Some(Default::default());
    assert!(net.connect_all(Duration::from_secs(2)));
    let client = net.clients[0].handle.unwrap();
    net.clients[0].endpoint.send(client, 0, b"hello").unwrap();
    let deadline = net.now + Duration::from_millis(50);
    net.run_until(deadline);
    net.clients[0].endpoint.disconnect(client, DisconnectReason::Closed);
    let deadline = net.now + Duration::from_millis(50);
    net.run_until(deadline);
    assert!(net.server_events.iter().any(|(_, e)| matches!(e, Event::Message { .. })));
    let token = rally_sim::secure::token(0, 1, net.server_addr);
    let key = token.client_to_server_key;
    let tapped: Vec<Vec<u8>> = net.tap.take().unwrap().into_iter().map(|(_, d)| d).collect();
    // The client's first data packet with a frame: the short header (`0x17`, 8 bytes).
    let data = tapped.iter().find(|d| d[0] == 0x17 && d.len() > 24).expect("a data packet");
    let disconnect = tapped.iter().find(|d| d[0] == 0x16).expect("a sealed disconnect");
    let mut largest = None;
    for (name, datagram, header) in [("sealed_data", data, 8), ("sealed_disconnect", disconnect, 4)]
    {
        // The sequence follows the type (data) or the type and the reason (disconnect).
        let at = if header == 4 { 2 } else { 1 };
        let seq = u16::from_le_bytes([datagram[at], datagram[at + 1]]);
        let (plaintext, number) =
            open_captured(&key, largest, &datagram[..header], seq, &datagram[header..])
                .expect("opens");
        largest = Some(number);
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&number.to_le_bytes());
        out.push(format!(
            "  \"{name}\": {{\n    \"key\": \"{}\", \"number\": {number}, \"nonce\": \"{}\",\n    \
             \"associated_data\": \"{}\", \"plaintext\": \"{}\",\n    \"datagram\": \"{}\"\n  }}",
            hex::encode(&key),
            hex::encode(&nonce),
            hex::encode(&datagram[..header]),
            hex::encode(&plaintext),
            hex::encode(datagram),
        ));
    }
}

#[test]
fn protocol_vectors_match_the_code() {
    let mut entries =
        vec!["  \"about\": \"docs/protocol.md sections 11-13; hex bytes; generated by \
         crates/sim/tests/protocol_vectors.rs\""
            .to_string()];
    token_vectors(&mut entries);
    sealed_vectors(&mut entries);
    let generated = format!("{{\n{}\n}}\n", entries.join(",\n"));
    if std::env::var_os("RALLY_BLESS").is_some() {
        std::fs::write(PATH, &generated).unwrap();
    }
    let file = std::fs::read_to_string(PATH).expect("docs/protocol-vectors.json");
    assert_eq!(file, generated, "the vectors drifted: RALLY_BLESS=1 rewrites them");
}
