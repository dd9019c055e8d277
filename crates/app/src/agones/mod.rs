//! `rally server` as an Agones game server, through the SDK sidecar's REST API on localhost
//! (`AGONES_SDK_HTTP_PORT`, 9358 when unset). Off by default: `[agones] enabled = true` or
//! `rally server --agones` turns it on.
//!
//! **Before the host binds**, [`placement`] reads the GameServer (`GET /gameserver`) for the
//! node's address and each worker's host port (a port named `worker-<k>` per worker): the
//! addresses connect tokens must name. With the `Dynamic` port policy each worker binds its
//! container port (`host.port + k`) and Agones maps a host port to it; with `Passthrough` the
//! container port is the host port Agones chose, and the worker binds that.
//!
//! **Then** [`Agones::start`] runs two threads beside the workers, never on them:
//! - the *keeper*: `Ready` at once (every worker's socket is bound when the host starts);
//!   then every few milliseconds the `rooms` and `players` counters (count and capacity) when
//!   the workers' published figures change, and every health period `Health` if every worker
//!   published and ticked within its lateness budget over the period ([`Pulse`]), withheld
//!   otherwise so that Agones replaces a sick server;
//! - the *watcher*: `GET /watch/gameserver`, one GameServer a line, for allocation and the
//!   room (`rally.dev/room`) or scene (`rally.dev/scene`) its labels or annotations name:
//!   an id that is not a room, a room whose worker is full, or a scene this server does not
//!   host is logged, counted and marked on the GameServer (`agones.dev/sdk-rally-refused`).
//!
//! **Back to Ready.** An `Allocated` server with no room open for
//! [`Settings::ready_when_empty`] since its last allocation calls `Ready` again, so that the
//! fleet may scale it down (Agones never deletes an allocated server to scale down).
//!
//! **On SIGTERM** the server drains as it always does ([`Agones::drain`] first stops health
//! and counters), then [`Agones::shutdown`] sends `Shutdown`.
//!
//! A sidecar that refuses, answers garbage or vanishes is logged (once per change, not per
//! retry), counted ([`Stats`], on `/metrics`) and retried with exponential backoff up to
//! [`Settings::retry_max`]; nothing of it stops a worker or closes a room.

pub mod sdk;

use rally_driver::host::{HostReport, Occupancy, Reporter};
use rally_driver::Clock;
use rally_proto::Instant;
pub use sdk::{Call, Failure, GameServer, Sdk, Stats};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The SDK's REST port when `AGONES_SDK_HTTP_PORT` is unset (Agones' own default).
pub const DEFAULT_SDK_PORT: u16 = 9358;
/// How often the keeper looks at the workers' figures.
pub const LOOK_INTERVAL: Duration = Duration::from_millis(5);
/// The first retry's delay after a failed call; each further failure doubles it.
pub const RETRY_MIN: Duration = Duration::from_millis(100);
/// The annotation key a refused allocation is marked with (`agones.dev/sdk-` + this).
pub const REFUSED_ANNOTATION: &str = "rally-refused";
/// The label or annotation naming the room an allocation is for.
pub const ROOM_KEY: &str = "rally.dev/room";
/// The label or annotation naming the scene an allocation is for.
pub const SCENE_KEY: &str = "rally.dev/scene";
/// The annotation Agones stamps on each allocation: a new value is a new allocation.
pub const LAST_ALLOCATED_KEY: &str = "agones.dev/last-allocated";

/// How workers' ports reach the outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortPolicy {
    /// Agones maps a host port of its choice to each worker's container port.
    Dynamic,
    /// Each worker binds the host port Agones chose.
    Passthrough,
}

