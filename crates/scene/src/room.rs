//! A room built from a scene: its colliders and bodies become entities with rapier bodies, and
//! each tick steps physics and applies the scene's respawn rules.

use crate::hooks::{NoHooks, SceneHooks};
use crate::input::XrInput;
use crate::player::{Avatar, Players, SceneStats};
use crate::roster::Held;
use crate::scene::{Body, BodyKind, BodyShape, ColliderShape, Grab, Respawn, Scene};
use crate::state::{RoomState, SceneMessage};
use glam::Vec3;
use rally_engine::{
    ClientId, ConfigError, Entity, EntityId, GrabRule, Room, Simulation, World, WorldError,
};
use rally_physics::{Motion, Physics, PhysicsError, Shape};
use rally_proto::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// Why a scene's room could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SceneRoomError {
    /// The world refused an entity (it is full: its `entities_max` is below the scene's).
    #[error("the world refused a scene entity: {0}")]
    World(#[from] WorldError),
    /// Physics refused a body (the world given already had a body for the entity).
    #[error("physics refused a scene body: {0}")]
    Physics(#[from] PhysicsError),
    /// The engine refused the room's settings (the scene's ranges lie within the engine's, so
    /// this names a scene limit that needs narrowing).
    #[error("the engine refused the scene's room settings: {0}")]
    Config(#[from] ConfigError),
}

/// One of the scene's bodies in the room.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) id: EntityId,
    start: Entity,
    respawn: Option<Respawn>,
    pub(crate) grab: Grab,
    pub(crate) shape: BodyShape,
    /// How far the shape reaches from its centre, metres: a hand further than this and the
    /// grab radius is out of reach.
    pub(crate) extent: f32,
    class: crate::scene::Name,
}

#[cfg(test)]
impl Placed {
    /// A body of `shape` at entity `id`, for the players' tests.
    pub(crate) fn for_test(id: EntityId, shape: BodyShape, grab: Grab) -> Self {
        Self {
            id,
            start: Entity::at(rally_engine::Transform::IDENTITY),
            respawn: None,
            grab,
            shape,
            extent: shape.extent(),
            class: crate::scene::Name::for_test("test"),
        }
    }
}

/// Contacts reported to hooks per physics step at most (past it they are counted by
/// rally-physics and dropped): a pile of blocks settling touches a few hundred pairs.
pub const CONTACTS_PER_STEP_MAX: usize = 1024;

/// The [`Simulation`] of a scene's room: rapier physics over the scene's colliders and bodies,
/// its respawn rules, and the standard XR player (see the crate docs): an avatar per player
/// that [`XrInput`] drives and whose grips grab.
pub struct SceneRoom {
    physics: Physics,
    colliders: Vec<EntityId>,
    bodies: Vec<Placed>,
    names: BTreeMap<String, EntityId>,
    respawns: u64,
    state: RoomState,
    players: Players,
    hooks: Box<dyn SceneHooks>,
    /// Whether a game set hooks ([`SceneRoom::set_hooks`]): until then the input hook, which
    /// does nothing, is not called (a call through the hooks' table on every input).
    hooked: bool,
}

impl std::fmt::Debug for SceneRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SceneRoom")
            .field("colliders", &self.colliders.len())
            .field("bodies", &self.bodies.len())
            .field("respawns", &self.respawns)
            .field("players", &self.players)
            .finish()
    }
}

impl SceneRoom {
    /// Spawns `scene`'s colliders, then its bodies, into `world` (in file order, so entity ids
    /// follow the file) and gives each a rapier body.
    pub fn new(scene: &Scene, world: &mut World) -> Result<Self, SceneRoomError> {
        let mut room = Self {
            physics: Physics::new(scene.settings().gravity),
            colliders: Vec::with_capacity(scene.colliders().len()),
            bodies: Vec::with_capacity(scene.bodies().len()),
            names: BTreeMap::new(),
            respawns: 0,
            state: RoomState::new(scene.state_settings()),
            players: Players::new(
                scene.player().clone(),
                scene.spawns().to_vec(),
                scene.settings().players_max,
            ),
            hooks: Box::new(NoHooks),
            hooked: false,
        };
        for collider in scene.colliders() {
            let id = world.spawn(Entity::at(collider.pose))?;
            let shape = match collider.shape {
                ColliderShape::Solid(shape) => physics_shape(shape),
                ColliderShape::Plane { normal } => Shape::HalfSpace(normal),
            };
            let body = rally_physics::Body {
                motion: Motion::Fixed,
                shape,
                restitution: collider.restitution,
                friction: collider.friction,
                density: 1000.0,
            };
            room.physics.add(world, id, body)?;
            room.colliders.push(id);
            if let Some(name) = &collider.name {
                room.names.insert(name.to_string(), id);
            }
        }
        for body in scene.bodies() {
            room.place(world, body)?;
        }
        crate::roster::write_classes(&mut room);
        Ok(room)
    }

