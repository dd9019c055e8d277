//! Goal: bodies and the world stay in step: a dropped ball comes to rest on the floor, a held
//! body follows its grabber and flies on when released, a paddle moving through a ball knocks
//! it away, and a despawned entity loses its body without a panic.

use glam::{Quat, Vec3};
use rally_engine::{Entity, Transform, World};
use rally_physics::{Body, Physics, Shape};
use std::time::Duration;

const DT: Duration = Duration::from_nanos(7_812_500);

fn world_with_floor() -> (World, Physics) {
    let mut world = World::new(64);
    let mut physics = Physics::new(Vec3::new(0.0, -9.81, 0.0));
    let floor =
        world.spawn(Entity::at(Transform::from_position(Vec3::new(0.0, -0.1, 0.0)))).unwrap();
    physics.add(&world, floor, Body::fixed_cuboid(Vec3::new(5.0, 0.1, 5.0))).unwrap();
    (world, physics)
}

fn spawn_at(world: &mut World, position: Vec3) -> u32 {
    world.spawn(Entity::at(Transform::from_position(position))).unwrap()
}

#[test]
fn a_dropped_ball_bounces_then_rests_on_the_floor() {
    let (mut world, mut physics) = world_with_floor();
    let ball = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    physics.add(&world, ball, Body::dynamic_ball(0.05)).unwrap();
    let mut lowest = f32::MAX;
    let mut rose = false;
    let mut last_y = 1.0;
    for _ in 0..1280 {
        physics.step(&mut world, DT);
        let y = world.get(ball).unwrap().transform.position.y;
        lowest = lowest.min(y);
        rose |= y > last_y + 1e-4;
        last_y = y;
    }
    assert!(rose, "it bounced");
    assert!(lowest > 0.03, "it never went through the floor: {lowest}");
    let rest = world.get(ball).unwrap();
    assert!((rest.transform.position.y - 0.05).abs() < 0.01, "{:?}", rest.transform.position);
    assert!(rest.linear_velocity.length() < 0.05);
}

#[test]
fn a_ball_asleep_on_the_floor_is_written_at_rest_and_then_left_as_it_is() {
    // Once rapier puts the ball to sleep, its last write leaves it still in the world (no
    // velocity), and the steps after leave its pose and velocities as they are, bit for bit.
    let (mut world, mut physics) = world_with_floor();
    let ball = spawn_at(&mut world, Vec3::new(0.0, 0.3, 0.0));
    physics.add(&world, ball, Body::dynamic_ball(0.05)).unwrap();
    for _ in 0..2560 {
        physics.step(&mut world, DT);
    }
    let rest = *world.get(ball).unwrap();
    assert_eq!((rest.linear_velocity, rest.angular_velocity), (Vec3::ZERO, Vec3::ZERO));
    for _ in 0..64 {
        physics.step(&mut world, DT);
        assert_eq!(*world.get(ball).unwrap(), rest);
    }
}

#[test]
fn a_held_body_follows_its_grabber_and_flies_on_when_released() {
    let (mut world, mut physics) = world_with_floor();
    let hand = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    physics.add(&world, hand, Body::kinematic_cuboid(Vec3::splat(0.05))).unwrap();
    let ball = spawn_at(&mut world, Vec3::new(0.0, 1.0, -0.2));
    physics.add(&world, ball, Body::dynamic_ball(0.02)).unwrap();
    world.grab(hand, ball).unwrap();
    for n in 0..64 {
        // The hand swings along x at 2 m/s; the world propagates the grab, then physics steps.
        let h = world.get_mut(hand).unwrap();
        h.transform.position.x = n as f32 * 2.0 * DT.as_secs_f32();
        h.linear_velocity = Vec3::new(2.0, 0.0, 0.0);
        world.propagate_grabs();
        physics.step(&mut world, DT);
        let (h, b) = (world.get(hand).unwrap(), world.get(ball).unwrap());
        let offset = b.transform.position - h.transform.position;
        assert!((offset - Vec3::new(0.0, 0.0, -0.2)).length() < 1e-4, "held: {offset}");
    }
    world.release(ball);
    let released_at = world.get(ball).unwrap().transform.position.x;
    for _ in 0..12 {
        physics.step(&mut world, DT);
    }
    let b = world.get(ball).unwrap();
    let flown = b.transform.position.x - released_at;
    assert!(flown > 0.15, "it kept the hand's 2 m/s for 12 ticks: {flown} m");
    assert!(b.transform.position.y < 1.0, "and gravity took over");
}

