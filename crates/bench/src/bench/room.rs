//! `rally-bench room`: the engine's own CPU cost per reference room-tick (W3 of
//! docs/design.md, the part the rooms issue owns).
//!
//! The reference room: 10 clients each sending an input every tick at 128 Hz, 256 bodies of
//! which 64 move every tick (the 10 controllers the inputs drive and 54 bodies on orbits), 192
//! at rest. Everything runs in one process over perfect in-memory links in virtual time; the
//! bench reads the OS clock around the room's work only:
//!
//! - `ingest`: `Room::receive` for every input frame that arrived (decode, apply);
//! - `interact`, `replicate` (quantize once, build and encode ten per-client snapshots) and
//!   `transmit` (hand them to the endpoint): the room's own phases, timed by a
//!   `PhaseObserver`;
//! - `simulate` is timed too but left out of the engine total: it is the game's code (here a
//!   trivial orbit; physics in a real game), which the host budgets separately.
//!
//! The transport's packetization and the sockets are not in these figures (a host benchmark
//! will measure the whole host). Allocations are counted per tick by the binary's counting
//! allocator.
//!
//! Two scene cases run in the same process after it (rally-scene, [issue 23]'s targets; the
//! scenes are generated in [`super::room_scene`]):
//!
//! - **sandbox-64**: `scenes/sandbox.toml` with 64 bouncing balls added (10 players sending the
//!   standard XR input every tick at the scene's 120 Hz, which moves their avatars: 30 more
//!   entities), timed exactly as the reference room and printed beside it: the engine's CPU
//!   per room-tick against the reference room's, and the physics (`simulate`) apart; on the
//!   fast pipeline (the sandbox's; each input's hand poses forwarded on arrival, in `ingest`)
//!   and on the greedy one (no forwarding, as the reference room, which drives nothing). The
//!   bench counts the entities that moved each tick.
//! - **settled-256**: 256 dynamic boxes on a floor, 10 players; after the boxes settle, the
//!   snapshot bytes per client per tick against the scene's per-client byte budget, and whether
//!   every client holds every body where the room has it.
//!
//! [issue 23]: the scene issue; docs/benchmarks.md gives the figures.

use super::room_scene;
use crate::alloc_counter;
use crate::game::{reference_room_sized, BODIES, CLIENTS, MOVING};
use crate::machine::Machine;
use crate::plot::{self, Panel};
use crate::stats::{summary, Summary};
use rally_engine::{
    connection_config, ClientConfig, ClientSession, Phase, PhaseObserver, Room, RoomConfig,
    Simulation, PHASES,
};
use rally_netem::LinkConfig;
use rally_proto::{EndpointConfig, Event};
use rally_sim::sandbox::HandInput;
use rally_sim::{Net, VirtualClock};
use serde::Serialize;
use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

/// The host's target for a whole room-tick (all phases but physics).
const TARGET_US: f64 = 25.0;
/// Entities the sandbox scene moves a tick: its 64 balls and its 10 players' heads and hands.
const SCENE_MOVING: usize = 64 + CLIENTS * 3;
/// The sandbox scene's entities: those and its 16 bodies at rest.
const SCENE_ENTITIES: usize = SCENE_MOVING + 16;

/// Options of `rally-bench room`.
#[derive(Debug, clap::Args)]
pub struct RoomArgs {
    /// 10 seconds of ticks instead of 60 (and 5 instead of 20 for the scene cases).
    #[arg(long)]
    pub quick: bool,
    /// The reference room only, without the scene cases.
    #[arg(long)]
    pub reference_only: bool,
    /// This case only (for a profiler: scripts/room-instructions.sh counts one case's
    /// instructions per room-tick under callgrind).
    #[arg(long, value_enum, value_name = "CASE")]
    pub case: Option<Case>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Draw the per-phase plot into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// The cases `rally-bench room` runs, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// The W3 reference room.
    Reference,
    /// The reference room moving as many entities a tick as the sandbox scene does
    /// (`SCENE_MOVING` of its 256): the same replicated motion.
    #[value(name = "reference-94")]
    Reference94,
    /// The reference room in the sandbox scene's shape: `SCENE_ENTITIES` entities,
    /// `SCENE_MOVING` moving: reference-94 less this is what 146 still entities cost.
    #[value(name = "reference-110")]
    Reference110,
    /// The sandbox with 64 moving bodies on the fast pipeline.
    SandboxFast,
    /// The sandbox with 64 moving bodies on the greedy pipeline.
    SandboxGreedy,
    /// 256 settled bodies against the byte budget.
    Settled,
}

