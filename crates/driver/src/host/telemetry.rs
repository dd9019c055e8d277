//! Where a host's time goes: scopes per phase and subsystem, per room and per worker, against
//! budgets.
//!
//! A worker times every scope on its own clock. Transport scopes (receive, decrypt, decode,
//! encode, encrypt, send) belong to the worker's endpoint, which all its rooms share; room
//! scopes (ingest, interact, simulate, replicate, transmit) belong to each room. What runs per
//! packet or per message is timed one run in so many at random, counted that many times (the
//! endpoint's four stages one in [`STAGE_SAMPLING`], a message's ingest on arrival one in
//! [`INGEST_SAMPLING`]): a clock read costs more than decoding a small packet, and timing each
//! one cost 6% of a worker's instructions (`rally-bench count`); a tick's phases are timed
//! every tick. Per room the
//! host keeps sums, maxima and budget overruns; per worker it keeps an HDR histogram of each
//! scope per room-tick and of tick lateness, and the thread's CPU time from the OS.
//!
//! For a fleet, a worker also keeps fixed-bucket histograms in seconds ([`Buckets`]: phases,
//! lateness, and each connection's RTT, jitter and loss sampled once a second) and the
//! transport's counters ([`TransportCounters`]: traffic, handshakes, refusals by reason,
//! drops, resends). All of it is plain arithmetic on the worker's own thread; the worker
//! copies its figures into the host's shared report ten times a second, never per packet, and
//! an exporter (the app's `/metrics`) reads that copy. Bucket counts add across workers and
//! hosts, which quantiles computed in a process cannot. The per room-tick HDR histograms stay
//! with the worker, behind a lock only a reader takes; the reader copies them and takes their
//! quantiles ([`Summary`]) on its own thread.

use crate::Sleep;
use hdrhistogram::Histogram;
use rally_engine::Phase;
use rally_proto::{Instant, Stage, StageObserver};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A scope of a host's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Reading datagrams from the socket (the syscalls, empty polls included).
    Receive,
    /// Authenticating and decrypting packets.
    Decrypt,
    /// Parsing packets and frames (acks, messages, fragments).
    Decode,
    /// A room taking its input frames and messages (decoding them, applying inputs): on
    /// arrival, and the tick's ingest phase.
    Ingest,
    /// A room's grab chains following their grabbers.
    Interact,
    /// A room's game code and physics.
    Simulate,
    /// A room quantizing its world and building each client's snapshot.
    Replicate,
    /// A room handing its snapshots and messages to the endpoint.
    Transmit,
    /// Building packets (acks, frames, resends).
    Encode,
    /// Sealing packets.
    Encrypt,
    /// Writing datagrams to the socket.
    Send,
}

/// Every scope, in the order a datagram and a tick pass through them.
pub const SCOPES: [Scope; 11] = [
    Scope::Receive,
    Scope::Decrypt,
    Scope::Decode,
    Scope::Ingest,
    Scope::Interact,
    Scope::Simulate,
    Scope::Replicate,
    Scope::Transmit,
    Scope::Encode,
    Scope::Encrypt,
    Scope::Send,
];

/// The scopes that are a room's own.
pub const ROOM_SCOPES: [Scope; 5] =
    [Scope::Ingest, Scope::Interact, Scope::Simulate, Scope::Replicate, Scope::Transmit];

impl Scope {
    /// Its position in [`SCOPES`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its position in [`ROOM_SCOPES`], for a room's own scope (they follow each other in
    /// [`SCOPES`]); past its end for another.
    #[inline]
    pub fn room_index(self) -> usize {
        self.index().wrapping_sub(Scope::Ingest.index())
    }

    /// Its name in metrics and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Receive => "receive",
            Scope::Decrypt => "decrypt",
            Scope::Decode => "decode",
            Scope::Ingest => "ingest",
            Scope::Interact => "interact",
            Scope::Simulate => "simulate",
            Scope::Replicate => "replicate",
            Scope::Transmit => "transmit",
            Scope::Encode => "encode",
            Scope::Encrypt => "encrypt",
            Scope::Send => "send",
        }
    }

    /// The scope of a room's tick phase.
    pub fn of_phase(phase: Phase) -> Scope {
        match phase {
            Phase::Ingest => Scope::Ingest,
            Phase::Interact => Scope::Interact,
            Phase::Simulate => Scope::Simulate,
            Phase::Replicate => Scope::Replicate,
            Phase::Transmit => Scope::Transmit,
        }
    }

    fn of_stage(stage: Stage) -> Scope {
        match stage {
            Stage::Decrypt => Scope::Decrypt,
            Stage::Decode => Scope::Decode,
            Stage::Encode => Scope::Encode,
            Stage::Encrypt => Scope::Encrypt,
        }
    }
}

