//! `rally-bench count`: the host's instructions per reference room-tick, counted by callgrind,
//! which gives the same figure from run to run on a machine whose wall time swings by tens of
//! percent ([scale] item 1; rustls' ci-bench counts its handshakes the same way).
//!
//! The host's own code runs without its socket: a [`MemoryWorker`] (the worker's routing, room
//! ticks, telemetry and report, and its sealed endpoint) on a thread of its own, fed in
//! memory by a client thread that plays 10 real client sessions per reference room, each
//! sending an input every tick at 128 Hz, on virtual time. The two threads take turns, once
//! per tick: the clients' datagrams of the tick go over as a batch (what `recvmmsg` would
//! read), the worker takes them in, ticks the rooms that are due, and hands back what it sent.
//! Only the worker's thread is counted, and only over the measured ticks: callgrind writes a
//! file per thread and collects inside [`worker_window`] alone.
//!
//! By phase, from callgrind's inclusive counts of the functions that do each (see
//! `count_callgrind`): open, decode, ingest, simulate, replicate, transmit, encode, seal;
//! "other" is the rest of the worker's total (routing, schedules, timers, acks, the report).
//! Telemetry's cost is the difference between the run with it on and the run with it off.
//!
//! Without `--callgrind` the same run is timed on the worker thread's CPU clock instead (a
//! quick smoke, and the CPU time beside the count), with what a clock read costs here and
//! sealing plus opening a packet with each AEAD compared (`count_seal`); with it, the
//! bench runs itself under `valgrind --tool=callgrind` once per telemetry setting (off, on)
//! and prints instructions per room-tick, both ways and their ratio. `scripts/count.sh`
//! reruns both.

use crate::game::{reference_room, CLIENTS};
use crate::machine::Machine;
use rally_driver::host::MemoryWorker;
use rally_driver::HostConfig;
use rally_engine::{connection_config, ClientConfig, ClientSession, RoomConfig};
use rally_proto::limit::Rate;
use rally_proto::{ConnectionHandle, Endpoint, EndpointConfig, EndpointRandomness, Event, Instant};
use rally_sim::sandbox::HandInput;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

/// Ticks per second of the reference room.
const TICK_HZ: u32 = 128;
/// Ticks before the measured ones: every client connects and joins, every buffer warms.
const WARMUP_TICKS: usize = 128;

/// Options of `rally-bench count`.
#[derive(Debug, clap::Args)]
pub struct CountArgs {
    /// 32 measured ticks instead of 256 (a quarter of a second of play instead of two).
    #[arg(long)]
    pub quick: bool,
    /// Reference rooms on the worker (10 clients each): 32, the load bench's reference step.
    #[arg(long, default_value_t = 32)]
    pub rooms: u64,
    /// Count instructions under `valgrind --tool=callgrind` (else: time the worker's CPU).
    #[arg(long)]
    pub callgrind: bool,
    /// Where callgrind's files go.
    #[arg(long, value_name = "DIR", default_value = "target/count")]
    pub out: PathBuf,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// One run with the worker's telemetry on or off (what `--callgrind` runs under
    /// valgrind).
    #[arg(long, hide = true, value_name = "on|off")]
    pub only: Option<String>,
    /// Time the server endpoint's receive and send paths on connections out of the caches,
    /// with and without prefetching them (`count_cold`), instead of the count.
    #[arg(long)]
    pub cold: bool,
    /// With `--cold`: MiB swept before each timed batch. 4 leaves the connections in the
    /// third level; 64 pushes them out of it too, to memory (a worker whose rooms, or whose
    /// neighbours on the machine, fill the third level).
    #[arg(long, value_name = "MIB", default_value_t = 4)]
    pub sweep_mib: usize,
    /// With `--callgrind`: simulate a second-level cache of this many bytes instead of the
    /// machine's. At 131072 every room's lines are out of it by the room's next tick, as in the
    /// load run, where the kernel's work between rooms evicts them: the misses are then the
    /// lines a room-tick touches.
    #[arg(long, value_name = "BYTES")]
    pub second_level: Option<u64>,
    /// Seal and open packets with one AEAD only (what `--callgrind` counts under valgrind).
    #[arg(long, hide = true, value_name = "AEAD")]
    pub seal_rounds: Option<String>,
}

/// Datagrams one way for one tick: where from (or to), and the bytes.
type Datagrams = Vec<(SocketAddr, Vec<u8>)>;