impl RoomArgs {
    /// Whether `case` runs.
    fn runs(&self, case: Case) -> bool {
        let listed = case == Case::Reference || !self.reference_only;
        listed && self.case.is_none_or(|only| only == case)
    }
}

/// Times the phases of one tick with the OS clock.
#[derive(Default)]
struct PhaseTimer {
    started: Option<std::time::Instant>,
    micros: [f64; 5],
}

impl PhaseObserver for PhaseTimer {
    #[allow(clippy::disallowed_methods)] // a benchmark reads the clock
    fn enter(&mut self, _phase: Phase) {
        self.started = Some(std::time::Instant::now());
    }
    fn exit(&mut self, phase: Phase) {
        let index = PHASES.iter().position(|p| *p == phase).unwrap_or(0);
        self.micros[index] = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e6);
    }
}

/// Per-tick samples.
#[derive(Default)]
pub(super) struct Samples {
    ingest: Vec<f64>,
    phases: [Vec<f64>; 5],
    engine: Vec<f64>,
    allocations: Vec<f64>,
    snapshot_bytes: Vec<f64>,
    /// Entities whose pose changed over the tick.
    moved: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    /// "reference" or the scene case's name.
    room: String,
    tick_rate: u32,
    clients: usize,
    bodies: usize,
    moving: usize,
    /// Entities whose pose changed, per tick, as measured.
    moved_per_tick: Summary,
    ticks: usize,
    /// Microseconds per room-tick: ingest, each phase, and the engine total (simulate excluded).
    micros: BTreeMap<String, Summary>,
    allocations_per_tick: Summary,
    pub(super) snapshot_bytes_per_client: Summary,
    target_us: f64,
}

/// Client `i`'s input at `t` seconds.
type InputFn<I> = fn(usize, f64) -> I;

/// A room, its network and its clients' sessions, with how far each event log was read.
pub(super) struct Bench<S: Simulation> {
    pub(super) room: Room<S>,
    net: Net,
    pub(super) sessions: Vec<ClientSession<S::Input, S::Message>>,
    input: InputFn<S::Input>,
    seen_server: usize,
    seen_clients: Vec<usize>,
}

impl<S: Simulation> Bench<S> {
    /// `room` with `clients` connected and joined, each sending `input` every tick.
    pub(super) fn new(
        room: Room<S>,
        clients: usize,
        input: InputFn<S::Input>,
    ) -> Result<Self, Box<dyn Error>> {
        let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
        let mut net = Net::secure(endpoint, LinkConfig::default(), clients, 1);
        if !net.connect_all(Duration::from_secs(1)) {
            return Err("the bench's clients did not connect".into());
        }
        let session = || ClientSession::new(ClientConfig::default()).expect("valid");
        let sessions = (0..clients).map(|_| session()).collect();
        let seen_clients = vec![0; clients];
        let mut bench = Bench { room, net, sessions, input, seen_server: 0, seen_clients };
        for _ in 0..10 {
            bench.deliver_to_room();
            bench.room.transmit(&mut bench.net.server);
            bench.net.drive();
            bench.deliver_to_clients();
            bench.net.drive();
        }
        if bench.sessions.iter().any(|s| s.client_id().is_none()) {
            return Err("the bench's clients did not join".into());
        }
        Ok(bench)
    }

