//! The host: many rooms on worker threads, one UDP socket each, ticks on time.
//!
//! Each worker owns a socket, the endpoint behind it and the rooms assigned to it, and runs
//! one loop: datagrams in (each input reaches its room on arrival, and the room's answer, the
//! fast path's poses say, goes out at once), every room's tick at its own deadline, datagrams
//! out. Rooms' deadlines are spread over the tick so that a worker's rooms do not all tick at
//! once. A worker waits for its socket or its next deadline, whichever comes first, on the
//! kernel's high-resolution timers with a microsecond of slack, so ticks start on time without
//! burning CPU; [`HostConfig::spin`] adds polling for the last stretch where a kernel wakes
//! threads late.
//!
//! **Routing.** A room lives on worker `room_id % workers`, and a worker's socket is its own
//! port ([`Host::room_address`]): the game's backend puts that address in the connect token it
//! issues, and the worker routes the connection to the room its token names, opening the room
//! on the first connection. Behind a port mapping (a fleet manager's host ports, a NAT) the
//! address clients reach is not the bound one: [`HostConfig::public_addresses`] gives it, and
//! the worker takes tokens naming it instead. One port per worker rather than one shared port
//! (`SO_REUSEPORT`): the kernel spreads a shared port's datagrams by their addresses, which
//! know nothing of rooms, so a datagram would have to cross threads to reach its room.
//!
//! **Faults.** A panic in a room's game code closes that room only: its clients are
//! disconnected with [`DisconnectReason::RoomFailed`] and the worker's other rooms tick on.
//! [`Host::shutdown`] drains: no new connections, every room hands over what it queued, the
//! worker waits until every reliable message is acknowledged or the drain timeout passes, then
//! tells every client [`DisconnectReason::ServerShutdown`] and reports what was left.
//!
//! **Telemetry.** See [`telemetry`]: every scope of the work is timed, per room and per worker,
//! against [`Budgets`]; [`Host::report`] gathers it.
//!
//! **Counting.** [`MemoryWorker`] is a worker without its socket: the same routing, ticks,
//! telemetry and report, fed datagrams in memory on the caller's time, so that a benchmark
//! (`rally-bench count`) can count the host's instructions per room-tick under callgrind.

mod memory;
pub mod telemetry;
mod worker;

use crate::UdpDriver;
pub use memory::MemoryWorker;
use rally_engine::{Room, RoomEvent, Simulation};
#[cfg(doc)]
use rally_proto::DisconnectReason;
use rally_proto::{EndpointConfig, Security, TokenKey};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use telemetry::Distributions;
pub use telemetry::{Budgets, HostReport, RoomReport, Scope, Summary, WorkerReport};
use worker::Worker;

