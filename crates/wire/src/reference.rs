//! The W4 reference snapshot (docs/design.md section 5): 256 rigid bodies in a room-sized
//! sandbox from a seeded generator, 64 of them moving, and the snapshot one 128 Hz tick later.
//!
//! Benchmarks, tests and the test vectors use the same generator, so a figure measured on it can be
//! reproduced from the seed alone. The 192 bodies at rest have zero velocity, as a physics engine's
//! sleeping bodies do; the 64 moving ones fly, spin and fall under gravity.

use crate::snapshot::{EntityState, Snapshot, SnapshotConfig};
use glam::{Quat, Vec3};

/// Bodies in the reference snapshot.
pub const BODIES: usize = 256;
/// Bodies that move between the two consecutive reference snapshots.
pub const MOVING: usize = 64;
/// The tick rate the second snapshot is advanced by.
pub const TICK_RATE_HZ: f32 = 128.0;

/// A small seeded generator (SplitMix64): enough for test data, with no dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniform in `lo..hi`.
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * unit
    }

    /// A vector with each component uniform in `-magnitude..magnitude`.
    pub fn vec3(&mut self, magnitude: f32) -> Vec3 {
        Vec3::new(
            self.range(-magnitude, magnitude),
            self.range(-magnitude, magnitude),
            self.range(-magnitude, magnitude),
        )
    }

    /// A uniformly random unit quaternion (Shoemake's method).
    pub fn rotation(&mut self) -> Quat {
        let (u1, u2, u3) = (self.range(0.0, 1.0), self.range(0.0, 1.0), self.range(0.0, 1.0));
        let tau = std::f32::consts::TAU;
        let (a, b) = ((1.0 - u1).sqrt(), u1.sqrt());
        Quat::from_xyzw(
            a * (tau * u2).sin(),
            a * (tau * u2).cos(),
            b * (tau * u3).sin(),
            b * (tau * u3).cos(),
        )
        .normalize()
    }
}

/// The float state of the reference bodies at the first tick, and which of them move.
pub fn bodies(seed: u64) -> (Vec<EntityState>, Vec<bool>) {
    let mut rng = SplitMix64::new(seed);
    let mut moving = vec![false; BODIES];
    let mut chosen = 0;
    while chosen < MOVING {
        let i = (rng.next_u64() % BODIES as u64) as usize;
        if !moving[i] {
            moving[i] = true;
            chosen += 1;
        }
    }
    let bodies = (0..BODIES)
        .map(|i| {
            let position =
                Vec3::new(rng.range(-20.0, 20.0), rng.range(0.0, 4.0), rng.range(-20.0, 20.0));
            let (linear_velocity, angular_velocity) =
                if moving[i] { (rng.vec3(4.0), rng.vec3(8.0)) } else { (Vec3::ZERO, Vec3::ZERO) };
            EntityState {
                id: i as u32 + 1,
                position,
                rotation: rng.rotation(),
                linear_velocity,
                angular_velocity,
            }
        })
        .collect();
    (bodies, moving)
}

/// Advances the moving bodies by one tick: ballistic flight under gravity and free spin.
pub fn step(bodies: &mut [EntityState], moving: &[bool]) {
    let dt = 1.0 / TICK_RATE_HZ;
    for (body, _) in bodies.iter_mut().zip(moving).filter(|(_, m)| **m) {
        body.position += body.linear_velocity * dt;
        body.linear_velocity.y -= 9.81 * dt;
        let spin = Quat::from_scaled_axis(body.angular_velocity * dt);
        body.rotation = (spin * body.rotation).normalize();
        body.angular_velocity *= 0.998;
    }
}

/// Quantizes float bodies into a snapshot of `tick`.
pub fn quantize(config: &SnapshotConfig, tick: u32, bodies: &[EntityState]) -> Snapshot {
    let mut snapshot = Snapshot::with_capacity(tick, bodies.len());
    for body in bodies {
        // The generator's ids are 1..=BODIES, ascending.
        snapshot.push(config.quantize(body)).expect("reference ids ascend");
    }
    snapshot
}

/// The reference pair: the snapshot at `tick` and the one a tick later with 64 bodies moved.
pub fn snapshots(config: &SnapshotConfig, seed: u64, tick: u32) -> (Snapshot, Snapshot) {
    let (mut bodies, moving) = bodies(seed);
    let baseline = quantize(config, tick, &bodies);
    step(&mut bodies, &moving);
    let current = quantize(config, tick.wrapping_add(1), &bodies);
    (baseline, current)
}
