//! `rally-bench latency`: the W2 workload of docs/design.md, total latency against the
//! latency model.
//!
//! A player's controller holds a paddle (grab chain depth 1) or a handle holding a paddle
//! holding a ball (depth 3) in a rapier3d world; the player samples a new hand pose every
//! frame and the meter in its session times each input from sampling to the first frame that
//! presents its effect, on the client's own clock. The client's frames and the server's ticks
//! run at the same nominal rate, each with a random phase and a drift of up to 300 ppm, so no
//! result depends on the two being aligned.
//!
//! Each sample is judged against its own model (`rally_engine::LatencyModel`): L_best =
//! ceil(RTT / dt) * dt, L_worst = ceil((RTT + dt) / dt) * dt, from the round trip that input
//! saw, which the meter measures without synchronized clocks (the server reports how long it
//! held each input). Without jitter that is the link's RTT; with jitter it varies per sample.
//!
//! `--mode sim` runs in virtual time through the emulated link, once without jitter and once
//! per `--jitter`. `--mode real` runs a server process and a player process (`rally-bench peer`) on
//! UDP sockets and their own OS clocks through a relay in this process that delays each
//! datagram by half the RTT (no jitter there). Real mode also measures the OS: a process woken
//! late samples or presents late, which moves samples by a frame either way.
//!
//! Observers (the same inputs seen on another client's frames) are measured in sim mode only,
//! on virtual time's one clock: two processes' clocks cannot time one input without a clock
//! sync the meter does not rely on. Their model is the network's: RTT to RTT + 2 dt. The same
//! observer measures interpolation (see `smoothness`).

mod scene;
mod smoothness;

use crate::game::Paddles;
use crate::machine::Machine;
use crate::plot;
use crate::stats;
use rally_engine::RoomConfig;
use rally_engine::{ClientConfig, ClientSession, LatencyModel, LatencySample, Pipeline, Room};
use rally_netem::LinkConfig;
use rally_proto::Instant;
use rally_sim::sandbox::HandInput;
use rally_sim::RoomNet;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use smoothness::Smoothness;
use stats::summary;
use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `rally-bench latency`.
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    /// `sim`: virtual time through the emulated link; `real`: a server and a client thread on
    /// UDP sockets and the OS clock through a delay relay on loopback.
    #[arg(long, default_value = "sim")]
    pub mode: String,
    /// Six one-second runs per configuration instead of twenty two-second ones.
    #[arg(long)]
    pub quick: bool,
    /// Tick and frame rates, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [72, 90, 120, 144])]
    pub hz: Vec<u32>,
    /// The link's round trip, milliseconds (half each way).
    #[arg(long, default_value_t = 10.0)]
    pub rtt: f64,
    /// Sim mode: also run with the link's one-way delay jittered by this standard deviation,
    /// milliseconds (comma separated; 0 for none).
    #[arg(long, value_delimiter = ',', default_values_t = [2.0])]
    pub jitter: Vec<f64>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Draw one CDF plot per rate into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

const PIPELINES: [(Pipeline, &str); 3] =
    [(Pipeline::Naive, "naive"), (Pipeline::Greedy, "greedy"), (Pipeline::Fast, "fast")];
const DEPTHS: [usize; 2] = [1, 3];
/// The most a clock drifts from nominal, parts per million.
const DRIFT_PPM: f64 = 300.0;