/// Budgets per room-tick: a room's scope that takes longer overruns (counted per room and per
/// worker). Transport scopes have no per-room budget: their work is shared by the rooms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Budgets {
    /// A room's ingest per tick (everything it took since its last tick, and the phase).
    pub ingest: Duration,
    /// Interact per tick.
    pub interact: Duration,
    /// Simulate per tick (the game's code and physics).
    pub simulate: Duration,
    /// Replicate per tick.
    pub replicate: Duration,
    /// Transmit per tick.
    pub transmit: Duration,
    /// How late a tick may start.
    pub lateness: Duration,
}

impl Default for Budgets {
    /// The W3 reference room's share of a core at 280 rooms per core and 128 Hz: 25 us per
    /// room-tick in all (physics apart), most of it replicate; lateness of half a millisecond.
    fn default() -> Self {
        Self {
            ingest: Duration::from_micros(4),
            interact: Duration::from_micros(2),
            simulate: Duration::from_micros(100),
            replicate: Duration::from_micros(15),
            transmit: Duration::from_micros(3),
            lateness: Duration::from_micros(500),
        }
    }
}

impl Budgets {
    /// The budget of a room scope.
    pub fn of(&self, scope: Scope) -> Option<Duration> {
        match scope {
            Scope::Ingest => Some(self.ingest),
            Scope::Interact => Some(self.interact),
            Scope::Simulate => Some(self.simulate),
            Scope::Replicate => Some(self.replicate),
            Scope::Transmit => Some(self.transmit),
            _ => None,
        }
    }
}

/// Nanoseconds per scope, shared by a worker's loop and its endpoint's observer; relaxed
/// atomics on one thread cost what plain adds do.
#[derive(Debug, Default)]
pub struct ScopeClock {
    nanos: [AtomicU64; SCOPES.len()],
}

impl ScopeClock {
    /// Adds `nanos` to `scope`.
    pub fn add(&self, scope: Scope, nanos: u64) {
        self.nanos[scope.index()].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Nanoseconds so far, per scope.
    pub fn read(&self) -> [u64; SCOPES.len()] {
        std::array::from_fn(|k| self.nanos[k].load(Ordering::Relaxed))
    }
}

/// One run in this many of each endpoint stage is timed, and counts for this many: stages
/// run per packet (and per look for a packet to build), about 75 times per reference
/// room-tick, and two clock reads (25-50 ns each on the virtual machines measured) cost more
/// than decoding a small packet does. The scopes' totals need no more.
pub const STAGE_SAMPLING: u64 = 64;

/// One message in this many is timed as it is taken in on arrival, and counts for this many:
/// about 15 messages arrive per reference room-tick, and the tick's ingest figure (that
/// phase plus the arrivals since the last tick) goes into a per-room-tick histogram.
pub const INGEST_SAMPLING: u64 = 16;

/// The most one sampled run counts, nanoseconds, before it is scaled. A stage of one packet or
/// a message's ingest takes a few microseconds; a reading far past that is the worker thread
/// descheduled mid-run (a busy machine, a virtual CPU taken away), which is not the run's
/// CPU, and scaled by the sampling factor it would swamp the scope's total.
pub const SAMPLE_NANOS_MAX: u64 = 50_000;

/// Picks one run in `one_in` at random (a fixed stride could fall in step with a pattern in
/// the traffic, an ack after every snapshot say, and time only one kind of packet).
#[derive(Debug)]
pub(crate) struct Sampler {
    state: u64,
    one_in: u64,
    /// The log of the chance that a run is not picked, for [`Sampler::gap`].
    ln_pass: f64,
}

impl Sampler {
    pub(crate) fn new(one_in: u64) -> Self {
        let ln_pass = (1.0 - 1.0 / one_in.max(1) as f64).ln();
        Self { state: 0x9e37_79b9_7f4a_7c15, one_in, ln_pass }
    }

    /// Whether to time this run (xorshift64).
    pub(crate) fn next(&mut self) -> bool {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % self.one_in == 0
    }

    /// How many runs to pass over before the next one picked, with the law of the gaps
    /// between [`Sampler::next`]'s picks (geometric: each run picked with chance one in
    /// `one_in`), in one draw: a caller skips those runs without a call each, and the draw
    /// costs a logarithm instead of `one_in` steps of the generator.
    pub(crate) fn gap(&mut self) -> u64 {
        self.next();
        // Uniform in (0, 1]: 53 bits of the state, never zero.
        let uniform = ((self.state >> 11) + 1) as f64 / (1u64 << 53) as f64;
        // Inverse transform: P(gap >= k) = (1 - 1/one_in)^k. One in one: always 0. The
        // quotient is never negative, so the cast's truncation is the floor (`f64::floor` is a
        // call into libm on x86_64's baseline).
        (uniform.ln() / self.ln_pass) as u64
    }
}

/// Picks one run in `one_in` at random as [`Sampler::next`] does, with one draw per pick
/// ([`Sampler::gap`]) and a countdown between picks: a run not picked costs a decrement, not a
/// step of the generator and a division.
#[derive(Debug)]
pub(crate) struct Countdown {
    sampler: Sampler,
    /// Runs to pass over before the next one picked.
    left: u64,
}

impl Countdown {
    pub(crate) fn new(one_in: u64) -> Self {
        let mut sampler = Sampler::new(one_in);
        let left = sampler.gap();
        Self { sampler, left }
    }

