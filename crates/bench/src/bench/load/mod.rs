//! `rally-bench load`: W3 on real sockets (docs/design.md, section 5). The host runs in this
//! process with encryption on; its clients are bots in a separate process (`rally-bench peer
//! bots`), each a real client session on its own socket, many per thread. The bench ramps the
//! number of reference rooms (10 clients each, 256 bodies of which 64 move, 128 Hz) and, at
//! each step, reads the host's own telemetry over a measurement window after a warm-up: the
//! workers' CPU time from getrusage, per room-tick and per scope, and tick lateness.
//!
//! The ramp stops where a budget breaks: the host's worker core full, tick lateness past its
//! budget, or the bots unable to keep their frame rate (then it is the load generator, not the
//! host, that ran out; the report says which). Rooms per core are extrapolated from the CPU
//! per room-tick measured at the largest step the host sustained; the rooms actually run are
//! reported beside them.
//!
//! After the ramp, the kernel's floor at its largest step (see [`bare`]): the same datagrams
//! through the same sockets and batched syscalls with nothing else, so that the report can say
//! how much of a room-tick's cost is Rally's own.
//!
//! `--waits` runs every step once per worker sleep policy ([`Wait`]), in turn, and prints them
//! side by side with each tick's lateness split into the worker's wake-up and its work;
//! `--bots-beside` runs the bots as threads of this process on the workers' cores instead.

mod bare;
pub mod bots;
mod wait;

use crate::game::{reference_room, CLIENTS};
use crate::machine::Machine;
use crate::stats::{summary, Summary};
use rally_driver::cpu::process_cpu_us;
use rally_driver::host::telemetry::TrafficCounters;
use rally_driver::host::{HostReport, Scope};
use rally_driver::{Host, HostConfig};
use rally_engine::RoomConfig;
use rally_proto::limit::Rate;
use rally_proto::EndpointConfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::error::Error;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
pub use wait::Wait;

/// Ticks per second of the reference room.
const TICK_HZ: u32 = 128;
/// The target: CPU per reference room-tick, all phases but physics, encryption on.
const TARGET_US: f64 = 25.0;
/// The lateness budget (p99).
const LATENESS_BUDGET_MS: f64 = 0.5;
/// The tokens' protocol id in this bench.
const PROTOCOL: u64 = 0x10ad;

/// The host's default tick window, in the flag's unit.
const TICK_WINDOW_US: u64 = rally_driver::host::TICK_WINDOW_DEFAULT.as_micros() as u64;

/// Options of `rally-bench load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// A short ramp (1 to 64 rooms, 4 s windows): under two minutes.
    #[arg(long)]
    pub quick: bool,
    /// The room counts to step through (default: the quick or full ramp).
    #[arg(long, value_delimiter = ',')]
    pub rooms: Vec<u64>,
    /// The host's worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// The bots' threads.
    #[arg(long, default_value_t = 1)]
    pub bot_threads: usize,
    /// How early a room may tick to share its worker's wake-up with an earlier deadline
    /// (`HostConfig::tick_window`), microseconds; the kernel floor's server groups its ticks
    /// the same way, so that both make the same wake-ups and batches. 0: each room at its own
    /// deadline (the host before round 20).
    #[arg(long, value_name = "US", default_value_t = TICK_WINDOW_US)]
    pub tick_window_us: u64,
    /// The workers' sleep policies to compare, comma-separated, each step run with each in
    /// turn: a step in microseconds (`200`: sleep in one go to 2 ms before the deadline, then
    /// in steps of 200 us), `none` (one sleep straight to the deadline: the host's default)
    /// or `spinN` (one sleep, then poll the last N us without sleeping).
    #[arg(long, value_delimiter = ',', default_value = "none")]
    pub waits: Vec<Wait>,
    /// Run the bots in this process, on the workers' cores (beside the workers, as clients
    /// sharing the host's machine would), instead of in a process of their own on the other
    /// cores: the workers' CPU and lateness then include what the bots cost them.
    #[arg(long)]
    pub bots_beside: bool,
    /// Let the OS place the host's workers and the bots instead of pinning the workers to the
    /// last cores and the bots to the others.
    #[arg(long)]
    pub no_pin: bool,
    /// Run the whole bench under the OS's realtime policy at this priority (1 to 99): the
    /// workers (through `HostConfig::realtime_priority`, as `rally server` would), the bots'
    /// process and the kernel floor's server all inherit it, so that other work on the
    /// machine (builds, other benches) does not preempt them. Needs root or CAP_SYS_NICE.
    #[arg(long, value_name = "PRIORITY", value_parser = clap::value_parser!(u8).range(1..=99))]
    pub realtime: Option<u8>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Draw the frame-time chart into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// After the ramp, measure telemetry's own cost at its last step: the step again with the
    /// host's telemetry off and on, alternately, three times each (median CPU per room-tick).
    #[arg(long)]
    pub telemetry_cost: bool,
    /// At each step, serve the host's `/metrics` and `/stats` as `rally server` does and time
    /// ten scrapes of each (size and time).
    #[arg(long)]
    pub scrape: bool,
    /// Ramp on past every limit but a full worker core (or bots that cannot connect): the
    /// per-room cost from 1 room to saturation (the growth fit), on a machine whose lateness
    /// spikes and other processes would stop the ramp at its first steps.
    #[arg(long)]
    pub to_saturation: bool,
    /// After the ramp and its floor, run its largest step and the kernel's floor beside it
    /// this many more times, alternately, and report Rally's own share (the step less its
    /// floor) of each pair with their median: one pair's share moves by 10 us or more here
    /// from run to run.
    #[arg(long, value_name = "PAIRS", default_value_t = 0)]
    pub own_share: usize,
}

/// Scrapes of the telemetry endpoint at a step.
#[derive(Debug, Clone, Serialize)]
pub struct Scrapes {
    /// `/metrics`: bytes, and milliseconds from connect to the last byte (median, max).
    pub metrics_bytes: usize,
    pub metrics_ms_median: f64,
    pub metrics_ms_max: f64,
    /// `/stats` (JSON, every room's figures): bytes and milliseconds.
    pub stats_bytes: usize,
    pub stats_ms_median: f64,
    pub stats_ms_max: f64,
}

/// Rally's own share at a step, from pairs of runs: the step, then the kernel's floor beside
/// it, alternately.
#[derive(Debug, Clone, Serialize)]
pub struct OwnShare {
    pub rooms: u64,
    /// Each pair's CPU per room-tick without simulate, microseconds: Rally's, then the floor's.
    pub rally_us: Vec<f64>,
    pub floor_us: Vec<f64>,
    /// Each pair's Rally less its floor.
    pub own_us: Vec<f64>,
    pub own_median_us: f64,
    pub rally_median_us: f64,
    pub floor_median_us: f64,
    /// Rally's fastest run less the floor's fastest: a second estimate beside the median of
    /// pairs. A neighbour on the host only ever adds time to a window, so each side's fastest
    /// run is the nearest to its own cost, where a pair's difference carries two runs' noise.
    pub own_of_minima_us: f64,
    /// Rooms a core at the tick rate from the median of Rally's runs.
    pub rooms_per_core: f64,
    /// Where the own share lies, medians over the pairs of Rally's part less the floor's, us
    /// a room-tick.
    pub parts: OwnParts,
}