/// A host's settings.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Worker threads (0: one per core).
    pub workers: usize,
    /// The address workers bind to.
    pub ip: IpAddr,
    /// Worker `i` binds `port + i`; 0 lets the OS pick each worker's port.
    pub port: u16,
    /// Each worker's port, by worker index, where a fleet manager chose them (Agones'
    /// `Passthrough` policy); empty: `port + i`. Its length must be the number of workers.
    pub worker_ports: Vec<u16>,
    /// The address clients reach each worker at, by worker index, where it is not the bound
    /// one (a container's host port, a node's address): connect tokens must name it, and
    /// the worker accepts tokens naming it. Empty: the bound addresses.
    pub public_addresses: Vec<SocketAddr>,
    /// How long before a tick's deadline a worker stops sleeping and polls, for kernels that
    /// wake sleeping threads late (each microsecond costs CPU before every tick). Zero, the
    /// default: never spin; the precise wait keeps ticks on time here.
    pub spin: Duration,
    /// The longest a worker with rooms sleeps at once over the last 2 ms before a wake-up (it
    /// wakes and sleeps again, reading the socket only at the wake-up itself); at least
    /// [`crate::STEPPED_STRETCH`] (2 ms, the default): no steps, one sleep to the wake-up.
    /// Steps were meant to keep a virtual machine's idle core from being handed elsewhere
    /// and waking late; measured (docs/benchmarks.md, "Sleep policies"), each step's wake-up
    /// cost about 20 us of CPU; steps lowered p99 lateness at 1 room on a busy machine in some
    /// runs, not at 8 rooms, so the default has none.
    pub sleep_step: Duration,
    /// How much earlier than its deadline a room may tick, to share a wake-up with a room
    /// whose deadline comes first: a worker that wakes for one room's tick also ticks every
    /// room due within this window, and their datagrams go out in one batch. Each room still
    /// ticks once a period, on its own schedule (its next deadline is one period after the
    /// one it was ticked for), so a snapshot is never later for it, up to this much earlier.
    /// Measured at 32 reference rooms a worker (docs/benchmarks.md, "Round 20"), 400 us (the
    /// default) took the wake-ups from 14-19 to 9-12 a tick period, the datagrams a
    /// `sendmmsg` from 11-14 to 21-23, and the median CPU per room-tick of fifteen runs from
    /// 103.9 us to 98.6. Zero: each room at its own deadline. At most [`TICK_WINDOW_MAX`], and
    /// for each room at most a quarter of its period.
    pub tick_window: Duration,
    /// Cores to pin workers to, worker `i` to `worker_cores[i % len]`; empty: the OS decides.
    /// Pinning keeps a worker's caches warm and its wake-ups prompt on a busy machine.
    pub worker_cores: Vec<usize>,
    /// Run workers under the OS's realtime policy (first in, first out) at this priority, 1 to
    /// 99; `None` (the default): the ordinary policy. On a machine shared with other work, a
    /// worker preempted while a tick falls due starts it late (docs/operating.md); realtime
    /// workers are not preempted by ordinary threads. [`Host::start`] fails with the OS's
    /// refusal when the process lacks the right.
    pub realtime_priority: Option<u8>,
    /// Rooms per worker at most; a connection to a room beyond it is refused (`ServerFull`).
    pub rooms_per_worker_max: usize,
    /// A room with no clients for this long is closed.
    pub room_idle_close: Duration,
    /// Budgets per room-tick, for the overrun counters.
    pub budgets: Budgets,
    /// Time every scope, record the histograms and sample each connection's quality (the
    /// default). Off, a worker only counts room-ticks, connections and its CPU time: what
    /// `rally-bench load --telemetry-cost` compares against to measure telemetry's own cost.
    pub telemetry: bool,
    /// The endpoints' settings (connection limits, rates; the engine's channels by default);
    /// `security` is set from `key` and the worker's address.
    pub endpoint: EndpointConfig,
    /// The key connect tokens are sealed with (shared with the game's backend). `None` runs
    /// in plaintext: for debugging only.
    pub key: Option<TokenKey>,
    /// The game's protocol id, which its tokens carry.
    pub protocol_id: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            workers: 0,
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            worker_ports: Vec::new(),
            public_addresses: Vec::new(),
            spin: Duration::ZERO,
            sleep_step: crate::STEPPED_STRETCH,
            tick_window: TICK_WINDOW_DEFAULT,
            worker_cores: Vec::new(),
            realtime_priority: None,
            rooms_per_worker_max: 1024,
            room_idle_close: Duration::from_secs(30),
            budgets: Budgets::default(),
            telemetry: true,
            endpoint: EndpointConfig {
                connection: rally_engine::connection_config(),
                ..EndpointConfig::default()
            },
            key: None,
            protocol_id: 0,
        }
    }
}

/// Workers per host at most.
pub const WORKERS_MAX: usize = 1024;

/// [`HostConfig::tick_window`] by default: about a twentieth of a 128 Hz tick, one and a half
/// times the spacing of 32 rooms' deadlines spread evenly over it.
pub const TICK_WINDOW_DEFAULT: Duration = Duration::from_micros(400);

/// [`HostConfig::tick_window`] at most. Whatever the window, a room ticks at most a quarter of
/// its own period early (a 1,000 Hz room at most 250 us).
pub const TICK_WINDOW_MAX: Duration = Duration::from_millis(2);

/// Why a host's settings were refused: [`HostConfig::validate`] names the field and its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostConfigError {
    /// A count or a port is outside its range.
    #[error("{field} is {value}, outside its range {min}..={max}")]
    OutOfRange {
        /// The setting.
        field: &'static str,
        /// What it was set to.
        value: u64,
        /// The smallest allowed.
        min: u64,
        /// The largest allowed.
        max: u64,
    },
    /// A duration is outside its range.
    #[error("{field} is {value:?}, outside its range {min:?}..={max:?}")]
    DurationOutOfRange {
        /// The setting.
        field: &'static str,
        /// What it was set to.
        value: Duration,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
}