#[test]
fn a_body_grabbed_and_released_between_two_steps_flies_from_where_it_was_let_go() {
    // Goal: a grab and its release before physics ever saw the body held (two inputs in one
    // tick) still throw it: the body must not snap back to where physics last had it.
    let (mut world, mut physics) = world_with_floor();
    let hand = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    let ball = spawn_at(&mut world, Vec3::new(0.0, 1.0, -0.2));
    physics.add(&world, ball, Body::dynamic_ball(0.02)).unwrap();
    physics.step(&mut world, DT);
    world.grab(hand, ball).unwrap();
    let h = world.get_mut(hand).unwrap();
    h.transform.position = Vec3::new(1.0, 2.0, 0.0);
    h.linear_velocity = Vec3::new(3.0, 0.0, 0.0);
    world.propagate_grabs();
    world.release(ball);
    physics.step(&mut world, DT);
    let b = world.get(ball).unwrap();
    let from = Vec3::new(1.0, 2.0, -0.2);
    assert!((b.transform.position - from).length() < 0.05, "{:?}", b.transform.position);
    assert!((b.linear_velocity.x - 3.0).abs() < 1e-3, "{:?}", b.linear_velocity);
}

#[test]
fn a_moving_paddle_knocks_a_resting_ball_away() {
    let mut world = World::new(8);
    let mut physics = Physics::new(Vec3::ZERO);
    let paddle = spawn_at(&mut world, Vec3::new(-0.3, 1.0, 0.0));
    physics.add(&world, paddle, Body::kinematic_cuboid(Vec3::new(0.01, 0.1, 0.1))).unwrap();
    let ball = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    physics.add(&world, ball, Body::dynamic_ball(0.02)).unwrap();
    for n in 0..64 {
        let p = world.get_mut(paddle).unwrap();
        p.transform.position.x = -0.3 + n as f32 * 3.0 * DT.as_secs_f32();
        p.transform.rotation = Quat::IDENTITY;
        physics.step(&mut world, DT);
    }
    let b = world.get(ball).unwrap();
    assert!(b.linear_velocity.x > 1.0, "the ball was hit: {:?}", b.linear_velocity);
    assert!(b.transform.position.x > world.get(paddle).unwrap().transform.position.x);
}

#[test]
fn a_despawned_entity_loses_its_body() {
    let (mut world, mut physics) = world_with_floor();
    let ball = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    physics.add(&world, ball, Body::dynamic_ball(0.05)).unwrap();
    assert!(physics.add(&world, ball, Body::dynamic_ball(0.05)).is_err());
    assert!(physics.add(&world, 999, Body::dynamic_ball(0.05)).is_err());
    assert_eq!(physics.len(), 2);
    world.despawn(ball).unwrap();
    physics.step(&mut world, DT);
    assert_eq!(physics.len(), 1);
}

#[test]
fn a_capsule_rests_on_a_half_space_floor_at_its_radius() {
    // Goal: the capsule and half-space shapes collide as their sizes say; method: an upright
    // capsule (half height 0.2, radius 0.1) dropped on an endless floor through the origin
    // comes to rest with its centre 0.3 m up.
    let mut world = World::new(8);
    let mut physics = Physics::new(Vec3::new(0.0, -9.81, 0.0));
    let floor = spawn_at(&mut world, Vec3::ZERO);
    let plane = Body { shape: Shape::HalfSpace(Vec3::Y), ..Body::fixed_cuboid(Vec3::ONE) };
    physics.add(&world, floor, plane).unwrap();
    let capsule = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    let shape = Shape::Capsule { half_height: 0.2, radius: 0.1 };
    physics.add(&world, capsule, Body { shape, ..Body::dynamic_ball(0.1) }).unwrap();
    physics.set_damping(capsule, 0.5, 5.0);
    for _ in 0..1280 {
        physics.step(&mut world, DT);
    }
    let y = world.get(capsule).unwrap().transform.position.y;
    assert!((y - 0.3).abs() < 0.02, "centre at {y}");
}

#[test]
fn a_teleported_body_restarts_from_the_world_pose_at_rest() {
    // Goal: `teleport` moves the rapier body, not only the world's copy; method: a falling
    // ball put back at 1 m with no velocity is at about 1 m one step later (without teleport
    // the body's own pose would overwrite the world's), and an unknown entity is refused.
    let (mut world, mut physics) = world_with_floor();
    let ball = spawn_at(&mut world, Vec3::new(0.0, 1.0, 0.0));
    physics.add(&world, ball, Body::dynamic_ball(0.05)).unwrap();
    for _ in 0..64 {
        physics.step(&mut world, DT);
    }
    assert!(world.get(ball).unwrap().transform.position.y < 0.9, "it fell");
    *world.get_mut(ball).unwrap() = Entity::at(Transform::from_position(Vec3::new(0.0, 1.0, 0.0)));
    assert!(physics.teleport(&world, ball));
    physics.step(&mut world, DT);
    let y = world.get(ball).unwrap().transform.position.y;
    assert!((y - 1.0).abs() < 0.01, "back at 1 m: {y}");
    assert!(!physics.teleport(&world, 999));
    assert!(!physics.set_damping(999, 1.0, 1.0));
}