    /// Whether to time this run. Inlined into the worker's generic code (instantiated in the
    /// host's crate): a run not picked is then a decrement, with no call.
    #[inline]
    pub(crate) fn next(&mut self) -> bool {
        if self.left > 0 {
            self.left -= 1;
            return false;
        }
        self.pick()
    }

    /// Draws the next gap; this run is picked.
    #[cold]
    fn pick(&mut self) -> bool {
        self.left = self.sampler.gap();
        true
    }
}

/// The endpoint's stages timed on the driver's clock into a [`ScopeClock`], one run in
/// [`STAGE_SAMPLING`]. The endpoint calls it only for the runs it times: after each, it says
/// how many runs to skip ([`StageObserver::skip`]), drawn so that each run is still timed with
/// probability one in [`STAGE_SAMPLING`] (the gap's law is that of the [`Sampler`]'s draws).
pub(crate) struct StageTimer {
    clock: crate::Clock,
    scopes: Arc<ScopeClock>,
    /// When the stage under way started.
    started: u64,
    sampler: Sampler,
}

impl StageTimer {
    pub(crate) fn new(clock: crate::Clock, scopes: Arc<ScopeClock>) -> Self {
        Self { clock, scopes, started: 0, sampler: Sampler::new(STAGE_SAMPLING) }
    }
}

impl StageObserver for StageTimer {
    fn enter(&mut self, _stage: Stage) {
        self.started = self.clock.now().as_nanos();
    }

    fn exit(&mut self, stage: Stage) {
        let elapsed = self.clock.now().as_nanos().saturating_sub(self.started);
        let elapsed = elapsed.min(SAMPLE_NANOS_MAX);
        self.scopes.add(Scope::of_stage(stage), elapsed * STAGE_SAMPLING);
    }

    fn skip(&mut self) -> u64 {
        self.sampler.gap()
    }
}

/// A distribution, summarized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Largest, microseconds.
    pub max_us: f64,
}

impl Summary {
    /// Summarizes a histogram of nanoseconds.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Self {
            count: histogram.len(),
            mean_us: histogram.mean() / 1e3,
            p50_us: us(histogram.value_at_quantile(0.5)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            max_us: us(histogram.max()),
        }
    }
}

/// A histogram of nanoseconds from 1 ns to 10 s at 2 significant figures (about 30 KB).
pub(crate) fn histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (low 1, high >= 2 low, 2 figures).
    Histogram::new_with_bounds(1, 10_000_000_000, 2).expect("valid constant bounds")
}

/// A worker's per room-tick distributions in nanoseconds (HDR histograms): each room scope's,
/// and lateness. A worker records into them under a lock nobody else holds but a reader
/// copying them (a copy of their counts: about 170 KB, microseconds); quantiles are taken
/// only when a report is read ([`Distributions::summarize`]), by the reader, from its copy.
/// Taken at each publish they cost about as much as the rest of telemetry's bookkeeping, and
/// copying the histograms out at each publish instead cost more than the lock.
#[derive(Debug, Clone)]
pub(crate) struct Distributions {
    scopes: [Histogram<u64>; ROOM_SCOPES.len()],
    lateness: Histogram<u64>,
    wake_lateness: Histogram<u64>,
    lateness_busy: Histogram<u64>,
}

impl Distributions {
    pub(crate) fn new() -> Self {
        Self {
            scopes: std::array::from_fn(|_| histogram()),
            lateness: histogram(),
            wake_lateness: histogram(),
            lateness_busy: histogram(),
        }
    }

    /// Adds one room-tick: nanoseconds per room scope, in [`ROOM_SCOPES`] order, and its
    /// lateness, split as [`split_lateness`] splits it.
    pub(crate) fn record(&mut self, nanos: &[u64; ROOM_SCOPES.len()], lateness: &Lateness) {
        for (histogram, nanos) in self.scopes.iter_mut().zip(nanos) {
            histogram.saturating_record((*nanos).max(1));
        }
        let ns = |d: Duration| (d.as_nanos() as u64).max(1);
        self.lateness.saturating_record(ns(lateness.total()));
        self.wake_lateness.saturating_record(ns(lateness.wake));
        self.lateness_busy.saturating_record(ns(lateness.busy));
    }

    /// Empties them.
    pub(crate) fn reset(&mut self) {
        self.scopes.iter_mut().for_each(Histogram::reset);
        self.lateness.reset();
        self.wake_lateness.reset();
        self.lateness_busy.reset();
    }

    /// Fills `report`'s summaries (per room-tick and lateness) from `shared`, copied under
    /// its lock and summarized after it: the worker waits for a copy, never for quantiles.
    pub(crate) fn summarize(shared: &std::sync::Mutex<Self>, report: &mut WorkerReport) {
        let copy = super::lock(shared).clone();
        report.per_room_tick =
            ROOM_SCOPES.iter().zip(&copy.scopes).map(|(s, h)| (*s, Summary::of(h))).collect();
        report.lateness = Summary::of(&copy.lateness);
        report.wake_lateness = Summary::of(&copy.wake_lateness);
        report.lateness_busy = Summary::of(&copy.lateness_busy);
    }
}

