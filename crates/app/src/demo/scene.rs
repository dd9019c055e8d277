//! `rally demo --scene FILE`: the demo's bots in a scene room. The host runs the scene
//! ([`SceneGame`](crate::game::SceneGame)); each bot sends the standard XR input every frame
//! and plays with the scene's grabbable bodies: it walks its right hand to one, grips it
//! (grip at or above [`GRIP_HOLD_MIN`](rally_scene::GRIP_HOLD_MIN) grabs the nearest
//! grabbable within the room's radius), carries it back, swings and releases it (a throw),
//! then picks the next one. The dashboard
//! gets the scene's static geometry once ([`SceneLayout`], `/api/scene`) and draws the bodies
//! where each snapshot puts them.
//!
//! The bots see the bodies only as the replicated state shows them, as a player would; the
//! room's standard XR player moves each bot's avatar to its input and grabs on its grip, and
//! the demo counts the room's grabs and releases ([`SceneGame::watch`]).
//!
//! [`SceneGame::watch`]: crate::game::SceneGame::watch

use super::bots::{run_frames, BotReport};
use glam::{Quat, Vec3};
use rally_engine::{ClientConfig, ClientSession, EntityId, Transform};
use rally_proto::{ConnectToken, EndpointConfig};
use rally_scene::{
    scene_room, BodyKind, BodyShape, ColliderShape, Grab, Scene, SceneMessage, SceneRoomError,
    XrHand, XrInput, XrPose,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::error::Error;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};

/// How fast a bot's hand moves when it reaches or carries, m/s.
const HAND_SPEED: f32 = 1.5;
/// How fast a throw swings the hand, m/s.
const THROW_SPEED: f32 = 4.0;
/// How close the hand must come to where it grips before it grips, metres.
const REACH_M: f32 = 0.05;
/// How far over a body's top the hand grips it, metres: the hand's ball (4 cm) clear of the
/// body, so that it does not push it away, and well within the room's grab radius (15 cm by
/// default) of its shape.
const HOVER_M: f32 = 0.07;
/// How long a bot keeps a hand on a body before it carries it, seconds (the grip settles).
const GRIP_S: f32 = 0.3;
/// How long a bot rests after a throw, seconds.
const REST_S: f32 = 1.0;
/// A bot gives up on a body it has not reached in this long (taken, thrown away), seconds.
const GIVE_UP_S: f32 = 6.0;
/// The height a bot carries a body at, metres.
const CARRY_Y: f32 = 1.2;

/// One shape of the scene, for drawing from above.
#[derive(Debug, Clone, Serialize)]
pub struct Piece {
    /// Its entity in the room.
    pub id: EntityId,
    /// `collider`, `dynamic` or `kinematic`.
    pub kind: &'static str,
    /// Its name in the file, if any.
    pub name: Option<String>,
    /// Its class (bodies; colliders are `static`).
    pub class: String,
    /// `box`, `sphere`, `capsule` or `plane`.
    pub shape: &'static str,
    /// Half its extent along x, y and z in its own frame, metres (a sphere's and a capsule's
    /// radius on x and z; a plane's are zero).
    pub half: [f32; 3],
    /// A plane's normal.
    pub normal: Option<[f32; 3]>,
    /// Where it starts.
    pub position: [f32; 3],
    /// Its turn about the vertical axis, radians.
    pub yaw: f32,
    /// Whether a hand may hold it.
    pub grabbable: bool,
}

/// A scene's static geometry with the room's entity ids, for the dashboard and the bots.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SceneLayout {
    /// The scene file.
    pub file: String,
    /// Colliders, then bodies, in file order.
    pub pieces: Vec<Piece>,
    /// Where players stand.
    pub spawns: Vec<[f32; 3]>,
    /// What the drawing must show, x and z: min then max, metres.
    pub bounds: [f32; 4],
}