    fn place(&mut self, world: &mut World, body: &Body) -> Result<(), SceneRoomError> {
        let start = Entity { priority: body.priority, ..Entity::at(body.pose) };
        let id = world.spawn(start)?;
        let motion = match body.kind {
            BodyKind::Dynamic => Motion::Dynamic,
            BodyKind::Kinematic => Motion::Kinematic,
        };
        let physical = rally_physics::Body {
            motion,
            shape: physics_shape(body.shape),
            restitution: body.restitution,
            friction: body.friction,
            // The scene gives mass; rapier takes density. The shape's volume is above zero:
            // every size is at least limits::SIZE_M's start.
            density: body.mass_kg / body.shape.volume(),
        };
        self.physics.add(world, id, physical)?;
        self.physics.set_damping(id, body.linear_damping, body.angular_damping);
        if let Some(name) = &body.name {
            self.names.insert(name.to_string(), id);
        }
        self.bodies.push(Placed {
            id,
            start,
            respawn: body.respawn,
            grab: body.grab,
            shape: body.shape,
            extent: body.shape.extent(),
            class: body.class.clone(),
        });
        Ok(())
    }

    /// The entity of the collider or body the scene names `name`.
    pub fn entity(&self, name: &str) -> Option<EntityId> {
        self.names.get(name).copied()
    }

    /// The colliders' entities, in file order.
    pub fn colliders(&self) -> &[EntityId] {
        &self.colliders
    }

    /// The bodies' entities, in file order.
    pub fn bodies(&self) -> impl Iterator<Item = EntityId> + '_ {
        self.bodies.iter().map(|b| b.id)
    }

    /// Whether a hand may hold `id`, and whether another hand may take it then.
    pub fn grab(&self, id: EntityId) -> Grab {
        self.bodies.iter().find(|b| b.id == id).map_or(Grab::No, |b| b.grab)
    }

    /// The scene's grab rule, for [`World::set_grab_rule`]: see [`SceneGrabRule`].
    pub fn grab_rule(&self) -> SceneGrabRule {
        SceneGrabRule { grabs: self.bodies.iter().map(|b| (b.id, b.grab)).collect() }
    }

    /// `client`'s avatar, if it has one.
    pub fn avatar(&self, client: ClientId) -> Option<Avatar> {
        self.players.avatar(client)
    }

    /// Every player's avatar, by client id.
    pub fn avatars(&self) -> impl Iterator<Item = (ClientId, Avatar)> + '_ {
        self.players.avatars()
    }

    /// The class of a body (the scene's `class`) or of an avatar's entity
    /// ([`HEAD_CLASS`](crate::HEAD_CLASS), [`HAND_CLASS`](crate::HAND_CLASS)), for
    /// interpolation and statistics; `None` for colliders and unknown ids.
    pub fn class(&self, id: EntityId) -> Option<&str> {
        match self.bodies.iter().find(|b| b.id == id) {
            Some(body) => Some(body.class.as_str()),
            None => self.players.class(id),
        }
    }

    /// What each player's hands hold now (the roster's [`HELD_KEY`](crate::HELD_KEY)).
    pub fn held(&self, world: &World) -> Held {
        self.players.held(world)
    }

    /// What the players did and what the room refused them.
    pub fn stats(&self) -> SceneStats {
        self.players.stats
    }

    /// Hands the room's events to `hooks` from now on (see [`SceneHooks`]), and turns on
    /// rally-physics' contact recording for [`SceneHooks::contact`].
    pub fn set_hooks(&mut self, hooks: Box<dyn SceneHooks>) {
        self.hooks = hooks;
        self.hooked = true;
        self.physics.record_contacts(CONTACTS_PER_STEP_MAX);
    }

    /// The hooks, to read a game's state back.
    pub fn hooks_mut(&mut self) -> &mut dyn SceneHooks {
        self.hooks.as_mut()
    }

    /// Bodies returned to their start pose by a respawn rule so far.
    pub fn respawns(&self) -> u64 {
        self.respawns
    }

    /// The relay's and the key-value state's side in the room: values, players, counts.
    pub fn state(&self) -> &RoomState {
        &self.state
    }

    pub(crate) fn state_mut(&mut self) -> &mut RoomState {
        &mut self.state
    }

    /// The rapier world, for a game that wraps this room.
    pub fn physics_mut(&mut self) -> &mut Physics {
        &mut self.physics
    }

    /// Bodies whose respawn rule fired go back to their start pose, at rest. A held body is
    /// left alone: its holder decides where it is.
    fn respawn(&mut self, world: &mut World) {
        for placed in &self.bodies {
            let Some(Respawn::BelowY(y)) = placed.respawn else { continue };
            if world.grabber_of(placed.id).is_some() {
                continue;
            }
            // Read, not lent: a row lent to change is walked by replicate, and this looks at
            // every body with the rule every tick. A NaN height (a broken simulation) respawns
            // too: the start pose is known good.
            if world.get(placed.id).is_none_or(|entity| entity.transform.position.y >= y) {
                continue;
            }
            let Some(entity) = world.get_mut(placed.id) else { continue };
            *entity = placed.start;
            self.physics.teleport(world, placed.id);
            self.respawns += 1;
        }
    }
}