/// The worker's answer to a turn: what it sent, and the turn's datagrams handed back, their
/// buffers for the clients' next ones (a socket reads into buffers it keeps: the worker frees
/// nothing per datagram it takes in).
type Answer = (Datagrams, Datagrams);

/// One turn of the worker: the time, and what arrived since its last turn.
struct Turn {
    now: Instant,
    datagrams: Datagrams,
    /// The buffers of the worker's last answer, handed back for reuse.
    spare: Datagrams,
    measured: bool,
}

/// What one run of the workload measured.
#[derive(Debug, Clone, Serialize)]
struct Run {
    telemetry: bool,
    rooms: u64,
    room_ticks: u64,
    /// The worker thread's CPU time per room-tick over the measured ticks, nanoseconds.
    cpu_ns_per_room_tick: f64,
    /// Datagrams the worker took in and sent, per room-tick.
    datagrams_in_per_room_tick: f64,
    datagrams_out_per_room_tick: f64,
}

/// Runs the benchmark.
pub fn run(args: &CountArgs) -> Result<(), Box<dyn Error>> {
    let ticks = if args.quick { 32 } else { 256 };
    if let Some(aead) = &args.seal_rounds {
        return Ok(super::count_seal::run_rounds(aead)?);
    }
    if args.cold {
        let costs = super::count_cold::run(args.sweep_mib << 20)?;
        if let Some(path) = &args.json {
            let json = serde_json::json!({
                "bench": "count", "mode": "cold", "machine": Machine::detect(),
                "sweep_mib": args.sweep_mib, "costs": costs,
            });
            super::write_json(path, &json)?;
        }
        return Ok(());
    }
    if let Some(only) = &args.only {
        let run = play(args.rooms, ticks, only == "on")?;
        println!("{}", serde_json::to_string(&run)?);
        return Ok(());
    }
    if args.callgrind {
        return super::count_callgrind::run(args, ticks);
    }
    let runs = [play(args.rooms, ticks, false)?, play(args.rooms, ticks, true)?];
    println!(
        "{} reference rooms, {} measured ticks each, the worker's CPU time (not a count: \
         --callgrind counts)",
        args.rooms, ticks
    );
    for run in &runs {
        let telemetry = if run.telemetry { "on" } else { "off" };
        println!(
            "telemetry {telemetry:<3}: {:>8.0} ns per room-tick over {} room-ticks \
             ({:.1} datagrams in, {:.1} out per room-tick)",
            run.cpu_ns_per_room_tick,
            run.room_ticks,
            run.datagrams_in_per_room_tick,
            run.datagrams_out_per_room_tick
        );
    }
    let clock_read_ns = clock_read_ns();
    println!("a clock read (the driver's Clock::now): {clock_read_ns:.1} ns");
    let seal = super::count_seal::measure()?;
    print_seal(&seal);
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "bench": "count", "mode": "cpu", "quick": args.quick,
            "machine": Machine::detect(), "runs": runs, "clock_read_ns": clock_read_ns,
            "seal_open": seal,
        });
        super::write_json(path, &json)?;
    }
    Ok(())
}

/// The AEADs' costs to seal and open one packet, the one Rally seals with first.
pub(super) fn print_seal(costs: &[super::count_seal::SealCost]) {
    let bytes = costs.first().map_or(0, |c| c.packet_bytes);
    println!("seal + open of a {bytes}-byte packet (best of 5; instructions under --callgrind):");
    println!("{:<30} {:>8} {:>13}", "AEAD", "ns", "instructions");
    for cost in costs {
        let counted = cost.instructions.map_or("-".to_string(), |i| format!("{i:.0}"));
        println!("{:<30} {:>8.0} {:>13}", cost.aead, cost.ns, counted);
    }
}

/// What one read of the driver's clock costs here: telemetry's timers read it, and under
/// valgrind a read is a syscall whose cost callgrind does not count.
#[allow(clippy::disallowed_methods)] // a benchmark reads the clock
fn clock_read_ns() -> f64 {
    let clock = rally_driver::Clock::start();
    let reads = 1_000_000;
    let started = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..reads {
        sum = sum.wrapping_add(clock.now().as_nanos());
    }
    std::hint::black_box(sum);
    started.elapsed().as_nanos() as f64 / reads as f64
}

