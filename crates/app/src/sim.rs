//! `rally sim`: batches of seeded deterministic simulations (see `rally_sim::scenario`).

use crate::sim_scene::{self, SceneOutcome};
use indicatif::{ProgressBar, ProgressStyle};
use rally_sim::room_scenario::{self, RoomOutcome};
use rally_sim::scenario::{self, Outcome};
use std::error::Error;

/// One seed in this many also runs the scene scenario (a whole sandbox with physics is slower
/// than the other scenarios).
const SCENE_EVERY: u64 = 4;

/// Options of `rally sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// The first seed of the batch.
    #[arg(long, default_value_t = 0)]
    pub start_seed: u64,
    /// Replay one seed (twice, to show the trace is the same) and describe its scenario.
    #[arg(long, conflicts_with_all = ["seeds", "start_seed"])]
    pub seed: Option<u64>,
}

/// Runs a batch or replays one seed; an error names the failing seed.
pub fn run(args: &SimArgs) -> Result<(), Box<dyn Error>> {
    if let Some(seed) = args.seed {
        return replay(seed);
    }
    let progress = ProgressBar::new(args.seeds);
    progress.set_style(
        ProgressStyle::with_template("simulating [{bar:40}] {pos}/{len} seeds, {eta} left")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    let (mut delivered, mut refused) = (0u64, 0u64);
    let (mut inputs, mut rpcs, mut snapshots) = (0u64, 0u64, 0u64);
    let (mut scenes, mut grabs) = (0u64, 0u64);
    for seed in args.start_seed..args.start_seed + args.seeds {
        let outcome = scenario::run(seed);
        let room = room_scenario::run(seed);
        let scene = (seed % SCENE_EVERY == 0).then(|| sim_scene::run(seed));
        progress.inc(1);
        let scene_failure = scene.as_ref().and_then(|s| s.failure.as_ref());
        let failure = outcome.failure.as_ref().or(room.failure.as_ref()).or(scene_failure);
        if let Some(failure) = failure {
            progress.finish_and_clear();
            describe(&outcome);
            describe_room(&room);
            if let Some(scene) = &scene {
                describe_scene(scene);
            }
            return Err(format!(
                "seed {seed} failed: {failure}; replay with `rally sim --seed {seed}`"
            )
            .into());
        }
        if let Some(scene) = &scene {
            (scenes, grabs) = (scenes + 1, grabs + scene.grabs);
        }
        delivered += outcome.delivered;
        refused += outcome.refused;
        (inputs, rpcs, snapshots) =
            (inputs + room.inputs, rpcs + room.rpcs, snapshots + room.snapshots);
    }
    progress.finish_and_clear();
    let (first, last) = (args.start_seed, args.start_seed + args.seeds.max(1) - 1);
    let seeds = args.seeds;
    println!("{seeds} seeds passed ({first}..={last}): {delivered} messages checked");
    println!("{refused} sends were refused by full send queues (load shed, as designed)");
    println!(
        "room scenarios: {inputs} inputs, {rpcs} reliable RPCs, {snapshots} snapshots checked"
    );
    println!(
        "scene scenarios (one seed in {SCENE_EVERY}): {scenes} sandbox rooms, {grabs} grabs, \
         every client converged"
    );
    Ok(())
}

fn replay(seed: u64) -> Result<(), Box<dyn Error>> {
    let first = scenario::run(seed);
    let second = scenario::run(seed);
    describe(&first);
    println!("trace hash {:016x}, replayed {:016x}", first.trace_hash, second.trace_hash);
    if first.trace_hash != second.trace_hash {
        return Err(
            format!("seed {seed} is not deterministic: two runs gave different traces").into()
        );
    }
    let room = room_scenario::run(seed);
    let again = room_scenario::run(seed);
    describe_room(&room);
    let same =
        (room.inputs, room.rpcs, room.snapshots) == (again.inputs, again.rpcs, again.snapshots);
    if !same {
        return Err(format!("room seed {seed} is not deterministic: two runs differ").into());
    }
    let scene = (seed % SCENE_EVERY == 0).then(|| sim_scene::run(seed));
    if let Some(scene) = &scene {
        describe_scene(scene);
    }
    let scene_failure = scene.as_ref().and_then(|s| s.failure.as_ref());
    match first.failure.as_ref().or(room.failure.as_ref()).or(scene_failure) {
        Some(failure) => Err(format!("seed {seed} failed: {failure}").into()),
        None => {
            println!("seed {seed} passed: {} messages checked", first.delivered);
            Ok(())
        }
    }
}

fn describe(outcome: &Outcome) {
    let s = &outcome.scenario;
    println!("seed {}:", s.seed);
    println!("  faulty link for {:?}: {:?}", s.fault_time, s.faulty);
    println!("  blackouts (offset, length): {:?}", s.blackouts);
    println!(
        "  {} clients, send gap {:?}, messages up to {} bytes",
        s.clients, s.send_gap, s.size_max
    );
    if let Some(failure) = &outcome.failure {
        println!("  FAILED: {failure}");
    }
}

fn describe_room(outcome: &RoomOutcome) {
    let s = &outcome.scenario;
    println!(
        "  room: {} clients, {} bodies, grab chain depth {}, inputs at {} Hz, late join {}, \
         resume {}",
        s.clients, s.bodies, s.chain_depth, s.input_hz, s.late_join, s.resume
    );
    println!(
        "  room checked: {} inputs, {} reliable RPCs, {} snapshots",
        outcome.inputs, outcome.rpcs, outcome.snapshots
    );
    if let Some(failure) = &outcome.failure {
        println!("  ROOM FAILED: {failure}");
    }
}

fn describe_scene(outcome: &SceneOutcome) {
    println!(
        "  scene: sandbox, {} players, {}% loss: {} grabs, {} garbage poses counted",
        outcome.players, outcome.loss_percent, outcome.grabs, outcome.bad_poses
    );
    if let Some(failure) = &outcome.failure {
        println!("  SCENE FAILED: {failure}");
    }
}
