//! A small game for room tests and room scenarios: each client's controller follows its
//! inputs, free bodies fly and bounce in a box, and grab chains hang off controllers.
//!
//! Its motion is a hand-written integrator (gravity, floor and walls), not a physics engine:
//! enough to keep dozens of entities changing every tick, deterministically, without pulling
//! rapier3d into the simulation harness.

use glam::{Quat, Vec3};
use rally_engine::{ClientId, Entity, EntityId, Simulation, Transform, World};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Half the width of the play box, metres.
const BOX_HALF: f32 = 4.0;
/// Speed kept after a bounce.
const RESTITUTION: f32 = 0.9;

/// A controller sample: where the hand is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HandInput {
    /// Position, metres.
    pub position: [f32; 3],
    /// Orientation, a quaternion (x, y, z, w).
    pub rotation: [f32; 4],
}

impl HandInput {
    /// Client `client`'s hand at time `t` seconds: a circle of its own, turning as it goes.
    pub fn on_circle(client: usize, t: f64) -> Self {
        let phase = t as f32 * 3.0 + client as f32;
        let centre = Vec3::new(client as f32 * 0.5 - 2.0, 1.2, 0.0);
        let position = centre + Vec3::new(phase.cos(), phase.sin(), 0.0) * 0.3;
        let rotation = Quat::from_rotation_y(phase);
        Self { position: position.into(), rotation: rotation.into() }
    }

    /// The bytes of one input as postcard writes it: seven little-endian `f32`s (position,
    /// then rotation; an array has no length), every 28 bytes a valid input.
    pub const BYTES: usize = 28;

    /// Reads one input from the front of `bytes` at its fixed offsets, with the bytes after
    /// it: the same bytes as serde's postcard read, taken and refused alike (any 28 bytes; a
    /// shorter slice is refused). A room decodes every client's input every tick, and serde's
    /// generic read was inlined or called out of line as unrelated code moved (about 110
    /// instructions an input apart), so this path is pinned inline.
    #[inline(always)]
    pub fn decode(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let (fixed, rest) = bytes.split_first_chunk::<{ Self::BYTES }>()?;
        let at = |i: usize| {
            f32::from_le_bytes([fixed[4 * i], fixed[4 * i + 1], fixed[4 * i + 2], fixed[4 * i + 3]])
        };
        let input =
            Self { position: [at(0), at(1), at(2)], rotation: [at(3), at(4), at(5), at(6)] };
        Some((input, rest))
    }
}

/// The sandbox's RPCs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SandboxMessage {
    /// A numbered event, to check order and exactly-once delivery.
    Count(u32),
    /// A request carrying a number.
    Ask(u32),
    /// Its answer: the number doubled.
    Answer(u32),
}

/// The sandbox game.
#[derive(Debug, Default)]
pub struct Sandbox {
    /// Each client's controller entity.
    pub controllers: BTreeMap<ClientId, EntityId>,
    /// When set, free bodies stop (so that a test can compare a still world).
    pub frozen: bool,
}

impl Sandbox {
    /// Spawns `count` free bodies at seeded places and speeds.
    pub fn populate(world: &mut World, count: usize, seed: u64) -> Vec<EntityId> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut unit = move || (rng.next_u32() as f32 / u32::MAX as f32) * 2.0 - 1.0;
        (0..count)
            .filter_map(|_| {
                let position = Vec3::new(unit() * 3.0, 1.0 + unit().abs() * 2.0, unit() * 3.0);
                let mut body = Entity::at(Transform::from_position(position));
                body.linear_velocity = Vec3::new(unit(), unit(), unit()) * 3.0;
                body.angular_velocity = Vec3::new(unit(), unit(), unit());
                world.spawn(body).ok()
            })
            .collect()
    }

    /// Spawns `depth` entities, each held by the previous one and the first by `root`, each
    /// 10 cm further along; returns them root first.
    pub fn chain(world: &mut World, root: EntityId, depth: usize) -> Vec<EntityId> {
        let mut holder = root;
        let mut chain = Vec::new();
        for _ in 0..depth {
            let Some(at) = world.get(holder).map(|e| e.transform) else { break };
            let offset = Transform::from_position(Vec3::new(0.0, 0.0, -0.1));
            let Ok(link) = world.spawn(Entity::at(at.mul(&offset))) else { break };
            if world.grab_at(holder, link, offset).is_err() {
                break;
            }
            chain.push(link);
            holder = link;
        }
        chain
    }
}

impl Simulation for Sandbox {
    type Input = HandInput;
    type Message = SandboxMessage;

    /// Reads the input at its fixed offsets ([`HandInput::decode`]): serde's bytes.
    #[inline]
    fn decode_input(bytes: &[u8]) -> Option<(HandInput, &[u8])> {
        HandInput::decode(bytes)
    }

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &HandInput) {
        let Some(&id) = self.controllers.get(&client) else { return };
        let Some(hand) = world.get_mut(id) else { return };
        let rotation = Quat::from_array(input.rotation);
        // A bad rotation from a client is its own problem, not the room's: keep the old one.
        if rotation.is_finite() && rotation.length_squared() > 0.5 {
            hand.transform.rotation = rotation.normalize();
        }
        let position = Vec3::from_array(input.position);
        if position.is_finite() {
            hand.transform.position = position.clamp(Vec3::splat(-100.0), Vec3::splat(100.0));
        }
    }

    fn step(&mut self, world: &mut World, dt: Duration) {
        if self.frozen {
            return;
        }
        let dt = dt.as_secs_f32();
        let held: Vec<EntityId> =
            world.iter().map(|(id, _)| id).filter(|id| world.grabber_of(*id).is_some()).collect();
        for (id, body) in world.iter_mut() {
            if self.controllers.values().any(|c| *c == id) || held.contains(&id) {
                continue;
            }
            integrate(body, dt);
        }
    }

    fn driven(&self, client: ClientId) -> Option<EntityId> {
        self.controllers.get(&client).copied()
    }

    fn joined(&mut self, world: &mut World, client: ClientId) {
        let at = Transform::from_position(Vec3::new(client as f32 * 0.5 - 2.0, 1.2, 0.0));
        if let Ok(id) = world.spawn(Entity { priority: 4.0, ..Entity::at(at) }) {
            self.controllers.insert(client, id);
        }
    }

    fn left(&mut self, world: &mut World, client: ClientId) {
        if let Some(id) = self.controllers.remove(&client) {
            let _ = world.despawn(id);
        }
    }
}

/// Gravity, then bounces off the floor and the walls of the box.
fn integrate(body: &mut Entity, dt: f32) {
    body.linear_velocity.y -= 9.81 * dt;
    let mut p = body.transform.position + body.linear_velocity * dt;
    let v = &mut body.linear_velocity;
    if p.y < 0.0 {
        p.y = -p.y;
        v.y = v.y.abs() * RESTITUTION;
    }
    for axis in [0, 2] {
        if p[axis].abs() > BOX_HALF {
            p[axis] = p[axis].signum() * (2.0 * BOX_HALF - p[axis].abs());
            v[axis] = -v[axis] * RESTITUTION;
        }
    }
    body.transform.position = p;
    let spin = body.angular_velocity * dt;
    let turn = Quat::from_scaled_axis(spin);
    body.transform.rotation = (turn * body.transform.rotation).normalize();
}
