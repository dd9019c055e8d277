//! Goal: draft 2's forms (docs/protocol.md sections 3 and 4) cost on a real connection what the
//! specification promises: a data packet with one 400-byte message is 8 bytes of short header
//! and 3 of frame before its payload (6 fewer than draft 1), a repair packet 8 and 4 before its
//! symbol (8 fewer), and a sealed one a byte less again once acked (the narrow header's
//! one-byte sequence), which restores right across wraps and reordering while a stale one is
//! refused and counted; a receiver still takes draft-1 packets; and garbage behind a short
//! header never panics an endpoint.
//! Method: a client streaming 400-byte messages at 60 Hz over a 10 ms link in virtual time, the
//! server's wiretap reading every datagram it received, plaintext and sealed; a sealed stream
//! over a jittery, reordering, lossy link past several 8-bit wraps; then hand-made packets of
//! both drafts and random ones fed to a connected server.

use rally_netem::LinkConfig;
use rally_proto::packet::{Frame, Frames, Packet};
use rally_proto::{ConnectionConfig, EndpointConfig, Event, Repair};
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

const MESSAGE: usize = 400;

fn link() -> LinkConfig {
    LinkConfig { delay: Duration::from_millis(10), ..LinkConfig::default() }
}

fn config(repair: Repair) -> EndpointConfig {
    let connection = ConnectionConfig { repair, ..ConnectionConfig::default() };
    EndpointConfig { connection, ..EndpointConfig::default() }
}

/// The datagrams the server received while the client sent 400-byte messages at 60 Hz on its
/// reliable-ordered channel for a second.
fn stream(repair: Repair, sealed: bool) -> Vec<Vec<u8>> {
    let mut pair = if sealed {
        Pair::secure(config(repair), link(), 7)
    } else {
        Pair::new(config(repair), link(), 7)
    };
    let (client, _) = pair.connect(Duration::from_secs(2)).expect("connects");
    pair.net.tap = Some(Default::default());
    for k in 0..60u8 {
        pair.client().send(client, 0, &[k; MESSAGE]).expect("queued");
        let next = pair.now() + Duration::from_micros(16_667);
        pair.run_until(next);
    }
    assert_eq!(pair.server_messages(0).len(), 60, "every message arrived");
    pair.net.tap.take().expect("tapped").into_iter().map(|(_, d)| d).collect()
}

/// The frames of a plaintext data packet, and its header's length.
fn frames(datagram: &[u8]) -> (Vec<Frame<'_>>, usize) {
    let Ok(Packet::Data { header, frames }) = Packet::decode(datagram) else {
        panic!("a data packet: {datagram:02x?}");
    };
    let parsed = Frames::new(frames, header.seq).collect::<Result<Vec<_>, _>>();
    (parsed.expect("valid frames"), datagram.len() - frames.len())
}

#[test]
fn a_message_packet_takes_eleven_bytes_besides_its_payload() {
    let datagrams = stream(Repair::Off, false);
    let mut carrying = 0;
    for datagram in &datagrams {
        let (frames, header) = frames(datagram);
        if let [Frame::Message { payload, .. }] = frames[..] {
            assert_eq!(payload.len(), MESSAGE);
            assert_eq!((datagram[0], header), (0x17, 8), "the short header");
            assert_eq!(datagram.len(), 8 + 3 + MESSAGE, "a last-frame message: 3 bytes");
            carrying += 1;
        }
    }
    assert!(carrying >= 55, "{carrying} packets of one message");
    // Sealed, the same and the tag, and once the server has acknowledged a packet the narrow
    // header: a byte less.
    let sealed = stream(Repair::Off, true);
    let with_message: Vec<&Vec<u8>> = sealed.iter().filter(|d| d.len() > 100).collect();
    assert!(with_message.len() >= 55);
    // The first ones go before the first ack is back (a round trip and the ack delay).
    let acked = with_message.iter().position(|d| d[0] == 0x18).expect("narrow headers");
    assert!(acked <= 3, "{acked} packets before the narrow header");
    for datagram in &with_message[..acked] {
        assert_eq!((datagram[0], datagram.len()), (0x17, 8 + 3 + MESSAGE + 16), "before an ack");
    }
    for datagram in &with_message[acked..] {
        assert_eq!((datagram[0], datagram.len()), (0x18, 7 + 3 + MESSAGE + 16), "narrow");
    }
}

/// Goal: one-byte sequences restore right across many 8-bit wraps while the link jitters,
/// reorders, duplicates and loses, so that every message arrives once and in order; and a
/// narrow packet replayed long after restores to another number and is refused and counted,
/// never delivered, with the connection unharmed.
#[test]
fn narrow_sequences_survive_wraps_and_reordering_and_a_stale_one_is_refused() {
    let link = LinkConfig {
        delay: Duration::from_millis(15),
        jitter: Duration::from_millis(6),
        reorder: true,
        duplicate: 0.05,
        loss: rally_netem::LossModel::Bernoulli { probability: 0.05 },
        ..LinkConfig::default()
    };
    let mut pair = Pair::secure(config(Repair::adaptive()), link, 11);
    let (client, _) = pair.connect(Duration::from_secs(2)).expect("connects");
    pair.net.tap = Some(Default::default());
    let sent: Vec<Vec<u8>> = (0..1200u32).map(|k| k.to_le_bytes().repeat(25)).collect();
    let mut stale = None;
    for message in &sent {
        pair.client().send(client, 0, message).expect("queued");
        let next = pair.now() + Duration::from_micros(16_667);
        pair.run_until(next);
        let tap = pair.net.tap.as_ref().expect("tapped");
        if stale.is_none() {
            stale = tap.iter().find(|(_, d)| d[0] == 0x18).map(|(_, d)| d.clone());
        }
    }
    let deadline = pair.now() + Duration::from_secs(2);
    pair.run_until(deadline);
    let arrived: Vec<Vec<u8>> = pair.server_messages(0).into_iter().map(<[u8]>::to_vec).collect();
    assert_eq!(arrived, sent, "every message once, in order");
    let before = pair.server().stats();
    let (now, from) = (pair.now(), pair.client_addr());
    pair.server().handle_datagram(now, from, &stale.expect("a narrow packet was sent"));
    let after = pair.server().stats();
    assert_eq!(
        after.unauthenticated + after.replayed,
        before.unauthenticated + before.replayed + 1
    );
    assert_eq!(pair.server_messages(0).len(), sent.len(), "nothing more delivered");
    pair.client().send(client, 0, b"after").expect("queued");
    let deadline = pair.now() + Duration::from_millis(200);
    pair.run_until(deadline);
    assert_eq!(pair.server_messages(0).last(), Some(&&b"after"[..]), "the connection goes on");
}