/// What the integration needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The sidecar, `127.0.0.1:<port>`.
    pub sdk: String,
    /// How often `Health` is sent (or withheld).
    pub health_period: Duration,
    /// The share of a worker's room-ticks in a health period that may start later than the
    /// lateness budget before health is withheld.
    pub late_ticks_ratio_max: f64,
    /// How workers' ports reach the outside.
    pub port_policy: PortPolicy,
    /// Worker `k`'s port in the GameServer is named this, then `k`.
    pub port_prefix: String,
    /// The longest wait between two retries of a failed call.
    pub retry_max: Duration,
    /// How long [`placement`] waits for the GameServer's address and ports.
    pub placement_wait: Duration,
    /// Workers (resolved: never 0).
    pub workers: usize,
    /// Rooms per worker at most.
    pub rooms_per_worker_max: usize,
    /// Clients per worker at most.
    pub connections_per_worker_max: usize,
    /// The scene this server hosts (its file's stem), if it hosts one.
    pub scene: Option<String>,
    /// How long an `Allocated` server with no room open, and no allocation since, waits before
    /// it calls `Ready` again; zero: never.
    pub ready_when_empty: Duration,
}

impl Settings {
    /// The `rooms` counter's capacity: what the host accepts.
    pub fn rooms_capacity(&self) -> u64 {
        (self.workers * self.rooms_per_worker_max) as u64
    }

    /// The `players` counter's capacity.
    pub fn players_capacity(&self) -> u64 {
        (self.workers * self.connections_per_worker_max) as u64
    }
}

/// The sidecar's address from `AGONES_SDK_HTTP_PORT` (`value`), or the default, saying so.
pub fn sdk_authority(value: Option<&str>) -> Result<String, String> {
    match value {
        Some(port) => port.trim().parse::<u16>().map(|p| format!("127.0.0.1:{p}")).map_err(|_| {
            format!(
                "AGONES_SDK_HTTP_PORT = {port:?}: not a port; unset it to use {DEFAULT_SDK_PORT}"
            )
        }),
        None => {
            tracing::warn!(
                port = DEFAULT_SDK_PORT,
                "agones is on but AGONES_SDK_HTTP_PORT is not set: using the SDK's default port"
            );
            Ok(format!("127.0.0.1:{DEFAULT_SDK_PORT}"))
        }
    }
}

/// Where workers bind and where clients reach them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Each worker's port to bind (Passthrough); empty: the configured ports (Dynamic).
    pub bind_ports: Vec<u16>,
    /// Where clients reach each worker: the node's address and the worker's host port.
    pub public: Vec<SocketAddr>,
}

/// Reads the GameServer until it has an address and a port for every worker (retrying with
/// backoff up to [`Settings::placement_wait`], or until `stop` is set), and places the workers.
pub fn placement(settings: &Settings, sdk: &Sdk, stop: &AtomicBool) -> Result<Placement, String> {
    let clock = Clock::start();
    let deadline = Instant::ZERO + settings.placement_wait;
    let mut backoff = Backoff::new(settings.retry_max);
    loop {
        let why = match sdk.game_server().and_then(|server| place(settings, &server)) {
            Ok(placement) => return Ok(placement),
            Err(why) => why,
        };
        if stop.load(Ordering::Relaxed) {
            return Err(format!("agones: stopped before the workers were placed: {why}"));
        }
        if clock.now() >= deadline {
            return Err(format!(
                "agones: no placement for the workers after {:?}: {why}",
                settings.placement_wait
            ));
        }
        backoff.failed(clock.now(), &why);
        std::thread::sleep(backoff.delay);
    }
}

/// The placement `server` gives, or why it gives none yet.
fn place(settings: &Settings, server: &GameServer) -> Result<Placement, String> {
    let public: Option<Vec<SocketAddr>> =
        (0..settings.workers).map(|k| server.worker_address(&settings.port_prefix, k)).collect();
    let Some(public) = public else {
        let names: Vec<&str> = server.ports.keys().map(String::as_str).collect();
        return Err(format!(
            "the GameServer (state {:?}, address {:?}) must have an address and ports named \
             {}0..{}{} (one per worker); it has [{}]",
            server.state,
            server.address,
            settings.port_prefix,
            settings.port_prefix,
            settings.workers - 1,
            names.join(", ")
        ));
    };
    let bind_ports = match settings.port_policy {
        PortPolicy::Dynamic => Vec::new(),
        PortPolicy::Passthrough => public.iter().map(SocketAddr::port).collect(),
    };
    Ok(Placement { bind_ports, public })
}

