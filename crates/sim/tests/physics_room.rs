//! Goal: a room whose world runs real physics (rapier3d through rally-physics) keeps ten
//! clients in step through loss and reordering, with a grab chain of depth three (controller,
//! handle, paddle, ball) moving the held ball with the hand in the same tick.
//! Method: balls bouncing on a floor, every client's controller driven by its inputs, the
//! chain on client 1's controller; 3 s under 10% loss with reordering, then a heal; virtual
//! time, several seeds.

use glam::Vec3;
use rally_engine::{ClientId, Entity, EntityId, Room, RoomConfig, Simulation, Transform, World};
use rally_netem::LinkConfig;
use rally_physics::{Body, Physics};
use rally_sim::links::hostile;
use rally_sim::sandbox::{HandInput, Sandbox, SandboxMessage};
use rally_sim::RoomNet;
use std::collections::BTreeMap;
use std::time::Duration;

/// Controllers follow inputs; everything else is rapier's.
struct PhysicsGame {
    physics: Physics,
    controllers: BTreeMap<ClientId, EntityId>,
    frozen: bool,
}

impl Simulation for PhysicsGame {
    type Input = HandInput;
    type Message = SandboxMessage;

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &HandInput) {
        let Some(hand) = self.controllers.get(&client).and_then(|id| world.get_mut(*id)) else {
            return;
        };
        hand.transform.position = Vec3::from_array(input.position);
        hand.transform.rotation = glam::Quat::from_array(input.rotation).normalize();
    }

    fn step(&mut self, world: &mut World, dt: Duration) {
        if !self.frozen {
            self.physics.step(world, dt);
        }
    }

    fn joined(&mut self, world: &mut World, client: ClientId) {
        let at = Transform::from_position(Vec3::new(client as f32 * 0.5 - 2.0, 1.2, 0.0));
        let id = world.spawn(Entity::at(at)).expect("room for a controller");
        self.physics.add(world, id, Body::kinematic_cuboid(Vec3::splat(0.04))).unwrap();
        self.controllers.insert(client, id);
    }
}

/// A floor and `balls` dynamic balls dropped at seeded places.
fn populate(world: &mut World, physics: &mut Physics, balls: usize, seed: u64) {
    let floor = Transform::from_position(Vec3::new(0.0, -0.1, 0.0));
    let floor = world.spawn(Entity::at(floor)).unwrap();
    physics.add(world, floor, Body::fixed_cuboid(Vec3::new(5.0, 0.1, 5.0))).unwrap();
    for id in Sandbox::populate(world, balls, seed) {
        physics.add(world, id, Body::dynamic_ball(0.05)).unwrap();
    }
}

#[test]
fn ten_clients_stay_in_step_with_a_physics_world() {
    for seed in 0..2 {
        let physics = Physics::new(Vec3::new(0.0, -9.81, 0.0));
        let game = PhysicsGame { physics, controllers: BTreeMap::new(), frozen: false };
        let mut room = Room::new(RoomConfig::default(), game, seed).unwrap();
        let mut physics =
            std::mem::replace(&mut room.simulation_mut().physics, Physics::new(Vec3::ZERO));
        populate(room.world_mut(), &mut physics, 32, seed);
        room.simulation_mut().physics = physics;
        run(room, seed);
    }
}

fn run(room: Room<PhysicsGame>, seed: u64) {
    let mut net = RoomNet::new(room, 10, hostile(), seed);
    for i in 0..10 {
        net.connect(i);
    }
    net.run_for(Duration::from_secs(2));
    let root = net.room.simulation().controllers[&1];
    let chain = Sandbox::chain(net.room.world_mut(), root, 3);
    let ball = chain[2];
    // The paddle and the ball it holds are bodies too: held, the dynamic ball goes kinematic.
    let game = net.room.simulation_mut();
    let mut physics = std::mem::replace(&mut game.physics, Physics::new(Vec3::ZERO));
    let world = net.room.world_mut();
    physics.add(world, chain[1], Body::kinematic_cuboid(Vec3::new(0.08, 0.08, 0.01))).unwrap();
    physics.add(world, ball, Body::dynamic_ball(0.02)).unwrap();
    net.room.simulation_mut().physics = physics;
    let frame = Duration::from_nanos(1_000_000_000 / 90);
    let end = net.net.now + Duration::from_secs(3);
    while net.net.now < end {
        let t = net.net.now.as_secs_f64();
        for i in 0..10 {
            net.input(i, HandInput::on_circle(i, t));
        }
        net.run_for(frame);
        // In the last tick's snapshot, the held ball sits where that tick's hand and three
        // offsets put it: the chain followed within the tick (within quantization).
        let config = net.room.config().snapshot;
        let snapshot = net.room.snapshot();
        let hand = config.dequantize(snapshot.get(root).unwrap());
        let held = config.dequantize(snapshot.get(ball).unwrap()).position;
        let expected = hand.position + hand.rotation * Vec3::new(0.0, 0.0, -0.3);
        let error = (held - expected).length();
        assert!(error < 0.003, "seed {seed}: held ball {error} m from where the hand puts it");
    }
    net.room.simulation_mut().frozen = true;
    net.net.set_links(LinkConfig { delay: Duration::from_millis(15), ..LinkConfig::default() });
    net.run_for(Duration::from_secs(1));
    let server = net.room.snapshot().entities();
    assert_eq!(server.len(), 1 + 32 + 10 + 3);
    for (i, session) in net.sessions.iter().enumerate() {
        assert_eq!(session.snapshot().unwrap().entities(), server, "seed {seed}: client {i}");
    }
}
