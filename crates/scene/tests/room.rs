//! A scene's room: its colliders and bodies spawned into a world with rapier bodies, stepped
//! with physics and the scene's respawn rules, deterministically.

use glam::Vec3;
use rally_engine::{Entity, Simulation, Transform, World};
use rally_scene::{scene_room, Scene, SceneRoom, SceneRoomError};
use std::time::Duration;

const DT: Duration = Duration::from_nanos(8_333_333);

fn example(name: &str) -> Scene {
    let path = format!("{}/../../scenes/{name}", env!("CARGO_MANIFEST_DIR"));
    Scene::load(path).unwrap()
}

fn build(scene: &Scene) -> (World, SceneRoom) {
    let mut world = World::new(scene.entities_max());
    let room = SceneRoom::new(scene, &mut world).unwrap();
    (world, room)
}

fn y(world: &World, id: u32) -> f32 {
    world.get(id).unwrap().transform.position.y
}

#[test]
fn the_table_tennis_ball_settles_on_the_table() {
    // Goal: the scene's shapes, poses and materials reach physics; method: step the
    // table-tennis room for 10 simulated seconds; the ball, dropped over the table, ends at
    // rest on its top (0.76 m) plus its radius, and the paddles lie where the file put them.
    let scene = example("table-tennis.toml");
    let (mut world, mut room) = build(&scene);
    let ball = room.entity("ball").unwrap();
    let paddle = room.entity("paddle-1").unwrap();
    for _ in 0..1200 {
        room.step(&mut world, DT);
        assert!(y(&world, ball) > 0.76, "the ball never goes through the table");
    }
    let ball_y = y(&world, ball);
    assert!((0.775..0.79).contains(&ball_y), "the ball rests on the table: {ball_y}");
    assert!(world.get(ball).unwrap().linear_velocity.length() < 0.05, "and is at rest");
    assert!((y(&world, paddle) - 0.77).abs() < 0.01, "the paddle lies on the table");
    assert_eq!(room.respawns(), 0);
}

#[test]
fn a_ball_knocked_off_the_table_respawns_at_its_start_pose() {
    // Goal: the respawn rule returns a body that falls below its height to its start pose at
    // rest; method: throw the table-tennis ball sideways off the table, step until the rule
    // fires (bounded), and compare its pose with the file's.
    let scene = example("table-tennis.toml");
    let (mut world, mut room) = build(&scene);
    let ball = room.entity("ball").unwrap();
    world.get_mut(ball).unwrap().linear_velocity = Vec3::new(4.0, 0.0, 0.0);
    assert!(room.physics_mut().teleport(&world, ball));
    let mut steps = 0;
    while room.respawns() == 0 {
        room.step(&mut world, DT);
        steps += 1;
        assert!(steps < 600, "the ball reached the floor within five seconds");
    }
    let start = scene.bodies()[0].pose;
    let entity = world.get(ball).unwrap();
    assert_eq!(entity.transform, start);
    assert_eq!(entity.linear_velocity, Vec3::ZERO);
    for _ in 0..30 {
        room.step(&mut world, DT);
    }
    let fallen = start.position.y - y(&world, ball);
    assert!((0.2..0.4).contains(&fallen), "it falls anew from the start, by {fallen} m");
    assert_eq!(room.respawns(), 1, "once");
}

#[test]
fn damping_slows_only_the_body_that_has_it() {
    // Goal: a body's damping reaches physics; method: two balls in a room without gravity,
    // both pushed at 1 m/s, one with a linear damping of 2 per second: after one second it
    // has about e^-2 of its speed, the other all of it.
    let text = "[room]\ngravity = [0, 0, 0]\n\
                [[bodies]]\nname = \"free\"\nsphere = 0.1\n\
                [[bodies]]\nname = \"damped\"\nsphere = 0.1\nposition = [0, 0, 5]\n\
                linear_damping = 2\n";
    let scene = Scene::parse("damping.toml", text).unwrap();
    let (mut world, mut room) = build(&scene);
    for name in ["free", "damped"] {
        let id = room.entity(name).unwrap();
        world.get_mut(id).unwrap().linear_velocity = Vec3::X;
        room.physics_mut().teleport(&world, id);
    }
    for _ in 0..120 {
        room.step(&mut world, DT);
    }
    let speed = |name| world.get(room.entity(name).unwrap()).unwrap().linear_velocity.length();
    assert!((speed("free") - 1.0).abs() < 1e-3, "{}", speed("free"));
    assert!((0.1..0.17).contains(&speed("damped")), "{}", speed("damped"));
}

#[test]
fn a_held_body_below_its_respawn_height_stays_in_the_hand() {
    // Goal: a hand decides where what it holds is, even below the respawn height; method: a
    // hand entity holds the ball under the floor for a second; the ball stays and no
    // respawn is counted; released, it respawns.
    let scene = example("table-tennis.toml");
    let mut world = World::new(scene.entities_max() + 1);
    let mut room = SceneRoom::new(&scene, &mut world).unwrap();
    let ball = room.entity("ball").unwrap();
    let low = Transform::from_position(Vec3::new(3.0, 0.1, 0.0));
    let hand = world.spawn(Entity::at(low)).unwrap();
    world.grab_at(hand, ball, Transform::IDENTITY).unwrap();
    world.get_mut(ball).unwrap().transform = low;
    for _ in 0..120 {
        room.step(&mut world, DT);
    }
    assert_eq!(room.respawns(), 0);
    assert!(world.release(ball));
    room.step(&mut world, DT);
    assert_eq!(room.respawns(), 1);
}