/// The own share split where Rally and its floor can be timed alike: the receive syscalls,
/// the send syscalls (each side times them on the clock around each call), and the rest
/// (Rally's protocol, game and loop without simulate, against the floor's loop). A syscall
/// part above zero is the kernel doing more for Rally than for the floor: the same calls on
/// colder caches, say, or more of them.
#[derive(Debug, Clone, Serialize)]
pub struct OwnParts {
    pub receive_us: f64,
    pub send_us: f64,
    pub rest_us: f64,
}

impl OwnParts {
    /// The parts of one pair: Rally's `step` against its `floor`.
    fn of(step: &Step, floor: &bare::BareStep) -> Self {
        let (receive, send) = (step.scope_us("receive"), step.scope_us("send"));
        let rest = step.cpu_us_per_room_tick_without_simulate - receive - send;
        let floor_rest = floor.cpu_us_per_room_tick
            - floor.receive_us_per_room_tick
            - floor.send_us_per_room_tick;
        Self {
            receive_us: receive - floor.receive_us_per_room_tick,
            send_us: send - floor.send_us_per_room_tick,
            rest_us: rest - floor_rest,
        }
    }

    /// Each part's median over `pairs`.
    fn median_of(pairs: &[OwnParts]) -> Self {
        let of = |part: fn(&OwnParts) -> f64| median(&pairs.iter().map(part).collect::<Vec<_>>());
        Self {
            receive_us: of(|p| p.receive_us),
            send_us: of(|p| p.send_us),
            rest_us: of(|p| p.rest_us),
        }
    }
}

/// Telemetry's cost at a step: CPU per room-tick with it and without.
#[derive(Debug, Clone, Serialize)]
pub struct TelemetryCost {
    pub rooms: u64,
    /// Each run's CPU per room-tick, microseconds, in the order run (off, on, off, on...).
    pub off_us: Vec<f64>,
    pub on_us: Vec<f64>,
    pub off_median_us: f64,
    pub on_median_us: f64,
    /// (on - off) / off, percent.
    pub cost_percent: f64,
}

/// One step of the ramp, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The workers' sleep policy (`--waits`).
    pub wait: String,
    pub rooms: u64,
    pub clients: u64,
    pub tick_hz: u32,
    /// Clients connected to the host when the window opened.
    pub connected: usize,
    /// Worker CPU (getrusage) per room-tick, microseconds.
    pub cpu_us_per_room_tick: f64,
    /// The same without the game's own simulate scope (the target's measure: all phases but
    /// physics).
    pub cpu_us_per_room_tick_without_simulate: f64,
    /// Mean microseconds per room-tick of each scope, and `other` (the loop, timers, event
    /// dispatch: CPU no scope covers).
    pub phases_us: BTreeMap<String, f64>,
    /// How late room-ticks started.
    pub tick_lateness_ms: Lateness,
    /// Room-ticks run per second, against rooms x tick rate.
    pub room_ticks_per_second: f64,
    /// The workers' CPU over the window's wall time (1.0: one core full).
    pub worker_utilization: f64,
    /// Room-ticks over a budget, per scope.
    pub overruns: BTreeMap<String, u64>,
    /// The workers' syscalls and wake-ups.
    pub syscalls: Syscalls,
    /// The host process's CPU over the window, microseconds (workers and everything else).
    pub process_cpu_us: u64,
    /// What the bots saw.
    pub bots: bots::BotsReport,
    /// Snapshots each bot applied per second, on average.
    pub snapshots_per_client_second: f64,
    /// Snapshots built as a client's own view (not the room's shared encoding), per
    /// room-tick: each is a client behind the shared encoding (a late acknowledgement).
    pub views_own_per_room_tick: f64,
    /// Why the ramp stopped here, if it did.
    pub limit: Option<String>,
    /// Telemetry was on (the default) for this step.
    pub telemetry: bool,
    /// The endpoint's scrapes, with `--scrape`.
    pub scrapes: Option<Scrapes>,
}

impl Step {
    /// Scope `name`'s mean microseconds a room-tick (0 for a scope not timed).
    fn scope_us(&self, name: &str) -> f64 {
        self.phases_us.get(name).copied().unwrap_or(0.0)
    }
}

/// The workers' syscalls and wake-ups over the window: what the loop costs beyond its rooms.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Syscalls {
    /// Sleeps (each ends in a wake-up) per tick period, per worker.
    pub wakeups_per_worker_tick: f64,
    /// Receive syscalls per room-tick.
    pub reads_per_room_tick: f64,
    /// Receive syscalls that found nothing, per room-tick.
    pub empty_reads_per_room_tick: f64,
    /// Datagrams per send syscall (`sendmmsg`).
    pub datagrams_per_send: f64,
}

impl Syscalls {
    fn of(report: &HostReport, room_ticks: f64, wall_us: u64) -> Self {
        let sum = |f: fn(&TrafficCounters) -> u64| {
            report.workers.iter().map(|w| f(&w.transport.traffic)).sum::<u64>() as f64
        };
        let worker_ticks =
            report.workers.len().max(1) as f64 * wall_us as f64 / 1e6 * f64::from(TICK_HZ);
        Self {
            wakeups_per_worker_tick: sum(|t| t.sleeps) / worker_ticks.max(1.0),
            reads_per_room_tick: sum(|t| t.reads) / room_ticks,
            empty_reads_per_room_tick: sum(|t| t.empty_reads) / room_ticks,
            datagrams_per_send: sum(|t| t.datagrams_out) / sum(|t| t.sends).max(1.0),
        }
    }
}

/// Lateness quantiles, milliseconds, and the p99 of its two parts: the worker's wake-up from
/// an idle sleep, and its work (`WorkerReport::wake_lateness`, `lateness_busy`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Lateness {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub wake_p99: f64,
    pub busy_p99: f64,
}

/// The ramp's timing.
struct Plan {
    warmup: Duration,
    window: Duration,
}

/// The steps run with one sleep policy, and what they show.
#[derive(Debug, Serialize)]
struct Run {
    wait: Wait,
    steps: Vec<Step>,
    verdict: Verdict,
}