impl HostConfig {
    /// Checks every count and duration against its range; [`Host::start`] calls it (and
    /// checks the ports again once `workers: 0` is resolved to the number of cores). The
    /// endpoint's own settings are the endpoint's to check.
    pub fn validate(&self) -> Result<(), HostConfigError> {
        count("workers", self.workers, 0..=WORKERS_MAX)?;
        // With one per core, the lists given per worker say how many there will be; `start`
        // checks them again against the cores.
        let listed = self.worker_ports.len().max(self.public_addresses.len());
        self.check_ports(if self.workers == 0 { listed.max(1) } else { self.workers })?;
        count("rooms_per_worker_max", self.rooms_per_worker_max, 1..=1 << 16)?;
        if let Some(priority) = self.realtime_priority {
            count("realtime_priority", usize::from(priority), 1..=99)?;
        }
        let second = Duration::from_secs(1);
        duration("spin", self.spin, Duration::ZERO..=Duration::from_millis(10))?;
        duration("sleep_step", self.sleep_step, Duration::from_micros(1)..=second)?;
        duration("tick_window", self.tick_window, Duration::ZERO..=TICK_WINDOW_MAX)?;
        let idle = Duration::from_millis(1)..=Duration::from_secs(24 * 3600);
        duration("room_idle_close", self.room_idle_close, idle)
    }

    /// Worker `i` binds `port + i`: the last worker's port must exist. Ports or public
    /// addresses given per worker must be given for every worker.
    fn check_ports(&self, workers: usize) -> Result<(), HostConfigError> {
        for (field, given) in [
            ("worker_ports", self.worker_ports.len()),
            ("public_addresses", self.public_addresses.len()),
        ] {
            if given != 0 {
                count(field, given, workers..=workers)?;
            }
        }
        if self.port == 0 || !self.worker_ports.is_empty() {
            return Ok(());
        }
        let last = usize::from(u16::MAX) + 1 - workers.max(1);
        count("port", usize::from(self.port), 1..=last)
    }
}

fn count(
    field: &'static str,
    value: usize,
    range: std::ops::RangeInclusive<usize>,
) -> Result<(), HostConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let wide = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    let (min, max) = (wide(*range.start()), wide(*range.end()));
    Err(HostConfigError::OutOfRange { field, value: wide(value), min, max })
}

fn duration(
    field: &'static str,
    value: Duration,
    range: std::ops::RangeInclusive<Duration>,
) -> Result<(), HostConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let (min, max) = (*range.start(), *range.end());
    Err(HostConfigError::DurationOutOfRange { field, value, min, max })
}

/// What a worker's drain left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// The worker.
    pub worker: usize,
    /// Connections told `ServerShutdown`.
    pub connections: usize,
    /// Connections whose every reliable message was acknowledged before they were told.
    pub drained: usize,
    /// Messages still unacknowledged when the drain timed out, over all connections.
    pub undelivered: usize,
}

/// A game as a host runs it: it builds each room, and answers the rooms' events.
pub trait Game: Send + Sync + 'static {
    /// The rooms' game code.
    type Simulation: Simulation;

    /// Builds room `room_id` when its first client connects (on the room's worker thread, so
    /// the simulation need not be `Send`).
    fn open(&self, room_id: u64) -> Room<Self::Simulation>;

    /// A room's event: joins and leaves, RPCs and requests (answer with [`Room::send`] and
    /// [`Room::respond`]). Called on arrival and after every tick; the default ignores them.
    fn on_event(&self, room: &mut Room<Self::Simulation>, event: GameEvent<Self>) {
        let _ = (room, event);
    }

    /// After each of a room's ticks: game code that needs the room at hand (RPCs on a timer, a
    /// round's end). What it sends leaves at once.
    fn after_tick(&self, room: &mut Room<Self::Simulation>) {
        let _ = room;
    }
}

/// The events of a game's rooms.
pub type GameEvent<G> = RoomEvent<<<G as Game>::Simulation as Simulation>::Message>;

/// A function from room id to room is a game that ignores its rooms' events.
impl<S, F> Game for F
where
    S: Simulation,
    F: Fn(u64) -> Room<S> + Send + Sync + 'static,
{
    type Simulation = S;

    fn open(&self, room_id: u64) -> Room<S> {
        self(room_id)
    }
}

/// What the host and its workers share.
#[derive(Debug, Default)]
struct Shared {
    /// Set by `shutdown`: drain and stop.
    draining: AtomicBool,
    /// How long a drain may wait, in microseconds.
    drain_timeout_us: AtomicU64,
    /// Bumped by `reset_telemetry`; a worker that sees a new value starts its figures afresh.
    reset_epoch: AtomicU64,
    /// Each worker's latest report, its summaries left for the reader to fill.
    reports: Mutex<Vec<Option<WorkerReport>>>,
    /// Each worker's per room-tick distributions, which it records into as it ticks.
    distributions: Mutex<Vec<Option<Arc<Mutex<Distributions>>>>>,
}

/// Reads a host's figures from any thread.
#[derive(Debug, Clone)]
pub struct Reporter {
    shared: Arc<Shared>,
    budgets: Budgets,
}