#[test]
fn the_sandbox_settles_without_losing_a_body() {
    // Goal: every body of the sandbox starts in a resting place; method: step it for five
    // simulated seconds; no body falls through the floor or respawns, and the kinematic
    // platform has not moved.
    let scene = example("sandbox.toml");
    let (mut world, mut room) = build(&scene);
    let platform = room.entity("platform").unwrap();
    let start = world.get(platform).unwrap().transform;
    for _ in 0..600 {
        room.step(&mut world, DT);
    }
    assert_eq!(room.respawns(), 0);
    for id in room.bodies() {
        assert!(y(&world, id) > 0.0, "body {id} is above the floor");
    }
    assert_eq!(world.get(platform).unwrap().transform, start);
    let cup = room.entity("cup-1").unwrap();
    assert!(y(&world, cup) > 1.2, "the cup stays on the shelf");
}

#[test]
fn two_rooms_of_one_scene_step_identically() {
    // Goal: a scene room is deterministic, so that simulations replay; method: two rooms of
    // the sandbox, stepped alike, hold bit-identical entities after three seconds.
    let scene = example("sandbox.toml");
    let (mut world_a, mut a) = build(&scene);
    let (mut world_b, mut b) = build(&scene);
    for _ in 0..360 {
        a.step(&mut world_a, DT);
        b.step(&mut world_b, DT);
    }
    let entities = |w: &World| w.iter().map(|(id, e)| (id, *e)).collect::<Vec<_>>();
    assert_eq!(entities(&world_a), entities(&world_b));
}

#[test]
fn the_room_has_the_scene_settings_and_entities_in_file_order() {
    // Goal: scene_room wires the scene's settings into the engine and spawns colliders then
    // bodies in file order; method: build the table-tennis room and read it back.
    let scene = example("table-tennis.toml");
    let room = scene_room(&scene, 7).unwrap();
    let game = room.simulation();
    assert_eq!(game.colliders(), &[1, 2, 3]);
    assert_eq!(game.bodies().collect::<Vec<_>>(), [4, 5, 6]);
    assert_eq!(game.entity("net"), Some(3));
    let config = scene.room_config();
    assert_eq!(
        (config.tick_rate, config.clients_max, config.snapshot_budget_bytes),
        (120, 4, 1100)
    );
    assert_eq!(room.world().iter().count(), 6);
}

#[test]
fn a_world_too_small_for_the_scene_is_refused() {
    // Goal: building into a world without room fails with a typed error, not a panic;
    // method: a world one entity short.
    let scene = example("table-tennis.toml");
    let mut world = World::new(5);
    let err = SceneRoom::new(&scene, &mut world).unwrap_err();
    assert!(matches!(err, SceneRoomError::World(_)), "{err}");
}

#[test]
fn the_scene_grab_rule_refuses_what_the_scene_refuses() {
    // Goal: grabbable and takeable reach the room; method: in the table-tennis room (paddles
    // grabbable, not takeable; the ball not grabbable) hands try each grab; then the same
    // take in the sandbox, where blocks are takeable.
    use rally_engine::GrabError;
    let scene = example("table-tennis.toml");
    let mut room = scene_room(&scene, 1).unwrap();
    let game = room.simulation();
    let (ball, paddle, table) = (
        game.entity("ball").unwrap(),
        game.entity("paddle-1").unwrap(),
        game.entity("table").unwrap(),
    );
    let world = room.world_mut();
    let hand_a = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    let hand_b = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    assert!(matches!(world.grab(hand_a, ball), Err(GrabError::NotAllowed { .. })));
    assert!(matches!(world.grab(hand_a, table), Err(GrabError::NotAllowed { .. })));
    assert!(matches!(world.grab(hand_a, hand_b), Err(GrabError::NotAllowed { .. })));
    world.grab(hand_a, paddle).unwrap();
    world.grab(hand_a, paddle).expect("its holder may grab it again");
    assert!(matches!(world.grab(hand_b, paddle), Err(GrabError::NotAllowed { .. })));
    assert_eq!(world.grabber_of(paddle), Some(hand_a), "the paddle stays in the first hand");
    world.release(paddle);
    world.grab(hand_b, paddle).expect("released, anyone may pick it up");

    let scene = example("sandbox.toml");
    let mut room = scene_room(&scene, 1).unwrap();
    let block = room.simulation().entity("block-0").unwrap();
    let world = room.world_mut();
    let hand_a = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    let hand_b = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
    world.grab(hand_a, block).unwrap();
    world.grab(hand_b, block).expect("a takeable block changes hands");
    assert_eq!(world.grabber_of(block), Some(hand_b));
}