/// Runs the benchmark.
pub fn run(args: &LoadArgs) -> Result<(), Box<dyn Error>> {
    let ramp = match (&args.rooms, args.quick) {
        (rooms, _) if !rooms.is_empty() => rooms.clone(),
        (_, true) => vec![1, 4, 16, 32, 64],
        (_, false) => vec![1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256],
    };
    if args.workers == 0 || args.bot_threads == 0 || ramp.contains(&0) {
        return Err("--workers, --bot-threads and every --rooms step must be at least 1".into());
    }
    wait::check(&args.waits)?;
    if let Some(priority) = args.realtime {
        // Threads and processes started from here on inherit the policy.
        rally_driver::cpu::run_realtime(priority)?;
    }
    let plan = if args.quick {
        Plan { warmup: Duration::from_secs(3), window: Duration::from_secs(4) }
    } else {
        Plan { warmup: Duration::from_secs(4), window: Duration::from_secs(10) }
    };
    let waits: Vec<String> = args.waits.iter().map(Wait::to_string).collect();
    println!(
        "W3 load: reference rooms ({CLIENTS} clients, 256 bodies, 64 moving, {TICK_HZ} Hz, \
         sealed), {} host worker(s), bots {} on {} thread(s); workers' sleep policies: {}{}",
        args.workers,
        if args.bots_beside {
            "in this process beside the workers"
        } else {
            "in a process of their own"
        },
        args.bot_threads,
        waits.join(", "),
        match args.realtime {
            Some(priority) => format!("; realtime priority {priority} (first in, first out)"),
            None => String::new(),
        }
    );
    let steps = ramp_each(&ramp, args, &plan)?;
    let runs: Vec<Run> = args
        .waits
        .iter()
        .zip(steps)
        .map(|(wait, steps)| Run { wait: *wait, verdict: verdict(&steps, args), steps })
        .collect();
    for run in &runs {
        if runs.len() > 1 {
            println!("\n== sleep policy {} ==", run.wait);
        }
        print(&run.steps, &run.verdict, args);
    }
    if runs.len() > 1 {
        compare(&runs);
    }
    let first = &runs[0];
    let floor = floor(&first.steps, args, &plan)?;
    let cost = if args.telemetry_cost {
        Some(telemetry_cost(&first.steps, args, &plan, first.wait)?)
    } else {
        None
    };
    let own = match (args.own_share, first.steps.last()) {
        (0, _) | (_, None) => None,
        (pairs, Some(last)) => Some(own_share(last.rooms, pairs, args, &plan, first.wait)?),
    };
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "bench": "load",
            "quick": args.quick,
            "machine": Machine::detect(),
            "workers": args.workers,
            "bot_threads": args.bot_threads,
            "bots_beside": args.bots_beside,
            "realtime_priority": args.realtime,
            "tick_window_us": args.tick_window_us,
            "target_us": TARGET_US,
            "wait": first.wait.to_string(),
            "results": first.steps,
            "rooms_per_core": first.verdict.rooms_per_core,
            "rooms_per_machine": first.verdict.rooms_per_machine,
            "bots_share_worker_cores": bots_share_cores(args),
            "growth": first.verdict.growth,
            "rooms_sustained": first.verdict.rooms_sustained,
            "cost_growth": first.verdict.cost_growth,
            "limit": first.verdict.limit,
            "waits": runs,
            "kernel_floor": floor,
            "telemetry_cost": cost,
            "own_share": own,
        });
        super::write_json(path, &json)?;
    }
    if let Some(dir) = &args.plot {
        draw(dir, &runs)?;
    }
    Ok(())
}

/// The ramp, each step run with each sleep policy in turn (so that the machine's noise at a
/// step hits every policy alike); a policy whose step stopped the ramp runs no further
/// steps. The steps, by policy in `--waits` order.
fn ramp_each(ramp: &[u64], args: &LoadArgs, plan: &Plan) -> Result<Vec<Vec<Step>>, Box<dyn Error>> {
    let progress = indicatif::ProgressBar::new((ramp.len() * args.waits.len()) as u64);
    let mut steps: Vec<Vec<Step>> = args.waits.iter().map(|_| Vec::new()).collect();
    let mut going = vec![true; args.waits.len()];
    for &rooms in ramp {
        for (k, wait) in args.waits.iter().enumerate() {
            if !going[k] {
                progress.inc(1);
                continue;
            }
            progress.set_message(format!("{rooms} rooms, wait {wait}"));
            let step = measure(rooms, args, plan, true, *wait)?;
            // A hidden bar (output not a terminal) prints nothing of its own: the step's line
            // goes to stdout then, or a logged run loses it.
            match progress.is_hidden() {
                true => println!("{}", line(&step)),
                false => progress.println(line(&step)),
            }
            progress.inc(1);
            going[k] = if args.to_saturation { cpu_measured(&step) } else { step.limit.is_none() };
            steps[k].push(step);
        }
        if !going.iter().any(|g| *g) {
            break;
        }
    }
    progress.finish_and_clear();
    Ok(steps)
}

/// The policies side by side, step by step: CPU per room-tick, `other`, wake-ups, lateness
/// and its two parts.
fn compare(runs: &[Run]) {
    println!(
        "\nsleep policies side by side (same run, each step with each policy in turn): us CPU \
         per room-tick without simulate, `other`, wake-ups per worker-tick, lateness p99 (wake \
         / busy) ms, bots' frames late"
    );
    println!(
        "{:>6} {:>8} {:>9} {:>8} {:>8} {:>22} {:>10}",
        "rooms", "wait", "CPU us", "other", "wakes", "p99 (wake / busy)", "bots late"
    );
    let mut rooms: Vec<u64> = runs.iter().flat_map(|r| r.steps.iter().map(|s| s.rooms)).collect();
    rooms.sort_unstable();
    rooms.dedup();
    for r in rooms {
        for run in runs {
            let Some(step) = run.steps.iter().find(|s| s.rooms == r) else { continue };
            let l = &step.tick_lateness_ms;
            println!(
                "{:>6} {:>8} {:>9.1} {:>8.1} {:>8.2} {:>22} {:>10}",
                r,
                run.wait.to_string(),
                step.cpu_us_per_room_tick_without_simulate,
                step.phases_us.get("other").copied().unwrap_or(0.0),
                step.syscalls.wakeups_per_worker_tick,
                format!("{:.3} ({:.3} / {:.3})", l.p99, l.wake_p99, l.busy_p99),
                step.bots.frames_late,
            );
        }
    }
    for run in runs {
        println!(
            "{:>8}: rooms per core {:.0} (from the largest sustained step, {} rooms){}",
            run.wait.to_string(),
            run.verdict.rooms_per_core,
            run.verdict.rooms_sustained,
            run.verdict
                .growth
                .as_ref()
                .map_or(String::new(), |g| { format!(", {:.0} by the fit", g.rooms_per_core) })
        );
    }
}

/// The last step again with telemetry off and on, alternately; medians of CPU per room-tick.
fn telemetry_cost(
    steps: &[Step],
    args: &LoadArgs,
    plan: &Plan,
    wait: Wait,
) -> Result<TelemetryCost, Box<dyn Error>> {
    let rooms = steps.last().map_or(1, |s| s.rooms);
    let (mut off_us, mut on_us) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        off_us.push(measure(rooms, args, plan, false, wait)?.cpu_us_per_room_tick);
        on_us.push(measure(rooms, args, plan, true, wait)?.cpu_us_per_room_tick);
    }
    let (off_median_us, on_median_us) = (median(&off_us), median(&on_us));
    let cost_percent = (on_median_us - off_median_us) / off_median_us.max(1e-9) * 100.0;
    println!(
        "telemetry's cost at {rooms} rooms: {on_median_us:.1} us CPU per room-tick with it, \
         {off_median_us:.1} without (medians of 3 alternating runs each: on {on_us:.1?}, off \
         {off_us:.1?}): {cost_percent:+.1}%"
    );
    Ok(TelemetryCost { rooms, off_us, on_us, off_median_us, on_median_us, cost_percent })
}

