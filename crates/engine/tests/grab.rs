//! Goal: grab chains of any depth follow their root within one propagation, whatever order
//! they were built in; cycles and grabs the rule forbids are refused with a typed error and
//! change nothing; despawning releases what the entity held.

use glam::{Quat, Vec3};
use rally_engine::{Entity, GrabError, Transform, World};

fn at(x: f32) -> Entity {
    Entity::at(Transform::from_position(Vec3::new(x, 0.0, 0.0)))
}

#[test]
fn a_chain_built_leaf_first_follows_its_root_in_one_propagation() {
    let mut world = World::new(64);
    let ids: Vec<u32> = (0..5).map(|i| world.spawn(at(i as f32)).unwrap()).collect();
    // Built from the far end, so that insertion order is the reverse of the needed order.
    for i in (0..4).rev() {
        world.grab(ids[i], ids[i + 1]).unwrap();
    }
    let root = world.get_mut(ids[0]).unwrap();
    root.transform.position = Vec3::new(10.0, 2.0, 0.0);
    root.transform.rotation = Quat::from_rotation_z(std::f32::consts::FRAC_PI_2);
    root.linear_velocity = Vec3::new(1.0, 0.0, 0.0);
    world.propagate_grabs();
    for (depth, id) in ids.iter().enumerate().skip(1) {
        let e = world.get(*id).unwrap();
        // Each link was 1 m along x from the previous; rotated 90 degrees about z, that is +y.
        let expected = Vec3::new(10.0, 2.0 + depth as f32, 0.0);
        assert!((e.transform.position - expected).length() < 1e-5, "depth {depth}");
        assert_eq!(e.linear_velocity, Vec3::new(1.0, 0.0, 0.0));
    }
}

#[test]
fn a_grab_that_closes_a_cycle_is_refused_and_changes_nothing() {
    let mut world = World::new(8);
    let a = world.spawn(at(0.0)).unwrap();
    let b = world.spawn(at(1.0)).unwrap();
    let c = world.spawn(at(2.0)).unwrap();
    world.grab(a, b).unwrap();
    world.grab(b, c).unwrap();
    assert_eq!(world.grab(c, a), Err(GrabError::Cycle { grabber: c, grabbable: a }));
    assert_eq!(world.grab(a, a), Err(GrabError::Cycle { grabber: a, grabbable: a }));
    assert_eq!(world.grabber_of(a), None);
    assert_eq!(world.grab(a, 99), Err(GrabError::UnknownEntity(99)));
    // Changing hands is not a cycle.
    world.grab(a, c).unwrap();
    assert_eq!(world.grabber_of(c), Some(a));
}

#[test]
fn the_grab_rule_decides() {
    let mut world = World::new(8);
    let hand = world.spawn(at(0.0)).unwrap();
    let wall = world.spawn(at(1.0)).unwrap();
    world
        .set_grab_rule(Box::new(move |_: &World, _grabber: u32, grabbable: u32| grabbable != wall));
    assert_eq!(
        world.grab(hand, wall),
        Err(GrabError::NotAllowed { grabber: hand, grabbable: wall })
    );
    assert_eq!(world.grabber_of(wall), None);
}

#[test]
fn despawning_a_grabber_releases_what_it_held_where_it_is() {
    let mut world = World::new(8);
    let hand = world.spawn(at(0.0)).unwrap();
    let cup = world.spawn(at(0.5)).unwrap();
    world.grab(hand, cup).unwrap();
    world.get_mut(hand).unwrap().transform.position.y = 3.0;
    world.propagate_grabs();
    world.despawn(hand).unwrap();
    world.propagate_grabs();
    assert_eq!(world.grabber_of(cup), None);
    assert_eq!(world.get(cup).unwrap().transform.position, Vec3::new(0.5, 3.0, 0.0));
    assert!(world.despawn(hand).is_err());
}

#[test]
fn the_world_refuses_entities_past_its_limit() {
    let mut world = World::new(2);
    world.spawn(at(0.0)).unwrap();
    world.spawn(at(0.0)).unwrap();
    assert!(world.spawn(at(0.0)).is_err());
    assert_eq!(world.len(), 2);
}
