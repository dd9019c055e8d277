//! The game the benchmarks and the demo play: controllers driven by inputs holding paddles,
//! in a rapier3d world.

use glam::Vec3;
use rally_engine::{ClientId, Entity, EntityId, Simulation, Transform, World};
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

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &HandInput) {
        let Some(hand) = self.controllers.get(&client).and_then(|id| world.get_mut(*id)) else {
            return;
        };
        hand.transform.position = Vec3::from_array(input.position);
        hand.transform.rotation = glam::Quat::from_array(input.rotation).normalize();
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
