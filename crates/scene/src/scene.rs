//! A checked scene: what [`Scene::parse`] makes of a file. Every value here is within its
//! range ([`crate::limits`]); the types are readable but only this crate builds them.

use crate::error::{SceneError, Source};
use crate::format::{
    List, RawBody, RawCapsule, RawCollider, RawKind, RawPipeline, RawPlayer, RawRelay, RawRoom,
    RawScene, RawShape, RawSpawn, RawState, Vector,
};
use crate::limits::*;
use crate::state::StateSettings;
use glam::{EulerRot, Quat, Vec3};
use rally_engine::{Pipeline, RoomConfig, Transform};
use std::collections::BTreeSet;
use std::ops::{Range, RangeInclusive};
use toml::Spanned;

/// Friction when a scene gives none.
pub const FRICTION_DEFAULT: f32 = 0.5;
/// Restitution when a scene gives none.
pub const RESTITUTION_DEFAULT: f32 = 0.3;
/// Density, kilograms per cubic metre, that gives a body its mass when the scene gives none
/// (water's).
pub const DENSITY_DEFAULT: f32 = 1000.0;
/// The class of a body whose scene gives none.
pub const CLASS_DEFAULT: &str = "prop";

/// A name or class name: 1 to [`NAME_BYTES_MAX`] bytes of ASCII letters, digits, `-` and `_`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

impl Name {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    #[cfg(test)]
    pub(crate) fn for_test(name: &str) -> Self {
        Self(name.to_string())
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A room's settings, from the scene's `[room]` table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RoomSettings {
    /// Ticks per second.
    pub tick_rate: u32,
    /// How inputs become state on clients.
    pub pipeline: Pipeline,
    /// Metres per second squared.
    pub gravity: Vec3,
    /// Players in the room at most.
    pub players_max: u32,
    /// Snapshot bytes per client per tick at most.
    pub client_bytes_per_tick_max: u32,
}

impl Default for RoomSettings {
    fn default() -> Self {
        Self {
            tick_rate: 120,
            pipeline: Pipeline::Fast,
            gravity: Vec3::new(0.0, -9.81, 0.0),
            players_max: 8,
            client_bytes_per_tick_max: 1100,
        }
    }
}

/// How far a grip reaches when the scene does not say, metres: a hand's width or so.
pub const GRAB_RADIUS_DEFAULT_M: f32 = 0.15;

/// How the standard XR player behaves, from the scene's `[player]` table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PlayerSettings {
    /// How far a grip reaches: a hand grabs the nearest grabbable body whose shape is within
    /// this distance of the hand's position, metres.
    pub grab_radius_m: f32,
}

impl Default for PlayerSettings {
    fn default() -> Self {
        Self { grab_radius_m: GRAB_RADIUS_DEFAULT_M }
    }
}

/// A shape that moves: what a body may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BodyShape {
    /// A box with these half extents, metres.
    Box {
        /// Half of each side, metres.
        half_extents: Vec3,
    },
    /// A sphere, metres.
    Sphere {
        /// Its radius.
        radius: f32,
    },
    /// A capsule along the local Y axis.
    Capsule {
        /// Half the distance between the centres of its two spheres, metres.
        half_height: f32,
        /// Its radius, metres.
        radius: f32,
    },
}

impl BodyShape {
    /// Cubic metres.
    pub fn volume(&self) -> f32 {
        let ball = |r: f32| 4.0 / 3.0 * std::f32::consts::PI * r * r * r;
        match *self {
            Self::Box { half_extents: h } => 8.0 * h.x * h.y * h.z,
            Self::Sphere { radius } => ball(radius),
            Self::Capsule { half_height, radius } => {
                ball(radius) + std::f32::consts::PI * radius * radius * 2.0 * half_height
            }
        }
    }

