//! The standard XR input: what any XR client sends a scene room each frame, so that no client
//! developer defines an input type. A head pose, two hands (pose, grip, trigger) and a few
//! opaque bytes for the game. It travels like any room input, in the engine's input frames
//! (serde, postcard; docs/scene.md gives the bytes), and is untrusted: poses are checked when
//! read ([`XrPose::transform`]), the buttons are bytes that cannot be out of range, and the game
//! bytes are bounded on decode.

use crate::limits::POSITION_ABS_MAX_M;
use glam::{Quat, Vec3};
use rally_engine::Transform;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Opaque game bytes in one input at most.
pub const GAME_BYTES_MAX: usize = 32;

/// The grip value from which a hand holds: more than half pressed.
pub const GRIP_HOLD_MIN: u8 = 128;

/// A pose as the client sampled it: position in metres and rotation as a quaternion
/// (x, y, z, w), in the room's frame. Unchecked until [`XrPose::transform`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct XrPose {
    /// Metres.
    pub position: [f32; 3],
    /// A quaternion, x, y, z, w; normalized on reading.
    pub rotation: [f32; 4],
}

impl XrPose {
    /// The pose of `transform`.
    pub fn from_transform(transform: &Transform) -> Self {
        Self { position: transform.position.into(), rotation: transform.rotation.into() }
    }

    /// The pose as a transform, or `None` if it is not one: a position that is not finite or
    /// is further than [`POSITION_ABS_MAX_M`] on an axis, or a rotation whose length is not
    /// near 1 (a client's bug or a forgery; the room keeps the entity's last pose).
    pub fn transform(&self) -> Option<Transform> {
        let position = Vec3::from_array(self.position);
        let rotation = Quat::from_array(self.rotation);
        // Every compare with a NaN is false, so a position that is not finite is not placed.
        let placed = position.abs().cmple(Vec3::splat(POSITION_ABS_MAX_M)).all();
        // A client's float rounding leaves a unit quaternion within a few percent of 1. A
        // component that is not finite makes the length NaN or infinite: not near 1.
        let unit = (0.8..=1.2).contains(&rotation.length());
        (placed && unit).then(|| Transform { position, rotation: rotation.normalize() })
    }
}

/// One hand: where it is and how far its grip and trigger are pressed.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct XrHand {
    /// The hand's (or its controller's) pose.
    pub pose: XrPose,
    /// Grip, 0 (released) to 255 (fully pressed).
    pub grip: u8,
    /// Trigger, 0 (released) to 255 (fully pressed).
    pub trigger: u8,
}

impl XrHand {
    /// Whether the grip is pressed enough to hold ([`GRIP_HOLD_MIN`]).
    pub fn holds(&self) -> bool {
        self.grip >= GRIP_HOLD_MIN
    }
}

/// Which hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hand {
    /// The left hand, `hands[0]`.
    Left = 0,
    /// The right hand, `hands[1]`.
    Right = 1,
}

/// Up to [`GAME_BYTES_MAX`] opaque bytes the game gives meaning to (a button, a gesture).
/// Longer ones cannot be made, and are refused when decoded. Held inline, so that an input
/// neither allocates nor frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GameBytes {
    len: u8,
    /// The bytes past `len` are zero, so that the derived equality compares the bytes alone.
    bytes: [u8; GAME_BYTES_MAX],
}

impl GameBytes {
    /// The bytes, or `None` if there are more than [`GAME_BYTES_MAX`].
    pub fn new(bytes: &[u8]) -> Option<Self> {
        let mut game = Self::default();
        let to = game.bytes.get_mut(..bytes.len())?;
        // Most inputs carry none: skipping the copy skips a call to memcpy (16 instructions).
        if !bytes.is_empty() {
            to.copy_from_slice(bytes);
        }
        game.len = bytes.len() as u8;
        Some(game)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Serialize for GameBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As a sequence of bytes, as the `Vec<u8>` it was: a varint length, then the bytes.
        self.as_slice().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for GameBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The whole input is bounded by the room codec's message_bytes_max before it is
        // decoded, so this vector is too; the check keeps the game's own bound.
        let bytes = Vec::<u8>::deserialize(deserializer)?;
        Self::new(&bytes).ok_or_else(|| {
            let expected = "at most GAME_BYTES_MAX game bytes";
            serde::de::Error::invalid_length(bytes.len(), &expected)
        })
    }
}

