//! The bounds every scene field is checked against. A scene is untrusted input: each size has
//! a limit here, each number a range, and docs/scene.md repeats them field by field.

use std::ops::RangeInclusive;

/// A scene file's size at most, bytes.
pub const FILE_BYTES_MAX: usize = 1 << 20;
/// Static colliders in a scene at most.
pub const COLLIDERS_MAX: usize = 1024;
/// Dynamic and kinematic bodies in a scene at most.
pub const BODIES_MAX: usize = 1024;
/// Player spawn points at most.
pub const SPAWNS_MAX: usize = 64;
/// A name's (or a class name's) length at most, bytes.
pub const NAME_BYTES_MAX: usize = 32;
/// How far from the origin a position may be, metres, on each axis.
pub const POSITION_ABS_MAX_M: f32 = 10_000.0;
/// A shape's sizes (box sides, radii, capsule heights), metres.
pub const SIZE_M: RangeInclusive<f32> = 0.001..=1000.0;
/// A body's mass, kilograms.
pub const MASS_KG: RangeInclusive<f32> = 0.001..=100_000.0;
/// Friction coefficients.
pub const FRICTION: RangeInclusive<f32> = 0.0..=10.0;
/// Restitution (bounciness): 0 stops dead, 1 bounces back at full speed.
pub const RESTITUTION: RangeInclusive<f32> = 0.0..=1.0;
/// Linear and angular damping, per second.
pub const DAMPING: RangeInclusive<f32> = 0.0..=100.0;
/// Replication priority: how fast a changed body's priority grows (1 is the default).
pub const PRIORITY: RangeInclusive<f32> = 0.01..=1000.0;
/// Each component of gravity, metres per second squared, in absolute value at most.
pub const GRAVITY_ABS_MAX: f32 = 100.0;
/// Room ticks per second.
pub const TICK_RATE: RangeInclusive<u32> = 10..=1000;
/// Players in a room.
pub const PLAYERS: RangeInclusive<u32> = 1..=256;
/// Snapshot bytes per client per tick (the room's byte budget for each client).
pub const CLIENT_BYTES_PER_TICK: RangeInclusive<u32> = 200..=65_536;
/// Rotation angles, degrees, in absolute value at most.
pub const ANGLE_DEG_ABS_MAX: f32 = 360.0;

/// A relayed message's bytes: the range a scene's `relay.message_bytes_max` takes, and its
/// default. The top keeps a relayed message well inside the room codec's 64 KiB.
pub const RELAY_BYTES: RangeInclusive<u32> = 1..=16_384;
/// The default of `relay.message_bytes_max`.
pub const RELAY_BYTES_DEFAULT: u32 = 1024;
/// Relay messages and writes per client per second, on average: `relay.per_second`.
pub const RELAY_PER_SECOND: RangeInclusive<u32> = 1..=10_000;
/// The default of `relay.per_second`.
pub const RELAY_PER_SECOND_DEFAULT: u32 = 60;
/// Relay messages and writes a client may send at once: `relay.burst`.
pub const RELAY_BURST: RangeInclusive<u32> = 1..=10_000;
/// The default of `relay.burst`.
pub const RELAY_BURST_DEFAULT: u32 = 30;
/// A key's bytes: `state.key_bytes_max`.
pub const KEY_BYTES: RangeInclusive<u32> = 1..=256;
/// The default of `state.key_bytes_max`.
pub const KEY_BYTES_DEFAULT: u32 = 64;
/// A value's bytes: `state.value_bytes_max`.
pub const VALUE_BYTES: RangeInclusive<u32> = 1..=16_384;
/// The default of `state.value_bytes_max`.
pub const VALUE_BYTES_DEFAULT: u32 = 1024;
/// Keys in one scope (the room's, or one player's): `state.keys_per_scope_max`.
pub const KEYS_PER_SCOPE: RangeInclusive<u32> = 1..=1024;
/// The default of `state.keys_per_scope_max`.
pub const KEYS_PER_SCOPE_DEFAULT: u32 = 64;
/// The keys and values in one message that brings a joiner the current values, bytes, about
/// (one pair larger than this goes alone): well inside the room codec's 64 KiB, since the
/// largest pair is 256 + 16,384 bytes.
pub const VALUES_BATCH_BYTES: usize = 16_384;