/// Rally's own share at `rooms` from `pairs` alternated runs of the step and its floor (the
/// floor with each run's own datagram sizes), printed with their median.
fn own_share(
    rooms: u64,
    pairs: usize,
    args: &LoadArgs,
    plan: &Plan,
    wait: Wait,
) -> Result<OwnShare, Box<dyn Error>> {
    let progress = indicatif::ProgressBar::new(pairs as u64);
    let (mut rally_us, mut floor_us, mut parts) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pairs {
        let step = measure(rooms, args, plan, true, wait)?;
        let floor = bare_beside(&step, args, plan)?;
        rally_us.push(step.cpu_us_per_room_tick_without_simulate);
        floor_us.push(floor.cpu_us_per_room_tick);
        parts.push(OwnParts::of(&step, &floor));
        progress.inc(1);
    }
    let parts = OwnParts::median_of(&parts);
    progress.finish_and_clear();
    let own_us: Vec<f64> = rally_us.iter().zip(&floor_us).map(|(r, f)| r - f).collect();
    let (own_median_us, rally_median_us) = (median(&own_us), median(&rally_us));
    let floor_median_us = median(&floor_us);
    let fastest = |runs: &[f64]| runs.iter().copied().fold(f64::INFINITY, f64::min);
    let (rally_fastest_us, floor_fastest_us) = (fastest(&rally_us), fastest(&floor_us));
    let own_of_minima_us = rally_fastest_us - floor_fastest_us;
    let rooms_per_core =
        if rally_median_us > 0.0 { 1e6 / f64::from(TICK_HZ) / rally_median_us } else { 0.0 };
    println!(
        "Rally's own share at {rooms} rooms over {pairs} alternated pairs (the step, then its \
         floor): median {own_median_us:.1} us per room-tick (each: {own_us:.1?}); Rally \
         {rally_median_us:.1} (each: {rally_us:.1?}), floor {floor_median_us:.1} (each: \
         {floor_us:.1?}); rooms per core from Rally's median: {rooms_per_core:.0} (target: own \
         share at most {TARGET_US:.0} us, rooms per core at least 75)"
    );
    println!(
        "  by the fastest runs (noise only adds time): Rally {rally_fastest_us:.1} less the \
         floor {floor_fastest_us:.1}: own share {own_of_minima_us:.1} us per room-tick"
    );
    println!(
        "  by part (medians over the pairs, Rally's less the floor's): receive syscalls {:+.1}, \
         send syscalls {:+.1}, the rest (protocol, game and loop against the floor's loop) \
         {:+.1} us per room-tick",
        parts.receive_us, parts.send_us, parts.rest_us
    );
    Ok(OwnShare {
        rooms,
        rally_us,
        floor_us,
        own_us,
        own_median_us,
        rally_median_us,
        floor_median_us,
        own_of_minima_us,
        rooms_per_core,
        parts,
    })
}

/// The middle value (the mean of the two middle ones for an even count, as the docs compute
/// medians over pairs by hand; 0 for none).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 0 => (sorted[mid - 1] + sorted[mid]) / 2.0,
        _ => sorted[mid],
    }
}

/// Ten scrapes of each of `/metrics` and `/stats` from a telemetry endpoint over `host`.
fn scrape(host: &Host) -> Result<Scrapes, Box<dyn Error>> {
    let endpoint = rally_app::Telemetry::start(([127, 0, 0, 1], 0).into(), host.reporter())?;
    let address = endpoint.address();
    let get = |path: &str| -> Result<(usize, f64), Box<dyn Error>> {
        let clock = rally_driver::Clock::start();
        let mut stream = std::net::TcpStream::connect(address)?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n")?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let ms = clock.now().as_nanos() as f64 / 1e6;
        let body = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(0, |at| response.len() - at - 4);
        Ok((body, ms))
    };
    let figures = |path: &str| -> Result<(usize, f64, f64), Box<dyn Error>> {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..10 {
            let (size, ms) = get(path)?;
            bytes = size;
            times.push(ms);
        }
        times.sort_by(f64::total_cmp);
        Ok((bytes, times[times.len() / 2], times[times.len() - 1]))
    };
    let (metrics_bytes, metrics_ms_median, metrics_ms_max) = figures("/metrics")?;
    let (stats_bytes, stats_ms_median, stats_ms_max) = figures("/stats")?;
    Ok(Scrapes {
        metrics_bytes,
        metrics_ms_median,
        metrics_ms_max,
        stats_bytes,
        stats_ms_median,
        stats_ms_max,
    })
}

/// One step: a fresh host, the bots, warm-up, the window, and the figures.
fn measure(
    rooms: u64,
    args: &LoadArgs,
    plan: &Plan,
    telemetry: bool,
    wait: Wait,
) -> Result<Step, Box<dyn Error>> {
    let key = rally_driver::backend::random_key()?;
    let clients = rooms * CLIENTS as u64;
    let mut endpoint =
        EndpointConfig { connection: rally_engine::connection_config(), ..Default::default() };
    // Every bot connects from 127.0.0.1 at once: the per-address handshake limit, meant for
    // strangers on the internet, would make the ramp wait minutes.
    endpoint.handshake_rate = Rate { per_second: 1e6, burst: 1e6 };
    endpoint.connections_max = clients as usize + 64;
    let (worker_cores, bot_cores) = cores(args);
    let config = wait.apply(HostConfig {
        workers: args.workers,
        worker_cores,
        realtime_priority: args.realtime,
        key: Some(key.clone()),
        protocol_id: PROTOCOL,
        endpoint,
        telemetry,
        tick_window: Duration::from_micros(args.tick_window_us),
        ..HostConfig::default()
    });
    let room = RoomConfig { tick_rate: TICK_HZ, ..RoomConfig::default() };
    let host = Host::start(config, move |id| {
        // reference_room raises the entity limit to fit its bodies, so spawning cannot fail.
        reference_room(room.clone(), id + 1).expect("the reference room fits")
    })?;
    let seconds = (plan.warmup + plan.window).as_secs_f64() + 1.0;
    let bots_args = bots::BotsArgs {
        key: crate::token::key_to_hex(&key),
        protocol: PROTOCOL,
        servers: host.addresses().to_vec(),
        ..bot_args(rooms, args.bot_threads, &bot_cores, seconds)
    };
    let bots = Bots::start(bots_args, args.bots_beside)?;
    std::thread::sleep(plan.warmup);
    let connected = host.report().workers.iter().map(|w| w.connections).sum();
    host.reset_telemetry();
    // Workers see the reset within a loop; the window starts after it.
    std::thread::sleep(Duration::from_millis(50));
    let cpu_before = process_cpu_us();
    std::thread::sleep(plan.window);
    let process_cpu_us = process_cpu_us() - cpu_before;
    // The workers publish every 100 ms: wait for a report that covers the window.
    std::thread::sleep(Duration::from_millis(120));
    let report = host.report();
    let scrapes = if args.scrape { Some(scrape(&host)?) } else { None };
    let bots_report = bots.finish()?;
    host.shutdown(Duration::ZERO)?;
    let mut step = step(rooms, connected, &report, process_cpu_us, bots_report, seconds);
    (step.telemetry, step.scrapes, step.wait) = (telemetry, scrapes, wait.to_string());
    if let Some(s) = &step.scrapes {
        println!(
            "scrapes at {rooms} rooms: /metrics {} bytes, {:.2} ms median, {:.2} ms max; /stats \
             {} bytes, {:.2} ms median, {:.2} ms max",
            s.metrics_bytes,
            s.metrics_ms_median,
            s.metrics_ms_max,
            s.stats_bytes,
            s.stats_ms_median,
            s.stats_ms_max
        );
    }
    Ok(step)
}

