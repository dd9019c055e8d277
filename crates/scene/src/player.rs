//! The standard XR player: an avatar of three entities per player (a head and two hands),
//! driven by [`XrInput`], whose grips grab through the world's grab graph.
//!
//! - **Joining** spawns the avatar at the first spawn point no present player stands on (round
//!   robin over all of them once every one is taken), its head 1.6 m above the point and its
//!   hands in front of the body, turned to the point's yaw. The hands get kinematic ball
//!   bodies ([`HAND_RADIUS_M`]) so that a hand pushes what it touches; the head gets none, so
//!   that a ball thrown across the room is not stopped by someone's face.
//! - **Input** moves the head and hands to the input's poses; a pose that is not one (see
//!   [`XrPose::transform`](crate::XrPose::transform)) keeps the entity's last pose and is
//!   counted. Each hand's velocity is measured from its poses and their arrival times over
//!   [`HAND_VELOCITY_WINDOW`], so what it holds carries it and what it lets go flies on with it.
//! - **Grip** crossing [`GRIP_HOLD_MIN`](crate::GRIP_HOLD_MIN) upward grabs the nearest
//!   grabbable body whose shape is within the scene's `grab_radius_m` of the hand; the grab goes
//!   through the world's grab graph, so chains follow and the
//!   [`SceneGrabRule`](crate::SceneGrabRule) decides handoffs (`takeable`). Grip falling under
//!   it releases.
//! - **Leaving** releases what the hands hold and despawns the avatar.
//!
//! Nothing a client sends can make the room panic or grow: refusals are counted in
//! [`SceneStats`].

use crate::hooks::SceneHooks;
use crate::input::{Hand, XrHand, XrInput, XrPose};
use crate::room::Placed;
use crate::roster::{Held, Holder};
use crate::scene::{BodyShape, Grab, PlayerSettings, SpawnPoint};
use glam::{Quat, Vec3};
use rally_engine::{ClientId, Entity, EntityId, GrabError, Transform, World};
use rally_physics::{Body, Motion, Physics, Shape};
use rally_proto::Instant;
use std::time::Duration;

/// The class of a player's head entity, for clients' interpolation.
pub const HEAD_CLASS: &str = "head";
/// The class of a player's hand entities, for clients' interpolation.
pub const HAND_CLASS: &str = "hand";
/// The radius of a hand's kinematic ball body, metres.
pub const HAND_RADIUS_M: f32 = 0.04;
/// How far back a hand's velocity is measured: long enough to span several of a client's
/// frames (so one late or early input does not swing it), short enough to follow a throw.
pub const HAND_VELOCITY_WINDOW: Duration = Duration::from_millis(50);
/// Pose samples kept per hand to measure its velocity: inputs arrive at a client's frame rate
/// (up to 144 Hz, or several at once after a loss), so a window holds a few.
const HAND_SAMPLES_MAX: usize = 16;
/// Where the head starts over a spawn point, metres.
const HEAD_HEIGHT_M: f32 = 1.6;
/// Where the hands start from a spawn point, in its frame (facing -Z), the left hand's.
const HAND_START: Vec3 = Vec3::new(-0.2, 1.1, -0.3);

/// A player's entities. They spawn in this order, one after the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avatar {
    /// The head (class [`HEAD_CLASS`]).
    pub head: EntityId,
    /// The left hand (class [`HAND_CLASS`]).
    pub left: EntityId,
    /// The right hand (class [`HAND_CLASS`]).
    pub right: EntityId,
}

impl Avatar {
    /// One hand's entity.
    pub fn hand(&self, hand: Hand) -> EntityId {
        match hand {
            Hand::Left => self.left,
            Hand::Right => self.right,
        }
    }

    /// Head, left hand, right hand.
    pub fn entities(&self) -> [EntityId; 3] {
        [self.head, self.left, self.right]
    }

    /// The avatar as the room writes it in its player's scope ([`AVATAR_KEY`](crate::AVATAR_KEY)):
    /// the ids of the head, the left hand and the right hand, 4 bytes each, little-endian.
    pub fn to_bytes(&self) -> [u8; AVATAR_BYTES] {
        let mut bytes = [0; AVATAR_BYTES];
        for (chunk, id) in bytes.chunks_exact_mut(4).zip(self.entities()) {
            chunk.copy_from_slice(&id.to_le_bytes());
        }
        bytes
    }

    /// The avatar of [`Avatar::to_bytes`]' bytes, or `None` if they are not 12.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; AVATAR_BYTES] = bytes.try_into().ok()?;
        let id = |k: usize| EntityId::from_le_bytes([0, 1, 2, 3].map(|b| bytes[4 * k + b]));
        Some(Self { head: id(0), left: id(1), right: id(2) })
    }
}