/// Exponential backoff between retries, and a log line per new failure (not per retry).
#[derive(Debug)]
struct Backoff {
    delay: Duration,
    max: Duration,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

impl Backoff {
    fn new(max: Duration) -> Self {
        Self { delay: Duration::ZERO, max, retry_at: None, last_error: None }
    }

    /// Whether a call may be made at `now`.
    fn due(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|at| now >= at)
    }

    fn failed(&mut self, now: Instant, why: &str) {
        self.delay = (self.delay * 2).clamp(RETRY_MIN, self.max.max(RETRY_MIN));
        self.retry_at = Some(now + self.delay);
        if self.last_error.as_deref() != Some(why) {
            let retry_ms = self.delay.as_millis() as u64;
            let message = "agones: SDK call failed; retrying with backoff";
            tracing::warn!(error = %why, retry_ms, "{message}");
            self.last_error = Some(why.to_string());
        }
    }

    fn succeeded(&mut self) {
        if self.last_error.take().is_some() {
            tracing::info!("agones: the SDK sidecar answers again");
        }
        self.delay = Duration::ZERO;
        self.retry_at = None;
    }
}

/// How long a worker may publish nothing before it counts as stuck (it publishes every 100 ms,
/// and at once on a change, unless a tick holds it).
pub const STUCK_AFTER: Duration = Duration::from_millis(500);

/// Whether every worker ticks within its budget: each must have published within
/// [`STUCK_AFTER`] (a worker stuck in a tick publishes nothing), and at most
/// [`Settings::late_ticks_ratio_max`] of its room-ticks since the last look may have started
/// later than the lateness budget.
#[derive(Debug, Default)]
pub struct Pulse {
    /// Per worker at the last look: wall time covered, late ticks, room-ticks, and when its
    /// figures last changed.
    last: Vec<Option<(u64, u64, u64, Instant)>>,
}

impl Pulse {
    /// Looks at `report` at `now` against the last look; `Err` names the first sick worker.
    pub fn look(
        &mut self,
        occupancy: &[Occupancy],
        workers: usize,
        ratio_max: f64,
        now: Instant,
    ) -> Result<(), String> {
        let mut verdict = Ok(());
        let mut next = Vec::with_capacity(workers);
        for k in 0..workers {
            let Some(w) = occupancy.iter().find(|w| w.worker == k) else {
                next.push(None);
                verdict = verdict.and(Err(format!("worker {k} has not reported")));
                continue;
            };
            let (wall, late, ticks) = (w.wall_us, w.late_ticks, w.room_ticks);
            let Some((wall0, late0, ticks0, changed)) = self.last.get(k).copied().flatten() else {
                next.push(Some((wall, late, ticks, now)));
                continue;
            };
            let changed = if wall == wall0 { changed } else { now };
            next.push(Some((wall, late, ticks, changed)));
            if now.saturating_duration_since(changed) > STUCK_AFTER {
                let why = format!("worker {k} published nothing for {STUCK_AFTER:?} (stuck)");
                verdict = verdict.and(Err(why));
            }
            // Figures that went down were reset (rally-bench's reset): count from zero.
            let (late, ticks) = if ticks < ticks0 || late < late0 {
                (late, ticks)
            } else {
                (late - late0, ticks - ticks0)
            };
            if ticks > 0 && late as f64 > ratio_max * ticks as f64 {
                let why = format!(
                    "worker {k}: {late} of its {ticks} room-ticks started later than the \
                     lateness budget"
                );
                verdict = verdict.and(Err(why));
            }
        }
        self.last = next;
        verdict
    }
}