/// The kernel's floor (see [`bare`]) at the ramp's largest step, with that step's datagram
/// sizes; printed beside Rally's cost there.
fn floor(
    steps: &[Step],
    args: &LoadArgs,
    plan: &Plan,
) -> Result<Option<bare::BareStep>, Box<dyn Error>> {
    let Some(step) = steps.last() else { return Ok(None) };
    let floor = bare_beside(step, args, plan)?;
    println!(
        "kernel floor at {} rooms (bare UDP on the same sockets and syscalls, no protocol, \
         encryption or game: {:.1} datagrams of {} bytes in and {:.1} of {} out per room-tick, \
         {:.1} wake-ups per tick period against Rally's {:.1}): {:.1} us CPU per room-tick \
         (receive syscalls {:.1}, send syscalls {:.1}); Rally {:.1} there (receive {:.1}, send \
         {:.1}), {:.1} of it its own",
        floor.rooms,
        floor.datagrams_in_per_room_tick,
        floor.input_bytes,
        floor.datagrams_out_per_room_tick,
        floor.snapshot_bytes,
        floor.wakeups_per_tick_period,
        step.syscalls.wakeups_per_worker_tick,
        floor.cpu_us_per_room_tick,
        floor.receive_us_per_room_tick,
        floor.send_us_per_room_tick,
        step.cpu_us_per_room_tick_without_simulate,
        step.scope_us("receive"),
        step.scope_us("send"),
        step.cpu_us_per_room_tick_without_simulate - floor.cpu_us_per_room_tick,
    );
    if floor.bots.joined < floor.bots.clients {
        println!(
            "(only {} of {} bare bots heard back: the floor is for fewer clients than Rally's)",
            floor.bots.joined, floor.bots.clients
        );
    }
    Ok(Some(floor))
}

/// The kernel's floor for `step`: its rooms, with the datagram sizes its bots saw.
fn bare_beside(
    step: &Step,
    args: &LoadArgs,
    plan: &Plan,
) -> Result<bare::BareStep, Box<dyn Error>> {
    // The bots received snapshots and sent inputs (with acks riding on them).
    let (input, snapshot) = step.bots.datagram_bytes();
    let sizes = (input.round() as usize, snapshot.round() as usize);
    let (worker_cores, bot_cores) = cores(args);
    let bots = (args.bot_threads, bot_cores.as_slice());
    let core = worker_cores.first().copied();
    let window = Duration::from_micros(args.tick_window_us);
    bare::measure(step.rooms, sizes, plan, (core, window), bots, args.bots_beside)
}

/// The host's workers get the last cores, one each; the bots get the rest. With a worker for
/// every core (`--workers 2` here), the workers take one core each and the bots run on all of
/// them, beside the workers: the machine has no core to give them alone (the report says so).
/// With `--bots-beside` the bots run on the workers' cores. Empty lists: no pinning.
fn cores(args: &LoadArgs) -> (Vec<usize>, Vec<usize>) {
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.no_pin || count < 2 {
        return (Vec::new(), Vec::new());
    }
    if args.workers >= count {
        return ((0..count).collect(), (0..count).collect());
    }
    let worker_cores: Vec<usize> = (count - args.workers..count).collect();
    if args.bots_beside {
        return (worker_cores.clone(), worker_cores);
    }
    (worker_cores, (0..count - args.workers).collect())
}

/// Whether the bots share the workers' cores (then the workers' CPU per room-tick includes
/// what sharing costs them, and their lateness what the bots' wake-ups cost).
fn bots_share_cores(args: &LoadArgs) -> bool {
    let (workers, bots) = cores(args);
    workers.is_empty() || bots.iter().any(|c| workers.contains(c))
}

/// What the bots are asked to play for `rooms` reference rooms, on `threads` threads pinned to
/// `cores`, for `seconds`; the caller says where they connect and how.
fn bot_args(rooms: u64, threads: usize, cores: &[usize], seconds: f64) -> bots::BotsArgs {
    bots::BotsArgs {
        key: String::new(),
        protocol: 0,
        servers: Vec::new(),
        rooms,
        clients: CLIENTS as u64,
        hz: TICK_HZ,
        threads,
        cores: cores.to_vec(),
        seconds,
        bare: None,
    }
}

/// The bots of a step: a process of their own (`rally-bench peer bots`), or threads in this
/// process (`--bots-beside`).
enum Bots {
    Process(Child),
    Beside(std::thread::JoinHandle<Result<bots::BotsReport, String>>),
}

