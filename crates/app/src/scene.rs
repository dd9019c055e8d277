//! `rally scene`: scene files (rally-scene, docs/scene.md). `check` validates one and explains
//! it: a summary of what the room will hold, or the error with its place and its fix.

use rally_scene::{BodyKind, Grab, Respawn, Scene};
use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;

/// `rally scene` commands.
#[derive(Debug, clap::Subcommand)]
pub enum SceneCommand {
    /// Check a scene file: print what the room will hold, or what is wrong, where, and the fix.
    Check {
        /// The scene file (TOML; docs/scene.md describes it).
        file: PathBuf,
    },
}

/// Runs a `rally scene` command.
pub fn run(command: &SceneCommand) -> Result<(), Box<dyn Error>> {
    match command {
        SceneCommand::Check { file } => {
            let scene = Scene::load(file)?;
            print!("{}", summary(&file.display().to_string(), &scene));
            Ok(())
        }
    }
}

/// What a checked scene holds, for a person: settings, colliders by shape, bodies by kind and
/// class, and spawn points.
pub fn summary(file: &str, scene: &Scene) -> String {
    let s = scene.settings();
    let mut out = format!("{file}: a valid scene\n");
    let _ = writeln!(
        out,
        "  room: {} Hz, {:?} pipeline, gravity [{}, {}, {}] m/s2, up to {} players, \
         {} bytes per client per tick",
        s.tick_rate,
        s.pipeline,
        s.gravity.x,
        s.gravity.y,
        s.gravity.z,
        s.players_max,
        s.client_bytes_per_tick_max
    );
    let shapes = count(scene.colliders().iter().map(|c| c.shape.name().to_owned()));
    let _ = writeln!(out, "  colliders: {} ({})", scene.colliders().len(), list(&shapes));
    let kinds = count(scene.bodies().iter().map(|b| match b.kind {
        BodyKind::Dynamic => "dynamic".to_owned(),
        BodyKind::Kinematic => "kinematic".to_owned(),
    }));
    let _ = writeln!(out, "  bodies: {} ({})", scene.bodies().len(), list(&kinds));
    let classes = count(scene.bodies().iter().map(|b| b.class.to_string()));
    let _ = writeln!(out, "    by class: {}", list(&classes));
    let grabbable = scene.bodies().iter().filter(|b| b.grab != Grab::No).count();
    let takeable = scene.bodies().iter().filter(|b| b.grab == Grab::Yes { takeable: true }).count();
    let respawn =
        scene.bodies().iter().filter(|b| matches!(b.respawn, Some(Respawn::BelowY(_)))).count();
    let _ = writeln!(
        out,
        "    grabbable: {grabbable} (of which {takeable} may be taken from a hand); \
         with a respawn rule: {respawn}"
    );
    let _ = writeln!(out, "  spawn points: {}", scene.spawns().len());
    let _ = writeln!(out, "  player: a grip reaches {} m", scene.player().grab_radius_m);
    let _ = writeln!(out, "  entities at most: {}", scene.entities_max());
    out
}

fn count(names: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for name in names {
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}

fn list(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts.iter().map(|(name, n)| format!("{n} {name}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_passes_every_example_and_names_the_field_of_a_bad_scene() {
        // Goal: `rally scene check` succeeds exactly on good scenes and its error carries the
        // place and the field; method: run it on every file in scenes/, then on a scene with
        // a negative mass written to the target directory.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let file = entry.unwrap().path();
            if file.extension().is_some_and(|e| e == "toml") {
                run(&SceneCommand::Check { file }).unwrap();
                checked += 1;
            }
        }
        assert_eq!(checked, 3);
        let file =
            std::env::temp_dir().join(format!("rally-bad-scene-{}.toml", std::process::id()));
        std::fs::write(&file, "[[bodies]]\nsphere = 0.1\nmass_kg = -1\n").unwrap();
        let err = run(&SceneCommand::Check { file: file.clone() }).unwrap_err().to_string();
        let _ = std::fs::remove_file(&file);
        assert!(err.contains(".toml:3:11: bodies[0].mass_kg: -1 is out of range"), "{err}");
        assert!(err.contains("fix: give a value from 0.001 to 100000"), "{err}");
    }

    #[test]
    fn the_summary_counts_the_table_tennis_scene() {
        // Goal: `rally scene check` explains a scene truthfully; method: summarize the
        // table-tennis example and compare each count with the file.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes/table-tennis.toml");
        let text = summary("table-tennis.toml", &Scene::load(path).unwrap());
        assert!(text.contains("120 Hz, Fast pipeline"), "{text}");
        assert!(text.contains("colliders: 3 (2 box, 1 plane)"), "{text}");
        assert!(text.contains("bodies: 3 (3 dynamic)"), "{text}");
        assert!(text.contains("by class: 1 ball, 2 paddle"), "{text}");
        assert!(text.contains("grabbable: 2 (of which 0 may"), "{text}");
        assert!(text.contains("with a respawn rule: 3"), "{text}");
        assert!(text.contains("spawn points: 2"), "{text}");
    }
}