/// How late a room-tick started, in two parts that add up to it: the worker's wake-up (it was
/// asleep with nothing to do when the tick fell due, and the OS ran it again late) and its
/// work (it was busy when the tick fell due, or woke and had other rooms' ticks or datagrams
/// to get through first). The first is the machine's (a timer, a hypervisor, other
/// processes on the core) and a sleep policy's to fix; the second is the load's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Late because the worker woke late from an idle sleep.
    pub wake: Duration,
    /// Late because the worker was busy (the previous tick's work, or other rooms').
    pub busy: Duration,
}

impl Lateness {
    /// The whole lateness.
    pub fn total(&self) -> Duration {
        self.wake + self.busy
    }
}

/// Splits the lateness of a tick due at `deadline` that started at `started`, given the
/// worker's last idle sleep before it (`from` to `woke`, see
/// [`crate::UdpDriver::last_sleep`]). The wake-up's part is the stretch of the sleep past the
/// deadline (or past the sleep's start, if it began after the deadline): the worker could not
/// have started the tick then. Everything else is work: the time from the deadline to the
/// sleep, if the worker was busy when the tick fell due, and from the wake-up to the tick.
/// With no sleep, or a sleep that ended before the deadline, it is all work. An early tick is
/// not late at all.
pub fn split_lateness(deadline: Instant, started: Instant, sleep: Option<Sleep>) -> Lateness {
    let late = started.saturating_duration_since(deadline);
    let wake = sleep.map_or(Duration::ZERO, |sleep| {
        let woke = sleep.woke.min(started);
        woke.saturating_duration_since(sleep.from.max(deadline))
    });
    let wake = wake.min(late);
    Lateness { wake, busy: late - wake }
}

/// One room's figures since the host started (or since the last reset).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoomReport {
    /// The room's id (from its clients' connect tokens).
    pub room_id: u64,
    /// The worker running it.
    pub worker: usize,
    /// Clients connected or resumable.
    pub clients: usize,
    /// Ticks run.
    pub ticks: u64,
    /// Nanoseconds per room scope in all, in [`ROOM_SCOPES`] order.
    pub scope_nanos: [u64; ROOM_SCOPES.len()],
    /// The longest tick's nanoseconds per room scope.
    pub scope_max_nanos: [u64; ROOM_SCOPES.len()],
    /// Ticks over their budget, per room scope.
    pub overruns: [u64; ROOM_SCOPES.len()],
    /// Ticks that started later than the lateness budget.
    pub late_ticks: u64,
    /// Snapshots built as a client's own view (`RoomStats::views_own`): clients that fell
    /// behind the shared encoding.
    pub views_own: u64,
}

/// One worker's figures.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    /// Its index.
    pub worker: usize,
    /// Its socket's address.
    pub address: std::net::SocketAddr,
    /// Rooms it runs.
    pub rooms: usize,
    /// Connections open on its endpoint.
    pub connections: usize,
    /// Room-ticks run.
    pub room_ticks: u64,
    /// Its thread's CPU time (user and system), microseconds.
    pub cpu_us: u64,
    /// Wall time covered, microseconds.
    pub wall_us: u64,
    /// Nanoseconds per scope in all, in [`SCOPES`] order.
    pub scope_nanos: [u64; SCOPES.len()],
    /// Per room-tick, per room scope in [`ROOM_SCOPES`] order (summarized when the report is
    /// read: [`HostReport`] has them).
    pub per_room_tick: Vec<(Scope, Summary)>,
    /// How late each room-tick started.
    pub lateness: Summary,
    /// The part of each room-tick's lateness that the worker's wake-up from an idle sleep
    /// took: it slept through the deadline ([`split_lateness`]).
    pub wake_lateness: Summary,
    /// The part of each room-tick's lateness that work took: the worker was busy when the
    /// tick fell due (the previous tick's work ran over), or had other ticks to run first.
    pub lateness_busy: Summary,
    /// Overruns per room scope, in [`ROOM_SCOPES`] order, over all its rooms.
    pub overruns: [u64; ROOM_SCOPES.len()],
    /// Rooms whose game code panicked and that were closed.
    pub rooms_failed: u64,
    /// Datagrams the socket refused to send.
    pub send_errors: u64,
    /// Datagrams the endpoint dropped (malformed, unauthenticated, replayed, rate limited...).
    pub dropped: u64,
    /// Each room's figures.
    #[serde(skip)]
    pub room_reports: Vec<RoomReport>,
    /// Clients in its rooms (connected or resumable), as of each room's last tick.
    pub players: usize,
    /// Rooms opened.
    pub rooms_opened: u64,
    /// Rooms closed (idle, or failed).
    pub rooms_closed: u64,
    /// Room-ticks that started later than the lateness budget.
    pub late_ticks: u64,
    /// The transport's counters: traffic, handshakes, refusals, drops, resends.
    pub transport: TransportCounters,
    /// Fixed-bucket histograms of phases, lateness and the clients' quality.
    pub histograms: WorkerHistograms,
}