impl Bots {
    fn start(args: bots::BotsArgs, beside: bool) -> Result<Self, Box<dyn Error>> {
        if beside {
            let thread = std::thread::Builder::new()
                .name("rally-bench-bots".into())
                .spawn(move || bots::play(&args).map_err(|e| e.to_string()))?;
            return Ok(Bots::Beside(thread));
        }
        let servers: Vec<String> = args.servers.iter().map(|a| a.to_string()).collect();
        let cores: Vec<String> = args.cores.iter().map(|c| c.to_string()).collect();
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["peer", "bots", "--key", &args.key, "--protocol", &args.protocol.to_string()])
            .args(["--servers", &servers.join(",")])
            .args(["--rooms", &args.rooms.to_string(), "--clients", &args.clients.to_string()])
            .args(["--hz", &args.hz.to_string(), "--threads", &args.threads.to_string()])
            .args(["--seconds", &format!("{:.1}", args.seconds)]);
        if !cores.is_empty() {
            command.args(["--cores", &cores.join(",")]);
        }
        if let Some(bytes) = args.bare {
            command.args(["--bare", &bytes.to_string()]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the bots (rally-bench peer bots): {e}"))?;
        Ok(Bots::Process(child))
    }

    fn finish(self) -> Result<bots::BotsReport, Box<dyn Error>> {
        let mut child = match self {
            Bots::Process(child) => child,
            Bots::Beside(thread) => {
                let report = thread.join().map_err(|_| "the bots' thread panicked")?;
                return Ok(report.map_err(|e| format!("the bots failed: {e}"))?);
            }
        };
        let status = child.wait()?;
        let mut out = String::new();
        if let Some(stdout) = child.stdout.as_mut() {
            stdout.read_to_string(&mut out)?;
        }
        if !status.success() {
            return Err(format!("the bots failed ({status}); they said: {out}").into());
        }
        let last = out.lines().last().ok_or("the bots printed no report")?;
        Ok(serde_json::from_str(last).map_err(|e| format!("the bots' report {last:?}: {e}"))?)
    }
}

/// The step's figures from the host's report over the window.
fn step(
    rooms: u64,
    connected: usize,
    report: &HostReport,
    process_cpu_us: u64,
    bots: bots::BotsReport,
    bot_seconds: f64,
) -> Step {
    let room_ticks = report.room_ticks().max(1) as f64;
    let cpu_us: u64 = report.workers.iter().map(|w| w.cpu_us).sum();
    let wall_us: u64 = report.workers.iter().map(|w| w.wall_us).max().unwrap_or(1).max(1);
    let cpu_per_tick = cpu_us as f64 / room_ticks;
    let mut phases_us = BTreeMap::new();
    let mut covered = 0.0;
    let mut simulate = 0.0;
    for (scope, us) in report.scope_us_per_room_tick() {
        phases_us.insert(scope.name().to_string(), us);
        covered += us;
        if scope == Scope::Simulate {
            simulate = us;
        }
    }
    phases_us.insert("other".to_string(), (cpu_per_tick - covered).max(0.0));
    let lateness = lateness(report);
    let mut overruns = BTreeMap::new();
    for (k, scope) in rally_driver::host::telemetry::ROOM_SCOPES.iter().enumerate() {
        overruns
            .insert(scope.name().to_string(), report.workers.iter().map(|w| w.overruns[k]).sum());
    }
    let workers = report.workers.len().max(1) as f64;
    let mut step = Step {
        wait: String::new(),
        rooms,
        clients: rooms * CLIENTS as u64,
        tick_hz: TICK_HZ,
        connected,
        cpu_us_per_room_tick: cpu_per_tick,
        cpu_us_per_room_tick_without_simulate: cpu_per_tick - simulate,
        phases_us,
        tick_lateness_ms: lateness,
        room_ticks_per_second: room_ticks / (wall_us as f64 / 1e6),
        worker_utilization: cpu_us as f64 / wall_us as f64 / workers,
        overruns,
        syscalls: Syscalls::of(report, room_ticks, wall_us),
        process_cpu_us,
        snapshots_per_client_second: bots.snapshots as f64
            / bots.clients.max(1) as f64
            / bot_seconds,
        views_own_per_room_tick: report.rooms.iter().map(|r| r.views_own).sum::<u64>() as f64
            / room_ticks,
        bots,
        limit: None,
        telemetry: true,
        scrapes: None,
    };
    step.limit = limit(&step);
    step
}

fn lateness(report: &HostReport) -> Lateness {
    let worst = |f: fn(&rally_driver::host::Summary) -> f64| {
        report.workers.iter().map(|w| f(&w.lateness)).fold(0.0, f64::max) / 1e3
    };
    let worst_of = |f: fn(&rally_driver::host::WorkerReport) -> f64| {
        report.workers.iter().map(f).fold(0.0, f64::max) / 1e3
    };
    Lateness {
        p50: worst(|s| s.p50_us),
        p99: worst(|s| s.p99_us),
        max: worst(|s| s.max_us),
        wake_p99: worst_of(|w| w.wake_lateness.p99_us),
        busy_p99: worst_of(|w| w.lateness_busy.p99_us),
    }
}

/// Why the ramp stops at this step, if it does.
fn limit(step: &Step) -> Option<String> {
    let expected_ticks = step.rooms as f64 * f64::from(step.tick_hz);
    if step.connected < step.clients as usize {
        return Some(format!(
            "only {} of {} bots connected during the warm-up",
            step.connected, step.clients
        ));
    }
    if step.worker_utilization > 0.9 || step.room_ticks_per_second < expected_ticks * 0.98 {
        return Some("host saturated: its worker core is full".into());
    }
    if step.tick_lateness_ms.p99 > LATENESS_BUDGET_MS {
        return Some(format!("tick lateness p99 over its budget of {LATENESS_BUDGET_MS} ms"));
    }
    let late = step.bots.frames_late as f64 / step.bots.frames.max(1) as f64;
    if late > 0.01 {
        return Some(format!(
            "bots saturated: {:.0}% of their frames late (the load generator ran out, not the \
             host)",
            late * 100.0
        ));
    }
    None
}

/// What the ramp shows.
#[derive(Debug, Serialize)]
struct Verdict {
    /// Rooms one core would run at 128 Hz at the CPU per room-tick measured at the largest
    /// step the host sustained.
    rooms_per_core: f64,
    /// The most rooms run within every budget.
    rooms_sustained: u64,
    /// CPU per room-tick at the largest sustained step over that at the smallest.
    cost_growth: f64,
    /// Rooms the whole machine runs: rooms per core times the cores the workers have (one
    /// worker per core at most).
    rooms_per_machine: f64,
    /// The workers' CPU split into a fixed cost per worker and a cost per room-tick.
    growth: Option<Growth>,
    /// Why the ramp stopped.
    limit: Option<String>,
}

/// The workers' CPU a second over the steps that ran all their rooms (late or not), as a fixed
/// cost per worker plus a cost per room-tick, the line fitted (least squares) over the lighter
/// half of the ramp: what a worker spends with no room (waking up, polling its socket,
/// publishing its report) apart from what each room-tick adds; then, at each step, what a
/// room-tick costs beyond the fixed share, and how that grows.
#[derive(Debug, Serialize)]
struct Growth {
    /// A worker's fixed CPU, microseconds per second (10,000: 1% of a core).
    fixed_us_per_worker_second: f64,
    /// What each room-tick adds at light load, microseconds.
    per_room_tick_us: f64,
    /// Per step: rooms, and the CPU per room-tick without the fixed share, microseconds.
    per_room_tick_us_by_step: Vec<(u64, f64)>,
    /// That cost at the largest step fitted over that at the smallest.
    growth: f64,
    /// Rooms one worker's core would run at 128 Hz by the fit: what its fixed cost leaves,
    /// over a room's ticks a second.
    rooms_per_core: f64,
}

/// [`Growth`] over `steps`: (rooms, room-ticks per second, CPU per room-tick in microseconds)
/// each, lightest first; `None` unless two of the lighter half differ in load.
fn growth(steps: &[(u64, f64, f64)], workers: usize) -> Option<Growth> {
    // x: room-ticks per second; y: the workers' CPU, microseconds per second.
    let points: Vec<(f64, f64)> = steps.iter().map(|s| (s.1, s.2 * s.1)).collect();
    // The line through the lighter half of the ramp (the steps come lightest first): a cost
    // per room-tick that grows with load would otherwise tilt the line and hide in the
    // fixed cost.
    let (fixed, per_room_tick_us) =
        fit_line(&points[..points.len().div_ceil(2).max(2).min(points.len())])?;
    let above = |(x, y): (f64, f64)| (y - fixed) / x.max(1e-9);
    let by_step: Vec<(u64, f64)> =
        steps.iter().zip(&points).map(|(s, p)| (s.0, above(*p))).collect();
    let (first, last) = (by_step.first()?.1, by_step.last()?.1);
    Some(Growth {
        fixed_us_per_worker_second: fixed / workers.max(1) as f64,
        per_room_tick_us,
        growth: if first > 0.0 { last / first } else { 0.0 },
        per_room_tick_us_by_step: by_step,
        rooms_per_core: (1e6 - fixed / workers.max(1) as f64).max(0.0)
            / (f64::from(TICK_HZ) * per_room_tick_us).max(1e-9),
    })
}

/// Whether the host kept every budget at this step (the bots may have run out).
fn host_held(step: &&Step) -> bool {
    step.limit.as_deref().is_none_or(|l| l.starts_with("bots"))
}

/// Whether a step measured what a room-tick costs the host, whatever limit it hit: every
/// client connected, and the worker's core was not full. Late ticks, late bots, or ticks
/// that fell behind because other processes held the core (this shared machine) do not change
/// what a room-tick costs in CPU.
fn cpu_measured(step: &Step) -> bool {
    step.connected >= step.clients as usize && step.worker_utilization <= 0.9
}

/// The least-squares line through `points`: intercept and slope; `None` unless two differ in x.
fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if points.len() < 2 || sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    Some((mean_y - slope * mean_x, slope))
}