/// A worker's occupancy and pace: what a fleet manager's counters and health checks need,
/// read without copying the rooms' figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    /// The worker.
    pub worker: usize,
    /// Rooms open.
    pub rooms: usize,
    /// Clients in its rooms (connected or resumable), as of each room's last tick.
    pub players: usize,
    /// Room-ticks run.
    pub room_ticks: u64,
    /// Room-ticks that started later than the lateness budget.
    pub late_ticks: u64,
    /// Wall time its figures cover, microseconds: it moves at every publication, so a worker
    /// whose value stands still publishes nothing (it is stuck in a tick).
    pub wall_us: u64,
}

impl Reporter {
    /// Each worker's occupancy as last published (every 100 ms, and within 5 ms of a room
    /// opening or closing, a change of players or a late tick); a worker that has not yet
    /// published is missing.
    pub fn occupancy(&self) -> Vec<Occupancy> {
        let reports = lock(&self.shared.reports);
        let occupancy = |w: &WorkerReport| Occupancy {
            worker: w.worker,
            rooms: w.rooms,
            players: w.players,
            room_ticks: w.room_ticks,
            late_ticks: w.late_ticks,
            wall_us: w.wall_us,
        };
        reports.iter().flatten().map(occupancy).collect()
    }

    /// The latest figures of every worker and room (workers publish ten times a second).
    pub fn report(&self) -> HostReport {
        let mut workers: Vec<WorkerReport> =
            lock(&self.shared.reports).iter().flatten().cloned().collect();
        let distributions = lock(&self.shared.distributions).clone();
        for worker in &mut workers {
            if let Some(Some(shared)) = distributions.get(worker.worker) {
                Distributions::summarize(shared, worker);
            }
        }
        let rooms = workers.iter().flat_map(|w| w.room_reports.iter().cloned()).collect();
        HostReport { workers, rooms, budgets: self.budgets.clone() }
    }
}

/// Many rooms on worker threads. Dropping it drains with no wait.
pub struct Host {
    addresses: Vec<SocketAddr>,
    /// Where clients reach each worker: tokens name these.
    public: Vec<SocketAddr>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<io::Result<DrainReport>>>,
    budgets: Budgets,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("addresses", &self.addresses).finish()
    }
}

/// Whether the OS grants a thread the realtime `priority`, asked on a thread of its own that
/// ends at once: a refusal stops [`Host::start`] before any socket is bound, rather than a
/// worker after it started.
fn probe_realtime(priority: u8) -> io::Result<()> {
    std::thread::spawn(move || crate::cpu::run_realtime(priority))
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the realtime probe panicked")))
}

impl Host {
    /// Binds every worker's socket and starts the workers; `game` builds each room when its
    /// first client connects. A config [`HostConfig::validate`] refuses is an
    /// [`io::ErrorKind::InvalidInput`] error carrying the [`HostConfigError`].
    pub fn start<G: Game>(config: HostConfig, game: G) -> io::Result<Self> {
        let invalid = |e: HostConfigError| io::Error::new(io::ErrorKind::InvalidInput, e);
        config.validate().map_err(invalid)?;
        let workers = match config.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        config.check_ports(workers).map_err(invalid)?;
        if let Some(priority) = config.realtime_priority {
            probe_realtime(priority)?;
        }
        let game = Arc::new(game);
        let shared = Arc::new(Shared::default());
        *lock(&shared.reports) = vec![None; workers];
        *lock(&shared.distributions) = vec![None; workers];
        let mut addresses = Vec::new();
        let mut public = Vec::new();
        let mut drivers = Vec::new();
        for index in 0..workers {
            let port = match (config.worker_ports.get(index), config.port) {
                (Some(port), _) => *port,
                (None, 0) => 0,
                (None, port) => port + index as u16,
            };
            let local = SocketAddr::new(config.ip, port);
            let driver = bind(&config, local, config.public_addresses.get(index).copied())?;
            addresses.push(driver.local_addr()?);
            public.push(config.public_addresses.get(index).copied().unwrap_or(addresses[index]));
            drivers.push(driver);
        }
        let mut threads = Vec::new();
        for (index, driver) in drivers.into_iter().enumerate() {
            let (game, shared, config) = (game.clone(), shared.clone(), config.clone());
            let thread = std::thread::Builder::new()
                .name(format!("rally-worker-{index}"))
                .spawn(move || Worker::new(index, driver, game, shared, config).run())?;
            threads.push(thread);
        }
        Ok(Self { addresses, public, shared, threads, budgets: config.budgets })
    }