#[test]
fn a_repair_packet_takes_twelve_bytes_besides_its_symbol() {
    let datagrams = stream(Repair::adaptive(), false);
    let mut repairs = 0;
    for datagram in &datagrams {
        let (frames, header) = frames(datagram);
        let Some(Frame::Repair { seed, data, .. }) = frames.last().copied() else { continue };
        assert_eq!(frames.len(), 1, "a repair goes alone (the server sends no repairs to ack)");
        // The symbol: length u16, checksum u32 and the payload.
        assert_eq!(data.len(), 6 + MESSAGE);
        assert_eq!((datagram[0], header), (0x17, 8));
        assert_eq!(datagram.len(), 8 + 4 + data.len(), "a last-frame repair: 4 bytes");
        let Ok(Packet::Data { header, .. }) = Packet::decode(datagram) else { unreachable!() };
        assert_eq!(seed, header.seq, "the seed is the packet's sequence");
        repairs += 1;
    }
    // Repairs start on before any loss is measured, and a clean link turns them off.
    assert!(repairs >= 10, "{repairs} repairs");
}

/// A plaintext pair, connected, with the client quiet: hand-made packets go to the server as
/// if from the client.
fn connected() -> (Pair, rally_proto::ConnectionHandle) {
    let mut pair = Pair::new(config(Repair::Off), link(), 3);
    let (_, server) = pair.connect(Duration::from_secs(2)).expect("connects");
    (pair, server)
}

#[test]
fn a_receiver_takes_draft_one_and_draft_two_packets_alike() {
    let (mut pair, server) = connected();
    let (now, from) = (pair.now(), pair.client_addr());
    // Draft 1: the long header (sequence 1000, acking the server's packet 0), a message frame
    // with its channel and length. Unreliable channel 1.
    let mut old = vec![0x13, 0xE8, 0x03, 0, 0, 0, 0, 0, 0, 0, 0];
    old.extend_from_slice(&[0x01, 1, 0, 0, 3]);
    old.extend_from_slice(b"one");
    // Draft 2: the short header (sequence 1001), the last-frame message `0x80 | 1`.
    let mut new = vec![0x17, 0xE9, 0x03, 0, 0, 0, 0, 0];
    new.extend_from_slice(&[0x81, 1, 0]);
    new.extend_from_slice(b"two");
    for datagram in [&old, &new] {
        pair.server().handle_datagram(now, from, datagram);
    }
    let mut messages = Vec::new();
    while let Some((handle, event)) = pair.server().poll_event() {
        if let Event::Message { channel, payload } = event {
            assert_eq!((handle, channel), (server, 1));
            messages.push(payload);
        }
    }
    assert_eq!(messages, vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(pair.server().stats().malformed, 0);
}

#[test]
fn garbage_behind_a_short_header_never_panics_and_is_counted() {
    let mut state = 0x9E37_79B9_u64;
    let mut random = move || {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u8
    };
    let mut closed = 0;
    for round in 0..40u16 {
        let (mut pair, server) = connected();
        let (now, from) = (pair.now(), pair.client_addr());
        for k in 0..25u16 {
            let seq = (2000 + round * 25 + k).to_le_bytes();
            let mut datagram = vec![0x17, seq[0], seq[1], 0, 0, 0, 0, 0];
            // A narrow header on a plaintext connection: counted as malformed, never taken.
            pair.server().handle_datagram(now, from, &[0x18, seq[0], 0, 0, 0, 0, 0, 0x81, 0, 0]);
            let len = usize::from(random()) % 64;
            datagram.extend((0..len).map(|_| random()));
            pair.server().handle_datagram(now, from, &datagram);
            // Truncated headers of both drafts too.
            let cut = usize::from(random()) % 11;
            pair.server().handle_datagram(now, from, &datagram[..cut.min(datagram.len())]);
        }
        let deadline = now + Duration::from_millis(50);
        pair.run_until(deadline);
        // Garbage frames from the peer close its connection with a reason; garbage that
        // happens to parse is taken as the peer's own messages (plaintext has no tag).
        let misbehaved =
            Event::Disconnected { reason: rally_proto::DisconnectReason::PeerMisbehaved };
        closed += usize::from(pair.server_events().contains(&(server, misbehaved)));
        assert!(pair.server().stats().malformed > 0, "truncated headers are counted");
    }
    assert!(closed > 20, "garbage frames closed {closed} of 40 connections");
}