/// What [`growth`] fits: rooms, room-ticks per second and CPU per room-tick of each step.
fn points(steps: &[&Step]) -> Vec<(u64, f64, f64)> {
    steps.iter().map(|s| (s.rooms, s.room_ticks_per_second, s.cpu_us_per_room_tick)).collect()
}

fn verdict(steps: &[Step], args: &LoadArgs) -> Verdict {
    let sustained: Vec<&Step> = steps.iter().filter(host_held).collect();
    // The fit takes every step that measured the CPU of all its rooms, late or not.
    let measured: Vec<&Step> = steps.iter().filter(|s| cpu_measured(s)).collect();
    let (first, last) = (sustained.first(), sustained.last());
    let per_tick = last.map_or(0.0, |s| s.cpu_us_per_room_tick);
    let rooms_per_core = if per_tick > 0.0 { 1e6 / f64::from(TICK_HZ) / per_tick } else { 0.0 };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Verdict {
        rooms_per_core,
        rooms_per_machine: rooms_per_core * args.workers.min(cores) as f64,
        growth: growth(&points(&measured), args.workers),
        rooms_sustained: last.map_or(0, |s| s.rooms),
        cost_growth: match (first, last) {
            (Some(a), Some(b)) if a.cpu_us_per_room_tick > 0.0 => {
                b.cpu_us_per_room_tick / a.cpu_us_per_room_tick
            }
            _ => 0.0,
        },
        limit: steps.last().and_then(|s| s.limit.clone()),
    }
}

fn line(step: &Step) -> String {
    let p = &step.phases_us;
    let get = |name: &str| p.get(name).copied().unwrap_or(0.0);
    format!(
        "{:>4} rooms {:>5} clients, wait {}: {:>6.1} us CPU per room-tick ({:>5.1} without \
         simulate), worker {:>4.0}% busy, lateness p50 {:.3} p99 {:.3} (wake {:.3}, busy {:.3}) \
         max {:.2} ms, replicate {:.1} decrypt {:.1} encrypt {:.1} other {:.1} us, own views \
         {:.2} a room-tick; bots {} of {} joined, {:.0} snapshots/s each, {:.1} us CPU a frame, \
         {:.1}% of frames late{}",
        step.rooms,
        step.clients,
        step.wait,
        step.cpu_us_per_room_tick,
        step.cpu_us_per_room_tick_without_simulate,
        step.worker_utilization * 100.0,
        step.tick_lateness_ms.p50,
        step.tick_lateness_ms.p99,
        step.tick_lateness_ms.wake_p99,
        step.tick_lateness_ms.busy_p99,
        step.tick_lateness_ms.max,
        get("replicate"),
        get("decrypt"),
        get("encrypt"),
        get("other"),
        step.views_own_per_room_tick,
        step.bots.joined,
        step.bots.clients,
        step.snapshots_per_client_second,
        step.bots.cpu_us_per_frame(),
        step.bots.frames_late as f64 / step.bots.frames.max(1) as f64 * 100.0,
        step.limit.as_ref().map_or(String::new(), |l| format!(" -- stop: {l}")),
    )
}

fn print(steps: &[Step], verdict: &Verdict, args: &LoadArgs) {
    let scopes: Vec<&str> =
        rally_driver::host::telemetry::SCOPES.iter().map(|s| s.name()).chain(["other"]).collect();
    println!("\nus per room-tick by scope (mean over the window):");
    print!("{:>6}", "rooms");
    for s in &scopes {
        print!(" {:>9}", s);
    }
    println!(" {:>9}", "total");
    for step in steps {
        print!("{:>6}", step.rooms);
        for s in &scopes {
            print!(" {:>9.2}", step.phases_us.get(*s).copied().unwrap_or(0.0));
        }
        println!(" {:>9.2}", step.cpu_us_per_room_tick);
    }
    println!(
        "\nthe workers' loop: wake-ups per worker-tick, reads (empty) per room-tick, \
         datagrams per send:"
    );
    for step in steps {
        let s = &step.syscalls;
        println!(
            "{:>6} {:>9.2} {:>9.2} ({:.2}) {:>9.2}",
            step.rooms,
            s.wakeups_per_worker_tick,
            s.reads_per_room_tick,
            s.empty_reads_per_room_tick,
            s.datagrams_per_send
        );
    }
    let costs: Vec<f64> = steps.iter().map(|s| s.cpu_us_per_room_tick_without_simulate).collect();
    let c: Summary = summary(&costs);
    println!(
        "\nCPU per room-tick without simulate over the ramp: mean {:.1}, min {:.1}, max {:.1} us \
         (target <= {TARGET_US})",
        c.mean,
        costs.iter().copied().fold(f64::MAX, f64::min),
        c.max
    );
    println!(
        "rooms per core at {TICK_HZ} Hz (from the CPU per room-tick at the largest sustained \
         step): {:.0}; per machine ({} worker(s), one core each): {:.0}; rooms run within every \
         budget: {}; cost growth from the first to that step: {:.2}x (target <= 1.3)",
        verdict.rooms_per_core,
        args.workers,
        verdict.rooms_per_machine,
        verdict.rooms_sustained,
        verdict.cost_growth
    );
    if bots_share_cores(args) {
        let why = if args.bots_beside {
            "--bots-beside puts them there"
        } else {
            "the machine has no core to give them alone"
        };
        println!(
            "(the bots share the workers' cores ({why}), so the workers' CPU and lateness \
             include what the bots cost them: rooms per machine is not measured here, only \
             what the workers did beside their own load generator)"
        );
    }
    let bots = steps.iter().rfind(|s| s.bots.frames > 0).map(|s| s.bots.cpu_us_per_frame());
    if let Some(us) = bots.filter(|us| *us > 0.0) {
        let rooms = 1e6 / (f64::from(TICK_HZ) * CLIENTS as f64 * us);
        println!(
            "the bots: {us:.1} us CPU per frame at the last step, about {rooms:.0} rooms' \
             clients per bot core; a step whose bots ran more than 1% of their frames late \
             measured a lighter load than W3's (its limit says so)"
        );
    }
    if let Some(g) = &verdict.growth {
        let by_step: Vec<String> =
            g.per_room_tick_us_by_step.iter().map(|(r, us)| format!("{r}: {us:.1}")).collect();
        println!(
            "fit over the steps that ran all their rooms: a worker's fixed cost {:.0} us CPU per \
             second ({:.1}% of a core), {:.1} us per room-tick beyond it; per room-tick \
             without the fixed share, by rooms: {}; growth {:.2}x; rooms per core by the fit: \
             {:.0}",
            g.fixed_us_per_worker_second,
            g.fixed_us_per_worker_second / 1e4,
            g.per_room_tick_us,
            by_step.join(", "),
            g.growth,
            g.rooms_per_core
        );
    }
    if let Some(limit) = &verdict.limit {
        println!("the ramp stopped: {limit}");
    }
}

