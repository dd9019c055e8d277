//! The standard XR input crosses the room's codec intact, its game bytes stay bounded, and a
//! pose that is not one is refused when read.

use proptest::prelude::*;
use rally_engine::{RoomConfig, Transform};
use rally_scene::{GameBytes, Hand, XrHand, XrInput, XrPose, GAME_BYTES_MAX};
use serde::Serialize;

fn pose(p: [f32; 3], q: [f32; 4]) -> XrPose {
    XrPose { position: p, rotation: q }
}

fn finite() -> impl Strategy<Value = f32> {
    -1000.0f32..1000.0
}

prop_compose! {
    fn any_pose()(p in prop::array::uniform3(finite()), q in prop::array::uniform4(finite()))
        -> XrPose {
        pose(p, q)
    }
}

prop_compose! {
    fn any_input()(
        head in any_pose(),
        left in any_pose(),
        right in any_pose(),
        buttons in prop::array::uniform4(any::<u8>()),
        game in prop::collection::vec(any::<u8>(), 0..=GAME_BYTES_MAX),
    ) -> XrInput {
        XrInput {
            head,
            hands: [
                XrHand { pose: left, grip: buttons[0], trigger: buttons[1] },
                XrHand { pose: right, grip: buttons[2], trigger: buttons[3] },
            ],
            game: GameBytes::new(&game).unwrap(),
        }
    }
}

proptest! {
    #[test]
    fn every_input_round_trips_through_the_room_codec(input in any_input()) {
        // Goal: what a client sends is what the room reads; method: encode and decode random
        // inputs with the codec a room uses for inputs, and compare.
        let codec = RoomConfig::default().codec;
        let bytes = codec.encode(&input).unwrap();
        let back: XrInput = codec.decode(&bytes).unwrap();
        prop_assert_eq!(back, input);
    }
}

/// What serde (postcard) reads from the front of `bytes`: the input re-encoded (so that NaNs
/// compare by their bits) and the bytes after it.
fn serde_reads(bytes: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let (input, rest) = postcard::take_from_bytes::<XrInput>(bytes).ok()?;
    Some((postcard::to_allocvec(&input).unwrap(), rest))
}

/// What the room's fixed-layout decode reads, the same way.
fn fixed_reads(bytes: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let (input, rest) = XrInput::decode(bytes)?;
    Some((postcard::to_allocvec(&input).unwrap(), rest))
}

prop_compose! {
    /// An input's bytes as a client might send them, or break them: any float bits (NaNs,
    /// infinities), any game bytes, then cut, given another length byte, or followed by more.
    fn any_input_bytes()(
        floats in prop::collection::vec(any::<u32>(), 21),
        buttons in prop::array::uniform4(any::<u8>()),
        game in prop::collection::vec(any::<u8>(), 0..=GAME_BYTES_MAX + 2),
        cut in prop::option::of(0usize..130),
        len in prop::option::of(any::<u8>()),
        tail in prop::collection::vec(any::<u8>(), 0..40),
    ) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (k, bits) in floats.iter().enumerate() {
            bytes.extend_from_slice(&bits.to_le_bytes());
            if k == 13 || k == 20 {
                bytes.extend_from_slice(&buttons[(k / 7 - 1) * 2..][..2]);
            }
        }
        bytes.push(len.unwrap_or(game.len() as u8));
        bytes.extend_from_slice(&game);
        bytes.extend_from_slice(&tail);
        bytes.truncate(cut.unwrap_or(usize::MAX));
        bytes
    }
}

proptest! {
    #[test]
    fn the_fixed_layout_decode_reads_what_serde_reads(bytes in any_input_bytes()) {
        // Goal: the room's fast decode takes and refuses exactly what serde does, so no client
        // can tell them apart; method: random and broken input bytes through both.
        prop_assert_eq!(fixed_reads(&bytes), serde_reads(&bytes));
    }
}