/// The bytes of [`Avatar::to_bytes`].
pub const AVATAR_BYTES: usize = 12;

/// What the standard XR players did and what the room refused them, since the room started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SceneStats {
    /// Avatars spawned (one per join).
    pub avatars_spawned: u64,
    /// Joins that got no avatar: the scene's `players_max` avatars exist, or the world is full.
    pub avatars_refused: u64,
    /// Inputs from a client with no avatar (ignored).
    pub inputs_without_avatar: u64,
    /// Head and hand poses that were not poses (not finite, too far, not a rotation): the
    /// entity kept its last pose.
    pub bad_poses: u64,
    /// Grips that took hold of a body.
    pub grabs: u64,
    /// Grips that let go of a body.
    pub releases: u64,
    /// Grips with no grabbable body in reach but a body that is not grabbable.
    pub grabs_not_grabbable: u64,
    /// Grips with no body within the grab radius.
    pub grabs_out_of_reach: u64,
    /// Grips of a body another hand holds that is not `takeable`.
    pub grabs_not_takeable: u64,
    /// Grips the grab graph refused for another reason (a cycle: never with the scene's rule).
    pub grabs_refused_other: u64,
}

/// One hand's state between inputs.
#[derive(Debug)]
struct HandState {
    id: EntityId,
    /// Whether the last input's grip held.
    gripping: bool,
    /// What this hand took hold of last (another hand may have taken it since).
    holds: Option<EntityId>,
    /// Arrival times and poses of the latest inputs.
    samples: Samples,
}

impl HandState {
    fn new(id: EntityId) -> Self {
        Self { id, gripping: false, holds: None, samples: Samples::default() }
    }

    /// Records the hand's pose at `now` and returns its velocity (linear, angular) over
    /// [`HAND_VELOCITY_WINDOW`], or `None` if no earlier sample arrived before `now`.
    fn measure(&mut self, now: Instant, pose: Transform) -> Option<(Vec3, Vec3)> {
        // In nanoseconds: this runs for each hand of every input.
        let now = now.as_nanos();
        self.samples.push(now, pose);
        // Keep one sample at least a window old, so the span is a whole window once the hand
        // has moved that long.
        let window = HAND_VELOCITY_WINDOW.as_nanos() as u64;
        while self.samples.len > 2 && now.saturating_sub(self.samples.time(1)) >= window {
            self.samples.pop();
        }
        let (then, old) = (self.samples.time(0), self.samples.pose(0));
        // Through i64, whose conversion is one instruction (u64's is a branch and several): the
        // same value, as nanoseconds since the room started are far below 2^63.
        let span = now.saturating_sub(then) as i64 as f32;
        if span <= 0.0 {
            return None;
        }
        // One division for both velocities: per second, from per nanosecond.
        let per_second = 1e9 / span;
        let linear = (pose.position - old.position) * per_second;
        let turn = pose.rotation * old.rotation.conjugate();
        Some((linear, rotation_vector(turn) * per_second))
    }
}

/// A hand's latest pose samples (arrival time in nanoseconds, pose), oldest first: a ring held
/// in the hand's state, so that an input neither allocates nor follows a pointer for it. Times
/// and poses apart, so that the window's trimming reads times alone (one pose is read an
/// input: copying whole samples to read their times cost 9 of a hand's 246 instructions).
#[derive(Debug, Clone, Copy)]
struct Samples {
    times: [u64; HAND_SAMPLES_MAX],
    poses: [Transform; HAND_SAMPLES_MAX],
    first: usize,
    len: usize,
}

impl Default for Samples {
    fn default() -> Self {
        Self {
            times: [0; HAND_SAMPLES_MAX],
            poses: [Transform::IDENTITY; HAND_SAMPLES_MAX],
            first: 0,
            len: 0,
        }
    }
}

impl Samples {
    /// Where the `k`th oldest sample is in the ring.
    fn slot(&self, k: usize) -> usize {
        (self.first + k) % HAND_SAMPLES_MAX
    }

    /// The `k`th oldest sample's arrival time, `k` below `len`.
    fn time(&self, k: usize) -> u64 {
        self.times[self.slot(k)]
    }

    /// The `k`th oldest sample's pose, `k` below `len`.
    fn pose(&self, k: usize) -> Transform {
        self.poses[self.slot(k)]
    }

    /// Adds the newest sample, dropping the oldest if the ring is full.
    fn push(&mut self, time: u64, pose: Transform) {
        if self.len == HAND_SAMPLES_MAX {
            self.pop();
        }
        let slot = self.slot(self.len);
        self.times[slot] = time;
        self.poses[slot] = pose;
        self.len += 1;
    }