/// The cores of the worker thread and of the clients' thread: the last core and the others,
/// as `rally-bench load` pins its worker and its bots, so that the clients' work neither
/// shares the worker's core caches nor trades cores with it (which moves the worker's CPU
/// time per room-tick by half here); every core for both on a machine of one.
fn cores() -> (Vec<usize>, Vec<usize>) {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    match n {
        0 | 1 => (vec![0], vec![0]),
        _ => (vec![n - 1], (0..n - 1).collect()),
    }
}

/// The workload: `rooms` reference rooms, their clients, `WARMUP_TICKS` then `ticks` measured
/// ticks, the worker's telemetry as `telemetry` says.
fn play(rooms: u64, ticks: usize, telemetry: bool) -> Result<Run, Box<dyn Error>> {
    let (to_worker, turns) = channel::<Turn>();
    let (answers, from_worker) = channel::<Answer>();
    let server: SocketAddr = "10.0.0.2:7777".parse()?;
    let clients = rooms * CLIENTS as u64;
    let (worker_cores, client_cores) = cores();
    rally_driver::cpu::pin_current_thread(&client_cores)?;
    let worker =
        std::thread::Builder::new().name("rally-count-worker".into()).spawn(move || {
            rally_driver::cpu::pin_current_thread(&worker_cores).map_err(|e| e.to_string())?;
            serve(server, clients, telemetry, &turns, &answers)
        })?;
    let mut players = Players::new(rooms, server);
    let dt = Duration::from_secs(1) / TICK_HZ;
    let mut now = Instant::ZERO;
    for tick in 0..WARMUP_TICKS + ticks {
        now += dt;
        let measured = tick >= WARMUP_TICKS;
        if tick == WARMUP_TICKS && players.joined() < clients as usize {
            return Err(format!("{} of {clients} clients joined", players.joined()).into());
        }
        let datagrams = players.frame(now);
        let spare = std::mem::take(&mut players.spare);
        to_worker.send(Turn { now, datagrams, spare, measured })?;
        let (answer, taken) = from_worker.recv()?;
        players.take(now, answer);
        players.inbound_spare = taken;
    }
    drop(to_worker);
    let served = worker.join().map_err(|_| "the worker thread panicked")??;
    players.check_kept_up()?;
    let per_room_tick = |n: u64| n as f64 / served.room_ticks.max(1) as f64;
    Ok(Run {
        telemetry,
        rooms,
        room_ticks: served.room_ticks,
        cpu_ns_per_room_tick: per_room_tick(served.cpu_us) * 1e3,
        datagrams_in_per_room_tick: per_room_tick(served.datagrams_in),
        datagrams_out_per_room_tick: per_room_tick(served.datagrams_out),
    })
}

/// What the worker thread measured over the measured ticks.
struct Served {
    room_ticks: u64,
    cpu_us: u64,
    datagrams_in: u64,
    datagrams_out: u64,
}

/// The worker's thread: turns until the clients stop; the measured ones in [`worker_window`].
fn serve(
    server: SocketAddr,
    clients: u64,
    telemetry: bool,
    turns: &Receiver<Turn>,
    answers: &Sender<Answer>,
) -> Result<Served, String> {
    let mut worker = memory_worker(server, clients, telemetry);
    let mut buf = vec![0u8; 2048];
    let mut first = None;
    while let Ok(turn) = turns.recv() {
        if turn.measured {
            first = Some(turn);
            break;
        }
        answers.send(worker_turn(&mut worker, turn, &mut buf)).map_err(|e| e.to_string())?;
    }
    let Some(first) = first else { return Err("no measured ticks".into()) };
    let (ticks, cpu, traffic) =
        (worker.room_ticks(), rally_driver::cpu::thread_cpu_us(), worker.traffic);
    worker_window(&mut worker, first, turns, answers, &mut buf);
    Ok(Served {
        room_ticks: worker.room_ticks() - ticks,
        cpu_us: rally_driver::cpu::thread_cpu_us() - cpu,
        datagrams_in: worker.traffic.datagrams_in - traffic.datagrams_in,
        datagrams_out: worker.traffic.datagrams_out - traffic.datagrams_out,
    })
}

/// The measured turns: callgrind collects inside this function only (`--toggle-collect`).
#[inline(never)]
fn worker_window(
    worker: &mut MemoryWorker<Game>,
    first: Turn,
    turns: &Receiver<Turn>,
    answers: &Sender<Answer>,
    buf: &mut [u8],
) {
    let mut turn = Some(first);
    while let Some(this) = turn {
        if answers.send(worker_turn(worker, this, buf)).is_err() {
            return;
        }
        turn = turns.recv().ok();
    }
}

