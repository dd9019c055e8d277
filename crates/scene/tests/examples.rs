//! The example scenes in the repository's scenes/ folder all pass the checks, and say what
//! their comments say.

use rally_scene::{BodyKind, ColliderShape, Grab, Scene};
use std::path::PathBuf;

fn scenes_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

#[test]
fn every_example_scene_passes() {
    // Goal: no example ships broken; method: load every .toml file in scenes/ (and count them,
    // so that an empty or moved folder fails too).
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(scenes_dir()).expect("scenes/ is at the repository's root") {
        let path = entry.expect("a readable directory entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(err) = Scene::load(&path) {
                panic!("{err}");
            }
            checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    checked.sort();
    assert_eq!(checked, ["empty.toml", "sandbox.toml", "table-tennis.toml"]);
}

#[test]
fn table_tennis_has_its_table_net_ball_and_paddles() {
    // Goal: the table-tennis scene is the room the issue asks for; method: read its parts.
    let scene = Scene::load(scenes_dir().join("table-tennis.toml")).unwrap();
    let names: Vec<_> =
        scene.colliders().iter().filter_map(|c| c.name.as_ref()).map(|n| n.as_str()).collect();
    assert_eq!(names, ["floor", "table", "net"]);
    assert!(matches!(scene.colliders()[0].shape, ColliderShape::Plane { .. }));
    let bodies: Vec<_> = scene.bodies().iter().map(|b| b.name.as_ref().unwrap().as_str()).collect();
    assert_eq!(bodies, ["ball", "paddle-1", "paddle-2"]);
    assert_eq!(scene.bodies()[0].grab, Grab::No);
    assert_eq!(scene.bodies()[1].grab, Grab::Yes { takeable: false });
    assert!(scene.bodies().iter().all(|b| b.kind == BodyKind::Dynamic && b.respawn.is_some()));
    assert_eq!(scene.spawns().len(), 2);
    assert_eq!(scene.settings().tick_rate, 120);
}

#[test]
fn the_sandbox_has_blocks_balls_a_shelf_and_a_floor() {
    // Goal: the sandbox scene is the room the issue asks for; method: count its parts by
    // class and check that every movable body can be grabbed and taken.
    let scene = Scene::load(scenes_dir().join("sandbox.toml")).unwrap();
    let class = |c: &str| scene.bodies().iter().filter(|b| b.class.as_str() == c).count();
    assert_eq!((class("block"), class("ball"), class("cup")), (8, 4, 3));
    let names: Vec<_> =
        scene.colliders().iter().filter_map(|c| c.name.as_ref()).map(|n| n.as_str()).collect();
    assert_eq!(names, ["floor", "wall", "shelf"]);
    let dynamic = scene.bodies().iter().filter(|b| b.kind == BodyKind::Dynamic);
    assert!(dynamic.clone().all(|b| b.grab == Grab::Yes { takeable: true }));
    assert_eq!(scene.spawns().len(), 10);
    assert_eq!(scene.settings().players_max, 10);
    assert!(scene.room_config().snapshot.entities_max >= scene.entities_max());
}