    /// Drops the oldest sample.
    fn pop(&mut self) {
        self.first = (self.first + 1) % HAND_SAMPLES_MAX;
        self.len -= 1;
    }
}

/// The rotation vector (axis times angle, radians) of the unit quaternion `turn`, the short
/// way round: glam's `to_scaled_axis` without its arctangent, square root, divisions and
/// branches. A unit quaternion is (sin(a/2) axis, cos(a/2)), so the rotation vector is its
/// vector part times (a/2) / sin(a/2), a smooth function of cos(a/2) alone on [0, 1] (1 for no
/// turn, pi/2 for a half turn): a polynomial in 1 - |w| (a least-squares fit weighted toward
/// minimax, within 5e-7 of it relative to it) gives it. The sign of `w` picks the short way.
/// libm's `atan2f` cost about a fifth of an XR input's work in the room (120 instructions a
/// hand, by callgrind); the arctangent polynomial that replaced it still took 45.
fn rotation_vector(turn: Quat) -> Vec3 {
    let x = 1.0 - turn.w.abs();
    let ratio = 1.0
        + x * (0.333_369_7
            + x * (0.132_438_5
                + x * (0.064_483_1
                    + x * (-0.002_529_4
                        + x * (0.066_345_2 + x * (-0.049_780_7 + x * 0.026_469_2))))));
    // Twice the half angle's ratio; negated for a turn the long way round (w below zero).
    Vec3::new(turn.x, turn.y, turn.z) * (2.0 * ratio).copysign(turn.w)
}

/// One player's avatar and hands.
#[derive(Debug)]
struct Player {
    avatar: Avatar,
    spawn: usize,
    hands: [HandState; 2],
}

/// Every player's avatar, and the settings and counters they share.
#[derive(Debug)]
pub(crate) struct Players {
    settings: PlayerSettings,
    spawns: Vec<SpawnPoint>,
    players_max: usize,
    /// Ascending by client id: see [`Players::row`].
    players: Vec<(ClientId, Player)>,
    joins: usize,
    pub(crate) stats: SceneStats,
}

impl Players {
    pub(crate) fn new(settings: PlayerSettings, spawns: Vec<SpawnPoint>, players_max: u32) -> Self {
        Self {
            settings,
            spawns,
            players_max: players_max as usize,
            players: Vec::new(),
            joins: 0,
            stats: SceneStats::default(),
        }
    }

    pub(crate) fn avatar(&self, client: ClientId) -> Option<Avatar> {
        self.get(client).map(|p| p.avatar)
    }

    /// The row of `client`'s player in `players`. Rows ascend by distinct client ids, so a
    /// player is at most `client - first` rows in, and exactly there while no older player has
    /// left (the room's ids ascend by one from join to join): that row is read first and the
    /// rows before it searched only on a miss. A tree's search took 31 instructions and a
    /// mispredicted branch for each input.
    fn row(&self, client: ClientId) -> Option<usize> {
        let first = self.players.first()?.0;
        let bound = usize::try_from(client.checked_sub(first)?).ok()?;
        let guess = bound.min(self.players.len() - 1);
        if self.players[guess].0 == client {
            return Some(guess);
        }
        self.players[..guess].binary_search_by_key(&client, |(c, _)| *c).ok()
    }

    fn get(&self, client: ClientId) -> Option<&Player> {
        self.row(client).map(|k| &self.players[k].1)
    }

