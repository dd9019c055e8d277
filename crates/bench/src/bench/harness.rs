//! A small measurement harness: each task runs in batches, tasks are interleaved round-robin so
//! that noise (other processes, frequency changes) is spread over all of them, and each task's
//! figure is the median time per operation over its batches. Heap allocations are counted over
//! every measured batch.
//!
//! The wire benchmark times its codecs here. Other benchmarks read the clock themselves where
//! they measure: the room benchmark times each phase, the sealing cost is a timed loop, and the
//! real-time modes (`--mode real`, the load benchmark) run on the driver's clock and CPU time.

use crate::alloc_counter::allocations;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::{Duration, Instant};

/// One thing to measure: `run(n)` performs the operation `n` times.
pub struct Task<'a> {
    pub name: String,
    pub run: Box<dyn FnMut(u64) + 'a>,
}

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub batches: usize,
    pub batch_time: Duration,
}

/// What one task measured.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub name: String,
    /// Median over batches of nanoseconds per operation.
    pub ns_median: f64,
    pub ns_min: f64,
    pub ns_max: f64,
    pub allocs_per_op: f64,
}

/// Measures every task with `plan`, showing a progress bar on a terminal.
pub fn measure(tasks: &mut [Task<'_>], plan: Plan) -> Vec<Measurement> {
    let iters: Vec<u64> = tasks.iter_mut().map(|t| calibrate(t, plan.batch_time)).collect();
    let progress = ProgressBar::new((plan.batches * tasks.len()) as u64);
    progress.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} batches, {eta} left")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    progress.set_message("measuring");
    let mut samples = vec![Vec::with_capacity(plan.batches); tasks.len()];
    let mut allocs = vec![0u64; tasks.len()];
    for _ in 0..plan.batches {
        for (i, task) in tasks.iter_mut().enumerate() {
            let before = allocations();
            let elapsed = timed(|| (task.run)(iters[i]));
            allocs[i] += allocations() - before;
            samples[i].push(elapsed.as_nanos() as f64 / iters[i] as f64);
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    tasks
        .iter()
        .enumerate()
        .map(|(i, task)| {
            let mut s = samples[i].clone();
            s.sort_by(f64::total_cmp);
            Measurement {
                name: task.name.clone(),
                ns_median: s[s.len() / 2],
                ns_min: s[0],
                ns_max: s[s.len() - 1],
                allocs_per_op: allocs[i] as f64 / (iters[i] * plan.batches as u64) as f64,
            }
        })
        .collect()
}

/// Finds how many operations fill one batch, warming the task up on the way.
fn calibrate(task: &mut Task<'_>, batch_time: Duration) -> u64 {
    let mut n = 1u64;
    loop {
        let elapsed = timed(|| (task.run)(n));
        if elapsed >= batch_time / 4 || n >= 1 << 30 {
            let per_op = elapsed.as_nanos().max(1) as f64 / n as f64;
            return ((batch_time.as_nanos() as f64 / per_op) as u64).max(1);
        }
        n *= 2;
    }
}

#[allow(clippy::disallowed_methods)] // The harness is the benchmark's clock.
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}