/// What an allocation asks of this server, and whether it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocation {
    /// A room it hosts: clients' tokens name `address`.
    Accepted {
        /// The room.
        room: Option<u64>,
        /// Its worker and where clients reach it.
        address: Option<SocketAddr>,
    },
    /// Refused, and why.
    Refused(String),
}

/// Judges the allocation `server` carries against what this server hosts.
pub fn judge(
    settings: &Settings,
    public: &[SocketAddr],
    report: &HostReport,
    server: &GameServer,
) -> Allocation {
    if let Some(scene) = server.metadata.get(SCENE_KEY) {
        match &settings.scene {
            Some(hosted) if hosted == scene => {}
            Some(hosted) => {
                return Allocation::Refused(format!(
                    "scene {scene:?} is not hosted here (this server hosts {hosted:?})"
                ))
            }
            None => {
                return Allocation::Refused(format!(
                    "scene {scene:?} is not hosted here (this server runs no scene)"
                ))
            }
        }
    }
    let Some(room) = server.metadata.get(ROOM_KEY) else {
        return Allocation::Accepted { room: None, address: None };
    };
    let Ok(id) = room.trim().parse::<u64>() else {
        return Allocation::Refused(format!("room {room:?} is not a room id (0 to 2^64-1)"));
    };
    let worker = (id % settings.workers as u64) as usize;
    let open = report.rooms.iter().any(|r| r.room_id == id);
    let rooms = report.workers.iter().find(|w| w.worker == worker).map_or(0, |w| w.rooms);
    if !open && rooms >= settings.rooms_per_worker_max {
        return Allocation::Refused(format!(
            "room {id}: its worker {worker} is full ({rooms} rooms)"
        ));
    }
    Allocation::Accepted { room: Some(id), address: public.get(worker).copied() }
}

/// The integration running beside the host.
pub struct Agones {
    stop: Arc<AtomicBool>,
    draining: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    sdk: Sdk,
    retry_max: Duration,
}

impl Agones {
    /// Starts the keeper and the watcher: `Ready` at once, then counters, health and the
    /// watch. `public` is where clients reach each worker ([`Placement::public`]).
    pub fn start(
        settings: Settings,
        sdk: Sdk,
        reporter: Reporter,
        public: Vec<SocketAddr>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let draining = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Seen {
            clock: Clock::start(),
            allocated: AtomicBool::new(false),
            allocation_at_ns: AtomicU64::new(0),
        });
        let keeper = Keeper {
            settings: settings.clone(),
            sdk: sdk.clone(),
            reporter: reporter.clone(),
            draining: draining.clone(),
            stop: stop.clone(),
            seen: seen.clone(),
        };
        let watcher =
            Watcher { settings: settings.clone(), sdk: sdk.clone(), reporter, public, seen };
        let watch_stop = stop.clone();
        let threads = vec![
            std::thread::Builder::new().name("rally-agones".into()).spawn(move || keeper.run())?,
            std::thread::Builder::new()
                .name("rally-agones-watch".into())
                .spawn(move || watcher.run(&watch_stop))?,
        ];
        Ok(Self { stop, draining, threads, sdk, retry_max: settings.retry_max })
    }

    /// Its figures, for `/metrics`.
    pub fn stats(&self) -> Arc<Stats> {
        self.sdk.stats.clone()
    }

    /// The drain began: no more health or counters (the host is going; Agones knows).
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// After the drain: stops the keeper (so that nothing follows), sends `Shutdown`, retried
    /// with backoff for up to `patience`, and stops the watcher. Whether the sidecar took it.
    pub fn shutdown(mut self, patience: Duration) -> bool {
        self.drain();
        self.stop.store(true, Ordering::Release);
        // The keeper first: it stops within a look or a call. The watcher may wait out a read.
        if !self.threads.is_empty() {
            let _ = self.threads.remove(0).join();
        }
        let taken = self.send_shutdown(patience);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        taken
    }

    fn send_shutdown(&self, patience: Duration) -> bool {
        let clock = Clock::start();
        let mut backoff = Backoff::new(self.retry_max);
        loop {
            match self.sdk.call(Call::Shutdown, "POST", "/shutdown", "{}") {
                Ok(_) => {
                    tracing::info!("agones: Shutdown sent");
                    return true;
                }
                Err(why) if clock.now() < Instant::ZERO + patience => {
                    backoff.failed(clock.now(), &why);
                    std::thread::sleep(backoff.delay);
                }
                Err(why) => {
                    tracing::error!(error = %why, "agones: Shutdown not taken; exiting anyway");
                    return false;
                }
            }
        }
    }
}