    /// How far the shape reaches from its centre, metres: the distance to its furthest point.
    pub fn extent(&self) -> f32 {
        match *self {
            Self::Box { half_extents } => half_extents.length(),
            Self::Sphere { radius } => radius,
            Self::Capsule { half_height, radius } => half_height + radius,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Box { .. } => "box",
            Self::Sphere { .. } => "sphere",
            Self::Capsule { .. } => "capsule",
        }
    }
}

/// A static collider's shape: any body shape, or an endless plane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColliderShape {
    /// A box, a sphere or a capsule.
    Solid(BodyShape),
    /// Everything below a plane through the collider's position: a floor.
    Plane {
        /// The plane's outward normal, a unit vector (world frame, before `rotation_deg`).
        normal: Vec3,
    },
}

impl ColliderShape {
    /// The shape's name in the file.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Solid(shape) => shape.name(),
            Self::Plane { .. } => "plane",
        }
    }
}

/// A collider that never moves: a floor, a table, a wall.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Collider {
    /// Its name, if the scene gives one (unique among names).
    pub name: Option<Name>,
    /// Its shape.
    pub shape: ColliderShape,
    /// Where it is.
    pub pose: Transform,
    /// Friction coefficient.
    pub friction: f32,
    /// Bounciness.
    pub restitution: f32,
}

/// How a body moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// Moved by gravity, contacts and grabs.
    Dynamic,
    /// Stays where the game puts it (grabs, Rust hooks); pushes dynamic bodies.
    Kinematic,
}

/// Whether hands may hold a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grab {
    /// No hand may hold it.
    No,
    /// A hand may hold it.
    Yes {
        /// Whether another hand may take it while it is held (hand to hand, player to player).
        takeable: bool,
    },
}

/// What brings a body back to its start pose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Respawn {
    /// When its centre falls below this height (metres), it returns to its start pose at rest.
    BelowY(f32),
}

/// A body that moves.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Body {
    /// Its name, if the scene gives one (unique among names).
    pub name: Option<Name>,
    /// How it moves.
    pub kind: BodyKind,
    /// Its shape.
    pub shape: BodyShape,
    /// Where it starts (and respawns).
    pub pose: Transform,
    /// Kilograms.
    pub mass_kg: f32,
    /// Friction coefficient.
    pub friction: f32,
    /// Bounciness.
    pub restitution: f32,
    /// Linear damping, per second.
    pub linear_damping: f32,
    /// Angular damping, per second.
    pub angular_damping: f32,
    /// Its class, for clients' interpolation and the room's statistics.
    pub class: Name,
    /// Its replication priority (1 is the engine's default).
    pub priority: f32,
    /// Whether hands may hold it.
    pub grab: Grab,
    /// What brings it back, if anything.
    pub respawn: Option<Respawn>,
}

/// Where a player appears.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SpawnPoint {
    /// Where the player stands, metres.
    pub position: Vec3,
    /// Which way the player faces: radians about +Y from facing -Z.
    pub yaw: f32,
}

/// A checked scene: a room's settings, static colliders, bodies and spawn points.
#[derive(Debug, Clone, PartialEq)]
pub struct Scene {
    settings: RoomSettings,
    colliders: Vec<Collider>,
    bodies: Vec<Body>,
    spawns: Vec<SpawnPoint>,
    state: StateSettings,
    player: PlayerSettings,
}