    /// Hands every event the server endpoint produced to the room: what `ingest` times.
    fn deliver_to_room(&mut self) {
        let now = self.net.now;
        for (handle, event) in &self.net.server_events[self.seen_server..] {
            match event {
                Event::Connected => self.room.accept(*handle),
                Event::Message { channel, payload } => {
                    self.room.receive(now, *handle, *channel, payload)
                }
                Event::Disconnected { .. } => {}
            }
        }
        self.seen_server = self.net.server_events.len();
    }

    /// Hands every client endpoint's events to its session, and sends what the sessions queued.
    fn deliver_to_clients(&mut self) {
        let now = self.net.now;
        for (i, session) in self.sessions.iter_mut().enumerate() {
            let client = &mut self.net.clients[i];
            for (handle, event) in &client.events[self.seen_clients[i]..] {
                match event {
                    Event::Connected => session.connected(*handle),
                    Event::Message { channel, payload } => session.receive(now, *channel, payload),
                    Event::Disconnected { .. } => {}
                }
            }
            self.seen_clients[i] = client.events.len();
            session.transmit(&mut client.endpoint);
        }
    }

    /// Every client sends an input sampled now.
    fn inputs(&mut self) {
        let now = self.net.now;
        for (i, session) in self.sessions.iter_mut().enumerate() {
            session.send_input(now, (self.input)(i, now.as_secs_f64()));
            session.transmit(&mut self.net.clients[i].endpoint);
        }
        self.net.drive();
    }
}

/// Runs the benchmark.
pub fn run(args: &RoomArgs) -> Result<(), Box<dyn Error>> {
    let ticks = if args.quick { 1280 } else { 7680 };
    // The reference room, then as it would be with the sandbox scene's motion and shape.
    let shapes = [
        (Case::Reference, "reference", BODIES, MOVING),
        (Case::Reference94, "reference-94", BODIES, SCENE_MOVING),
        (Case::Reference110, "reference-110", SCENE_ENTITIES, SCENE_MOVING),
    ];
    let mut references = Vec::new();
    for (case, name, bodies, moving) in shapes {
        if args.runs(case) {
            let room = reference_room_sized(RoomConfig::default(), 1, bodies, moving)?;
            let mut bench = Bench::new(room, CLIENTS, HandInput::on_circle)?;
            let samples = measure(&mut bench, ticks, 256)?;
            let report = report(name, 128, &samples, ticks, (CLIENTS, bodies, moving));
            print(&report);
            references.push((case, report));
        }
    }
    let seconds = if args.quick { 5 } else { 20 };
    // The reference room drives no entity, so it has no fast path to pay for: the greedy
    // pipeline leaves that cost out of the scene's figures.
    let mut sandboxes = Vec::new();
    for (case, pipeline) in [(Case::SandboxFast, "fast"), (Case::SandboxGreedy, "greedy")] {
        if args.runs(case) {
            let sandbox = room_scene::sandbox_64(seconds, pipeline)?;
            print(&sandbox);
            for (_, reference) in &references {
                compare(reference, &sandbox);
            }
            sandboxes.push((case, sandbox));
        }
    }
    let mut settled = None;
    if args.runs(Case::Settled) {
        let report = room_scene::settled_256(seconds)?;
        room_scene::print_settled(&report);
        settled = Some(report);
    }
    if let Some(path) = &args.json {
        let mut json = serde_json::json!({
            "bench": "room",
            "quick": args.quick,
            "machine": Machine::detect(),
        });
        for (case, reference) in &references {
            let key = match case {
                Case::Reference => "report",
                Case::Reference94 => "reference_94",
                _ => "reference_110",
            };
            json[key] = serde_json::to_value(reference)?;
        }
        for (case, sandbox) in &sandboxes {
            let key = match case {
                Case::SandboxFast => "scene_sandbox_64",
                _ => "scene_sandbox_64_greedy",
            };
            json[key] = serde_json::to_value(sandbox)?;
        }
        if let Some(settled) = &settled {
            json["scene_settled_256"] = serde_json::to_value(settled)?;
        }
        super::write_json(path, &json)?;
    }
    if let (Some(dir), Some(((_, reference), others))) = (&args.plot, references.split_first()) {
        let rooms: Vec<&Report> = others.iter().chain(&sandboxes).map(|(_, r)| r).collect();
        draw(dir, reference, &rooms)?;
    }
    Ok(())
}