impl SceneLayout {
    /// The layout of `scene`'s rooms: one is built, so that each piece carries the entity id
    /// every room of this scene gives it (ids follow the file).
    pub fn new(file: &str, scene: &Scene) -> Result<Self, SceneRoomError> {
        let room = scene_room(scene, 0)?;
        let game = room.simulation();
        let mut pieces = Vec::new();
        for (collider, id) in scene.colliders().iter().zip(game.colliders()) {
            let (shape, half, normal) = match collider.shape {
                ColliderShape::Solid(solid) => (collider.shape.name(), half(solid), None),
                ColliderShape::Plane { normal } => ("plane", [0.0; 3], Some(normal.into())),
            };
            pieces.push(Piece {
                id: *id,
                kind: "collider",
                name: collider.name.as_ref().map(|n| n.as_str().to_owned()),
                class: "static".into(),
                shape,
                half,
                normal,
                position: collider.pose.position.into(),
                yaw: yaw(&collider.pose),
                grabbable: false,
            });
        }
        for (body, id) in scene.bodies().iter().zip(game.bodies()) {
            pieces.push(Piece {
                id,
                kind: match body.kind {
                    BodyKind::Dynamic => "dynamic",
                    BodyKind::Kinematic => "kinematic",
                },
                name: body.name.as_ref().map(|n| n.as_str().to_owned()),
                class: body.class.as_str().to_owned(),
                shape: ColliderShape::Solid(body.shape).name(),
                half: half(body.shape),
                normal: None,
                position: body.pose.position.into(),
                yaw: yaw(&body.pose),
                grabbable: body.grab != Grab::No,
            });
        }
        let spawns: Vec<[f32; 3]> = scene.spawns().iter().map(|s| s.position.into()).collect();
        Ok(Self { file: file.to_owned(), bounds: bounds(&pieces, &spawns), pieces, spawns })
    }

    /// The grabbable bodies' ids, each with how high over its centre a hand grips it.
    fn grabbable(&self) -> Vec<(EntityId, f32)> {
        self.pieces.iter().filter(|p| p.grabbable).map(|p| (p.id, p.half[1] + HOVER_M)).collect()
    }
}

fn half(shape: BodyShape) -> [f32; 3] {
    match shape {
        BodyShape::Box { half_extents } => half_extents.into(),
        BodyShape::Sphere { radius } => [radius; 3],
        BodyShape::Capsule { half_height, radius } => [radius, half_height + radius, radius],
    }
}

fn yaw(pose: &Transform) -> f32 {
    pose.rotation.to_euler(glam::EulerRot::YXZ).0
}

/// Pieces wider than this (half, metres) are ground, drawn but not framed.
const GROUND_HALF_M: f32 = 5.0;

/// The smallest square around every piece but the ground (planes, and slabs wider than
/// [`GROUND_HALF_M`]) and every spawn point, with a margin; 10 m across around the origin when
/// there is nothing to frame.
fn bounds(pieces: &[Piece], spawns: &[[f32; 3]]) -> [f32; 4] {
    // (x, z, half along x, half along z); a turned piece's halves are its widest.
    let mut points: Vec<(f32, f32, f32, f32)> = pieces
        .iter()
        .filter(|p| p.shape != "plane" && p.half[0].max(p.half[2]) <= GROUND_HALF_M)
        .map(|p| {
            let (hx, hz) = match p.yaw.abs() < 1e-3 {
                true => (p.half[0], p.half[2]),
                false => (p.half[0].max(p.half[2]), p.half[0].max(p.half[2])),
            };
            (p.position[0], p.position[2], hx, hz)
        })
        .collect();
    points.extend(spawns.iter().map(|s| (s[0], s[2], 0.5, 0.5)));
    let Some(first) = points.first() else { return [-5.0, -5.0, 5.0, 5.0] };
    let mut b = [first.0, first.1, first.0, first.1];
    for (x, z, hx, hz) in &points {
        b = [b[0].min(x - hx), b[1].min(z - hz), b[2].max(x + hx), b[3].max(z + hz)];
    }
    let (cx, cz) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
    let side = ((b[2] - b[0]).max(b[3] - b[1]) / 2.0 + 0.5).min(15.0);
    [cx - side, cz - side, cx + side, cz + side]
}

/// What a bot is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Moving its hand to the body, since `since`.
    Reach { target: EntityId, since: f32 },
    /// Gripping it, since `since`.
    Grip { target: EntityId, since: f32 },
    /// Carrying it back to where it throws from.
    Carry,
    /// Swinging forward, about to let go.
    Throw,
    /// Resting after a throw, since `since`.
    Rest { since: f32 },
}

/// A bot in a scene: where it stands, its right hand, and what it is doing.
#[derive(Debug, Clone)]
pub struct ScenePlayer {
    spawn: Vec3,
    /// Unit vector from the spawn point towards the scene's middle, on the floor.
    facing: Vec3,
    hand: Vec3,
    grip: u8,
    step: Step,
    /// The grabbable bodies, with the height over each's centre where the hand grips it.
    targets: Vec<(EntityId, f32)>,
    next: usize,
}