/// The whole host's figures: what `/stats` serves and `rally-bench load` reads.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// Workers' figures.
    pub workers: Vec<WorkerReport>,
    /// Every room's figures.
    pub rooms: Vec<RoomReport>,
    /// Budgets the overruns count against.
    pub budgets: Budgets,
}

impl HostReport {
    /// Room-ticks over all workers.
    pub fn room_ticks(&self) -> u64 {
        self.workers.iter().map(|w| w.room_ticks).sum()
    }

    /// Worker CPU microseconds per room-tick, over all workers.
    pub fn cpu_us_per_room_tick(&self) -> f64 {
        let cpu: u64 = self.workers.iter().map(|w| w.cpu_us).sum();
        cpu as f64 / self.room_ticks().max(1) as f64
    }

    /// Mean microseconds per room-tick of each scope, over all workers.
    pub fn scope_us_per_room_tick(&self) -> Vec<(Scope, f64)> {
        let ticks = self.room_ticks().max(1) as f64;
        SCOPES
            .iter()
            .map(|s| {
                let nanos: u64 = self.workers.iter().map(|w| w.scope_nanos[s.index()]).sum();
                (*s, nanos as f64 / 1e3 / ticks)
            })
            .collect()
    }
}

/// Upper bounds, in seconds, of the per room-tick phase histograms: a 128 Hz tick is
/// 7.8125 ms, and a worker shares it among hundreds of rooms, so a room's phase takes
/// microseconds; the top buckets catch a phase that eats a tick or more.
pub const PHASE_BOUNDS: [f64; 14] = [
    1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 7.8125e-3,
    15.625e-3, 50e-3,
];

/// Upper bounds, in seconds, of the tick lateness histogram: the default budget is half a
/// millisecond; a tick later than one tick (7.8125 ms at 128 Hz) is skipped.
pub const LATENESS_BOUNDS: [f64; 12] =
    [10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 4e-3, 7.8125e-3, 15.625e-3, 50e-3, 250e-3];

/// Upper bounds, in seconds, of the clients' round-trip time histogram.
pub const RTT_BOUNDS: [f64; 12] =
    [1e-3, 5e-3, 10e-3, 20e-3, 30e-3, 50e-3, 75e-3, 100e-3, 150e-3, 200e-3, 300e-3, 500e-3];

/// Upper bounds, in seconds, of the clients' jitter (round-trip time deviation) histogram.
pub const JITTER_BOUNDS: [f64; 10] =
    [0.5e-3, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 200e-3, 500e-3];

/// Upper bounds of the clients' packet loss histogram, a ratio (0 to 1).
pub const LOSS_BOUNDS: [f64; 10] = [0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// A histogram with fixed buckets, as Prometheus exposes them: counts add across workers and
/// hosts, so quantiles can be taken over a fleet. Counts are per bucket here (the last one
/// past every bound); the exposition makes them cumulative.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Buckets {
    /// Upper bounds, ascending.
    pub bounds: &'static [f64],
    /// Samples per bucket: `counts[k]` fell in `(bounds[k-1], bounds[k]]`, the last past all.
    pub counts: Vec<u64>,
    /// The samples' sum.
    pub sum: f64,
}

impl Buckets {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0 }
    }

    /// Adds one sample.
    #[inline]
    pub fn record(&mut self, value: f64) {
        // The first bound not below the value (a NaN lands in the first bucket, as a binary
        // search puts it), found by a scan from the bottom: a worker records eight samples
        // per room-tick, most of them in the lowest buckets (a phase of a few microseconds, a
        // lateness of none), where the scan stops after a compare or three and a binary search
        // over a dozen bounds takes four rounds every time.
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN: `bound < NaN` is false.
        let bucket = self.bounds.iter().position(|bound| !(*bound < value));
        let bucket = bucket.unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
    }

    /// Samples in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Empties it.
    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.sum = 0.0;
    }

    /// Adds another histogram over the same bounds (a fleet's, a host's).
    pub fn merge(&mut self, other: &Buckets) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.sum += other.sum;
    }
}

