//! Goal: the bytes docs/scene.md ("On the wire") gives a client in another language are the
//! bytes a real session sends and a real room sends back: the standard XR input in an input
//! frame, and scene messages in their RPC envelopes, both ways.
//! Method: a scene room and one client over a perfect emulated link; the payloads the
//! endpoints deliver are captured and compared with the documented test vectors.

use rally_engine::{Delivery, RELIABLE, STATE};
use rally_netem::LinkConfig;
use rally_proto::Event;
use rally_scene::{
    handle_event, scene_room, GameBytes, RelayTarget, Scene, SceneMessage, SceneRoom, WriteScope,
    XrInput,
};
use rally_sim::RoomNet;
use std::time::Duration;

/// Hex, two digits a byte, spaces between: as docs/scene.md writes the vectors.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

fn joined() -> RoomNet<SceneRoom> {
    let scene = Scene::parse("wire.toml", "").unwrap();
    let mut net = RoomNet::new(scene_room(&scene, 1).unwrap(), 1, LinkConfig::default(), 1);
    net.connect(0);
    net.run_for(Duration::from_millis(100));
    assert!(net.sessions[0].client_id().is_some());
    net
}

/// What the server's endpoint delivered on `channel` since event `from`.
fn to_server(net: &RoomNet<SceneRoom>, from: usize, channel: u8) -> Vec<Vec<u8>> {
    let events = &net.net.server_events[from..];
    events
        .iter()
        .filter_map(|(_, event)| match event {
            Event::Message { channel: c, payload } if *c == channel => Some(payload.to_vec()),
            _ => None,
        })
        .collect()
}

/// The standard XR input of the documented vector: the head at the origin facing -Z, both
/// hands at the origin with a zero rotation, the right grip fully pressed, one game byte 9.
fn documented_input() -> XrInput {
    let mut input = XrInput::default();
    input.head.rotation = [0.0, 0.0, 0.0, 1.0];
    input.hands[1].grip = 255;
    input.game = GameBytes::new(&[9]).unwrap();
    input
}

/// docs/scene.md's input vector, after the frame's header.
const INPUT: &str = "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
    00 00 80 3f \
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ff 00 \
    01 09";

#[test]
fn an_input_frame_is_the_documented_postcard_bytes() {
    let mut net = joined();
    let start = net.net.server_events.len();
    net.input(0, documented_input());
    net.run_for(Duration::from_millis(10));
    let frames = to_server(&net, start, STATE);
    let frame = frames.first().expect("an input frame");
    // The header: the newest snapshot held (an option of a varint), the first input's
    // sequence number (varint 0: the first input), and the count of inputs (varint 1).
    let header = match frame[0] {
        0 => 1,
        1 => 2 + frame[1..].iter().position(|b| b & 0x80 == 0).unwrap(),
        other => panic!("not an option tag: {other}"),
    };
    assert_eq!(&frame[header..header + 2], &[0x00, 0x01]);
    assert_eq!(hex(&frame[header + 2..]), INPUT);
    assert_eq!(frame.len() - header - 2, 89 + 1, "89 bytes, and one for each game byte");
}

/// Each message, and docs/scene.md's vector for its envelope.
fn client_vectors() -> Vec<(SceneMessage, &'static str)> {
    vec![
        (
            SceneMessage::Relay { to: RelayTarget::All, reliable: true, bytes: vec![1, 2, 3] },
            "02 06 00 00 00 01 03 06 39",
        ),
        (
            SceneMessage::Relay { to: RelayTarget::One(7), reliable: true, bytes: vec![0xaa; 5] },
            "02 0c 00 00 02 04 07 01 05 00 aa aa aa aa aa",
        ),
        (
            SceneMessage::Write {
                scope: WriteScope::Room,
                key: "phase".into(),
                value: Some(b"play".to_vec()),
            },
            "02 0f 00 01 00 05 70 68 61 73 65 01 04 00 70 6c 61 79",
        ),
        (
            SceneMessage::Write { scope: WriteScope::Mine, key: "k".into(), value: None },
            "02 05 00 01 01 01 6b 00",
        ),
    ]
}

#[test]
fn scene_messages_are_the_documented_envelope_bytes_both_ways() {
    let mut net = joined();
    for (message, vector) in client_vectors() {
        let start = net.net.server_events.len();
        net.sessions[0].send(Delivery::Reliable, &message).unwrap();
        net.flush();
        net.run_for(Duration::from_millis(10));
        assert_eq!(to_server(&net, start, RELIABLE), vec![hex_bytes(vector)], "{message:?}");
    }
    // The room's answer to the first: the relayed bytes, stamped with the sender's id (1).
    let start = net.net.clients[0].events.len();
    let (relay, _) = client_vectors().remove(0);
    net.sessions[0].send(Delivery::Reliable, &relay).unwrap();
    net.flush();
    net.run_for(Duration::from_millis(10));
    let events: Vec<_> = net.room_events.drain(..).collect();
    for event in events {
        handle_event(&mut net.room, event);
    }
    net.flush();
    net.run_for(Duration::from_millis(10));
    let got: Vec<String> = net.net.clients[0].events[start..]
        .iter()
        .filter_map(|(_, event)| match event {
            Event::Message { channel: RELIABLE, payload } => Some(hex(payload)),
            _ => None,
        })
        .collect();
    assert!(got.contains(&"02 07 00 02 01 04 01 03 06 39".to_owned()), "{got:?}");
}

fn hex_bytes(text: &str) -> Vec<u8> {
    text.split(' ').map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}
