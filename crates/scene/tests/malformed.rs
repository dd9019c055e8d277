//! Malformed scenes are refused with the field they got wrong, its place in the file, and a
//! fix; and no input at all makes the parser panic.

use proptest::prelude::*;
use rally_scene::{limits, Scene, SceneError};

/// A small scene with one of everything, to break in each test.
const GOOD: &str = r#"
[room]
tick_rate = 120
pipeline = "fast"
gravity = [0, -9.81, 0]
players_max = 4
client_bytes_per_tick_max = 1100

[player]
grab_radius_m = 0.15

[[colliders]]
name = "floor"
plane = [0, 1, 0]

[[bodies]]
name = "ball"
sphere = 0.02
mass_kg = 0.0027
position = [0, 1, 0]
respawn = { below_y = -5 }

[[bodies]]
name = "paddle"
box = [0.15, 0.02, 0.26]
position = [0, 1, 1]
grabbable = true
takeable = false

[[spawns]]
position = [0, 0, -2]
yaw_deg = 180
"#;

/// GOOD with `from` replaced by `to` (which must occur).
fn broken(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from:?} is in the scene");
    GOOD.replacen(from, to, 1)
}

#[test]
fn the_base_scene_passes() {
    // Goal: the cases below fail for their own change, not for the base; method: parse it.
    let scene = Scene::parse("good.toml", GOOD).unwrap();
    assert_eq!((scene.colliders().len(), scene.bodies().len()), (1, 2));
}

#[test]
fn each_malformed_scene_names_its_field() {
    // Goal: every class of mistake is refused and names the right field at the right line;
    // method: one change to a good scene per case, then compare the error's field and line
    // with the changed line.
    // One byte over NAME_BYTES_MAX (a name at the limit passes in the next test).
    let long = "c".repeat(limits::NAME_BYTES_MAX + 1);
    let long_class = format!("takeable = false\nclass = \"{long}\"");
    let cases: &[(&str, &str, &str)] = &[
        ("tick_rate = 120", "tick_rate = 5", "room.tick_rate"),
        ("tick_rate = 120", "tick_rate = \"fast\"", "tick_rate"),
        ("pipeline = \"fast\"", "pipeline = \"quick\"", "pipeline"),
        ("gravity = [0, -9.81, 0]", "gravity = [0, -981, 0]", "room.gravity"),
        ("gravity = [0, -9.81, 0]", "gravity = [0, -9.81]", "gravity"),
        ("players_max = 4", "players_max = 0", "room.players_max"),
        ("players_max = 4", "players_max = -1", "players_max"),
        (
            "client_bytes_per_tick_max = 1100",
            "client_bytes_per_tick_max = 10",
            "room.client_bytes_per_tick_max",
        ),
        ("grab_radius_m = 0.15", "grab_radius_m = 2", "player.grab_radius_m"),
        ("grab_radius_m = 0.15", "grab_radius_m = -0.1", "player.grab_radius_m"),
        ("grab_radius_m = 0.15", "grab_radius = 0.15", "grab_radius"),
        ("plane = [0, 1, 0]", "plane = [0, 0, 0]", "colliders[0].plane"),
        ("name = \"floor\"", "name = \"the floor\"", "colliders[0].name"),
        ("name = \"paddle\"", "name = \"ball\"", "bodies[1].name"),
        ("sphere = 0.02", "sphere = 0.0", "bodies[0].sphere"),
        ("sphere = 0.02", "sphere = nan", "bodies[0].sphere"),
        ("sphere = 0.02", "sphere = 0.02\nbox = [1, 1, 1]", "bodies[0].shape"),
        ("sphere = 0.02", "hull = [[0, 0, 0], [1, 0, 0], [0, 1, 0]]", "bodies[0].hull"),
        ("sphere = 0.02", "capsule = { radius = 0.1, height = 0.1 }", "bodies[0].capsule.height"),
        ("box = [0.15, 0.02, 0.26]", "plane = [0, 1, 0]", "bodies[1].plane"),
        ("box = [0.15, 0.02, 0.26]", "box = [0.15, 0.02, 2000]", "bodies[1].box"),
        ("mass_kg = 0.0027", "mass_kg = 1e9", "bodies[0].mass_kg"),
        ("mass_kg = 0.0027", "masss_kg = 0.0027", "masss_kg"),
        ("position = [0, 1, 0]", "position = [0, inf, 0]", "bodies[0].position"),
        ("below_y = -5", "below_y = 2", "bodies[0].respawn.below_y"),
        (
            "grabbable = true\ntakeable = false",
            "grabbable = false\ntakeable = true",
            "bodies[1].takeable",
        ),
        ("takeable = false", "takeable = false\nrestitution = 1.5", "bodies[1].restitution"),
        (
            "takeable = false",
            "takeable = false\nrotation_deg = [0, 720, 0]",
            "bodies[1].rotation_deg",
        ),
        ("takeable = false", "takeable = false\nclass = \"\"", "bodies[1].class"),
        ("takeable = false", &long_class, "bodies[1].class"),
        ("takeable = false", "takeable = false\nkind = \"static\"", "kind"),
        ("yaw_deg = 180", "yaw_deg = 1000", "spawns[0].yaw_deg"),
    ];
    for (from, to, field) in cases {
        let text = broken(from, to);
        let err = Scene::parse("bad.toml", &text).expect_err(to);
        assert_eq!(err.field(), Some(*field), "{to:?} gave: {err}");
        // The error points at the last line the change wrote (the one that broke the scene).
        let line =
            GOOD[..GOOD.find(from).unwrap()].matches('\n').count() + to.matches('\n').count() + 1;
        let at = err.location().expect("a place in the file");
        assert_eq!((at.file.as_str(), at.line), ("bad.toml", line), "{to:?} gave: {err}");
        assert!(err.to_string().contains("fix: "), "{err}");
    }
}