impl Scene {
    /// Reads and checks the scene file at `path`.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self, SceneError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::metadata(path)
            .map_err(|source| SceneError::Read { file: file.clone(), source })?
            .len();
        if bytes > FILE_BYTES_MAX as u64 {
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            return Err(SceneError::TooLarge { file, bytes, max: FILE_BYTES_MAX });
        }
        let text = std::fs::read_to_string(path)
            .map_err(|source| SceneError::Read { file: file.clone(), source })?;
        Self::parse(&file, &text)
    }

    /// Checks the scene text `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self, SceneError> {
        if text.len() > FILE_BYTES_MAX {
            let file = file.to_owned();
            return Err(SceneError::TooLarge { file, bytes: text.len(), max: FILE_BYTES_MAX });
        }
        let source = Source { file, text };
        let raw: RawScene = toml::from_str(text).map_err(|e| source.syntax(&e))?;
        Checker { source, names: BTreeSet::new() }.scene(raw)
    }

    /// The room's settings.
    pub fn settings(&self) -> &RoomSettings {
        &self.settings
    }

    /// How the standard XR player behaves.
    pub fn player(&self) -> &PlayerSettings {
        &self.player
    }

    /// The static colliders, in file order.
    pub fn colliders(&self) -> &[Collider] {
        &self.colliders
    }

    /// The dynamic and kinematic bodies, in file order.
    pub fn bodies(&self) -> &[Body] {
        &self.bodies
    }

    /// The player spawn points, in file order; at least one (the origin when the file gives
    /// none).
    pub fn spawns(&self) -> &[SpawnPoint] {
        &self.spawns
    }

    /// The limits of the relay and the key-value state: the `[relay]` and `[state]` sections.
    pub fn state_settings(&self) -> StateSettings {
        self.state
    }

    /// Entities a room of this scene holds at most: one per collider and body, and three per
    /// player (head and two hands, for the standard XR player).
    pub fn entities_max(&self) -> usize {
        self.colliders.len() + self.bodies.len() + 3 * self.settings.players_max as usize
    }

    /// The engine settings of a room for this scene: the defaults, with the scene's tick rate,
    /// pipeline, players and byte budget, and room for its entities.
    pub fn room_config(&self) -> RoomConfig {
        let mut config = RoomConfig {
            tick_rate: self.settings.tick_rate,
            pipeline: self.settings.pipeline,
            clients_max: self.settings.players_max as usize,
            snapshot_budget_bytes: self.settings.client_bytes_per_tick_max as usize,
            ..RoomConfig::default()
        };
        config.snapshot.entities_max = config.snapshot.entities_max.max(self.entities_max());
        config
    }
}

/// Turns the raw file into a [`Scene`], checking each value where it is.
struct Checker<'a> {
    source: Source<'a>,
    names: BTreeSet<String>,
}

type Checked<T> = Result<T, SceneError>;