#[derive(Debug, Clone, Serialize)]
struct LatencySummary {
    mean: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

#[derive(Debug, Clone, Serialize)]
struct ModelMs {
    best: f64,
    worst: f64,
}

/// The means of where total latency went, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
struct Parts {
    round_trip: f64,
    server_hold: f64,
    frame_wait: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    /// `paddles` (the demo's paddles room) or `scene` (the sandbox scene's standard XR player).
    room: &'static str,
    pipeline: String,
    /// `player` (the client whose input it is) or `observer` (another client).
    viewer: &'static str,
    hz: u32,
    chain_depth: usize,
    link_rtt_ms: f64,
    link_jitter_ms: f64,
    samples: usize,
    latency_ms: LatencySummary,
    /// The model at the link's nominal RTT; each sample is judged against its own.
    model_ms: ModelMs,
    within_model_fraction: f64,
    at_best_fraction: f64,
    /// Player rows: the means of the meter's split.
    #[serde(skip_serializing_if = "Option::is_none")]
    parts_ms: Option<Parts>,
    #[serde(skip)]
    latencies: Vec<f64>,
}

/// One configuration of the benchmark.
#[derive(Debug, Clone, Copy)]
pub(super) struct Setup {
    /// `paddles` or `scene`.
    room: &'static str,
    pipeline: Pipeline,
    name: &'static str,
    hz: u32,
    depth: usize,
    rtt_ms: f64,
    jitter_ms: f64,
}

/// Runs the benchmark.
pub fn run(args: &LatencyArgs) -> Result<(), Box<dyn Error>> {
    if args.mode != "sim" && args.mode != "real" {
        return Err(format!("--mode {}: use sim or real", args.mode).into());
    }
    if args.hz.iter().any(|hz| !(10..=1000).contains(hz)) {
        return Err("--hz: rates must be between 10 and 1000, such as --hz 72,90,120".into());
    }
    if !(0.0..=1000.0).contains(&args.rtt) {
        return Err("--rtt: milliseconds between 0 and 1000, such as --rtt 10".into());
    }
    if args.jitter.iter().any(|j| !(0.0..=100.0).contains(j)) {
        return Err("--jitter: milliseconds between 0 and 100, such as --jitter 2".into());
    }
    // Real mode's relay delays every datagram alike: no jitter there.
    let mut jitters = vec![0.0];
    if args.mode == "sim" {
        jitters.extend(args.jitter.iter().filter(|j| **j > 0.0));
    }
    let mut setups = Vec::new();
    for &jitter_ms in &jitters {
        for &hz in &args.hz {
            for depth in DEPTHS {
                for (pipeline, name) in PIPELINES {
                    let room = "paddles";
                    let rtt_ms = args.rtt;
                    setups.push(Setup { room, pipeline, name, hz, depth, rtt_ms, jitter_ms });
                }
            }
            // The scene room: a hand holding a block, in virtual time only.
            if args.mode == "sim" {
                for (pipeline, name) in &PIPELINES[1..] {
                    let (room, pipeline, name, depth) = ("scene", *pipeline, *name, 1);
                    let rtt_ms = args.rtt;
                    setups.push(Setup { room, pipeline, name, hz, depth, rtt_ms, jitter_ms });
                }
            }
        }
    }
    let progress = indicatif::ProgressBar::new(setups.len() as u64);
    let (mut rows, mut observers, mut smooth) = (Vec::new(), Vec::new(), Vec::new());
    for setup in &setups {
        if args.mode == "real" {
            let seconds = if args.quick { 1 } else { 5 };
            let (samples, rtt) = measure_real(setup, seconds)?;
            // The OS clock's frames are nominal.
            let (dt, nominal) =
                (Duration::from_secs(1) / setup.hz, Duration::from_secs_f64(rtt / 1e3));
            let judged: Vec<Judged> = samples
                .into_iter()
                .map(|s| (s, LatencyModel::new(s.round_trip.unwrap_or(nominal), dt, dt)))
                .collect();
            rows.push(player_row(setup, rtt, &judged));
        } else if setup.room == "scene" {
            let judged = measure_scene_runs(setup, args.quick)?;
            rows.push(player_row(setup, setup.rtt_ms, &judged));
        } else {
            let measured = measure_runs(setup, args.quick)?;
            rows.push(player_row(setup, setup.rtt_ms, &measured.player));
            observers.push(observer_row(setup, measured.observer));
            smooth.extend(measured.smooth.rows(setup));
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    print(&rows);
    if !observers.is_empty() {
        println!(
            "\nobservers: the same inputs seen on another client's frames, virtual time (model: \
             RTT to RTT + 2 dt; at best: at most RTT + dt)"
        );
        print_table(&observers);
        rows.extend(observers);
        // The table shows depth 1 of the two pipelines that matter; the JSON has every row.
        let shown: Vec<_> = smooth
            .iter()
            .filter(|r| r.chain_depth == 1 && r.pipeline != "naive")
            .cloned()
            .collect();
        smoothness::print(&shown);
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "bench": "latency",
            "mode": args.mode,
            "quick": args.quick,
            "machine": Machine::detect(),
            "results": rows,
            "interpolation": smooth,
        });
        super::write_json(path, &json)?;
    }
    if let Some(dir) = &args.plot {
        draw(dir, &rows)?;
    }
    Ok(())
}

/// Many short sim runs of one setup: each run has its own clock phases and drifts, which
/// covers the phases a long run would.
fn measure_runs(setup: &Setup, quick: bool) -> Result<Measured, Box<dyn Error>> {
    let (runs, seconds) = if quick { (6, 1) } else { (20, 2) };
    let mut all =
        Measured { player: Vec::new(), observer: Vec::new(), smooth: Smoothness::empty() };
    for run in 0..runs {
        let jitter = (setup.jitter_ms * 10.0) as u64;
        let seed = u64::from(setup.hz) * 1000 + setup.depth as u64 * 100 + run + jitter * 100_000;
        let measured = measure(setup, seconds, seed)?;
        all.player.extend(measured.player);
        all.observer.extend(measured.observer);
        all.smooth.merge(measured.smooth);
    }
    Ok(all)
}

/// [`measure_runs`] for the scene room: the player's samples only.
fn measure_scene_runs(setup: &Setup, quick: bool) -> Result<Vec<Judged>, Box<dyn Error>> {
    let (runs, seconds) = if quick { (6, 1) } else { (20, 2) };
    let mut all = Vec::new();
    for run in 0..runs {
        let jitter = (setup.jitter_ms * 10.0) as u64;
        let seed = u64::from(setup.hz) * 1000 + 900 + run + jitter * 100_000;
        all.extend(scene::measure(setup, seconds, seed)?);
    }
    Ok(all)
}

/// A player's sample and the model it is judged by: that of the round trip it saw, on the
/// client's frame time and the server's tick time, drift included.
type Judged = (LatencySample, LatencyModel);

/// One run's samples: the player's own (its session's meter) and an observer's latencies in
/// milliseconds (another client's frames showing the player's held paddle where the input put
/// it).
struct Measured {
    player: Vec<Judged>,
    observer: Vec<f64>,
    /// The observer's frames with and without interpolation.
    smooth: Smoothness,
}

/// One player and one observer through one pipeline for `seconds`, in virtual time.
fn measure(setup: &Setup, seconds: u64, seed: u64) -> Result<Measured, Box<dyn Error>> {
    let Setup { pipeline, hz, depth, rtt_ms, jitter_ms, .. } = *setup;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let config = RoomConfig { tick_rate: hz, pipeline, ..RoomConfig::default() };
    let mut room = Room::new(config, Paddles::new(depth), seed)?;
    let mut game = std::mem::replace(room.simulation_mut(), Paddles::new(0));
    game.set_table(room.world_mut())?;
    *room.simulation_mut() = game;
    let one_way = Duration::from_secs_f64(rtt_ms / 2000.0);
    let jitter = Duration::from_secs_f64(jitter_ms / 1000.0);
    // One path: jitter varies the delay but never reorders.
    let link = LinkConfig { delay: one_way, jitter, reorder: false, ..LinkConfig::default() };
    let mut net = RoomNet::new(room, 2, link, seed);
    let defer_inputs = pipeline == Pipeline::Naive;
    let client = ClientConfig { defer_inputs, ..ClientConfig::default() };
    net.sessions[0] = ClientSession::new(client)?;
    // Each clock has its own phase and drift.
    let nominal = 1.0 / f64::from(hz);
    let mut drifted = || nominal * (1.0 + (unit(&mut rng) * 2.0 - 1.0) * DRIFT_PPM * 1e-6);
    let (server_dt, player_dt, observer_dt) = (drifted(), drifted(), drifted());
    let server_phase = Duration::from_secs_f64(unit(&mut rng) * nominal);
    let (player_phase, observer_phase) = (unit(&mut rng) * nominal, unit(&mut rng) * nominal);
    net.set_tick_schedule(Instant::ZERO + server_phase, Duration::from_secs_f64(server_dt));
    net.connect(0);
    net.connect(1);
    net.run_for(Duration::from_secs(1));
    let player = net.sessions[0].client_id().ok_or("the player did not join")?;
    net.sessions[1].client_id().ok_or("the observer did not join")?;
    let root = net.room.simulation().controllers[&player];
    let paddle = *net.room.world_mut().chain_of(root).last().ok_or("no grab chain")?;
    let start = net.net.now.as_secs_f64();
    let warmup = start + 0.5;
    let end = warmup + seconds as f64;
    let at = |phase: f64, dt: f64, k: u64| start + phase + k as f64 * dt;
    let (mut k, mut j) = (0u64, 0u64);
    let mut observer =
        Observer { paddle, depth, sampled: Vec::new(), next: 0, latencies: Vec::new() };
    let ball = net.room.simulation().ball.ok_or("no ball on the table")?;
    let mut smooth = Smoothness::new([root, paddle, ball], &mut net.sessions[1]);
    loop {
        let (player_at, observer_at) =
            (at(player_phase, player_dt, k), at(observer_phase, observer_dt, j));
        if player_at.min(observer_at) >= end {
            break;
        }
        if player_at <= observer_at {
            let t = Instant::ZERO + Duration::from_secs_f64(player_at);
            net.run_until(t);
            // The frame presents what arrived, then samples the hand and sends it.
            net.sessions[0].present(t);
            if player_at < warmup {
                net.sessions[0].latency_mut().take_samples();
            }
            let hand = HandInput::on_circle(0, t.as_secs_f64());
            observer.sampled(t, player_at >= warmup, &hand);
            net.input(0, hand);
            k += 1;
        } else {
            let t = Instant::ZERO + Duration::from_secs_f64(observer_at);
            net.run_until(t);
            observer.present(t, &net.sessions[1]);
            smooth.frame(t, observer_at >= warmup, net.room.world(), &mut net.sessions[1]);
            j += 1;
        }
    }
    let nominal = Duration::from_secs_f64(rtt_ms / 1000.0);
    let (frame, tick) = (Duration::from_secs_f64(player_dt), Duration::from_secs_f64(server_dt));
    let player = net.sessions[0]
        .latency_mut()
        .take_samples()
        .into_iter()
        .map(|s| (s, LatencyModel::new(s.round_trip.unwrap_or(nominal), frame, tick)))
        .collect();
    smooth.finish_run(&mut net.sessions[1]);
    Ok(Measured { player, observer: observer.latencies, smooth })
}

/// The observer's meter, which can use the one clock of virtual time: each player input's
/// expected paddle position, and the first observer frame that shows it.
struct Observer {
    paddle: rally_engine::EntityId,
    depth: usize,
    /// (sampled at, counted, where the paddle should go), in sampling order.
    sampled: Vec<(Instant, bool, glam::Vec3)>,
    /// The first sample not yet seen.
    next: usize,
    latencies: Vec<f64>,
}

impl Observer {
    fn sampled(&mut self, at: Instant, counted: bool, hand: &HandInput) {
        let rotation = glam::Quat::from_array(hand.rotation);
        let offset = glam::Vec3::new(0.0, 0.0, -0.1 * self.depth as f32);
        let paddle = glam::Vec3::from_array(hand.position) + rotation * offset;
        self.sampled.push((at, counted, paddle));
    }

