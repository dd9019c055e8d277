//! Where a host's time goes: scopes per phase and subsystem, per room and per worker, against
//! budgets.
//!
//! A worker times every scope on its own clock. Transport scopes (receive, decrypt, decode,
//! encode, encrypt, send) belong to the worker's endpoint, which all its rooms share; room
//! scopes (ingest, interact, simulate, replicate, transmit) belong to each room. Per room the
//! host keeps sums, maxima and budget overruns; per worker it keeps an HDR histogram of each
//! scope per room-tick and of tick lateness, and the thread's CPU time from the OS.

use hdrhistogram::Histogram;
use rally_engine::Phase;
use rally_proto::{Stage, StageObserver};
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

/// The endpoint's stages timed on the driver's clock into a [`ScopeClock`].
pub(crate) struct StageTimer {
    pub(crate) clock: crate::Clock,
    pub(crate) scopes: Arc<ScopeClock>,
    pub(crate) started: u64,
}

impl StageObserver for StageTimer {
    fn enter(&mut self, _stage: Stage) {
        self.started = self.clock.now().as_nanos();
    }

    fn exit(&mut self, stage: Stage) {
        let elapsed = self.clock.now().as_nanos().saturating_sub(self.started);
        self.scopes.add(Scope::of_stage(stage), elapsed);
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
    /// Per room-tick, per scope in [`SCOPES`] order.
    pub per_room_tick: Vec<(Scope, Summary)>,
    /// How late each room-tick started.
    pub lateness: Summary,
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