/// A worker's counters of the transport, in base units, since it started (or the last reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TransportCounters {
    /// Datagrams and bytes through the socket.
    #[serde(flatten)]
    pub traffic: TrafficCounters,
    /// Connection requests from new addresses (a client retrying counts again).
    pub handshakes_started: u64,
    /// Connections opened.
    pub handshakes_completed: u64,
    /// Handshakes refused: connect token expired.
    pub refused_expired: u64,
    /// Handshakes refused: token forged (did not authenticate, or another protocol id).
    pub refused_forged: u64,
    /// Handshakes refused: token names other servers.
    pub refused_wrong_server: u64,
    /// Handshakes refused: token replayed from another address.
    pub refused_replay: u64,
    /// Handshakes refused: no token (or one where none is taken).
    pub refused_missing: u64,
    /// Handshakes refused: the table of tokens in use was full.
    pub refused_token_table_full: u64,
    /// Handshakes refused: `connections_max` connections exist.
    pub refused_server_full: u64,
    /// Handshakes refused: a challenge response with a bad or expired cookie.
    pub refused_bad_cookie: u64,
    /// Packets to a sealed connection that did not authenticate.
    pub open_failed_unauthenticated: u64,
    /// Authentic packets seen before.
    pub open_failed_replayed: u64,
    /// Datagrams dropped: did not decode.
    pub dropped_malformed: u64,
    /// Datagrams dropped: from addresses with no connection.
    pub dropped_unknown_peer: u64,
    /// Datagrams dropped: over their source's rate (packets or handshakes).
    pub dropped_rate_limited: u64,
    /// Datagrams dropped: a new source while the rate table was full.
    pub dropped_rate_table_full: u64,
    /// Datagrams dropped: longer than any Rally packet.
    pub dropped_oversized: u64,
    /// Datagrams the socket refused to send.
    pub send_errors: u64,
    /// Reliable units sent again, over the worker's connections.
    pub resends: u64,
}

/// Datagrams and bytes through a worker's socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TrafficCounters {
    /// Datagrams read.
    pub datagrams_in: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// Datagrams written.
    pub datagrams_out: u64,
    /// Bytes written.
    pub bytes_out: u64,
    /// Receive syscalls.
    pub reads: u64,
    /// Receive syscalls that found nothing.
    pub empty_reads: u64,
    /// Send syscalls (`datagrams_out / sends`: datagrams per `sendmmsg`).
    pub sends: u64,
    /// The worker loop's sleeps (each a wake-up).
    pub sleeps: u64,
}

impl TransportCounters {
    /// Every counter, by name, in the order of the fields.
    pub fn values(&self) -> [u64; 27] {
        let t = &self.traffic;
        [
            t.datagrams_in,
            t.bytes_in,
            t.datagrams_out,
            t.bytes_out,
            self.handshakes_started,
            self.handshakes_completed,
            self.refused_expired,
            self.refused_forged,
            self.refused_wrong_server,
            self.refused_replay,
            self.refused_missing,
            self.refused_token_table_full,
            self.refused_server_full,
            self.refused_bad_cookie,
            self.open_failed_unauthenticated,
            self.open_failed_replayed,
            self.dropped_malformed,
            self.dropped_unknown_peer,
            self.dropped_rate_limited,
            self.dropped_rate_table_full,
            self.dropped_oversized,
            self.send_errors,
            self.resends,
            t.reads,
            t.empty_reads,
            t.sends,
            t.sleeps,
        ]
    }

    /// Sets every counter from `values` (as [`TransportCounters::values`] orders them).
    pub fn from_values(v: [u64; 27]) -> Self {
        Self {
            traffic: TrafficCounters {
                datagrams_in: v[0],
                bytes_in: v[1],
                datagrams_out: v[2],
                bytes_out: v[3],
                reads: v[23],
                empty_reads: v[24],
                sends: v[25],
                sleeps: v[26],
            },
            handshakes_started: v[4],
            handshakes_completed: v[5],
            refused_expired: v[6],
            refused_forged: v[7],
            refused_wrong_server: v[8],
            refused_replay: v[9],
            refused_missing: v[10],
            refused_token_table_full: v[11],
            refused_server_full: v[12],
            refused_bad_cookie: v[13],
            open_failed_unauthenticated: v[14],
            open_failed_replayed: v[15],
            dropped_malformed: v[16],
            dropped_unknown_peer: v[17],
            dropped_rate_limited: v[18],
            dropped_rate_table_full: v[19],
            dropped_oversized: v[20],
            send_errors: v[21],
            resends: v[22],
        }
    }

    /// These counters less `baseline` (what a reset left behind).
    pub fn since(&self, baseline: &TransportCounters) -> Self {
        let (now, then) = (self.values(), baseline.values());
        Self::from_values(std::array::from_fn(|k| now[k].saturating_sub(then[k])))
    }