impl Drop for Agones {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What the watcher saw that the keeper acts on.
#[derive(Debug)]
struct Seen {
    /// Both threads' clock.
    clock: Clock,
    /// The GameServer is `Allocated`, as of the watch's last line.
    allocated: AtomicBool,
    /// When the last allocation was seen, nanoseconds on `clock`.
    allocation_at_ns: AtomicU64,
}

/// The keeper thread: `Ready`, counters, health, back to `Ready` when empty.
struct Keeper {
    settings: Settings,
    sdk: Sdk,
    reporter: Reporter,
    draining: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    seen: Arc<Seen>,
}

/// A counter as last set: (count, capacity), and its retries.
struct Counter {
    name: &'static str,
    sent: Option<u64>,
    backoff: Backoff,
}

impl Keeper {
    fn run(self) {
        let clock = self.seen.clock;
        let mut empty = (None, Backoff::new(self.settings.retry_max));
        let mut ready = Backoff::new(self.settings.retry_max);
        let mut ready_sent = false;
        let mut health = Backoff::new(self.settings.retry_max);
        let mut pulse = Pulse::default();
        let mut next_health = Instant::ZERO;
        let mut withheld = false;
        let mut counters = ["rooms", "players"].map(|name| Counter {
            name,
            sent: None,
            backoff: Backoff::new(self.settings.retry_max),
        });
        while !self.stop.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire) {
            let now = clock.now();
            if !ready_sent {
                if ready.due(now) {
                    match self.sdk.call(Call::Ready, "POST", "/ready", "{}") {
                        Ok(_) => {
                            ready.succeeded();
                            ready_sent = true;
                            next_health = now + self.settings.health_period;
                            let occupancy = self.reporter.occupancy();
                            let _ = pulse.look(&occupancy, self.settings.workers, 1.0, now);
                            tracing::info!(sdk = %self.sdk.authority, "agones: Ready sent");
                        }
                        Err(why) => ready.failed(now, &why),
                    }
                }
                std::thread::sleep(LOOK_INTERVAL);
                continue;
            }
            // The occupancy, not the whole report: this runs every few milliseconds.
            let occupancy = self.reporter.occupancy();
            self.count(&occupancy, &mut counters, now);
            self.ready_when_empty(&occupancy, now, &mut empty);
            if now >= next_health {
                next_health = now + self.settings.health_period;
                let ratio = self.settings.late_ticks_ratio_max;
                let verdict = pulse.look(&occupancy, self.settings.workers, ratio, now);
                withheld = self.health(verdict, withheld, &mut health, now);
            }
            std::thread::sleep(LOOK_INTERVAL);
        }
    }

    /// Sets the `rooms` and `players` counters if they changed (or a set failed).
    fn count(&self, occupancy: &[Occupancy], counters: &mut [Counter; 2], now: Instant) {
        let rooms: usize = occupancy.iter().map(|w| w.rooms).sum();
        let players: usize = occupancy.iter().map(|w| w.players).sum();
        let values = [
            (rooms as u64, self.settings.rooms_capacity()),
            (players as u64, self.settings.players_capacity()),
        ];
        for (counter, (count, capacity)) in counters.iter_mut().zip(values) {
            if counter.sent == Some(count) || !counter.backoff.due(now) {
                continue;
            }
            match self.sdk.set_counter(counter.name, count, capacity) {
                Ok(()) => {
                    counter.backoff.succeeded();
                    counter.sent = Some(count);
                }
                Err(why) => counter.backoff.failed(now, &why),
            }
        }
    }

