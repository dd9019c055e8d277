//! The games the benchmarks, the demo and `rally server` play: controllers driven by inputs
//! holding paddles in a rapier3d world ([`Paddles`]), and the W3 reference room
//! ([`Reference`]).

use glam::Vec3;
use rally_engine::{ClientId, Entity, EntityId, Room, RoomConfig, Simulation, Transform, World};
use rally_physics::{Body, Physics};
use rally_sim::sandbox::{HandInput, Sandbox};
use std::collections::BTreeMap;
use std::time::Duration;

/// Each client's inputs move its controller, which holds a paddle down a grab chain; the rest
/// is rapier's.
pub struct Paddles {
    /// The rapier world.
    pub physics: Physics,
    /// Each client's controller.
    pub controllers: BTreeMap<ClientId, EntityId>,
    /// Depth of the grab chain each controller gets on joining (0: none).
    pub chain_depth: usize,
    /// The ball [`Paddles::set_table`] put in play.
    pub ball: Option<EntityId>,
}

impl Simulation for Paddles {
    type Input = HandInput;
    type Message = ();

    /// Reads the input at its fixed offsets ([`HandInput::decode`]): serde's bytes.
    #[inline]
    fn decode_input(bytes: &[u8]) -> Option<(HandInput, &[u8])> {
        HandInput::decode(bytes)
    }

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &HandInput) {
        move_hand(&self.controllers, world, client, input);
    }

    fn step(&mut self, world: &mut World, dt: Duration) {
        self.physics.step(world, dt);
    }

    fn driven(&self, client: ClientId) -> Option<EntityId> {
        self.controllers.get(&client).copied()
    }

    fn joined(&mut self, world: &mut World, client: ClientId) {
        let Ok(id) = world.spawn(Entity::at(Transform::from_position(Vec3::new(0.0, 1.2, 0.0))))
        else {
            return;
        };
        let _ = self.physics.add(world, id, Body::kinematic_cuboid(Vec3::splat(0.04)));
        self.controllers.insert(client, id);
        let chain = Sandbox::chain(world, id, self.chain_depth);
        if let Some(paddle) = chain.last() {
            let blade = Body::kinematic_cuboid(Vec3::new(0.08, 0.08, 0.01));
            let _ = self.physics.add(world, *paddle, blade);
        }
    }
}

impl Default for Paddles {
    /// A paddle in every hand.
    fn default() -> Self {
        Self::new(1)
    }
}

impl Paddles {
    /// A world with gravity and nothing in it yet.
    pub fn new(chain_depth: usize) -> Self {
        Self {
            physics: Physics::new(Vec3::new(0.0, -9.81, 0.0)),
            controllers: BTreeMap::new(),
            chain_depth,
            ball: None,
        }
    }

    /// A table-tennis table and a ball over it.
    pub fn set_table(&mut self, world: &mut World) -> Result<(), Box<dyn std::error::Error>> {
        let table = world.spawn(Entity::at(Transform::from_position(Vec3::new(0.0, 0.7, 0.0))))?;
        self.physics.add(world, table, Body::fixed_cuboid(Vec3::new(0.76, 0.02, 1.37)))?;
        let at = Transform::from_position(Vec3::new(0.0, 1.2, 0.0));
        let ball = world.spawn(Entity { priority: 8.0, ..Entity::at(at) })?;
        self.physics.add(world, ball, Body::dynamic_ball(0.02))?;
        self.ball = Some(ball);
        Ok(())
    }
}

/// Clients in the reference room.
pub const CLIENTS: usize = 10;
/// Bodies in the reference room, controllers included.
pub const BODIES: usize = 256;
/// Bodies that move every tick, controllers included.
pub const MOVING: usize = 64;

/// The W3 reference game (docs/design.md, section 5): inputs move controllers;
/// `MOVING - CLIENTS` bodies orbit; the rest of the `BODIES` rest. No physics: the host's
/// budget leaves the game's own cost apart.
#[derive(Default)]
pub struct Reference {
    controllers: BTreeMap<ClientId, EntityId>,
    orbiting: Vec<EntityId>,
    t: f32,
}