    /// The endpoint's and socket's counters, gathered.
    pub fn gather(
        stats: &rally_proto::EndpointStats,
        traffic: &crate::Traffic,
        oversized: u64,
        send_errors: u64,
        resends: u64,
    ) -> Self {
        let refused = &stats.tokens_refused;
        Self {
            traffic: TrafficCounters {
                datagrams_in: traffic.datagrams_in,
                bytes_in: traffic.bytes_in,
                datagrams_out: traffic.datagrams_out,
                bytes_out: traffic.bytes_out,
                reads: traffic.reads,
                empty_reads: traffic.empty_reads,
                sends: traffic.sends,
                sleeps: traffic.sleeps,
            },
            handshakes_started: stats.handshakes_started,
            handshakes_completed: stats.handshakes_completed,
            refused_expired: refused.expired,
            refused_forged: refused.forged,
            refused_wrong_server: refused.wrong_server,
            refused_replay: refused.reused,
            refused_missing: refused.missing,
            refused_token_table_full: refused.table_full,
            refused_server_full: stats.refused_full,
            refused_bad_cookie: stats.bad_cookie,
            open_failed_unauthenticated: stats.unauthenticated,
            open_failed_replayed: stats.replayed,
            dropped_malformed: stats.malformed,
            dropped_unknown_peer: stats.unknown_peer,
            dropped_rate_limited: stats.rate_limited,
            dropped_rate_table_full: stats.rate_table_full,
            dropped_oversized: oversized,
            send_errors,
            resends,
        }
    }
}

/// A worker's histograms in fixed buckets, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerHistograms {
    /// Seconds per room-tick of each room scope, in [`ROOM_SCOPES`] order.
    pub phase_seconds: Vec<Buckets>,
    /// How late each room-tick started, seconds.
    pub lateness_seconds: Buckets,
    /// The wake-up's part of each room-tick's lateness, seconds ([`split_lateness`]).
    pub wake_lateness_seconds: Buckets,
    /// The work's part of each room-tick's lateness, seconds ([`split_lateness`]).
    pub lateness_busy_seconds: Buckets,
    /// Each connection's smoothed round-trip time, sampled once a second.
    pub client_rtt_seconds: Buckets,
    /// Each connection's round-trip time deviation, sampled once a second.
    pub client_jitter_seconds: Buckets,
    /// Each connection's packet loss estimate (0 to 1), sampled once a second.
    pub client_loss_ratio: Buckets,
}

impl Default for WorkerHistograms {
    fn default() -> Self {
        Self {
            phase_seconds: ROOM_SCOPES.iter().map(|_| Buckets::new(&PHASE_BOUNDS)).collect(),
            lateness_seconds: Buckets::new(&LATENESS_BOUNDS),
            wake_lateness_seconds: Buckets::new(&LATENESS_BOUNDS),
            lateness_busy_seconds: Buckets::new(&LATENESS_BOUNDS),
            client_rtt_seconds: Buckets::new(&RTT_BOUNDS),
            client_jitter_seconds: Buckets::new(&JITTER_BOUNDS),
            client_loss_ratio: Buckets::new(&LOSS_BOUNDS),
        }
    }
}