impl ScenePlayer {
    /// Bot `bot` in `layout`: at spawn point `bot % spawns`, starting with the `bot`-th
    /// grabbable body (so that bots spread over the bodies).
    pub fn new(bot: usize, layout: &SceneLayout) -> Self {
        let spawn =
            layout.spawns.get(bot % layout.spawns.len().max(1)).copied().unwrap_or_default();
        let spawn = Vec3::from(spawn);
        let middle = Vec3::new(
            (layout.bounds[0] + layout.bounds[2]) / 2.0,
            0.0,
            (layout.bounds[1] + layout.bounds[3]) / 2.0,
        );
        let facing = (middle - spawn).with_y(0.0).try_normalize().unwrap_or(Vec3::NEG_Z);
        let hand = spawn + Vec3::Y * 1.0 + facing * 0.3;
        let targets = layout.grabbable();
        let next = bot % targets.len().max(1);
        Self { spawn, facing, hand, grip: 0, step: Step::Rest { since: -REST_S }, targets, next }
    }

    /// The input for the frame at `t` seconds, `dt` after the last, given every body's position
    /// as replicated.
    pub fn frame(&mut self, t: f32, dt: f32, bodies: &BTreeMap<EntityId, Vec3>) -> XrInput {
        let throw_from = self.spawn + Vec3::Y * CARRY_Y - self.facing * 0.1;
        let throw_to = throw_from + self.facing * 0.6 + Vec3::Y * 0.3;
        let step = self.step;
        self.step = match step {
            Step::Rest { since } if t - since >= REST_S => match self.pick(bodies) {
                Some(target) => Step::Reach { target, since: t },
                None => Step::Rest { since: t },
            },
            Step::Rest { .. } => step,
            Step::Reach { target, since } => match self.grip_point(target, bodies) {
                Some(at) if self.move_hand(at, HAND_SPEED, dt) <= REACH_M => {
                    Step::Grip { target, since: t }
                }
                Some(_) if t - since < GIVE_UP_S => step,
                _ => Step::Rest { since: t },
            },
            Step::Grip { since, .. } if t - since >= GRIP_S => Step::Carry,
            Step::Grip { .. } => step,
            Step::Carry => match self.move_hand(throw_from, HAND_SPEED, dt) <= REACH_M {
                true => Step::Throw,
                false => step,
            },
            Step::Throw => match self.move_hand(throw_to, THROW_SPEED, dt) <= REACH_M {
                true => Step::Rest { since: t },
                false => step,
            },
        };
        self.grip = match self.step {
            Step::Grip { .. } | Step::Carry | Step::Throw => 255,
            Step::Reach { .. } | Step::Rest { .. } => 0,
        };
        self.input(t)
    }

    /// Where the hand grips `target`, as replicated: over its top.
    fn grip_point(&self, target: EntityId, bodies: &BTreeMap<EntityId, Vec3>) -> Option<Vec3> {
        let over = self.targets.iter().find(|(id, _)| *id == target)?.1;
        bodies.get(&target).map(|at| *at + Vec3::Y * over)
    }

    /// The next grabbable body in turn that the bot can see.
    fn pick(&mut self, bodies: &BTreeMap<EntityId, Vec3>) -> Option<EntityId> {
        for _ in 0..self.targets.len() {
            let (target, _) = self.targets[self.next];
            self.next = (self.next + 1) % self.targets.len();
            if bodies.contains_key(&target) {
                return Some(target);
            }
        }
        None
    }

    /// Moves the hand towards `to` at `speed` at most; the distance left.
    fn move_hand(&mut self, to: Vec3, speed: f32, dt: f32) -> f32 {
        self.hand += (to - self.hand).clamp_length_max(speed * dt);
        self.hand.distance(to)
    }

    /// Head over the feet, a step behind the hand; the left hand idle at the side.
    fn input(&self, t: f32) -> XrInput {
        let turn = Quat::from_rotation_arc(Vec3::NEG_Z, self.facing);
        let pose = |at: Vec3| XrPose { position: at.into(), rotation: turn.into() };
        let reach = (self.hand - self.spawn).with_y(0.0);
        // The player steps towards a far hand: the head stays within 0.6 m of it.
        let feet = self.spawn + reach - reach.clamp_length_max(0.6);
        let head = feet + Vec3::Y * 1.6 + Vec3::Y * 0.01 * (t * 3.0).sin();
        let left = feet + Vec3::Y * 1.0 + turn * Vec3::new(-0.25, 0.0, -0.1);
        let grip = self.grip;
        XrInput {
            head: pose(head),
            hands: [
                XrHand { pose: pose(left), grip: 0, trigger: 0 },
                XrHand { pose: pose(self.hand), grip, trigger: 0 },
            ],
            game: Default::default(),
        }
    }

