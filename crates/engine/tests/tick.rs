//! Goal: one tick runs its phases in the stated order: inputs are applied on arrival, grabbed
//! entities have followed their grabbers before user code steps, and the snapshot replicated
//! in a tick already holds what that tick's step did.

use glam::Vec3;
use rally_engine::{Entity, Phase, Room, RoomConfig, Simulation, Transform, World, PHASES};
use rally_proto::{Endpoint, EndpointConfig, EndpointRandomness, Instant};
use std::time::Duration;

/// Records, in its step, where the held cup was; then moves the ball one metre.
#[derive(Default)]
struct Probe {
    cup_seen_at: Option<Vec3>,
}

impl Simulation for Probe {
    type Input = ();
    type Message = ();
    fn apply_input(&mut self, _world: &mut World, _client: u32, _input: &()) {}
    fn step(&mut self, world: &mut World, _dt: Duration) {
        self.cup_seen_at = world.get(2).map(|e| e.transform.position);
        world.get_mut(3).unwrap().transform.position.x += 1.0;
    }
}

#[test]
fn interact_precedes_simulate_which_precedes_replicate() {
    assert_eq!(
        PHASES,
        [Phase::Ingest, Phase::Interact, Phase::Simulate, Phase::Replicate, Phase::Transmit]
    );
    let mut room = Room::new(RoomConfig::default(), Probe::default(), 1).unwrap();
    let world = room.world_mut();
    let hand = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    let cup = world.spawn(Entity::at(Transform::from_position(Vec3::X))).unwrap();
    let ball = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    assert_eq!((hand, cup, ball), (1, 2, 3));
    world.grab(hand, cup).unwrap();
    // The hand moves between ticks, as an input arriving would move it.
    world.get_mut(hand).unwrap().transform.position = Vec3::new(0.0, 2.0, 0.0);
    let mut endpoint =
        Endpoint::new(EndpointConfig::default(), EndpointRandomness::danger_from_seed(1))
            .expect("the default config is valid");
    room.tick(Instant::from_millis(8), &mut endpoint);
    assert_eq!(room.simulation().cup_seen_at, Some(Vec3::new(1.0, 2.0, 0.0)));
    let ball_code = room.snapshot().get(ball).unwrap().position;
    let expected = room.config().snapshot.position.quantize(Vec3::X);
    assert_eq!(ball_code, expected, "the snapshot holds this tick's step");
    assert_eq!(room.snapshot().tick(), room.tick_number());
    assert_eq!(room.phase(), None, "no phase runs between ticks");
}