    pub(crate) fn avatars(&self) -> impl Iterator<Item = (ClientId, Avatar)> + '_ {
        self.players.iter().map(|(client, p)| (*client, p.avatar))
    }

    /// The class of an avatar's entity, if `id` is one.
    pub(crate) fn class(&self, id: EntityId) -> Option<&'static str> {
        self.players.iter().find_map(|(_, p)| {
            match p.avatar.entities().iter().position(|e| *e == id) {
                Some(0) => Some(HEAD_CLASS),
                Some(_) => Some(HAND_CLASS),
                None => None,
            }
        })
    }

    /// The first spawn point no present player stands on, or round robin once all are taken.
    fn spawn_point(&self) -> usize {
        (0..self.spawns.len())
            .find(|k| self.players.iter().all(|(_, p)| p.spawn != *k))
            .unwrap_or(self.joins % self.spawns.len())
    }

    /// Spawns `client`'s avatar; `None` (counted) if the room or the world is full.
    pub(crate) fn join(
        &mut self,
        world: &mut World,
        physics: &mut Physics,
        client: ClientId,
    ) -> Option<Avatar> {
        let at = match self.players.binary_search_by_key(&client, |(c, _)| *c) {
            Err(at) if self.players.len() < self.players_max => at,
            _ => {
                self.stats.avatars_refused += 1;
                return None;
            }
        };
        let spawn = self.spawn_point();
        let point = self.spawns[spawn];
        let frame =
            Transform { position: point.position, rotation: Quat::from_rotation_y(point.yaw) };
        let local = |at: Vec3| frame.mul(&Transform::from_position(at));
        let poses = [
            local(Vec3::new(0.0, HEAD_HEIGHT_M, 0.0)),
            local(HAND_START),
            local(HAND_START * Vec3::new(-1.0, 1.0, 1.0)),
        ];
        let mut ids = [0; 3];
        for (k, pose) in poses.iter().enumerate() {
            match world.spawn(Entity::at(*pose)) {
                Ok(id) => ids[k] = id,
                Err(_) => {
                    for id in &ids[..k] {
                        let _ = world.despawn(*id);
                    }
                    self.stats.avatars_refused += 1;
                    return None;
                }
            }
        }
        let avatar = Avatar { head: ids[0], left: ids[1], right: ids[2] };
        for hand in [avatar.left, avatar.right] {
            let body = Body {
                motion: Motion::Kinematic,
                shape: Shape::Ball(HAND_RADIUS_M),
                ..Body::kinematic_cuboid(Vec3::ZERO)
            };
            // The hand was spawned just now and has no body yet.
            let _ = physics.add(world, hand, body);
        }
        let hands = [HandState::new(avatar.left), HandState::new(avatar.right)];
        self.players.insert(at, (client, Player { avatar, spawn, hands }));
        self.joins += 1;
        self.stats.avatars_spawned += 1;
        Some(avatar)
    }

    /// Releases what `client`'s hands hold and despawns its avatar.
    pub(crate) fn leave(
        &mut self,
        world: &mut World,
        physics: &mut Physics,
        hooks: &mut dyn SceneHooks,
        client: ClientId,
    ) -> Option<Avatar> {
        let (_, mut player) = self.players.remove(self.row(client)?);
        for hand in [Hand::Left, Hand::Right] {
            let state = &mut player.hands[hand as usize];
            if let Some(id) = release(world, state) {
                self.stats.releases += 1;
                hooks.released(world, client, hand, id);
            }
        }
        for id in player.avatar.entities() {
            physics.remove(id);
            let _ = world.despawn(id);
        }
        Some(player.avatar)
    }

    /// Moves `client`'s avatar to `input`'s poses and acts on its grips. Inlined into the
    /// room's two callers: the call's arguments on the stack and its saved registers were 12
    /// instructions an input (callgrind).
    #[inline(always)]
    pub(crate) fn input(
        &mut self,
        world: &mut World,
        bodies: &[Placed],
        hooks: &mut dyn SceneHooks,
        client: ClientId,
        input: &XrInput,
        now: Option<Instant>,
    ) {
        // One look-up per input: this runs for every input of every player.
        let Some(row) = self.row(client) else {
            self.stats.inputs_without_avatar += 1;
            return;
        };
        let player = &mut self.players[row].1;
        let stats = &mut self.stats;
        // The avatar's entities spawned one after the other: one look-up finds all three, in
        // consecutive rows (wherever they are, if a despawn between them ever parts them).
        let ids = player.avatar.entities();
        let [head, left_entity, right_entity] = match world.get_run_mut(ids) {
            Some(run) => run.map(Some),
            None => world.get_many_mut(ids),
        };
        if let Some(entity) = head {
            place(entity, &input.head, &mut stats.bad_poses);
        }
        // Each hand by name rather than in a loop: the loop's exit was a mispredicted branch
        // an input.
        let [left, right] = &mut player.hands;
        move_hand(left_entity, left, &input.hands[0], now, stats);
        move_hand(right_entity, right, &input.hands[1], now, stats);
        // Both hands are placed before either grips, so that a handoff between them sees both
        // where the input put them. A grip held or left as it was (nearly every input) does
        // nothing: checked here, before a grip is set up and called.
        let holds = [input.hands[0].holds(), input.hands[1].holds()];
        if left.gripping == holds[0] && right.gripping == holds[1] {
            return;
        }
        let mut grip = Grip { world, bodies, hooks, client, radius: self.settings.grab_radius_m };
        grip.act(Hand::Left, left, holds[0], stats);
        grip.act(Hand::Right, right, holds[1], stats);
    }

    /// What each player's hands hold now (a hand another took from holds nothing), for the
    /// roster.
    pub(crate) fn held(&self, world: &World) -> Held {
        Held::new(self.players.iter().flat_map(|(client, player)| {
            let hands = [Hand::Left, Hand::Right].into_iter().zip(&player.hands);
            hands.filter_map(move |(hand, state)| {
                let id = state.holds?;
                let holder = Holder { player: *client, hand };
                (world.grabber_of(id) == Some(state.id)).then_some((id, holder))
            })
        }))
    }

    /// Every avatar's entities, for the fast path: head, left hand, right hand.
    pub(crate) fn driven_into(&self, client: ClientId, out: &mut Vec<EntityId>) {
        if let Some(player) = self.get(client) {
            out.extend(player.avatar.entities());
        }
    }
}