    /// Calls `Ready` again once an `Allocated` server has had no room open, and no new
    /// allocation, for [`Settings::ready_when_empty`]. `empty`: since when, and its retries.
    fn ready_when_empty(
        &self,
        occupancy: &[Occupancy],
        now: Instant,
        empty: &mut (Option<Instant>, Backoff),
    ) {
        let rooms: usize = occupancy.iter().map(|w| w.rooms).sum();
        let wait = self.settings.ready_when_empty;
        if wait.is_zero() || rooms > 0 || !self.seen.allocated.load(Ordering::Acquire) {
            empty.0 = None;
            return;
        }
        let since = *empty.0.get_or_insert(now);
        let allocated = Instant::from_nanos(self.seen.allocation_at_ns.load(Ordering::Acquire));
        if now.saturating_duration_since(since.max(allocated)) < wait || !empty.1.due(now) {
            return;
        }
        match self.sdk.call(Call::Ready, "POST", "/ready", "{}") {
            Ok(_) => {
                empty.1.succeeded();
                empty.0 = None;
                self.seen.allocated.store(false, Ordering::Release);
                let empty_s = wait.as_secs_f64();
                tracing::info!(empty_s, "agones: no rooms since the last allocation: Ready again");
            }
            Err(why) => empty.1.failed(now, &why),
        }
    }

    /// Sends `Health` if `verdict` is good, withholds it (counted, logged on change) if not;
    /// whether it was withheld.
    fn health(
        &self,
        verdict: Result<(), String>,
        was_withheld: bool,
        backoff: &mut Backoff,
        now: Instant,
    ) -> bool {
        match verdict {
            Ok(()) => {
                if was_withheld {
                    tracing::info!("agones: every worker ticks on time again; Health resumes");
                }
                match self.sdk.call(Call::Health, "POST", "/health", "{}") {
                    Ok(_) => backoff.succeeded(),
                    Err(why) => backoff.failed(now, &why),
                }
                false
            }
            Err(why) => {
                self.sdk.stats.health_withheld.fetch_add(1, Ordering::Relaxed);
                if !was_withheld {
                    tracing::warn!(reason = %why, "agones: Health withheld");
                }
                true
            }
        }
    }
}

/// The watcher thread: allocations and what they ask for.
struct Watcher {
    settings: Settings,
    sdk: Sdk,
    reporter: Reporter,
    public: Vec<SocketAddr>,
    seen: Arc<Seen>,
}

/// The last GameServer update judged: its state, and the room, scene and allocation stamp
/// its metadata carry; an allocation is judged once, when one of them changes.
type Judged = (String, Option<String>, Option<String>, Option<String>);

/// How long a watch read waits before looking at the stop flag.
const WATCH_READ: Duration = Duration::from_millis(200);

impl Watcher {
    fn run(self, stop: &AtomicBool) {
        let clock = Clock::start();
        let mut backoff = Backoff::new(self.settings.retry_max);
        let mut judged: Option<Judged> = None;
        while !stop.load(Ordering::Acquire) {
            if !backoff.due(clock.now()) {
                std::thread::sleep(LOOK_INTERVAL.max(Duration::from_millis(20)));
                continue;
            }
            match self.watch(stop, &mut judged, &mut backoff) {
                Ok(()) => {}
                Err(why) => backoff.failed(clock.now(), &why),
            }
        }
    }