/// One pass of a batched worker's loop: datagrams in, events to rooms, due ticks, datagrams
/// out, housekeeping.
fn worker_turn(worker: &mut MemoryWorker<Game>, turn: Turn, buf: &mut [u8]) -> Answer {
    let Turn { now, datagrams, spare, .. } = turn;
    worker.receive(now, datagrams.iter().map(|(from, bytes)| (*from, bytes.as_slice())));
    let mut out = Out { spare, sent: Vec::with_capacity(datagrams.len() * 2) };
    worker.flush(now, buf, |t, bytes| out.push(t.destination, bytes));
    worker.tick_due(now, buf, |t, bytes| out.push(t.destination, bytes));
    worker.flush(now, buf, |t, bytes| out.push(t.destination, bytes));
    worker.housekeeping(now);
    (out.sent, datagrams)
}

/// The worker's outgoing datagrams, copied into reused buffers (a socket's send buffer).
struct Out {
    spare: Datagrams,
    sent: Datagrams,
}

impl Out {
    /// The copy is the socket's: a worker on a socket has the endpoint write each datagram
    /// straight into its send batch, and the kernel copies it out (the load bench's floor
    /// counts that). So callgrind's count leaves this function out, and it stays a call of its
    /// own for that.
    #[inline(never)]
    fn push(&mut self, to: SocketAddr, bytes: &[u8]) {
        let mut buffer = self.spare.pop().map(|(_, b)| b).unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(bytes);
        self.sent.push((to, buffer));
    }
}

/// The reference game, as `rally-bench load`'s host runs it.
type Game = fn(u64) -> rally_engine::Room<crate::game::Reference>;

fn open_room(id: u64) -> rally_engine::Room<crate::game::Reference> {
    let room = RoomConfig { tick_rate: TICK_HZ, ..RoomConfig::default() };
    // reference_room raises the entity limit to fit its bodies, so spawning cannot fail.
    reference_room(room, id + 1).expect("the reference room fits")
}

/// A worker whose endpoint lets in the harness's tokens, sized for `clients`.
fn memory_worker(server: SocketAddr, clients: u64, telemetry: bool) -> MemoryWorker<Game> {
    let (endpoint, endpoint_seeded) = harness_server(server, clients);
    let host = HostConfig { telemetry, endpoint, ..HostConfig::default() };
    MemoryWorker::new(endpoint_seeded, server, open_room as Game, host)
}

/// The harness's sealed server endpoint at `server` for `clients` (and its configuration):
/// the engine's channels, room for every client, a fixed seed.
pub(super) fn harness_server(server: SocketAddr, clients: u64) -> (EndpointConfig, Endpoint) {
    let mut endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
    // Every client connects at once: the per-address handshake limit is for strangers.
    endpoint.handshake_rate = Rate { per_second: 1e6, burst: 1e6 };
    endpoint.connections_max = clients as usize + 64;
    let config = rally_sim::secure::server_config(endpoint.clone(), server);
    let seeded = Endpoint::new(config, EndpointRandomness::danger_from_seed(2))
        .expect("a valid endpoint config");
    (endpoint, seeded)
}

/// Client `index` of `room`: its endpoint, connecting to `server` with a token for the room,
/// and its connection's handle. Its address is [`client_addr`]`(index)`.
pub(super) fn harness_client(
    index: u64,
    room: u64,
    server: SocketAddr,
) -> (Endpoint, ConnectionHandle) {
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let seed = EndpointRandomness::danger_from_seed(1_000 + index);
    let mut endpoint = Endpoint::new(config, seed).expect("a valid config");
    let token = rally_sim::secure::room_token(index, 1, room, server);
    // The harness's tokens name this server, so connecting cannot fail.
    let handle = endpoint.connect_with_token(Instant::ZERO, token).expect("a harness token");
    (endpoint, handle)
}

/// Client `index`'s address, 10.1.(index >> 8).(index & 255).
pub(super) fn client_addr(index: u64) -> SocketAddr {
    SocketAddr::from(([10, 1, (index >> 8) as u8, index as u8], 40_000))
}

/// One client: its endpoint, its session, its address.
struct Player {
    endpoint: Endpoint,
    session:
        ClientSession<HandInput, <crate::game::Reference as rally_engine::Simulation>::Message>,
    addr: SocketAddr,
}