/// What a grip acts on: the room of one player's input.
struct Grip<'a> {
    world: &'a mut World,
    bodies: &'a [Placed],
    hooks: &'a mut dyn SceneHooks,
    client: ClientId,
    radius: f32,
}

impl Grip<'_> {
    /// Grabs on a grip's press and releases on its release; a grip held or left as it was
    /// (nearly every input) does nothing.
    fn act(&mut self, hand: Hand, state: &mut HandState, holds: bool, stats: &mut SceneStats) {
        let was = std::mem::replace(&mut state.gripping, holds);
        match (was, holds) {
            (false, true) => self.grab(hand, state, stats),
            (true, false) => {
                if let Some(id) = release(self.world, state) {
                    stats.releases += 1;
                    self.hooks.released(self.world, self.client, hand, id);
                }
            }
            _ => {}
        }
    }

    /// Grabs the nearest grabbable body in reach of the hand, if the grab graph allows it.
    fn grab(&mut self, hand: Hand, state: &mut HandState, stats: &mut SceneStats) {
        let Some(at) = self.world.get(state.id).map(|e| e.transform.position) else { return };
        let Some(target) = reach(self.world, self.bodies, at, self.radius, stats) else { return };
        match self.world.grab(state.id, target) {
            Ok(()) => {
                state.holds = Some(target);
                stats.grabs += 1;
                self.hooks.grabbed(self.world, self.client, hand, target);
            }
            Err(GrabError::NotAllowed { .. }) => stats.grabs_not_takeable += 1,
            Err(_) => stats.grabs_refused_other += 1,
        }
    }
}

/// Moves a hand (its `entity`, if the world holds it) to `xr`'s pose and, given the input's
/// arrival time, sets its velocity. Inlined into the input's apply, once a hand: out of line,
/// its arguments and the call cost 10 instructions a hand (callgrind).
#[inline(always)]
fn move_hand(
    entity: Option<&mut Entity>,
    state: &mut HandState,
    xr: &XrHand,
    now: Option<Instant>,
    stats: &mut SceneStats,
) {
    let Some(entity) = entity else { return };
    place(entity, &xr.pose, &mut stats.bad_poses);
    // A bad pose is a sample too: the hand stood still for it.
    let Some(now) = now else { return };
    if let Some((linear, angular)) = state.measure(now, entity.transform) {
        entity.linear_velocity = linear;
        entity.angular_velocity = angular;
    }
}

/// Moves `entity` to `pose`, or keeps its pose and counts it if `pose` is not one.
fn place(entity: &mut Entity, pose: &XrPose, bad_poses: &mut u64) {
    match pose.transform() {
        Some(transform) => entity.transform = transform,
        None => *bad_poses += 1,
    }
}

/// Lets go of what the hand holds, if it still holds it (another hand may have taken it);
/// returns what it let go of. What is let go of first takes the hand's pose and velocity, so
/// that it flies on with the hand's motion.
fn release(world: &mut World, state: &mut HandState) -> Option<EntityId> {
    let id = state.holds.take()?;
    if world.grabber_of(id) != Some(state.id) {
        return None;
    }
    world.propagate_grabs();
    world.release(id).then_some(id)
}

/// The nearest grabbable body within `radius` of `at` (to the nearest point of its shape; the
/// nearest centre breaks a tie, as when the hand is inside two), or `None`, counted: a body in
/// reach that is not grabbable, or nothing in reach.
fn reach(
    world: &World,
    bodies: &[Placed],
    at: Vec3,
    radius: f32,
    stats: &mut SceneStats,
) -> Option<EntityId> {
    let mut nearest: Option<(f32, f32, EntityId)> = None;
    let mut refused = false;
    // The bodies ascend by id, as the world's rows do: one walk over both, not a look-up each.
    let mut rows = world.iter().peekable();
    for body in bodies {
        let Some(entity) = seek(&mut rows, body.id) else { continue };
        // Further from the hand than the radius and the body's extent: out of reach, without
        // the exact distance. A NaN is not further, and goes on to be refused below.
        let bound = (radius + body.extent) * (1.0 + 1e-3) + 1e-3;
        if (entity.transform.position - at).length_squared() > bound * bound {
            continue;
        }
        let gap = distance(body.shape, &entity.transform, at);
        // A NaN (a broken simulation) is never within reach.
        if gap.is_nan() || gap > radius {
            continue;
        }
        if body.grab == Grab::No {
            refused = true;
            continue;
        }
        let centre = (entity.transform.position - at).length();
        let key = (gap, centre, body.id);
        if nearest
            .is_none_or(|n| (key.0, key.1).partial_cmp(&(n.0, n.1)).is_some_and(|o| o.is_lt()))
        {
            nearest = Some(key);
        }
    }
    if nearest.is_none() {
        if refused {
            stats.grabs_not_grabbable += 1;
        } else {
            stats.grabs_out_of_reach += 1;
        }
    }
    nearest.map(|n| n.2)
}