fn draw(dir: &std::path::Path, runs: &[Run]) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    let dt_ms = 1e3 / f64::from(TICK_HZ);
    let named = |name: &str, wait: Wait| {
        if runs.len() > 1 {
            format!("{name}, wait {wait}")
        } else {
            name.to_string()
        }
    };
    // Frame time: the CPU a worker spends per tick period, against the tick itself.
    let mut series = Vec::new();
    let mut per_room = Vec::new();
    for run in runs {
        let steps = &run.steps;
        let frame: Vec<(f64, f64)> =
            steps.iter().map(|s| (s.rooms as f64, s.worker_utilization * dt_ms)).collect();
        series.push((named("frame time (CPU per 7.8 ms tick)", run.wait), frame));
        per_room.push((
            named("CPU per room-tick", run.wait),
            steps.iter().map(|s| (s.rooms as f64, s.cpu_us_per_room_tick / 1e3)).collect(),
        ));
    }
    // Where the cost per room-tick of the largest step the host sustained, held, would fill
    // the tick (the first policy's).
    if let Some(last) = runs[0].steps.iter().rfind(host_held) {
        let per_room_ms = last.cpu_us_per_room_tick / 1e3;
        if per_room_ms > 0.0 {
            let from = (last.rooms as f64, last.worker_utilization * dt_ms);
            let line = vec![from, (dt_ms / per_room_ms, dt_ms)];
            let name = named("extrapolated from the largest sustained step", runs[0].wait);
            series.push((name, line));
        }
    }
    let path = dir.join("load-frame-time.png");
    crate::plot::lines(
        &path,
        "W3: a worker's CPU per tick against rooms (128 Hz, sealed)",
        ("reference rooms on one worker", "milliseconds per tick period"),
        &series,
        &[("the tick: 7.8 ms".to_string(), dt_ms)],
    )?;
    println!("wrote {}", path.display());
    let path = dir.join("load-room-cost.png");
    let target = TARGET_US / 1e3;
    crate::plot::lines(
        &path,
        "W3: CPU per room-tick against rooms",
        ("reference rooms on one worker", "milliseconds of CPU per room-tick"),
        &per_room,
        &[("target: 25 us".to_string(), target)],
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{growth, median, LoadArgs, Wait};
    use clap::Parser;

    /// `rally-bench load`'s options alone, as its command line gives them.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    #[test]
    fn the_command_line_takes_a_list_of_sleep_policies_and_refuses_a_bad_one_by_name() {
        // Goal: `--waits` reaches the bench as the policies listed, defaults to the host's own
        // (no steps), and a bad entry stops the bench with what to write instead.
        let parse = |args: &[&str]| Cli::try_parse_from([&["load"], args].concat());
        let cli = parse(&["--waits", "200,none,spin50"]).expect("valid policies");
        assert_eq!(cli.load.waits, [Wait::Steps(200), Wait::None, Wait::Spin(50)]);
        assert_eq!(parse(&[]).expect("defaults").load.waits, [Wait::None]);
        assert!(!parse(&[]).expect("defaults").load.bots_beside);
        assert!(parse(&["--bots-beside"]).expect("a flag").load.bots_beside);
        for (bad, says) in [("200,0", "out of range"), ("2000", "write none"), ("fast", "spinN")] {
            let error = parse(&["--waits", bad]).expect_err(bad).to_string();
            assert!(error.contains("--waits") && error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn the_median_of_pairs_is_the_middle_or_the_mean_of_the_two_middle_ones() {
        // Goal: six pairs' median is what the docs compute by hand (the mean of the third and
        // fourth), not the upper middle one; an odd count gives its middle, none gives 0.
        assert!((median(&[44.0, 21.5, 26.3, 24.1, 39.0, 21.9]) - 25.2).abs() < 1e-9);
        assert_eq!(median(&[33.2, 19.2, 38.8]), 33.2);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn the_fit_separates_a_workers_fixed_cost_from_the_cost_per_room_tick() {
        // Goal: two workers that burn 20 ms of CPU a second each with no room, and 15 us per
        // room-tick, show 328 us per room-tick at 1 room but no growth once the fixed share is
        // taken out. Method: steps built from that model; then a ramp whose last step (64
        // rooms) costs 20% more per room-tick: growth the fit must report, not absorb.
        let model = |rooms: u64, extra: f64| {
            let ticks = rooms as f64 * 128.0;
            (rooms, ticks, (2.0 * 20_000.0 + ticks * 15.0 * extra) / ticks)
        };
        let flat = growth(&[model(1, 1.0), model(8, 1.0), model(32, 1.0)], 2).unwrap();
        assert!((flat.fixed_us_per_worker_second - 20_000.0).abs() < 1e-6);
        assert!((flat.per_room_tick_us - 15.0).abs() < 1e-9);
        assert!((flat.growth - 1.0).abs() < 1e-9);
        // 980 ms of each second left, 1.92 ms of room-ticks a second per room.
        assert!((flat.rooms_per_core - 980_000.0 / (128.0 * 15.0)).abs() < 1e-6);
        let steps = [model(1, 1.0), model(2, 1.0), model(4, 1.0), model(64, 1.2)];
        let grown = growth(&steps, 2).unwrap();
        assert!(grown.growth > 1.1, "growth {}", grown.growth);
        assert!(growth(&[model(4, 1.0)], 1).is_none(), "one step fits nothing");
    }
}