/// Every room's clients, on the client thread.
struct Players {
    players: Vec<Player>,
    by_addr: HashMap<SocketAddr, usize>,
    server: SocketAddr,
    buf: Vec<u8>,
    /// Buffers to hand back to the worker.
    spare: Datagrams,
    /// The buffers of the datagrams the worker took in, for the clients' next ones.
    inbound_spare: Datagrams,
}

impl Players {
    /// 10 clients per room, each connecting with a token for its room.
    fn new(rooms: u64, server: SocketAddr) -> Self {
        let mut players = Vec::new();
        for room in 0..rooms {
            for k in 0..CLIENTS as u64 {
                let index = room * CLIENTS as u64 + k;
                let (endpoint, _) = harness_client(index, room, server);
                let session_config = ClientConfig { interpolate: false, ..Default::default() };
                let session = ClientSession::new(session_config).expect("a valid client config");
                players.push(Player { endpoint, session, addr: client_addr(index) });
            }
        }
        let by_addr = players.iter().enumerate().map(|(i, p)| (p.addr, i)).collect();
        let (buf, spare, inbound_spare) = (vec![0; 2048], Vec::new(), Vec::new());
        Self { players, by_addr, server, buf, spare, inbound_spare }
    }

    /// Every client's frame at `now`: an input if it has joined; what it sends.
    fn frame(&mut self, now: Instant) -> Datagrams {
        let mut out = Vec::new();
        let mut pool = std::mem::take(&mut self.inbound_spare);
        for (i, player) in self.players.iter_mut().enumerate() {
            if player.session.client_id().is_some() {
                player.session.present(now);
                let input = HandInput::on_circle(i, now.as_secs_f64());
                player.session.send_input(now, input);
                player.session.transmit(&mut player.endpoint);
            }
            player.endpoint.handle_timeout(now);
            while let Some(t) = player.endpoint.poll_transmit(now, &mut self.buf) {
                let mut bytes = pool.pop().map(|(_, b)| b).unwrap_or_default();
                bytes.clear();
                bytes.extend_from_slice(&self.buf[..t.len]);
                out.push((player.addr, bytes));
            }
        }
        out
    }

    /// The worker's datagrams, each to its client, and their events to the sessions.
    fn take(&mut self, now: Instant, datagrams: Datagrams) {
        for (to, bytes) in &datagrams {
            let Some(&i) = self.by_addr.get(to) else { continue };
            let player = &mut self.players[i];
            player.endpoint.handle_datagram(now, self.server, bytes);
            while let Some((handle, event)) = player.endpoint.poll_event() {
                match event {
                    Event::Connected => player.session.connected(handle),
                    Event::Message { channel, payload } => {
                        player.session.receive(now, channel, &payload)
                    }
                    Event::Disconnected { .. } => player.session.disconnected(),
                }
                player.session.transmit(&mut player.endpoint);
            }
            while player.session.poll_event().is_some() {}
        }
        self.spare = datagrams;
    }

    fn joined(&self) -> usize {
        self.players.iter().filter(|p| p.session.client_id().is_some()).count()
    }

    /// The count means something only if every client kept getting snapshots.
    fn check_kept_up(&self) -> Result<(), Box<dyn Error>> {
        let ticks: BTreeMap<usize, Option<u32>> = self
            .players
            .iter()
            .enumerate()
            .map(|(i, p)| (i, p.session.snapshot().map(|s| s.tick())))
            .collect();
        let newest = ticks.values().flatten().max().copied().unwrap_or(0);
        for (i, tick) in ticks {
            if tick.is_none_or(|t| newest.wrapping_sub(t) > 2) {
                return Err(format!("client {i} fell behind: at tick {tick:?} of {newest}").into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_worker_ticks_each_room_once_a_tick_and_hears_each_client_once_a_tick() {
        // Goal: the count divides by the right number: every measured tick ticks every room
        // once, and each client's input datagram reaches the worker each tick (a harness that
        // dropped clients or ticked twice would count a different room-tick). Method: two
        // rooms, 16 measured ticks, telemetry on.
        let run = super::play(2, 16, true).expect("the workload runs");
        assert_eq!(run.room_ticks, 32);
        assert_eq!(run.datagrams_in_per_room_tick, 10.0);
        assert!(run.datagrams_out_per_room_tick >= 10.0, "a snapshot per client per tick");
    }
}