/// The entity of `id` among `rows` (ascending by id), skipping the rows before it; `None`, and
/// no row after it taken, if `rows` do not hold it.
fn seek<'a>(
    rows: &mut std::iter::Peekable<impl Iterator<Item = (EntityId, &'a Entity)>>,
    id: EntityId,
) -> Option<&'a Entity> {
    while let Some((row, entity)) = rows.next_if(|(row, _)| *row <= id) {
        if row == id {
            return Some(entity);
        }
    }
    None
}

/// How far `point` is from `shape` placed at `pose`: 0 inside it, metres; NaN if either is
/// not finite (`max` would turn a NaN into 0, within reach).
fn distance(shape: BodyShape, pose: &Transform, point: Vec3) -> f32 {
    let local = pose.rotation.conjugate() * (point - pose.position);
    if !local.is_finite() {
        return f32::NAN;
    }
    match shape {
        BodyShape::Box { half_extents } => (local.abs() - half_extents).max(Vec3::ZERO).length(),
        BodyShape::Sphere { radius } => (local.length() - radius).max(0.0),
        BodyShape::Capsule { half_height, radius } => {
            let axis = Vec3::new(0.0, local.y.clamp(-half_height, half_height), 0.0);
            ((local - axis).length() - radius).max(0.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::NoHooks;

    #[test]
    fn distance_is_to_the_nearest_point_of_the_shape() {
        let at = Transform::from_position(Vec3::new(1.0, 0.0, 0.0));
        let cube = BodyShape::Box { half_extents: Vec3::splat(0.1) };
        assert!((distance(cube, &at, Vec3::new(1.3, 0.0, 0.0)) - 0.2).abs() < 1e-6);
        assert_eq!(distance(cube, &at, Vec3::new(1.05, 0.0, 0.0)), 0.0);
        let ball = BodyShape::Sphere { radius: 0.1 };
        assert!((distance(ball, &at, Vec3::new(1.0, 0.5, 0.0)) - 0.4).abs() < 1e-6);
        let capsule = BodyShape::Capsule { half_height: 0.2, radius: 0.05 };
        assert!((distance(capsule, &at, Vec3::new(1.0, 0.5, 0.0)) - 0.25).abs() < 1e-6);
        assert!((distance(capsule, &at, Vec3::new(1.15, 0.1, 0.0)) - 0.1).abs() < 1e-6);
        assert!(distance(ball, &at, Vec3::NAN).is_nan());
    }

    #[test]
    fn reach_finds_what_the_exact_distance_finds_around_every_shape() {
        // A body of each shape, turned, and hands on a grid all around them: skipping far
        // bodies by their extent must never skip one in reach, nor take one out of it.
        let mut world = World::new(64);
        let shapes = [
            BodyShape::Box { half_extents: Vec3::new(0.3, 0.05, 0.2) },
            BodyShape::Sphere { radius: 0.1 },
            BodyShape::Capsule { half_height: 0.25, radius: 0.05 },
        ];
        let mut bodies = Vec::new();
        for (k, shape) in shapes.into_iter().enumerate() {
            let turn = Quat::from_euler(glam::EulerRot::XYZ, 0.3, 0.7 * k as f32, 1.1);
            let pose = Transform { position: Vec3::new(2.0 * k as f32, 1.0, 0.0), rotation: turn };
            let id = world.spawn(Entity::at(pose)).unwrap();
            bodies.push(Placed::for_test(id, shape, Grab::Yes { takeable: true }));
        }
        let (radius, mut stats, mut hits) = (0.1, SceneStats::default(), 0);
        for (x, y, z) in
            (-20..90).flat_map(|x| (0..40).flat_map(move |y| (-12..12).map(move |z| (x, y, z))))
        {
            let at = Vec3::new(0.025 * x as f32, 0.5 + 0.025 * y as f32, 0.025 * z as f32);
            let exact = bodies.iter().find_map(|b| {
                let pose = world.get(b.id).unwrap().transform;
                (distance(b.shape, &pose, at) <= radius).then_some(b.id)
            });
            assert_eq!(reach(&world, &bodies, at, radius, &mut stats), exact, "{at}");
            hits += usize::from(exact.is_some());
        }
        assert!(hits > 500, "{hits} hands in reach");
    }

    #[test]
    fn every_present_player_is_found_whatever_joined_and_left_before() {
        let mut world = World::new(64);
        let mut physics = Physics::new(Vec3::ZERO);
        let spawns = vec![SpawnPoint { position: Vec3::ZERO, yaw: 0.0 }];
        let mut players = Players::new(PlayerSettings::default(), spawns, 8);
        // Out of order and with gaps, as a wrapping game may call `joined`.
        for client in [5, 9, 7, 2] {
            assert!(players.join(&mut world, &mut physics, client).is_some());
        }
        assert!(players.join(&mut world, &mut physics, 7).is_none(), "a second avatar");
        // The oldest leaving moves every other player a row down.
        assert!(players.leave(&mut world, &mut physics, &mut NoHooks, 2).is_some());
        let present: Vec<ClientId> = players.avatars().map(|(c, _)| c).collect();
        assert_eq!(present, [5, 7, 9]);
        for client in [5, 7, 9] {
            let avatar = players.avatar(client).unwrap();
            assert_eq!(players.class(avatar.head), Some(HEAD_CLASS));
        }
        for absent in [0, 2, 6, 8, 10, ClientId::MAX] {
            assert_eq!(players.avatar(absent), None, "{absent}");
        }
    }

    #[test]
    fn an_input_moves_its_players_head_and_hands_and_nothing_else() {
        // Two players, the first of whose avatars loses its left hand to a game's despawn
        // (its rows then are not consecutive): each input moves the head and the hands its
        // player has to the input's poses, with each hand's velocity measured as a lone
        // `HandState` measures it, and leaves the other player's avatar where it was.
        let mut world = World::new(64);
        let mut physics = Physics::new(Vec3::ZERO);
        let spawns = vec![SpawnPoint { position: Vec3::ZERO, yaw: 0.0 }];
        let mut players = Players::new(PlayerSettings::default(), spawns, 8);
        let a = players.join(&mut world, &mut physics, 1).unwrap();
        let b = players.join(&mut world, &mut physics, 2).unwrap();
        let frame = Duration::from_millis(11);
        let mut expected =
            [[HandState::new(0), HandState::new(0)], [HandState::new(0), HandState::new(0)]];
        for k in 0..12u32 {
            if k == 6 {
                world.despawn(a.left).unwrap();
            }
            let t = k as f32 * 0.1;
            let pose = |x: f32| XrPose {
                position: [x + t, 1.0 + t * t, -t],
                rotation: Quat::from_rotation_y(t * (1.0 + x)).to_array(),
            };
            let hand = |x: f32| XrHand { pose: pose(x), grip: 0, trigger: 0 };
            let hands = [hand(-0.3), hand(0.3)];
            let input = XrInput { head: pose(0.0), hands, ..XrInput::default() };
            let (client, avatar) = if k % 2 == 0 { (1, a) } else { (2, b) };
            let other = if k % 2 == 0 { b } else { a };
            let before: Vec<Option<Entity>> =
                other.entities().iter().map(|id| world.get(*id).copied()).collect();
            let now = Instant::ZERO + frame * k;
            players.input(&mut world, &[], &mut NoHooks, client, &input, Some(now));
            let head = world.get(avatar.head).unwrap();
            assert_eq!(Some(head.transform), input.head.transform(), "input {k}: head");
            for (side, id) in [avatar.left, avatar.right].into_iter().enumerate() {
                let Some(entity) = world.get(id) else {
                    assert!(k >= 6 && client == 1 && side == 0, "input {k}: hand {side} gone");
                    continue;
                };
                let transform = input.hands[side].pose.transform().unwrap();
                assert_eq!(entity.transform, transform, "input {k}: hand {side}");
                let measured = expected[usize::from(client == 2)][side]
                    .measure(now, transform)
                    .unwrap_or((Vec3::ZERO, Vec3::ZERO));
                let velocities = (entity.linear_velocity, entity.angular_velocity);
                assert_eq!(velocities, measured, "input {k}: hand {side}");
            }
            let after: Vec<Option<Entity>> =
                other.entities().iter().map(|id| world.get(*id).copied()).collect();
            assert_eq!(before, after, "input {k}: the other avatar");
        }
        assert_eq!(players.stats.bad_poses, 0);
    }

    #[test]
    fn an_avatar_reads_back_from_its_bytes_and_nothing_else_reads_as_one() {
        let avatar = Avatar { head: 7, left: 8, right: 0x0102_0304 };
        let bytes = avatar.to_bytes();
        assert_eq!(bytes[8..], [4, 3, 2, 1], "little-endian, head first");
        assert_eq!(Avatar::from_bytes(&bytes), Some(avatar));
        assert_eq!(Avatar::from_bytes(&bytes[..11]), None);
        assert_eq!(Avatar::from_bytes(&[bytes.as_slice(), &[0]].concat()), None);
    }

    /// The exact rotation vector of `q`, the short way round, in f64: twice the half angle's
    /// arctangent along the unit axis.
    fn exact_rotation_vector(q: Quat) -> [f64; 3] {
        let q = if q.w < 0.0 { -q } else { q };
        let v = [q.x as f64, q.y as f64, q.z as f64];
        let sin = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        if sin == 0.0 {
            return [0.0; 3];
        }
        let angle = 2.0 * sin.atan2(q.w as f64);
        v.map(|c| c * angle / sin)
    }

    #[test]
    fn the_rotation_vector_is_the_exact_one_far_within_a_velocitys_quantization_step() {
        // Every axis and angle the short way round (and the long way, which turns back), and
        // the tiny turns of a still hand: within 4e-6 rad of the exact form, so within 0.002
        // rad/s (under half the snapshot's 0.01 rad/s step) over any span of 2 ms or more.
        let axes = [Vec3::X, Vec3::Y, Vec3::Z, Vec3::new(1.0, -2.0, 0.5).normalize()];
        for axis in axes {
            for k in 0..=7200 {
                let angle = k as f32 * std::f32::consts::TAU / 7200.0;
                for turn in [angle, 1e-3 * angle, 1e-7 * angle] {
                    let q = Quat::from_axis_angle(axis, turn);
                    let (got, exact) = (rotation_vector(q), exact_rotation_vector(q));
                    let error = (0..3).map(|i| (got[i] as f64 - exact[i]).powi(2)).sum::<f64>();
                    assert!(error.sqrt() < 4e-6, "{axis} by {turn}: {}", error.sqrt());
                }
            }
        }
        assert_eq!(rotation_vector(Quat::IDENTITY), Vec3::ZERO);
        // A half turn either way is half a turn about the axis, one way or the other.
        let half = rotation_vector(Quat::from_axis_angle(Vec3::Y, std::f32::consts::PI));
        assert!((half.length() - std::f32::consts::PI).abs() < 1e-5, "{half}");
    }

    #[test]
    fn a_hand_moving_steadily_measures_its_velocity() {
        let mut hand = HandState::new(1);
        let frame = Duration::from_nanos(1_000_000_000 / 90);
        let mut measured = None;
        for k in 0..30u32 {
            let now = Instant::ZERO + frame * k;
            let pose = Transform {
                position: Vec3::new(2.0 * (frame * k).as_secs_f32(), 1.0, 0.0),
                rotation: Quat::from_rotation_y(3.0 * (frame * k).as_secs_f32()),
            };
            measured = hand.measure(now, pose);
            assert!(hand.samples.len <= HAND_SAMPLES_MAX);
        }
        let (linear, angular) = measured.unwrap();
        assert!((linear - Vec3::new(2.0, 0.0, 0.0)).length() < 1e-3, "{linear}");
        assert!((angular - Vec3::new(0.0, 3.0, 0.0)).length() < 1e-2, "{angular}");
        // A burst of inputs arriving at once (resent after a loss) measures nothing new.
        let mut burst = HandState::new(1);
        assert!(burst.measure(Instant::ZERO, Transform::IDENTITY).is_none());
        assert!(burst.measure(Instant::ZERO, Transform::IDENTITY).is_none());
    }

    #[test]
    fn a_burst_longer_than_the_ring_forgets_its_oldest_sample() {
        // A hand still at the origin, then a burst of inputs arriving at one instant 10 ms
        // later, 1 cm away: measured against the first sample while the ring holds it; once
        // the burst fills the ring, the oldest left arrived with the rest and measures nothing.
        let mut hand = HandState::new(1);
        assert!(hand.measure(Instant::ZERO, Transform::IDENTITY).is_none());
        let at = Instant::ZERO + Duration::from_millis(10);
        let moved = Transform::from_position(Vec3::new(0.01, 0.0, 0.0));
        for k in 1..HAND_SAMPLES_MAX {
            let (linear, _) = hand.measure(at, moved).expect("the first sample is kept");
            assert!((linear.x - 1.0).abs() < 1e-4, "burst input {k}: {linear}");
        }
        assert!(hand.measure(at, moved).is_none());
        assert_eq!(hand.samples.len, HAND_SAMPLES_MAX);
    }
}