impl Simulation for Reference {
    type Input = HandInput;
    type Message = ();

    /// Reads the input at its fixed offsets ([`HandInput::decode`]): serde's bytes.
    #[inline]
    fn decode_input(bytes: &[u8]) -> Option<(HandInput, &[u8])> {
        HandInput::decode(bytes)
    }

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &HandInput) {
        move_hand(&self.controllers, world, client, input);
    }

    fn step(&mut self, world: &mut World, dt: Duration) {
        self.t += dt.as_secs_f32();
        for (k, id) in self.orbiting.iter().enumerate() {
            let Some(body) = world.get_mut(*id) else { continue };
            let phase = self.t * 2.0 + k as f32;
            let radius = 1.0 + (k % 5) as f32 * 0.5;
            body.transform.position = Vec3::new(phase.cos() * radius, 1.0, phase.sin() * radius);
            body.linear_velocity = Vec3::new(-phase.sin(), 0.0, phase.cos()) * radius * 2.0;
        }
    }

    fn joined(&mut self, world: &mut World, client: ClientId) {
        if let Ok(id) = world.spawn(Entity::at(Transform::IDENTITY)) {
            self.controllers.insert(client, id);
        }
    }
}

/// The reference room with its bodies spawned: `BODIES - CLIENTS` of them, of which
/// `MOVING - CLIENTS` orbit; each client that joins adds its controller.
/// `seed` makes the room's session secrets.
pub fn reference_room(
    config: RoomConfig,
    seed: u64,
) -> Result<Room<Reference>, rally_engine::WorldError> {
    reference_room_sized(config, seed, BODIES, MOVING)
}

/// The reference room with `bodies` entities, `moving` of them moving every tick, its
/// `CLIENTS` controllers included in both (`moving - CLIENTS` orbit; `bodies` clamped to
/// `CLIENTS..=BODIES`, `moving` to `CLIENTS..=bodies`): the reference room's work for another
/// room's shape (the sandbox scene has 110 entities and moves 94 a tick).
pub fn reference_room_sized(
    mut config: RoomConfig,
    seed: u64,
    bodies: usize,
    moving: usize,
) -> Result<Room<Reference>, rally_engine::WorldError> {
    let bodies = bodies.clamp(CLIENTS, BODIES);
    let moving = moving.clamp(CLIENTS, bodies);
    config.snapshot.entities_max = config.snapshot.entities_max.max(BODIES);
    let mut game = Reference::default();
    // Callers pass a validated config (the server checks it at start), and the raised entity
    // limit is far below the engine's.
    let mut room = Room::new(config, Reference::default(), seed).expect("a valid room config");
    for k in 0..bodies - CLIENTS {
        let at = Transform::from_position(Vec3::new(k as f32 * 0.1 - 10.0, 0.5, -3.0));
        let id = room.world_mut().spawn(Entity::at(at))?;
        if k < moving - CLIENTS {
            game.orbiting.push(id);
        }
    }
    *room.simulation_mut() = game;
    Ok(room)
}

/// Puts `client`'s controller where its input says, if it has one.
fn move_hand(
    controllers: &BTreeMap<ClientId, EntityId>,
    world: &mut World,
    client: ClientId,
    input: &HandInput,
) {
    let Some(hand) = controllers.get(&client).and_then(|id| world.get_mut(*id)) else { return };
    hand.transform.position = Vec3::from_array(input.position);
    hand.transform.rotation = glam::Quat::from_array(input.rotation).normalize();
}

/// A host's game for a scene file: every room is the scene's ([`rally_scene::scene_room`]),
/// built from one parsed and checked [`Scene`](rally_scene::Scene) that all rooms share.
/// The room's engine settings (tick rate, pipeline, players, byte budget) are the scene's.
pub struct SceneGame {
    scene: std::sync::Arc<rally_scene::Scene>,
    seed: Box<dyn Fn(u64) -> u64 + Send + Sync>,
    /// Where each tick's players' figures go, if anyone watches (the demo's dashboard).
    stats: Option<std::sync::Arc<std::sync::Mutex<rally_scene::SceneStats>>>,
}