impl WorkerHistograms {
    /// Empties them all.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_scope_s_room_index_is_its_place_among_the_room_scopes() {
        for (k, scope) in ROOM_SCOPES.iter().enumerate() {
            assert_eq!(scope.room_index(), k, "{}", scope.name());
        }
        let others = SCOPES.iter().filter(|s| !ROOM_SCOPES.contains(s));
        assert!(others.clone().all(|s| s.room_index() >= ROOM_SCOPES.len()));
    }

    #[test]
    fn a_sample_on_a_bound_falls_in_that_bucket_and_the_rest_past_the_last() {
        // Prometheus buckets are `le`: a sample equal to a bound counts in it.
        let mut buckets = Buckets::new(&LOSS_BOUNDS);
        for value in [0.0, 0.01, 0.011, 2.0] {
            buckets.record(value);
        }
        assert_eq!(buckets.counts[0], 1, "0 is in le=0");
        assert_eq!(buckets.counts[3], 1, "0.01 is in le=0.01");
        assert_eq!(buckets.counts[4], 1, "0.011 is in le=0.02");
        assert_eq!(buckets.counts[LOSS_BOUNDS.len()], 1, "2 is past every bound");
        assert_eq!(buckets.count(), 4);
        let mut merged = Buckets::new(&LOSS_BOUNDS);
        merged.merge(&buckets);
        merged.merge(&buckets);
        assert_eq!((merged.count(), merged.sum), (8, 2.0 * buckets.sum));
    }

    #[test]
    fn every_sample_falls_in_the_bucket_a_binary_search_over_the_bounds_finds() {
        // Goal: `record`'s scan from the bottom puts every value where the binary search it
        // replaced did, NaN included. Method: each bound's neighbours and values across all
        // the ranges, into each histogram's bounds.
        for bounds in [&PHASE_BOUNDS[..], &LATENESS_BOUNDS, &RTT_BOUNDS, &LOSS_BOUNDS] {
            let near = bounds.iter().flat_map(|b| [*b, b * (1.0 - 1e-9), b * (1.0 + 1e-9)]);
            let spread = (0..200).map(|k| 1e-7 * 1.1f64.powi(k));
            let odd = [f64::NAN, -1.0, 0.0, f64::INFINITY];
            for value in near.chain(spread).chain(odd) {
                let mut buckets = Buckets::new(bounds);
                buckets.record(value);
                let want = bounds.partition_point(|bound| *bound < value);
                assert_eq!(buckets.counts[want], 1, "{value} in {bounds:?}");
            }
        }
    }

    #[test]
    fn the_countdown_times_one_run_in_sampling_whatever_the_pattern_of_runs() {
        // Goal: sampled scopes add up to their true totals on average, including when the
        // traffic has a period (a snapshot then an ack, over and over) that a fixed stride
        // would fall in step with. Method: runs alternating between two kinds, 2 and 10
        // nanoseconds; each sampled run counts INGEST_SAMPLING times; the estimate of each kind's
        // total is within 10% of its truth.
        let mut sampler = Countdown::new(INGEST_SAMPLING);
        let runs = 64_000u64;
        let mut estimate = [0u64; 2];
        for k in 0..runs {
            let kind = (k % 2) as usize;
            if sampler.next() {
                estimate[kind] += [2, 10][kind] * INGEST_SAMPLING;
            }
        }
        for (kind, nanos) in [2u64, 10].iter().enumerate() {
            let truth = (runs / 2 * nanos) as f64;
            let error = (estimate[kind] as f64 - truth).abs() / truth;
            assert!(error < 0.1, "kind {kind}: estimate {} vs {truth}", estimate[kind]);
        }
    }

    #[test]
    fn skipping_by_gaps_times_one_run_in_the_sampling_factor_with_no_pattern() {
        // The endpoint skips the runs a gap says, then times one: over many runs, one in
        // STAGE_SAMPLING is timed (the scopes' totals are scaled by it), and a gap is
        // memoryless as the sampler's own picks are (a fixed stride would fall in step with a
        // pattern in the traffic): as many gaps of 0 as one in STAGE_SAMPLING, and gaps past
        // STAGE_SAMPLING as often as the law says (about 1/e of them).
        let mut sampler = Sampler::new(STAGE_SAMPLING);
        let gaps: Vec<u64> = (0..100_000).map(|_| sampler.gap()).collect();
        let runs: u64 = gaps.iter().map(|g| g + 1).sum();
        let rate = gaps.len() as f64 / runs as f64;
        assert!((rate * STAGE_SAMPLING as f64 - 1.0).abs() < 0.05, "one run in {}", 1.0 / rate);
        let share = |f: &dyn Fn(u64) -> bool| {
            gaps.iter().filter(|g| f(**g)).count() as f64 / gaps.len() as f64
        };
        let zero = share(&|g| g == 0) * STAGE_SAMPLING as f64;
        assert!((zero - 1.0).abs() < 0.1, "gaps of 0: {zero} in {STAGE_SAMPLING}");
        let long = share(&|g| g >= STAGE_SAMPLING);
        let law = (1.0 - 1.0 / STAGE_SAMPLING as f64).powi(STAGE_SAMPLING as i32);
        assert!((long - law).abs() < 0.02, "gaps past {STAGE_SAMPLING}: {long} (law {law})");
        assert_eq!(Sampler::new(1).gap(), 0, "one in one times every run");
    }

    #[test]
    fn lateness_splits_into_the_wake_up_past_the_deadline_and_the_work() {
        // Goal: each part of a late tick goes to its cause, and the parts add up to the
        // lateness. Method: a tick due at 1,000 us, started at 1,300 us, after sleeps that
        // ended before, across and after the deadline, and with none.
        let at = |us: u64| Instant::from_nanos(us * 1_000);
        let us = Duration::from_micros;
        let sleep = |from, woke| Some(Sleep { from: at(from), woke: at(woke) });
        let split = |s| {
            let l = split_lateness(at(1_000), at(1_300), s);
            assert_eq!(l.total(), us(300), "the parts add up");
            (l.wake, l.busy)
        };
        // Asleep through the deadline, woke 120 us late, then 180 us of other rooms' ticks.
        assert_eq!(split(sleep(600, 1_120)), (us(120), us(180)));
        // Woke before the deadline, busy since: all work.
        assert_eq!(split(sleep(600, 900)), (Duration::ZERO, us(300)));
        assert_eq!(split(None), (Duration::ZERO, us(300)));
        // Busy 100 us past the deadline, then asleep (for a timer) until 1,250: 150 us of it
        // was the wake-up's (the tick could not start while asleep), 150 us work.
        assert_eq!(split(sleep(1_100, 1_250)), (us(150), us(150)));
        // A wake-up reading after the tick's start (another clock read) is capped at it.
        assert_eq!(split(sleep(600, 1_400)), (us(300), Duration::ZERO));
        // An early tick is not late, whatever the sleep.
        let early = split_lateness(at(1_000), at(990), sleep(600, 990));
        assert_eq!(early, Lateness::default());
    }

    #[test]
    fn counters_since_a_baseline_subtract_field_by_field() {
        let mut now = TransportCounters::default();
        now.traffic.bytes_in = 10;
        now.refused_expired = 3;
        now.traffic.sleeps = 7;
        let mut baseline = now;
        baseline.traffic.bytes_in = 4;
        let since = now.since(&baseline);
        assert_eq!((since.traffic.bytes_in, since.refused_expired), (6, 0));
        assert_eq!(TransportCounters::from_values(now.values()), now);
    }
}