impl Checker<'_> {
    fn scene(mut self, raw: RawScene) -> Checked<Scene> {
        let settings = match raw.room {
            Some(room) => self.room(room.into_inner())?,
            None => RoomSettings::default(),
        };
        let colliders = Self::list(raw.colliders);
        let bodies = Self::list(raw.bodies);
        let spawns = Self::list(raw.spawns);
        let colliders = (colliders.into_iter().enumerate())
            .map(|(k, c)| self.collider(&format!("colliders[{k}]"), c))
            .collect::<Checked<Vec<_>>>()?;
        let bodies = (bodies.into_iter().enumerate())
            .map(|(k, b)| self.body(&format!("bodies[{k}]"), b))
            .collect::<Checked<Vec<_>>>()?;
        let mut spawns = (spawns.into_iter().enumerate())
            .map(|(k, s)| self.spawn(&format!("spawns[{k}]"), s.into_inner()))
            .collect::<Checked<Vec<_>>>()?;
        if spawns.is_empty() {
            spawns.push(SpawnPoint { position: Vec3::ZERO, yaw: 0.0 });
        }
        let state = self.state(raw.relay, raw.state)?;
        let player = match raw.player {
            Some(player) => self.player(player.into_inner())?,
            None => PlayerSettings::default(),
        };
        Ok(Scene { settings, colliders, bodies, spawns, state, player })
    }

    /// The entries of a list, or none.
    fn list<T, const MAX: usize>(raw: Option<List<T, MAX>>) -> Vec<T> {
        raw.map_or_else(Vec::new, |list| list.0)
    }

    fn room(&self, raw: RawRoom) -> Checked<RoomSettings> {
        let d = RoomSettings::default();
        let pipeline = raw.pipeline.map(|p| match p.into_inner() {
            RawPipeline::Naive => Pipeline::Naive,
            RawPipeline::Greedy => Pipeline::Greedy,
            RawPipeline::Fast => Pipeline::Fast,
        });
        let gravity = match &raw.gravity {
            None => d.gravity,
            Some(g) => self.vector("room.gravity", g, GRAVITY_ABS_MAX)?,
        };
        Ok(RoomSettings {
            tick_rate: self.integer("room.tick_rate", raw.tick_rate, TICK_RATE, d.tick_rate)?,
            pipeline: pipeline.unwrap_or(d.pipeline),
            gravity,
            players_max: self.integer(
                "room.players_max",
                raw.players_max,
                PLAYERS,
                d.players_max,
            )?,
            client_bytes_per_tick_max: self.integer(
                "room.client_bytes_per_tick_max",
                raw.client_bytes_per_tick_max,
                CLIENT_BYTES_PER_TICK,
                d.client_bytes_per_tick_max,
            )?,
        })
    }

    fn state(&self, relay: Option<RawRelay>, state: Option<RawState>) -> Checked<StateSettings> {
        let d = StateSettings::default();
        let relay =
            relay.unwrap_or(RawRelay { message_bytes_max: None, per_second: None, burst: None });
        let state = state.unwrap_or(RawState {
            key_bytes_max: None,
            value_bytes_max: None,
            keys_per_scope_max: None,
        });
        Ok(StateSettings {
            relay_bytes_max: self.integer(
                "relay.message_bytes_max",
                relay.message_bytes_max,
                RELAY_BYTES,
                d.relay_bytes_max,
            )?,
            relay_per_second: self.integer(
                "relay.per_second",
                relay.per_second,
                RELAY_PER_SECOND,
                d.relay_per_second,
            )?,
            relay_burst: self.integer("relay.burst", relay.burst, RELAY_BURST, d.relay_burst)?,
            key_bytes_max: self.integer(
                "state.key_bytes_max",
                state.key_bytes_max,
                KEY_BYTES,
                d.key_bytes_max,
            )?,
            value_bytes_max: self.integer(
                "state.value_bytes_max",
                state.value_bytes_max,
                VALUE_BYTES,
                d.value_bytes_max,
            )?,
            keys_per_scope_max: self.integer(
                "state.keys_per_scope_max",
                state.keys_per_scope_max,
                KEYS_PER_SCOPE,
                d.keys_per_scope_max,
            )?,
        })
    }

    fn player(&self, raw: RawPlayer) -> Checked<PlayerSettings> {
        let d = PlayerSettings::default();
        Ok(PlayerSettings {
            grab_radius_m: self.number(
                "player.grab_radius_m",
                raw.grab_radius_m.as_ref(),
                GRAB_RADIUS_M,
                d.grab_radius_m,
            )?,
        })
    }

    fn collider(&mut self, at: &str, raw: Spanned<RawCollider>) -> Checked<Collider> {
        let span = raw.span();
        let raw = raw.into_inner();
        Ok(Collider {
            name: self.name(at, raw.name.as_ref())?,
            shape: self.collider_shape(at, &span, raw.shape())?,
            pose: self.pose(at, raw.position.as_ref(), raw.rotation_deg.as_ref())?,
            friction: self.number(
                &field(at, "friction"),
                raw.friction.as_ref(),
                FRICTION,
                FRICTION_DEFAULT,
            )?,
            restitution: self.number(
                &field(at, "restitution"),
                raw.restitution.as_ref(),
                RESTITUTION,
                RESTITUTION_DEFAULT,
            )?,
        })
    }

    fn body(&mut self, at: &str, raw: Spanned<RawBody>) -> Checked<Body> {
        let span = raw.span();
        let raw = raw.into_inner();
        let shape = match self.collider_shape(at, &span, raw.shape())? {
            ColliderShape::Solid(shape) => shape,
            ColliderShape::Plane { .. } => {
                let span = raw.plane.as_ref().map_or(span.clone(), |p| p.span());
                let fix = "make it a [[colliders]] entry, or give the body a box";
                return Err(self.source.invalid(
                    &span,
                    field(at, "plane"),
                    "a body cannot be a plane",
                    fix,
                ));
            }
        };
        let pose = self.pose(at, raw.position.as_ref(), raw.rotation_deg.as_ref())?;
        let mass_default =
            (shape.volume() * DENSITY_DEFAULT).clamp(*MASS_KG.start(), *MASS_KG.end());
        Ok(Body {
            name: self.name(at, raw.name.as_ref())?,
            kind: raw.kind.as_ref().map_or(BodyKind::Dynamic, |k| match k.get_ref() {
                RawKind::Dynamic => BodyKind::Dynamic,
                RawKind::Kinematic => BodyKind::Kinematic,
            }),
            shape,
            pose,
            mass_kg: self.number(
                &field(at, "mass_kg"),
                raw.mass_kg.as_ref(),
                MASS_KG,
                mass_default,
            )?,
            friction: self.number(
                &field(at, "friction"),
                raw.friction.as_ref(),
                FRICTION,
                FRICTION_DEFAULT,
            )?,
            restitution: self.number(
                &field(at, "restitution"),
                raw.restitution.as_ref(),
                RESTITUTION,
                RESTITUTION_DEFAULT,
            )?,
            linear_damping: self.number(
                &field(at, "linear_damping"),
                raw.linear_damping.as_ref(),
                DAMPING,
                0.0,
            )?,
            angular_damping: self.number(
                &field(at, "angular_damping"),
                raw.angular_damping.as_ref(),
                DAMPING,
                0.0,
            )?,
            class: match &raw.class {
                Some(class) => self.identifier(&field(at, "class"), class)?,
                None => Name(CLASS_DEFAULT.to_owned()),
            },
            priority: self.number(&field(at, "priority"), raw.priority.as_ref(), PRIORITY, 1.0)?,
            grab: self.grab(at, &raw)?,
            respawn: self.respawn(at, &raw, pose.position.y)?,
        })
    }

    fn grab(&self, at: &str, raw: &RawBody) -> Checked<Grab> {
        let grabbable = raw.grabbable.as_ref().is_some_and(|g| *g.get_ref());
        match (&raw.takeable, grabbable) {
            (None, false) => Ok(Grab::No),
            (Some(t), false) if *t.get_ref() => Err(self.source.invalid(
                &t.span(),
                field(at, "takeable"),
                "a body no hand may hold cannot be taken from one",
                "add grabbable = true, or remove takeable",
            )),
            (Some(_), false) => Ok(Grab::No),
            (takeable, true) => {
                Ok(Grab::Yes { takeable: takeable.as_ref().is_none_or(|t| *t.get_ref()) })
            }
        }
    }

    fn respawn(&self, at: &str, raw: &RawBody, start_y: f32) -> Checked<Option<Respawn>> {
        let Some(respawn) = &raw.respawn else { return Ok(None) };
        let below = &respawn.get_ref().below_y;
        let field = format!("{at}.respawn.below_y");
        let y = self.finite(&field, below, POSITION_ABS_MAX_M)?;
        if y >= start_y {
            return Err(self.source.invalid(
                &below.span(),
                field,
                format!(
                    "{y} is not below the body's start height {start_y}: it would respawn forever"
                ),
                "give a height under the body's position",
            ));
        }
        Ok(Some(Respawn::BelowY(y)))
    }

    fn spawn(&self, at: &str, raw: RawSpawn) -> Checked<SpawnPoint> {
        let position = self.vector(&field(at, "position"), &raw.position, POSITION_ABS_MAX_M)?;
        let yaw = match &raw.yaw_deg {
            None => 0.0,
            Some(yaw) => self.finite(&field(at, "yaw_deg"), yaw, ANGLE_DEG_ABS_MAX)?.to_radians(),
        };
        Ok(SpawnPoint { position, yaw })
    }

    /// Exactly one of the shape keys, each size in [`SIZE_M`].
    fn collider_shape(
        &self,
        at: &str,
        span: &Range<usize>,
        raw: RawShape<'_>,
    ) -> Checked<ColliderShape> {
        let mut given: Vec<Range<usize>> = [
            raw.cuboid.as_ref().map(Spanned::span),
            raw.sphere.as_ref().map(Spanned::span),
            raw.capsule.as_ref().map(Spanned::span),
            raw.plane.as_ref().map(Spanned::span),
            raw.hull.as_ref().map(Spanned::span),
        ]
        .into_iter()
        .flatten()
        .collect();
        given.sort_by_key(|s| s.start);
        if given.len() != 1 {
            // Point at the second shape when there are several, at the table when none.
            let span = given.get(1).unwrap_or(span);
            let problem = format!("{} shapes given", given.len());
            let fix = "give exactly one of box, sphere, capsule or plane";
            return Err(self.source.invalid(span, field(at, "shape"), problem, fix));
        }
        if let Some(hull) = raw.hull {
            let fix = "convex hulls are planned, not yet built: use a box, sphere or capsule";
            return Err(self.source.invalid(
                &hull.span(),
                field(at, "hull"),
                "not supported yet",
                fix,
            ));
        }
        if let Some(size) = raw.cuboid {
            let half_extents = self.sizes(&field(at, "box"), size)? / 2.0;
            return Ok(ColliderShape::Solid(BodyShape::Box { half_extents }));
        }
        if let Some(radius) = raw.sphere {
            let radius = self.size(&field(at, "sphere"), radius)?;
            return Ok(ColliderShape::Solid(BodyShape::Sphere { radius }));
        }
        if let Some(capsule) = raw.capsule {
            return Ok(ColliderShape::Solid(self.capsule(at, capsule.get_ref())?));
        }
        let plane = raw.plane.as_ref().expect("exactly one shape is given, and the others are not");
        let normal = self.vector(&field(at, "plane"), plane, POSITION_ABS_MAX_M)?;
        if normal.length() < 1e-3 {
            let fix = "give the plane's outward normal, such as [0, 1, 0] for a floor";
            return Err(self.source.invalid(
                &plane.span(),
                field(at, "plane"),
                "a zero normal",
                fix,
            ));
        }
        Ok(ColliderShape::Plane { normal: normal.normalize() })
    }

    fn capsule(&self, at: &str, raw: &RawCapsule) -> Checked<BodyShape> {
        let radius = self.size(&field(at, "capsule.radius"), &raw.radius)?;
        let height = self.size(&field(at, "capsule.height"), &raw.height)?;
        if height < 2.0 * radius {
            return Err(self.source.invalid(
                &raw.height.span(),
                field(at, "capsule.height"),
                format!("{height} m is shorter than the two end caps ({} m)", 2.0 * radius),
                "make height (end to end) at least twice the radius, or use a sphere",
            ));
        }
        Ok(BodyShape::Capsule { half_height: height / 2.0 - radius, radius })
    }

    fn pose(
        &self,
        at: &str,
        position: Option<&Vector>,
        rotation: Option<&Vector>,
    ) -> Checked<Transform> {
        let position = match position {
            None => Vec3::ZERO,
            Some(p) => self.vector(&field(at, "position"), p, POSITION_ABS_MAX_M)?,
        };
        let rotation = match rotation {
            None => Quat::IDENTITY,
            Some(r) => {
                let deg = self.vector(&field(at, "rotation_deg"), r, ANGLE_DEG_ABS_MAX)?;
                let rad = deg * std::f32::consts::PI / 180.0;
                Quat::from_euler(EulerRot::YXZ, rad.y, rad.x, rad.z).normalize()
            }
        };
        Ok(Transform { position, rotation })
    }

    /// A name unique among the scene's names.
    fn name(&mut self, at: &str, raw: Option<&Spanned<String>>) -> Checked<Option<Name>> {
        let Some(raw) = raw else { return Ok(None) };
        let name = self.identifier(&field(at, "name"), raw)?;
        if !self.names.insert(name.0.clone()) {
            let problem = format!("the name \"{name}\" is used twice");
            return Err(self.source.invalid(
                &raw.span(),
                field(at, "name"),
                problem,
                "rename one of them",
            ));
        }
        Ok(Some(name))
    }

    fn identifier(&self, field: &str, raw: &Spanned<String>) -> Checked<Name> {
        let text = raw.get_ref();
        let ok = !text.is_empty()
            && text.len() <= NAME_BYTES_MAX
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            return Ok(Name(text.clone()));
        }
        Err(self.source.invalid(
            &raw.span(),
            field,
            format!("{text:?} is not a name"),
            format!("use 1 to {NAME_BYTES_MAX} ASCII letters, digits, '-' or '_'"),
        ))
    }

    fn sizes(&self, field: &str, raw: &Vector) -> Checked<Vec3> {
        let v = raw.get_ref();
        if v.iter().all(|x| SIZE_M.contains(x)) {
            return Ok(Vec3::from_array(*v));
        }
        Err(self.range_error(field, &raw.span(), &format!("{v:?}"), &SIZE_M))
    }

    fn size(&self, field: &str, raw: &Spanned<f32>) -> Checked<f32> {
        self.number(field, Some(raw), SIZE_M, 0.0)
    }

    fn vector(&self, field: &str, raw: &Vector, abs_max: f32) -> Checked<Vec3> {
        let v = raw.get_ref();
        if v.iter().all(|x| x.is_finite() && x.abs() <= abs_max) {
            return Ok(Vec3::from_array(*v));
        }
        Err(self.range_error(field, &raw.span(), &format!("{v:?}"), &(-abs_max..=abs_max)))
    }

    fn finite(&self, field: &str, raw: &Spanned<f32>, abs_max: f32) -> Checked<f32> {
        self.number(field, Some(raw), -abs_max..=abs_max, 0.0)
    }

    fn number(
        &self,
        field: &str,
        raw: Option<&Spanned<f32>>,
        range: RangeInclusive<f32>,
        default: f32,
    ) -> Checked<f32> {
        let Some(raw) = raw else { return Ok(default) };
        // NaN is in no range, so `contains` refuses it too.
        if range.contains(raw.get_ref()) {
            return Ok(*raw.get_ref());
        }
        Err(self.range_error(field, &raw.span(), &raw.get_ref().to_string(), &range))
    }

    fn integer(
        &self,
        field: &str,
        raw: Option<Spanned<u32>>,
        range: RangeInclusive<u32>,
        default: u32,
    ) -> Checked<u32> {
        let Some(raw) = raw else { return Ok(default) };
        if range.contains(raw.get_ref()) {
            return Ok(*raw.get_ref());
        }
        Err(self.range_error(field, &raw.span(), &raw.get_ref().to_string(), &range))
    }

    fn range_error<T: std::fmt::Display>(
        &self,
        field: &str,
        span: &Range<usize>,
        value: &str,
        range: &RangeInclusive<T>,
    ) -> SceneError {
        let (low, high) = (range.start(), range.end());
        let each = if value.starts_with('[') { "each component " } else { "" };
        let fix = format!("give {each}a value from {low} to {high}");
        self.source.invalid(span, field, format!("{value} is out of range"), fix)
    }
}

/// The path of field `name` of the entry at `at`: `bodies[2].mass_kg`.
fn field(at: &str, name: &str) -> String {
    format!("{at}.{name}")
}