/// Ticks `bench`'s room `warmup + ticks` times, each client sending an input every tick, and
/// times the last `ticks`; fails if a client fell behind.
pub(super) fn measure<S: Simulation>(
    bench: &mut Bench<S>,
    ticks: usize,
    warmup: usize,
) -> Result<Samples, Box<dyn Error>> {
    let mut samples = Samples::default();
    let clients = bench.sessions.len() as f64;
    let progress = indicatif::ProgressBar::new((ticks + warmup) as u64);
    let dt = bench.room.config().dt();
    let mut poses = Vec::new();
    for tick in 0..ticks + warmup {
        let now = bench.net.now;
        bench.inputs();
        let before = alloc_counter::allocations();
        let ingest = time(|| bench.deliver_to_room());
        let bytes_before = bench.room.stats().snapshot_bytes;
        let mut timer = PhaseTimer::default();
        bench.room.tick_observed(now, &mut bench.net.server, &mut timer);
        let allocations = alloc_counter::allocations() - before;
        bench.net.drive();
        bench.deliver_to_clients();
        let moved = moved(bench.room.world(), &mut poses);
        if tick >= warmup {
            let bytes = (bench.room.stats().snapshot_bytes - bytes_before) as f64;
            samples.record(ingest, &timer, allocations, bytes / clients);
            samples.moved.push(moved as f64);
        }
        progress.inc(1);
        bench.net.run_until(now + dt);
    }
    progress.finish_and_clear();
    check_converged(bench)?;
    Ok(samples)
}

/// How many entities' poses differ from `poses`, which then become the world's.
fn moved(world: &rally_engine::World, poses: &mut Vec<(u32, rally_engine::Transform)>) -> usize {
    let now: Vec<_> = world.iter().map(|(id, e)| (id, e.transform)).collect();
    let moved = now.iter().filter(|pose| !poses.contains(pose)).count();
    *poses = now;
    moved
}

impl Samples {
    fn record(&mut self, ingest: f64, timer: &PhaseTimer, allocations: u64, bytes: f64) {
        let simulate = PHASES.iter().position(|p| *p == Phase::Simulate).unwrap_or(2);
        let phases: f64 =
            timer.micros.iter().enumerate().filter(|(k, _)| *k != simulate).map(|(_, v)| v).sum();
        self.ingest.push(ingest);
        for (k, v) in timer.micros.iter().enumerate() {
            self.phases[k].push(*v);
        }
        self.engine.push(ingest + phases);
        self.allocations.push(allocations as f64);
        self.snapshot_bytes.push(bytes);
    }
}

#[allow(clippy::disallowed_methods)] // a benchmark reads the clock
fn time(f: impl FnOnce()) -> f64 {
    let start = std::time::Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1e6
}

/// The measurement means something only if the clients really kept up with the room.
fn check_converged<S: Simulation>(bench: &Bench<S>) -> Result<(), Box<dyn Error>> {
    let room = bench.room.snapshot();
    for (i, session) in bench.sessions.iter().enumerate() {
        let tick = session.snapshot().map(|s| s.tick());
        if tick.is_none_or(|t| room.tick().wrapping_sub(t) > 2) {
            return Err(format!(
                "client {i} fell behind: at tick {tick:?}, the room at {}",
                room.tick()
            )
            .into());
        }
    }
    Ok(())
}

/// The report of `samples`; `sizes` is (clients, bodies, moving) as the room was built.
pub(super) fn report(
    room: &str,
    tick_rate: u32,
    samples: &Samples,
    ticks: usize,
    sizes: (usize, usize, usize),
) -> Report {
    let mut micros = BTreeMap::new();
    micros.insert("0 ingest".to_string(), summary(&samples.ingest));
    for (k, phase) in PHASES.iter().enumerate().skip(1) {
        let name = format!("{k} {phase:?}").to_lowercase();
        micros.insert(name, summary(&samples.phases[k]));
    }
    micros.insert("engine total".to_string(), summary(&samples.engine));
    let (clients, bodies, moving) = sizes;
    Report {
        room: room.to_string(),
        tick_rate,
        clients,
        bodies,
        moving,
        moved_per_tick: summary(&samples.moved),
        ticks,
        micros,
        allocations_per_tick: summary(&samples.allocations),
        snapshot_bytes_per_client: summary(&samples.snapshot_bytes),
        target_us: TARGET_US,
    }
}

