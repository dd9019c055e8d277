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