    /// The newest sample whose paddle position the observer shows (within quantization) is
    /// seen now, with every earlier one.
    fn present(&mut self, now: Instant, session: &ClientSession<HandInput, ()>) {
        let Some(shown) = session.entities().find(|e| e.id == self.paddle) else { return };
        let newest = (self.next..self.sampled.len())
            .rev()
            .find(|i| self.sampled[*i].2.distance(shown.position) < 0.002);
        let Some(newest) = newest else { return };
        for (at, counted, _) in &self.sampled[self.next..=newest] {
            if *counted {
                self.latencies.push((now - *at).as_secs_f64() * 1e3);
            }
        }
        self.next = newest + 1;
    }
}

/// One player through one pipeline on real sockets: a server process and a player process,
/// each with its own clock, through a relay in this process delaying each datagram by half of
/// `rtt_ms`. Returns the samples after a second of warm-up, and the RTT the player's
/// connection measured.
fn measure_real(setup: &Setup, seconds: u64) -> Result<(Vec<LatencySample>, f64), Box<dyn Error>> {
    let (hz, depth) = (setup.hz.to_string(), setup.depth.to_string());
    // This process is the backend: a key for the run, a token for the player.
    let key = crate::token::random_key()?;
    let key_hex = crate::token::key_to_hex(&key);
    let server_args = ["server", "--hz", &hz, "--pipeline", setup.name, "--depth", &depth];
    let mut server = Peer::spawn(&[&server_args[..], &["--key", &key_hex]].concat())?;
    let first = server.lines.next().ok_or("the server process said nothing")??;
    let address: std::net::SocketAddr = first
        .strip_prefix("listening ")
        .ok_or_else(|| format!("the server process said {first:?}"))?
        .parse()?;
    let one_way = Duration::from_secs_f64(setup.rtt_ms / 2000.0);
    let relay = crate::testbed::LinkRelay::delay(address, one_way)?;
    // The player goes to the relay; the server checks that the token names it too.
    let token = crate::token::issue_local(&key, 0, vec![relay.address(), address])?;
    let (token, run) = (crate::token::token_to_hex(&token), (seconds + 1).to_string());
    let mut args = vec!["player", "--token", &token, "--hz", &hz, "--seconds", &run];
    if setup.pipeline == Pipeline::Naive {
        args.push("--defer");
    }
    let mut player = Peer::spawn(&args)?;
    let (mut samples, mut rtts) = (Vec::new(), Vec::new());
    // The first second is the join and the warm-up.
    for line in player.lines.by_ref().skip(1) {
        let line: crate::peer::PlayerLine = serde_json::from_str(&line?)?;
        samples.extend(line.samples());
        rtts.push(line.rtt_us as f64 / 1e3);
    }
    drop(server);
    relay.stop()?;
    let rtt = rtts.iter().sum::<f64>() / rtts.len().max(1) as f64;
    Ok((samples, rtt))
}

/// A `rally-bench peer` child process and its output lines; killed when dropped.
struct Peer {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Peer {
    fn spawn(args: &[&str]) -> Result<Self, Box<dyn Error>> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new(std::env::current_exe()?)
            .arg("peer")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no output from a peer process")?;
        Ok(Self { child, lines: std::io::BufReader::new(stdout).lines() })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Closing its standard input asks it to stop; a kill makes sure.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A player's row: each sample judged against its own model (the link's nominal `rtt_ms`
/// where the meter could not split it).
fn player_row(setup: &Setup, rtt_ms: f64, samples: &[Judged]) -> Row {
    let dt = Duration::from_secs(1) / setup.hz;
    let nominal = Duration::from_secs_f64(rtt_ms / 1000.0);
    let slack = Duration::from_millis(1);
    let (mut within, mut at_best, mut parts) = (0, 0, Parts::default());
    for (sample, model) in samples {
        within += usize::from(model.contains(sample.total, slack));
        at_best += usize::from(sample.total <= model.best + slack);
        parts.round_trip += ms(sample.round_trip.unwrap_or(nominal));
        parts.server_hold += ms(sample.server_hold.unwrap_or_default());
        parts.frame_wait += ms(sample.frame_wait);
    }
    let n = samples.len().max(1) as f64;
    parts.round_trip /= n;
    parts.server_hold /= n;
    parts.frame_wait /= n;
    let latencies: Vec<f64> = samples.iter().map(|(s, _)| ms(s.total)).collect();
    let model = LatencyModel::new(nominal, dt, dt);
    let mut row =
        row(setup, rtt_ms, latencies, ModelMs { best: ms(model.best), worst: ms(model.worst) });
    row.within_model_fraction = within as f64 / n;
    row.at_best_fraction = at_best as f64 / n;
    row.parts_ms = Some(parts);
    row
}

/// An observer's row: its frames are not the player's, so its model is the network's: at
/// least the RTT (the input's way up, the state's way down), at most the RTT plus a tick's
/// wait on the server and a frame's wait on the observer. `at best` here means at most the
/// RTT plus one frame: what the fast path promises every client. Judged at the link's nominal
/// RTT: with jitter, samples stray from it by the jitter of two one-way trips.
fn observer_row(setup: &Setup, latencies: Vec<f64>) -> Row {
    let (rtt, dt) = (setup.rtt_ms, 1000.0 / f64::from(setup.hz));
    let mut row = row(setup, rtt, latencies, ModelMs { best: rtt, worst: rtt + 2.0 * dt });
    row.viewer = "observer";
    let n = row.latencies.len().max(1) as f64;
    let within = row.latencies.iter().filter(|l| **l >= rtt - 1.0 && **l <= rtt + 2.0 * dt + 1.0);
    row.within_model_fraction = within.count() as f64 / n;
    let at_best = row.latencies.iter().filter(|l| **l <= rtt + dt + 1.0).count();
    row.at_best_fraction = at_best as f64 / n;
    row
}

fn row(setup: &Setup, rtt: f64, latencies: Vec<f64>, model: ModelMs) -> Row {
    let s = summary(&latencies);
    Row {
        room: setup.room,
        pipeline: setup.name.into(),
        viewer: "player",
        hz: setup.hz,
        chain_depth: setup.depth,
        link_rtt_ms: rtt,
        link_jitter_ms: setup.jitter_ms,
        samples: latencies.len(),
        latency_ms: LatencySummary { mean: s.mean, p50: s.p50, p99: s.p99, max: s.max },
        model_ms: model,
        within_model_fraction: 0.0,
        at_best_fraction: 0.0,
        parts_ms: None,
        latencies,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print(rows: &[Row]) {
    print_table(rows);
    print_targets(rows);
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<7} {:<7} {:>4} {:>5} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} \
         {:>7}  parts",
        "room",
        "pipe",
        "hz",
        "depth",
        "jitter",
        "samples",
        "mean",
        "p50",
        "p99",
        "max",
        "L_best",
        "L_worst",
        "within",
        "at best"
    );
    for r in rows {
        let l = &r.latency_ms;
        let parts = r.parts_ms.as_ref().map_or(String::new(), |p| {
            format!("rtt {:.1} hold {:.1} wait {:.1}", p.round_trip, p.server_hold, p.frame_wait)
        });
        println!(
            "{:<7} {:<7} {:>4} {:>5} {:>6.1} {:>7} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} \
             {:>6.1}% {:>6.1}%  {parts}",
            r.room,
            r.pipeline,
            r.hz,
            r.chain_depth,
            r.link_jitter_ms,
            r.samples,
            l.mean,
            l.p50,
            l.p99,
            l.max,
            r.model_ms.best,
            r.model_ms.worst,
            r.within_model_fraction * 100.0,
            r.at_best_fraction * 100.0
        );
    }
    println!(
        "latency = input sampled on the client to the first frame presenting it, ms; L_best and \
         L_worst at the link's RTT, but each sample is judged by the RTT it saw"
    );
}

fn print_targets(rows: &[Row]) {
    for r in rows {
        let (met, what) = match r.pipeline.as_str() {
            "greedy" => (r.within_model_fraction == 1.0, "every sample within the model +-1 ms"),
            "fast" => (r.at_best_fraction == 1.0, "every sample at most L_best + 1 ms"),
            _ => continue,
        };
        let verdict = if met { "MET " } else { "MISS" };
        let (p, hz, depth, jitter) = (&r.pipeline, r.hz, r.chain_depth, r.link_jitter_ms);
        let room = r.room;
        println!("{verdict} {room} {p} {hz} Hz depth {depth} jitter {jitter} ms: {what}");
    }
    for r in rows.iter().filter(|r| r.pipeline == "naive") {
        let greedy = rows.iter().find(|g| {
            g.room == r.room
                && g.pipeline == "greedy"
                && g.hz == r.hz
                && g.chain_depth == r.chain_depth
                && g.link_jitter_ms == r.link_jitter_ms
        });
        if let Some(g) = greedy {
            let frames = (r.latency_ms.mean - g.latency_ms.mean) / (1000.0 / f64::from(r.hz));
            println!(
                "naive {} Hz depth {} jitter {} ms: {frames:.2} frames above greedy (the source: \
                 about 3)",
                r.hz, r.chain_depth, r.link_jitter_ms
            );
        }
    }
}

/// One CDF plot per rate and jitter, with the model's bounds at the link's RTT drawn in.
fn draw(dir: &std::path::Path, rows: &[Row]) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    let mut groups: Vec<(u32, f64)> = rows.iter().map(|r| (r.hz, r.link_jitter_ms)).collect();
    groups.dedup();
    groups.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    groups.dedup();
    for (hz, jitter) in groups {
        let group: Vec<&Row> =
            rows.iter().filter(|r| r.hz == hz && r.link_jitter_ms == jitter).collect();
        let series: Vec<(String, Vec<f64>)> = group
            .iter()
            .map(|r| {
                let name =
                    format!("{} {} depth {} {}", r.room, r.pipeline, r.chain_depth, r.viewer);
                (name, r.latencies.clone())
            })
            .collect();
        let Some(model) = group.iter().find(|r| r.viewer == "player").map(|r| &r.model_ms) else {
            continue;
        };
        let marks = [("L_best".to_string(), model.best), ("L_worst".to_string(), model.worst)];
        let suffix = if jitter > 0.0 { format!("-jitter{jitter}ms") } else { String::new() };
        let path = dir.join(format!("latency-{hz}hz{suffix}.png"));
        let title = format!(
            "W2 total latency CDF, {hz} Hz, RTT {:.0} ms, jitter {jitter} ms",
            group[0].link_rtt_ms
        );
        plot::cdf(&path, &title, "total latency, ms", &series, &marks, None)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