    /// Each worker's socket address, by worker index.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// Where clients reach each worker, by worker index: [`HostConfig::public_addresses`], or
    /// the bound addresses.
    pub fn public_addresses(&self) -> &[SocketAddr] {
        &self.public
    }

    /// The address of the worker that hosts `room_id`: the one to put in its clients' tokens
    /// (its public address).
    pub fn room_address(&self, room_id: u64) -> SocketAddr {
        self.public[(room_id % self.public.len() as u64) as usize]
    }

    /// The latest figures of every worker and room (workers publish ten times a second).
    pub fn report(&self) -> HostReport {
        self.reporter().report()
    }

    /// A handle that reads the figures from another thread (a metrics endpoint's).
    pub fn reporter(&self) -> Reporter {
        Reporter { shared: self.shared.clone(), budgets: self.budgets.clone() }
    }

    /// Starts every figure afresh (counters, histograms, CPU time), as of each worker's next
    /// loop; [`Host::report`] then covers only what followed.
    pub fn reset_telemetry(&self) {
        self.shared.reset_epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Drains and stops: no new connections; every room hands over what it queued; each
    /// worker waits up to `timeout` for its reliable messages to be acknowledged, then tells
    /// every client `ServerShutdown`. Returns what each worker left.
    pub fn shutdown(mut self, timeout: Duration) -> io::Result<Vec<DrainReport>> {
        self.stop(timeout)
    }

    fn stop(&mut self, timeout: Duration) -> io::Result<Vec<DrainReport>> {
        let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        self.shared.drain_timeout_us.store(micros, Ordering::Relaxed);
        self.shared.draining.store(true, Ordering::Release);
        let mut reports = Vec::new();
        for thread in self.threads.drain(..) {
            let report = thread.join().map_err(|_| io::Error::other("a worker panicked"))??;
            reports.push(report);
        }
        Ok(reports)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.stop(Duration::ZERO);
    }
}

/// Binds a worker's socket at `address`; its tokens must name `public`, else the bound address.
fn bind(
    config: &HostConfig,
    address: SocketAddr,
    public: Option<SocketAddr>,
) -> io::Result<UdpDriver> {
    match &config.key {
        Some(key) => UdpDriver::bind_secure_as(
            address,
            public,
            config.endpoint.clone(),
            key.clone(),
            config.protocol_id,
        ),
        None => {
            let endpoint =
                EndpointConfig { security: Security::DangerPlaintext, ..config.endpoint.clone() };
            UdpDriver::bind(address, endpoint)
        }
    }
}

/// Locks a mutex that a panicking holder cannot leave broken (its data is replaced whole).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_config_outside_its_ranges_is_refused_before_anything_binds() {
        // Goal: each refused setting names its field and range, and `Host::start` refuses it
        // as invalid input instead of binding sockets or overflowing a port. Method: settings
        // just past their ranges.
        assert_eq!(HostConfig::default().validate(), Ok(()));
        let ports = HostConfig { port: 65_535, workers: 2, ..HostConfig::default() };
        let expected =
            HostConfigError::OutOfRange { field: "port", value: 65_535, min: 1, max: 65_534 };
        assert_eq!(ports.validate(), Err(expected));
        let rooms = HostConfig { rooms_per_worker_max: 0, ..HostConfig::default() };
        assert!(matches!(
            rooms.validate(),
            Err(HostConfigError::OutOfRange { field: "rooms_per_worker_max", .. })
        ));
        let listed =
            HostConfig { workers: 3, worker_ports: vec![7000, 7001], ..Default::default() };
        assert!(matches!(
            listed.validate(),
            Err(HostConfigError::OutOfRange { field: "worker_ports", value: 2, min: 3, max: 3 })
        ));
        let step = HostConfig { sleep_step: Duration::ZERO, ..HostConfig::default() };
        assert!(matches!(
            step.validate(),
            Err(HostConfigError::DurationOutOfRange { field: "sleep_step", .. })
        ));
        for priority in [0, 100] {
            let realtime = HostConfig { realtime_priority: Some(priority), ..Default::default() };
            let expected = HostConfigError::OutOfRange {
                field: "realtime_priority",
                value: u64::from(priority),
                min: 1,
                max: 99,
            };
            assert_eq!(realtime.validate(), Err(expected));
        }
        let game = |_: u64| -> Room<Idle> { unreachable!("no room opens") };
        let Err(refused) = Host::start(ports, game) else { panic!("a host on port 65536") };
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
    }

    struct Idle;

    impl Simulation for Idle {
        type Input = ();
        type Message = ();
        fn apply_input(&mut self, _: &mut rally_engine::World, _: u32, _: &()) {}
        fn step(&mut self, _: &mut rally_engine::World, _: Duration) {}
    }
}