pub(super) fn print(report: &Report) {
    println!(
        "{} room: {} clients, {} bodies ({} moving; measured {:.1} entities moved per tick), \
         {} ticks at {} Hz",
        report.room,
        report.clients,
        report.bodies,
        report.moving,
        report.moved_per_tick.mean,
        report.ticks,
        report.tick_rate
    );
    println!("{:<16} {:>9} {:>9} {:>9} {:>9}", "us per tick", "mean", "p50", "p99", "max");
    for (name, s) in &report.micros {
        println!("{name:<16} {:>9.2} {:>9.2} {:>9.2} {:>9.2}", s.mean, s.p50, s.p99, s.max);
    }
    let a = report.allocations_per_tick;
    let b = report.snapshot_bytes_per_client;
    println!("allocations per tick: mean {:.1}, max {:.0}", a.mean, a.max);
    println!("snapshot bytes per client per tick: mean {:.0}, max {:.0}", b.mean, b.max);
    println!("engine total = ingest + interact + replicate + transmit (simulate is the game's)");
    let total = report.micros["engine total"].mean;
    let verdict = if total <= TARGET_US { "within" } else { "over" };
    println!(
        "engine mean {total:.1} us per room-tick: {verdict} the [scale] budget of {TARGET_US} us \
         for a whole room-tick (transport and encryption still to add)"
    );
    println!();
}

/// The scene target: the engine's CPU per room-tick of the sandbox at most the reference's.
fn compare(reference: &Report, scene: &Report) {
    let (r, s) = (&reference.micros["engine total"], &scene.micros["engine total"]);
    let physics = &scene.micros["2 simulate"];
    let verdict = if s.mean <= r.mean { "at most" } else { "OVER" };
    println!(
        "scene target: engine CPU per room-tick, {} {:.2} us mean (p99 {:.2}) vs {} \
         {:.2} us (p99 {:.2}): {verdict} that room's; the scene's physics adds {:.1} us \
         mean (p99 {:.1}), the game's share, budgeted apart",
        scene.room, s.mean, s.p99, reference.room, r.mean, r.p99, physics.mean, physics.p99
    );
    println!();
}

/// One figure of a summary.
type Statistic = fn(&Summary) -> f64;

fn draw(dir: &std::path::Path, report: &Report, scenes: &[&Report]) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    let groups: Vec<String> = report.micros.keys().cloned().collect();
    let rooms: Vec<&Report> = std::iter::once(report).chain(scenes.iter().copied()).collect();
    // A panel per statistic, a bar per room: the rooms side by side in each phase.
    let stats: [(&str, Statistic); 3] =
        [("mean", |s| s.mean), ("p50", |s| s.p50), ("p99", |s| s.p99)];
    let panels: Vec<Panel> = stats
        .iter()
        .map(|(stat, of)| Panel {
            title: format!("CPU per room-tick by phase, {stat}"),
            y_label: "microseconds (log)".into(),
            groups: groups.clone(),
            series: rooms
                .iter()
                .map(|room| {
                    let values =
                        groups.iter().map(|g| room.micros.get(g).map_or(0.0, of)).collect();
                    (room.room.clone(), values)
                })
                .collect(),
        })
        .collect();
    let path = dir.join("room-phases.png");
    let title = match scenes.is_empty() {
        false => "Engine cost per room-tick: the W3 reference room and the sandbox scene",
        true => "W3 reference room: engine cost per tick",
    };
    plot::grouped_bars(&path, title, panels.len(), &panels)?;
    println!("wrote {}", path.display());
    Ok(())
}