#[test]
fn the_fixed_layout_decode_reads_a_sent_input_and_odd_lengths_as_serde_does() {
    // Goal: the fixed offsets are the documented ones, and the game bytes' length is read as
    // postcard reads it; method: a real input's bytes read back whole, and lengths written
    // the long way (a varint with a zero continuation), over the limit, and over a byte.
    let input = XrInput {
        head: pose([0.0, 1.7, 0.5], [0.0, 0.6, 0.0, 0.8]),
        hands: [
            XrHand { pose: pose([-0.2, 1.2, -0.3], [0.0, 0.0, 0.0, 1.0]), grip: 255, trigger: 1 },
            XrHand { pose: pose([0.2, 1.1, -0.4], [0.6, 0.0, 0.0, 0.8]), grip: 3, trigger: 200 },
        ],
        game: GameBytes::new(&[4, 5, 6]).unwrap(),
    };
    let mut bytes = postcard::to_allocvec(&input).unwrap();
    bytes.push(99);
    let (read, rest) = XrInput::decode(&bytes).unwrap();
    assert_eq!((read, rest), (input, &[99u8][..]));
    let fixed = bytes.len() - 5;
    for length in [&[0x83, 0x00][..], &[0x80, 0x80, 0x00], &[33], &[0x81, 0x02], &[0xff; 11]] {
        let odd = [&bytes[..fixed], length, &[4, 5, 6, 99]].concat();
        assert_eq!(fixed_reads(&odd), serde_reads(&odd), "length {length:?}");
    }
    assert!(fixed_reads(&[&bytes[..fixed], &[0x83, 0x00, 4, 5, 6]].concat()).is_some());
}

#[test]
fn an_input_without_game_bytes_fits_in_a_hundred_bytes() {
    // Goal: the standard input stays small enough to send every frame; method: encode a
    // typical one and bound its size (three poses of seven floats and four button bytes).
    let codec = RoomConfig::default().codec;
    let input = XrInput {
        head: pose([0.0, 1.7, 0.0], [0.0, 0.0, 0.0, 1.0]),
        hands: [XrHand {
            pose: pose([0.2, 1.2, -0.3], [0.0, 0.0, 0.0, 1.0]),
            grip: 255,
            trigger: 0,
        }; 2],
        game: GameBytes::default(),
    };
    let bytes = codec.encode(&input).unwrap();
    assert!(bytes.len() <= 100, "{} bytes", bytes.len());
    assert!(input.hand(Hand::Left).holds() && input.hand(Hand::Right).holds());
}

/// The input's serde shape with unbounded game bytes, as a hostile client could send it.
#[derive(Serialize)]
struct Forged {
    head: XrPose,
    hands: [XrHand; 2],
    game: Vec<u8>,
}

#[test]
fn game_bytes_over_the_limit_are_refused() {
    // Goal: the game bytes' bound holds on the side that receives; method: GameBytes cannot
    // be made one byte over, and a forged input one byte over fails to decode while one at
    // the limit decodes.
    assert!(GameBytes::new(&[0; GAME_BYTES_MAX]).is_some());
    assert!(GameBytes::new(&[0; GAME_BYTES_MAX + 1]).is_none());
    let codec = RoomConfig::default().codec;
    let forged =
        |n| Forged { head: XrPose::default(), hands: Default::default(), game: vec![7; n] };
    let at_limit = codec.encode(&forged(GAME_BYTES_MAX)).unwrap();
    assert_eq!(codec.decode::<XrInput>(&at_limit).unwrap().game.as_slice(), [7; GAME_BYTES_MAX]);
    let over = codec.encode(&forged(GAME_BYTES_MAX + 1)).unwrap();
    assert!(codec.decode::<XrInput>(&over).is_err());
}

#[test]
fn a_pose_that_is_not_one_is_refused_when_read() {
    // Goal: the room never takes a broken pose from a client; method: NaN, infinite and
    // far-away positions and zero or non-unit rotations give None, a slightly denormalized
    // rotation is normalized, and a transform's pose reads back as itself.
    let q = [0.0, 0.0, 0.0, 1.0];
    assert!(pose([f32::NAN, 0.0, 0.0], q).transform().is_none());
    assert!(pose([0.0, f32::INFINITY, 0.0], q).transform().is_none());
    assert!(pose([0.0, 0.0, 20_000.0], q).transform().is_none());
    assert!(pose([0.0; 3], [0.0; 4]).transform().is_none());
    assert!(pose([0.0; 3], [0.0, 0.0, 0.0, 2.0]).transform().is_none());
    assert!(pose([0.0; 3], [0.0, 0.0, 0.0, f32::NAN]).transform().is_none());
    let read = pose([1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 1.05]).transform().unwrap();
    assert!((read.rotation.length() - 1.0).abs() < 1e-6);
    let t = Transform::from_position(glam::Vec3::new(0.5, 1.5, -2.0));
    assert_eq!(XrPose::from_transform(&t).transform(), Some(t));
}