    /// One watch stream, until it ends, breaks or `stop` is set.
    fn watch(
        &self,
        stop: &AtomicBool,
        judged: &mut Option<Judged>,
        backoff: &mut Backoff,
    ) -> Result<(), String> {
        let stats = &self.sdk.stats;
        stats.called(Call::Watch);
        let opened =
            crate::http_client::stream(&self.sdk.authority, "/watch/gameserver", WATCH_READ);
        let (status, mut lines) = opened.map_err(|e| {
            stats.fail(Call::Watch, Failure::Unreachable);
            format!("GET /watch/gameserver: {e}")
        })?;
        if !(200..300).contains(&status) {
            stats.fail(Call::Watch, Failure::Refused);
            return Err(format!("GET /watch/gameserver: answered {status}"));
        }
        while !stop.load(Ordering::Acquire) {
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    stats.fail(Call::Watch, Failure::Unreachable);
                    return Err("the watch stream ended".into());
                }
                Err(crate::http_client::HttpError::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    stats.fail(Call::Watch, Failure::Garbage);
                    return Err(format!("the watch stream broke: {e}"));
                }
            };
            backoff.succeeded();
            match GameServer::parse(&line) {
                Ok(server) => self.on_update(&server, judged),
                Err(why) => {
                    stats.fail(Call::Watch, Failure::Garbage);
                    let message = "agones: a watch line that is not a GameServer; skipped";
                    tracing::warn!(error = %why, "{message}");
                }
            }
        }
        Ok(())
    }

    /// Judges an allocation the first time it is seen.
    fn on_update(&self, server: &GameServer, judged: &mut Option<Judged>) {
        let key = (
            server.state.clone(),
            server.metadata.get(ROOM_KEY).cloned(),
            server.metadata.get(SCENE_KEY).cloned(),
            server.metadata.get(LAST_ALLOCATED_KEY).cloned(),
        );
        let allocated = server.state == "Allocated";
        self.seen.allocated.store(allocated, Ordering::Release);
        if !allocated || judged.as_ref() == Some(&key) {
            *judged = Some(key);
            return;
        }
        *judged = Some(key);
        let now = self.seen.clock.now().as_nanos();
        self.seen.allocation_at_ns.store(now, Ordering::Release);
        let stats = &self.sdk.stats;
        match judge(&self.settings, &self.public, &self.reporter.report(), server) {
            Allocation::Accepted { room, address } => {
                stats.allocations_accepted.fetch_add(1, Ordering::Relaxed);
                let address = address.map(|a| a.to_string()).unwrap_or_default();
                let name = &server.name;
                tracing::info!(game_server = %name, ?room, %address, "agones: allocated");
            }
            Allocation::Refused(why) => {
                stats.allocations_refused.fetch_add(1, Ordering::Relaxed);
                let name = &server.name;
                tracing::error!(game_server = %name, reason = %why, "agones: allocation refused");
                if let Err(e) = self.sdk.annotate(REFUSED_ANNOTATION, &why) {
                    let message = "agones: could not mark the refusal on the GameServer";
                    tracing::warn!(error = %e, "{message}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rally_driver::host::{Budgets, RoomReport};

    fn settings(policy: PortPolicy, scene: Option<&str>) -> Settings {
        Settings {
            sdk: String::new(),
            health_period: Duration::from_secs(1),
            late_ticks_ratio_max: 0.05,
            port_policy: policy,
            port_prefix: "worker-".into(),
            retry_max: Duration::from_secs(1),
            placement_wait: Duration::ZERO,
            workers: 2,
            rooms_per_worker_max: 1,
            connections_per_worker_max: 8,
            scene: scene.map(str::to_string),
            ready_when_empty: Duration::ZERO,
        }
    }

    fn server(metadata: &[(&str, &str)]) -> GameServer {
        GameServer {
            state: "Allocated".into(),
            address: Some("10.1.2.3".parse().unwrap()),
            ports: [("worker-0".to_string(), 7401), ("worker-1".to_string(), 7402)].into(),
            metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..GameServer::default()
        }
    }

    #[test]
    fn workers_bind_their_container_port_or_the_host_port_by_policy() {
        // Goal: Dynamic binds the configured ports and Passthrough the host ports, and both
        // name the node's address and host port in tokens; a missing port is named.
        let public: Vec<SocketAddr> =
            vec!["10.1.2.3:7401".parse().unwrap(), "10.1.2.3:7402".parse().unwrap()];
        let dynamic = place(&settings(PortPolicy::Dynamic, None), &server(&[])).unwrap();
        assert_eq!(dynamic, Placement { bind_ports: vec![], public: public.clone() });
        let passthrough = place(&settings(PortPolicy::Passthrough, None), &server(&[])).unwrap();
        assert_eq!(passthrough, Placement { bind_ports: vec![7401, 7402], public });
        let mut one_port = server(&[]);
        one_port.ports.remove("worker-1");
        let error = place(&settings(PortPolicy::Dynamic, None), &one_port).unwrap_err();
        assert!(error.contains("worker-0..worker-1") && error.contains("[worker-0]"), "{error}");
    }

    #[test]
    fn allocations_name_a_room_and_scene_this_server_can_host_or_are_refused() {
        let public = vec!["10.1.2.3:7401".parse().unwrap(), "10.1.2.3:7402".parse().unwrap()];
        let report = HostReport { workers: vec![], rooms: vec![], budgets: Budgets::default() };
        let hosts = settings(PortPolicy::Dynamic, Some("sandbox"));
        let judged = |metadata: &[(&str, &str)], report: &HostReport| {
            judge(&hosts, &public, report, &server(metadata))
        };
        let room = [(ROOM_KEY, "5"), (SCENE_KEY, "sandbox")];
        let accepted = Allocation::Accepted { room: Some(5), address: Some(public[1]) };
        assert_eq!(judged(&room, &report), accepted);
        for (metadata, why) in [
            (&[(ROOM_KEY, "lobby")][..], "not a room id"),
            (&[(SCENE_KEY, "arena")][..], "hosts \"sandbox\""),
        ] {
            let Allocation::Refused(reason) = judged(metadata, &report) else {
                panic!("{metadata:?} accepted")
            };
            assert!(reason.contains(why), "{reason}");
        }
        let none = judge(&settings(PortPolicy::Dynamic, None), &public, &report, &server(&room));
        assert!(matches!(none, Allocation::Refused(r) if r.contains("runs no scene")));
        // Worker 1 is full (one room at most): a new room there is refused, its open one not.
        let mut full = report.clone();
        full.rooms.push(RoomReport { room_id: 7, worker: 1, ..RoomReport::default() });
        let mut worker = a_worker_report();
        (worker.worker, worker.rooms) = (1, 1);
        full.workers.push(worker);
        let refused = judged(&[(ROOM_KEY, "5")], &full);
        assert!(matches!(&refused, Allocation::Refused(r) if r.contains("full ")), "{refused:?}");
        assert!(matches!(judged(&[(ROOM_KEY, "7")], &full), Allocation::Accepted { .. }));
    }

    /// A worker's report, from a real host (the type has no constructor outside the driver).
    fn a_worker_report() -> rally_driver::host::WorkerReport {
        let config = rally_driver::HostConfig { workers: 1, ..Default::default() };
        let host = rally_driver::Host::start(config, |_: u64| -> rally_engine::Room<Idle> {
            unreachable!("no client connects")
        })
        .expect("a host");
        for _ in 0..1000 {
            if let Some(worker) = host.report().workers.pop() {
                return worker;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no report in 10 s");
    }

    /// A game with nothing in it.
    struct Idle;

    impl rally_engine::Simulation for Idle {
        type Input = u8;
        type Message = u8;
        fn apply_input(&mut self, _: &mut rally_engine::World, _: rally_engine::ClientId, _: &u8) {}
        fn step(&mut self, _: &mut rally_engine::World, _: Duration) {}
    }
}
