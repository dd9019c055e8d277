//! `rally sim`: batches of seeded deterministic simulations (see `rally_sim::scenario`).

use indicatif::{ProgressBar, ProgressStyle};
use rally_sim::scenario::{self, Outcome};
use std::error::Error;

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
    for seed in args.start_seed..args.start_seed + args.seeds {
        let outcome = scenario::run(seed);
        progress.inc(1);
        if let Some(failure) = &outcome.failure {
            progress.finish_and_clear();
            describe(&outcome);
            return Err(format!(
                "seed {seed} failed: {failure}; replay with `rally sim --seed {seed}`"
            )
            .into());
        }
        delivered += outcome.delivered;
        refused += outcome.refused;
    }
    progress.finish_and_clear();
    let (first, last) = (args.start_seed, args.start_seed + args.seeds.max(1) - 1);
    let seeds = args.seeds;
    println!("{seeds} seeds passed ({first}..={last}): {delivered} messages checked");
    println!("{refused} sends were refused by full send queues (load shed, as designed)");
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
    match &first.failure {
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