    /// Whether the right hand holds on, as the room reads the grip.
    #[cfg(test)]
    fn gripping(&self) -> bool {
        self.grip >= rally_scene::GRIP_HOLD_MIN
    }
}

/// A bot's thread in a scene room: joins with `token`, then plays a frame every `1 / hz` until
/// `stop`, reporting as the table-tennis bots do.
#[allow(clippy::too_many_arguments)] // one thread's whole setup, passed once
pub fn play(
    bot: usize,
    token: ConnectToken,
    config: EndpointConfig,
    hz: u32,
    layout: Arc<SceneLayout>,
    stop: Arc<AtomicBool>,
    reports: mpsc::Sender<BotReport>,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut player = ScenePlayer::new(bot, &layout);
    let session: ClientSession<XrInput, SceneMessage> =
        ClientSession::new(ClientConfig::default())?;
    run_frames(bot, token, config, hz, session, stop, reports, |session, now, frame| {
        let bodies = session.entities().map(|e| (e.id, e.position)).collect();
        player.frame(now.as_secs_f64() as f32, frame.as_secs_f32(), &bodies)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> SceneLayout {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes/sandbox.toml");
        SceneLayout::new("sandbox.toml", &Scene::load(path).unwrap()).unwrap()
    }

    #[test]
    fn the_layout_names_every_piece_with_its_room_entity() {
        // Goal: the dashboard can tell each replicated entity's shape; method: the sandbox's
        // layout against its file (3 colliders then 16 bodies, ids in file order).
        let layout = sandbox();
        assert_eq!(layout.pieces.len(), 19);
        let floor = &layout.pieces[0];
        assert_eq!((floor.kind, floor.shape, floor.half), ("collider", "box", [10.0, 0.1, 10.0]));
        let ball = layout.pieces.iter().find(|p| p.name.as_deref() == Some("ball-0")).unwrap();
        assert_eq!((ball.shape, ball.class.as_str(), ball.grabbable), ("sphere", "ball", true));
        let ids: Vec<_> = layout.pieces.iter().map(|p| p.id).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(layout.spawns.len(), 10);
        // Framed: the spawn ring (3.5 m) and the wall, not the 20 m floor.
        let [x0, z0, x1, z1] = layout.bounds;
        assert!(x0 < -3.3 && x1 > 3.3 && z0 < -3.5 && z1 > 3.5, "{:?}", layout.bounds);
        assert!(x1 - x0 < 10.0, "{:?}", layout.bounds);
    }

    #[test]
    fn a_bot_reaches_a_body_grips_it_carries_it_and_throws_it() {
        // Goal: the bots play as the XR player rules expect: grip only on arrival,
        // held while carrying, released after a fast forward swing. Method: a bot against the
        // sandbox's bodies at rest, frame by frame at 120 Hz.
        let layout = sandbox();
        let bodies: BTreeMap<EntityId, Vec3> =
            layout.pieces.iter().map(|p| (p.id, Vec3::from(p.position))).collect();
        let mut bot = ScenePlayer::new(0, &layout);
        let dt = 1.0 / 120.0;
        let (mut gripped_at, mut released_at) = (None, None);
        let mut fastest: f32 = 0.0;
        for k in 0..2400 {
            let t = k as f32 * dt;
            let before = bot.hand;
            let input = bot.frame(t, dt, &bodies);
            assert!(input.hand(rally_scene::Hand::Right).pose.transform().is_some());
            if bot.gripping() && gripped_at.is_none() {
                gripped_at = Some(bot.hand);
                let Step::Grip { target, .. } = bot.step else { panic!("{:?}", bot.step) };
                let over = bot.grip_point(target, &bodies).unwrap();
                assert!(bot.hand.distance(over) <= REACH_M, "gripped on arrival");
                let gap = bot.hand.y - bodies[&target].y;
                assert!(gap > 0.0 && gap < 0.15 + 0.2, "over the body, within reach: {gap}");
            }
            if gripped_at.is_some() && !bot.gripping() && released_at.is_none() {
                released_at = Some(t);
            }
            if bot.gripping() {
                fastest = fastest.max(before.distance(bot.hand) / dt);
            }
        }
        assert!(gripped_at.is_some(), "the bot never gripped");
        assert!(released_at.is_some(), "the bot never let go");
        assert!(fastest > HAND_SPEED * 2.0, "the release follows a throw: {fastest} m/s");
    }
}