impl SceneGame {
    /// Hosts `scene`; room `id`'s session secrets come from `seed(id)`. Builds one room first,
    /// so that a scene the engine or the world would refuse is refused here, at start, rather
    /// than when a player connects.
    pub fn new(
        scene: rally_scene::Scene,
        seed: impl Fn(u64) -> u64 + Send + Sync + 'static,
    ) -> Result<Self, rally_scene::SceneRoomError> {
        rally_scene::scene_room(&scene, 0)?;
        Ok(Self { scene: std::sync::Arc::new(scene), seed: Box::new(seed), stats: None })
    }

    /// After each tick, copies the room's [`SceneStats`](rally_scene::SceneStats) (grabs,
    /// releases, refusals) into `stats`; with several rooms, the last to tick's.
    pub fn watch(
        mut self,
        stats: std::sync::Arc<std::sync::Mutex<rally_scene::SceneStats>>,
    ) -> Self {
        self.stats = Some(stats);
        self
    }

    /// The scene the rooms are built from.
    pub fn scene(&self) -> &rally_scene::Scene {
        &self.scene
    }
}

impl rally_driver::host::Game for SceneGame {
    type Simulation = rally_scene::SceneRoom;

    fn open(&self, room_id: u64) -> Room<rally_scene::SceneRoom> {
        // `new` built this scene's room once: building it again gives the same answer.
        rally_scene::scene_room(&self.scene, (self.seed)(room_id))
            .expect("SceneGame::new built this scene's room")
    }

    /// Relays, key-value writes, joins and leaves go to the scene's relay and state.
    fn on_event(
        &self,
        room: &mut Room<rally_scene::SceneRoom>,
        event: rally_driver::host::GameEvent<Self>,
    ) {
        rally_scene::handle_event(room, event);
    }

    fn after_tick(&self, room: &mut Room<rally_scene::SceneRoom>) {
        // A player the full outbox skipped this tick is sent the whole state again.
        rally_scene::resend_missed(room);
        if let Some(stats) = &self.stats {
            *stats.lock().unwrap_or_else(|p| p.into_inner()) = room.simulation().stats();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of `room`'s entities one step of its game moves.
    fn moved_by_one_step(room: &mut Room<Reference>) -> usize {
        let before: Vec<_> = room.world().iter().map(|(id, e)| (id, e.transform)).collect();
        let mut game = std::mem::take(room.simulation_mut());
        game.step(room.world_mut(), Duration::from_millis(8));
        *room.simulation_mut() = game;
        let after = room.world().iter().map(|(id, e)| (id, e.transform));
        after.zip(&before).filter(|(now, then)| now != *then).count()
    }

    #[test]
    fn a_sized_reference_room_has_the_bodies_and_motion_asked_for() {
        // The sandbox scene's shape: 110 entities, 94 moving, the 10 controllers among both.
        let mut room = reference_room_sized(RoomConfig::default(), 1, 110, 94).unwrap();
        assert_eq!(room.world().len(), 110 - CLIENTS);
        assert_eq!(moved_by_one_step(&mut room), 94 - CLIENTS);
        let mut room = reference_room(RoomConfig::default(), 1).unwrap();
        assert_eq!(room.world().len(), BODIES - CLIENTS);
        assert_eq!(moved_by_one_step(&mut room), MOVING - CLIENTS);
    }

    #[test]
    fn a_sized_reference_room_clamps_what_it_cannot_build() {
        let mut room = reference_room_sized(RoomConfig::default(), 1, 10_000, 10_000).unwrap();
        assert_eq!(room.world().len(), BODIES - CLIENTS);
        assert_eq!(moved_by_one_step(&mut room), BODIES - CLIENTS);
        let room = reference_room_sized(RoomConfig::default(), 1, 0, 0).unwrap();
        assert_eq!(room.world().len(), 0);
    }
}