/// One frame of a standard XR client: head, both hands, and game bytes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct XrInput {
    /// The headset's pose.
    pub head: XrPose,
    /// The hands, left then right ([`Hand`]).
    pub hands: [XrHand; 2],
    /// Opaque bytes for the game.
    pub game: GameBytes,
}

impl XrInput {
    /// One hand.
    pub fn hand(&self, hand: Hand) -> &XrHand {
        &self.hands[hand as usize]
    }
}

/// The bytes of one pose: seven little-endian `f32`, as postcard writes them.
const POSE_BYTES: usize = 7 * 4;
/// The bytes of one hand: its pose, its grip and its trigger.
const HAND_BYTES: usize = POSE_BYTES + 2;

impl XrInput {
    /// Reads one input from the front of `bytes`, the bytes postcard writes for it
    /// (docs/scene.md, "On the wire"), and returns it with the bytes after it, or
    /// `None` if `bytes` do not start with one: the same as serde would, read at fixed offsets
    /// (a room reads one from every player on every frame; postcard through serde took 26
    /// calls). A game-bytes length that is not one canonical byte of at most
    /// [`GAME_BYTES_MAX`] (a client's bug or a forgery) is left to serde, which decides it.
    pub fn decode(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let (Fixed { head, left, right, len }, rest) = Fixed::split(bytes)?;
        // Most inputs carry no game bytes: their path makes no call, so it saves and restores
        // no registers (12 instructions an input when the copy was inline).
        if len != 0 {
            return Self::decode_with_game(bytes);
        }
        let hands = [hand_at(left), hand_at(right)];
        Some((Self { head: pose_at(head), hands, game: GameBytes::default() }, rest))
    }

    /// [`XrInput::decode`] of an input carrying game bytes: out of line, as it calls `memcpy`.
    #[inline(never)]
    fn decode_with_game(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let (Fixed { head, left, right, len }, rest) = Fixed::split(bytes)?;
        if usize::from(len) > GAME_BYTES_MAX {
            return Self::decode_serde(bytes);
        }
        let (game, rest) = rest.split_at_checked(usize::from(len))?;
        let game = GameBytes::new(game)?;
        Some((Self { head: pose_at(head), hands: [hand_at(left), hand_at(right)], game }, rest))
    }

    /// [`XrInput::decode`] through serde. Out of line and cold: a forgery's path, kept from
    /// growing the fixed-offset path's stack frame and saved registers.
    #[cold]
    #[inline(never)]
    fn decode_serde(bytes: &[u8]) -> Option<(Self, &[u8])> {
        postcard::take_from_bytes(bytes).ok()
    }
}

/// The fixed-offset part of an input's bytes: the head's and both hands' bytes and the game
/// bytes' length, borrowed from the front of the input.
struct Fixed<'a> {
    head: &'a [u8; POSE_BYTES],
    left: &'a [u8; HAND_BYTES],
    right: &'a [u8; HAND_BYTES],
    len: u8,
}

impl<'a> Fixed<'a> {
    /// Splits the fixed part off the front of `bytes`, or `None` if they are too short for it.
    #[inline(always)]
    fn split(bytes: &'a [u8]) -> Option<(Self, &'a [u8])> {
        let (head, rest) = bytes.split_first_chunk::<POSE_BYTES>()?;
        let (left, rest) = rest.split_first_chunk::<HAND_BYTES>()?;
        let (right, rest) = rest.split_first_chunk::<HAND_BYTES>()?;
        let (&len, rest) = rest.split_first()?;
        Some((Self { head, left, right, len }, rest))
    }
}

/// The pose of seven little-endian `f32`: position, then rotation.
fn pose_at(bytes: &[u8; POSE_BYTES]) -> XrPose {
    let mut f = [0.0; 7];
    for (value, word) in f.iter_mut().zip(bytes.chunks_exact(4)) {
        *value = f32::from_le_bytes([word[0], word[1], word[2], word[3]]);
    }
    XrPose { position: [f[0], f[1], f[2]], rotation: [f[3], f[4], f[5], f[6]] }
}

/// The hand of a pose's bytes, then its grip and trigger bytes.
fn hand_at(bytes: &[u8; HAND_BYTES]) -> XrHand {
    let (pose, buttons) = bytes.split_at(POSE_BYTES);
    let pose = pose.first_chunk::<POSE_BYTES>().map_or_else(XrPose::default, pose_at);
    XrHand { pose, grip: buttons[0], trigger: buttons[1] }
}