/// Who may hold what, from the scene: a grab is allowed only of a body with `grabbable = true`,
/// and of one held by another grabber only if it is `takeable` too. Colliders, players' own
/// entities and anything not in the scene are never grabbable.
#[derive(Debug, Clone)]
pub struct SceneGrabRule {
    grabs: BTreeMap<EntityId, Grab>,
}

impl GrabRule for SceneGrabRule {
    fn allow(&self, world: &World, grabber: EntityId, grabbable: EntityId) -> bool {
        match self.grabs.get(&grabbable) {
            None | Some(Grab::No) => false,
            Some(Grab::Yes { takeable: true }) => true,
            Some(Grab::Yes { takeable: false }) => {
                world.grabber_of(grabbable).is_none_or(|holder| holder == grabber)
            }
        }
    }
}

/// rally-physics' shape for a scene body's shape.
fn physics_shape(shape: BodyShape) -> Shape {
    match shape {
        BodyShape::Box { half_extents } => Shape::Cuboid(half_extents),
        BodyShape::Sphere { radius } => Shape::Ball(radius),
        BodyShape::Capsule { half_height, radius } => Shape::Capsule { half_height, radius },
    }
}

impl Simulation for SceneRoom {
    type Input = XrInput;
    type Message = SceneMessage;

    /// Reads the standard XR input at its fixed offsets ([`XrInput::decode`]): the same bytes
    /// as serde, taken and refused alike.
    fn decode_input(bytes: &[u8]) -> Option<(XrInput, &[u8])> {
        XrInput::decode(bytes)
    }

    /// Moves `client`'s avatar, with no arrival time (hand velocities are measured only by
    /// [`Simulation::apply_input_at`], which the room calls).
    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &XrInput) {
        let hooks = self.hooks.as_mut();
        self.players.input(world, &self.bodies, hooks, client, input, None);
        if self.hooked {
            hooks.input(world, client, input);
        }
    }

    /// Moves `client`'s avatar to the input's poses, measures its hands' velocities from the
    /// arrival times, and grabs or releases on its grips.
    fn apply_input_at(
        &mut self,
        world: &mut World,
        client: ClientId,
        input: &XrInput,
        now: Instant,
    ) {
        let hooks = self.hooks.as_mut();
        self.players.input(world, &self.bodies, hooks, client, input, Some(now));
        if self.hooked {
            hooks.input(world, client, input);
        }
    }

    fn step(&mut self, world: &mut World, dt: Duration) {
        self.physics.step(world, dt);
        self.respawn(world);
        for (a, b) in self.physics.contacts() {
            self.hooks.contact(world, *a, *b);
        }
        self.hooks.step(world, dt);
    }

    /// The head and both hands: the fast path sends them and what they hold on every input.
    fn driven_into(&self, client: ClientId, out: &mut Vec<EntityId>) {
        self.players.driven_into(client, out);
    }

    /// Spawns the player's avatar (see the crate docs).
    fn joined(&mut self, world: &mut World, client: ClientId) {
        if let Some(avatar) = self.players.join(world, &mut self.physics, client) {
            self.hooks.joined(world, client, avatar);
        }
    }

    /// Releases what the player's hands hold and despawns its avatar.
    fn left(&mut self, world: &mut World, client: ClientId) {
        let hooks = self.hooks.as_mut();
        if let Some(avatar) = self.players.leave(world, &mut self.physics, hooks, client) {
            hooks.left(world, client, avatar);
        }
    }
}

/// A room hosting `scene`: the engine settings of [`Scene::room_config`], a [`SceneRoom`] over
/// its world, and the scene's [`SceneGrabRule`]; `seed` makes the room's session secrets.
pub fn scene_room(scene: &Scene, seed: u64) -> Result<Room<SceneRoom>, SceneRoomError> {
    let mut room = Room::new(scene.room_config(), placeholder(), seed)?;
    let game = SceneRoom::new(scene, room.world_mut())?;
    room.world_mut().set_grab_rule(Box::new(game.grab_rule()));
    *room.simulation_mut() = game;
    Ok(room)
}

/// An empty scene room, to hold the place while the room's world is filled.
fn placeholder() -> SceneRoom {
    SceneRoom {
        physics: Physics::new(Vec3::ZERO),
        colliders: Vec::new(),
        bodies: Vec::new(),
        names: BTreeMap::new(),
        respawns: 0,
        state: RoomState::default(),
        players: Players::new(Default::default(), Vec::new(), 0),
        hooks: Box::new(NoHooks),
        hooked: false,
    }
}