#[test]
fn a_name_at_its_limit_passes() {
    // Goal: the name limit is exact, not off by one; method: a name of NAME_BYTES_MAX bytes.
    let name = "n".repeat(limits::NAME_BYTES_MAX);
    let text = broken("name = \"ball\"", &format!("name = \"{name}\""));
    let scene = Scene::parse("name.toml", &text).unwrap();
    assert_eq!(scene.bodies()[0].name.as_ref().unwrap().as_str(), name);
}

#[test]
fn a_missing_required_field_and_an_unknown_table_are_refused() {
    // Goal: shape errors without a line of their own are refused too; method: a spawn point
    // without its position, and a table the format does not have.
    let err = Scene::parse("bad.toml", &broken("position = [0, 0, -2]\n", "")).unwrap_err();
    assert!(matches!(err, SceneError::Syntax { .. }), "{err}");
    assert!(err.to_string().contains("position"), "{err}");
    let err = Scene::parse("bad.toml", &format!("{GOOD}\n[lights]\nsun = 1\n")).unwrap_err();
    assert_eq!(err.field(), Some("lights"), "{err}");
}

#[test]
fn each_count_limit_holds() {
    // Goal: the limits on colliders, bodies and spawn points are enforced; method: one entry
    // over each limit (and exactly at the limit, which passes).
    for (table, entry, max) in [
        ("colliders", "sphere = 1", limits::COLLIDERS_MAX),
        ("bodies", "sphere = 1", limits::BODIES_MAX),
        ("spawns", "position = [0, 0, 0]", limits::SPAWNS_MAX),
    ] {
        let scene = |n: usize| format!("[[{table}]]\n{entry}\n").repeat(n);
        assert!(Scene::parse("n.toml", &scene(max)).is_ok(), "{table} at its limit");
        let err = Scene::parse("n.toml", &scene(max + 1)).unwrap_err();
        assert_eq!(err.field(), Some(table), "{err}");
    }
}

#[test]
fn a_long_inline_list_stops_at_its_limit() {
    // Goal: the cheapest way to list entries (`{}` is three bytes) is bounded too; method: an
    // inline list of BODIES_MAX empty tables reaches the shape check, one more is refused as
    // too long, naming the list.
    let inline = |n: usize| format!("bodies = [{}]\n", "{},".repeat(n));
    let err = Scene::parse("n.toml", &inline(limits::BODIES_MAX)).unwrap_err();
    assert_eq!(err.field(), Some("bodies[0].shape"), "{err}");
    let err = Scene::parse("n.toml", &inline(limits::BODIES_MAX + 1)).unwrap_err();
    assert_eq!(err.field(), Some("bodies"), "{err}");
    assert!(err.to_string().contains("fix: keep at most 1024"), "{err}");
}

#[test]
fn a_scene_over_the_size_limit_is_refused_unread() {
    // Goal: a huge file is refused before it is parsed; method: a comment one byte over.
    let text = format!("#{}", "x".repeat(limits::FILE_BYTES_MAX));
    let err = Scene::parse("big.toml", &text).unwrap_err();
    assert!(matches!(err, SceneError::TooLarge { .. }), "{err}");
}

#[test]
fn every_prefix_of_a_scene_is_refused_or_parsed_without_panic() {
    // Goal: a truncated file never panics and never reports a place outside the file; method:
    // cut the table-tennis example at every character boundary and parse each piece.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes/table-tennis.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let lines = text.lines().count() + 1;
    let mut refused = 0;
    for cut in (0..=text.len()).filter(|n| text.is_char_boundary(*n)) {
        if let Err(err) = Scene::parse("cut.toml", &text[..cut]) {
            refused += 1;
            if let Some(at) = err.location() {
                assert!(at.line >= 1 && at.line <= lines && at.column >= 1, "{err}");
            }
        }
    }
    assert!(refused > 0, "some cuts land inside a value");
}

proptest! {
    #[test]
    fn no_mangled_scene_panics(
        at in 0usize..GOOD.len(),
        bytes in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        // Goal: arbitrary damage gives a result, never a panic; method: overwrite a few
        // bytes of the base scene at a random place (lossily back to text) and parse.
        let mut raw = GOOD.as_bytes().to_vec();
        let end = (at + bytes.len()).min(raw.len());
        raw.splice(at..end, bytes);
        let text = String::from_utf8_lossy(&raw);
        let _ = Scene::parse("mangled.toml", &text);
    }
}

#[test]
fn a_value_nested_too_deep_is_refused_without_overflowing_the_stack() {
    // Goal: nesting cannot exhaust the stack; method: a hull of 100,000 nested arrays (200 KB,
    // within the file limit) and a shape inside 100,000 nested inline tables.
    let n = 100_000;
    let arrays = format!("[[bodies]]\nhull = {}{}\n", "[".repeat(n), "]".repeat(n));
    let err = Scene::parse("deep.toml", &arrays).unwrap_err();
    assert!(matches!(err, SceneError::Syntax { .. }), "{err}");
    let tables = format!("[[bodies]]\nsphere = {}1{}\n", "{a=".repeat(n), "}".repeat(n));
    let err = Scene::parse("deep.toml", &tables).unwrap_err();
    assert_eq!(err.field(), Some("sphere"), "{err}");
}
