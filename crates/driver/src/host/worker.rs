//! One worker: a socket, its endpoint, its rooms, one loop.

use super::telemetry::{histogram, RoomReport, Scope, ScopeClock, StageTimer, Summary};
use super::telemetry::{WorkerReport, ROOM_SCOPES, SCOPES};
use super::{lock, DrainReport, Game, HostConfig, Shared};
use crate::{Clock, UdpDriver};
use hdrhistogram::Histogram;
use rally_engine::{Phase, PhaseObserver, Pipeline, Room, Simulation};
use rally_proto::{ConnectionHandle, DisconnectReason, Endpoint, Event, Instant};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often a worker publishes its report.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);
/// The longest a worker with nothing due waits before looking at its flags again.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// How long a worker keeps sending after telling its clients it shuts down: the disconnect
/// goes out three times, a keepalive interval apart at most.
const GOODBYE: Duration = Duration::from_millis(60);

/// A room on a worker, with its schedule and figures.
struct Hosted<S: Simulation> {
    room: Room<S>,
    next_tick: Instant,
    /// Ingest time since the last tick (inputs arrive between ticks).
    ingest_pending: u64,
    /// When it last had no client, if it has none now.
    empty_since: Option<Instant>,
    report: RoomReport,
}

/// The rooms of a worker and the connections routed to them.
pub(super) struct Rooms<G: Game> {
    worker: usize,
    rooms: BTreeMap<u64, Hosted<G::Simulation>>,
    routes: HashMap<ConnectionHandle, u64>,
    /// Rooms by their next tick (stale entries are skipped).
    schedule: BinaryHeap<Reverse<(Instant, u64)>>,
    game: Arc<G>,
    config: HostConfig,
    clock: Clock,
    scopes: Arc<ScopeClock>,
    /// Per room-tick histograms of each room scope, and of lateness.
    histograms: [Histogram<u64>; ROOM_SCOPES.len()],
    lateness: Histogram<u64>,
    overruns: [u64; ROOM_SCOPES.len()],
    room_ticks: u64,
    rooms_failed: u64,
    /// Rooms opened so far: spreads their tick deadlines over the tick.
    opened: u64,
    /// Rooms on the fast pipeline, which answer each input the moment it arrives.
    fast_rooms: usize,
    draining: bool,
}

/// Times a tick's phases.
struct PhaseTimes {
    clock: Clock,
    started: u64,
    nanos: [u64; ROOM_SCOPES.len()],
}

impl PhaseObserver for PhaseTimes {
    fn enter(&mut self, _phase: Phase) {
        self.started = self.clock.now().as_nanos();
    }

    fn exit(&mut self, phase: Phase) {
        let index = ROOM_SCOPES.iter().position(|s| *s == Scope::of_phase(phase)).unwrap_or(0);
        self.nanos[index] = self.clock.now().as_nanos().saturating_sub(self.started);
    }
}

impl<G: Game> Rooms<G> {
    /// Hands an endpoint event to the room of its connection.
    fn on_event(&mut self, endpoint: &mut Endpoint, handle: ConnectionHandle, event: Event) {
        let now = self.clock.now();
        match event {
            Event::Connected => self.route(endpoint, handle, now),
            Event::Message { channel, payload } => {
                let Some(&id) = self.routes.get(&handle) else { return };
                let started = now.as_nanos();
                let ok = self.guarded(id, |room| room.receive(now, handle, channel, &payload));
                let ingest = self.clock.now().as_nanos().saturating_sub(started);
                if let Some(hosted) = self.rooms.get_mut(&id) {
                    hosted.ingest_pending += ingest;
                }
                // What the room answered (the fast path's poses) goes now, not at its tick.
                if !(ok && self.guarded(id, |room| room.transmit(endpoint))) {
                    self.fail(endpoint, id);
                }
            }
            Event::Disconnected { reason } => {
                let Some(id) = self.routes.remove(&handle) else { return };
                if !self.guarded(id, |room| room.disconnected(now, handle, reason)) {
                    self.fail(endpoint, id);
                }
            }
        }
    }

    /// A new connection goes to the room its token names, opened if need be.
    fn route(&mut self, endpoint: &mut Endpoint, handle: ConnectionHandle, now: Instant) {
        // Plaintext connections (debugging) have no grant: they all go to room 0.
        let id = endpoint.grant(handle).map_or(0, |grant| grant.room_id);
        if self.draining {
            endpoint.disconnect(handle, DisconnectReason::ServerShutdown);
            return;
        }
        if !self.rooms.contains_key(&id) {
            if self.rooms.len() >= self.config.rooms_per_worker_max {
                endpoint.disconnect(handle, DisconnectReason::ServerFull);
                return;
            }
            if !self.open(id, now) {
                endpoint.disconnect(handle, DisconnectReason::RoomFailed);
                return;
            }
        }
        self.routes.insert(handle, id);
        self.guarded(id, |room| room.accept(handle));
    }

    /// Opens room `id`; its ticks are spread from other rooms' by the golden ratio of a tick.
    fn open(&mut self, id: u64, now: Instant) -> bool {
        let Ok(room) = catch_unwind(AssertUnwindSafe(|| self.game.open(id))) else {
            self.rooms_failed += 1;
            return false;
        };
        let dt = room.config().dt();
        let spread = (self.opened as f64 * 0.618_033_988_75).fract();
        self.opened += 1;
        let next_tick = now + dt.mul_f64(spread);
        let report = RoomReport { room_id: id, worker: self.worker, ..RoomReport::default() };
        self.fast_rooms += usize::from(room.config().pipeline == Pipeline::Fast);
        let hosted = Hosted { room, next_tick, ingest_pending: 0, empty_since: None, report };
        self.rooms.insert(id, hosted);
        self.schedule.push(Reverse((next_tick, id)));
        true
    }

    /// Runs `f` on room `id`, then hands the game the room's events; false if the game's code
    /// panicked (the caller then fails the room).
    fn guarded(&mut self, id: u64, f: impl FnOnce(&mut Room<G::Simulation>)) -> bool {
        let Some(hosted) = self.rooms.get_mut(&id) else { return true };
        let game = &self.game;
        let room = &mut hosted.room;
        catch_unwind(AssertUnwindSafe(|| {
            f(room);
            while let Some(event) = room.poll_event() {
                game.on_event(room, event);
            }
        }))
        .is_ok()
    }

    /// Closes a room whose code panicked: its clients are told why; other rooms go on.
    fn fail(&mut self, endpoint: &mut Endpoint, id: u64) {
        if !self.close(id) {
            return;
        }
        self.rooms_failed += 1;
        self.routes.retain(|handle, room| {
            if *room == id {
                endpoint.disconnect(*handle, DisconnectReason::RoomFailed);
            }
            *room != id
        });
    }

    /// The earliest tick deadline, skipping entries of closed rooms.
    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, id))) = self.schedule.peek().copied() {
            if self.rooms.get(&id).is_some_and(|h| h.next_tick == at) {
                return Some(at);
            }
            self.schedule.pop();
        }
        None
    }

    /// Ticks every room whose deadline has come, earliest first.
    fn tick_due(&mut self, endpoint: &mut Endpoint) {
        // Only what was due when this pass began, each room once: ticks that outlast the next
        // deadline must not keep the worker from its socket (acks, timeouts, the drain flag).
        let due_by = self.clock.now();
        while let Some(at) = self.next_deadline() {
            if at > due_by {
                return;
            }
            let Some(Reverse((_, id))) = self.schedule.pop() else { return };
            self.tick(endpoint, id, at, self.clock.now());
        }
    }

    /// One room's tick, timed by phase; a tick that would start more than a tick late is
    /// skipped (the world does not replay missed ticks), so an overloaded worker sheds ticks
    /// instead of falling ever further behind.
    fn tick(&mut self, endpoint: &mut Endpoint, id: u64, at: Instant, now: Instant) {
        let Some(hosted) = self.rooms.get_mut(&id) else { return };
        let dt = hosted.room.config().dt();
        let ingest_pending = std::mem::take(&mut hosted.ingest_pending);
        let mut times = PhaseTimes { clock: self.clock, started: 0, nanos: [0; ROOM_SCOPES.len()] };
        let game = self.game.clone();
        let ticked = self.guarded(id, |room| {
            room.tick_observed(now, endpoint, &mut times);
            game.after_tick(room);
            room.transmit(endpoint);
        });
        if !ticked {
            self.fail(endpoint, id);
            return;
        }
        times.nanos[0] += ingest_pending;
        let Some(hosted) = self.rooms.get_mut(&id) else { return };
        let lateness = now.saturating_duration_since(at);
        hosted.next_tick = if lateness > dt { now + dt } else { at + dt };
        self.schedule.push(Reverse((hosted.next_tick, id)));
        self.record(id, &times.nanos, lateness);
        self.close_if_idle(id, now);
    }

    /// Adds one room-tick's figures to the room's and the worker's.
    fn record(&mut self, id: u64, nanos: &[u64; ROOM_SCOPES.len()], lateness: Duration) {
        let Some(hosted) = self.rooms.get_mut(&id) else { return };
        let report = &mut hosted.report;
        report.ticks += 1;
        self.room_ticks += 1;
        for (k, scope) in ROOM_SCOPES.iter().enumerate() {
            report.scope_nanos[k] += nanos[k];
            report.scope_max_nanos[k] = report.scope_max_nanos[k].max(nanos[k]);
            self.scopes.add(*scope, nanos[k]);
            self.histograms[k].saturating_record(nanos[k].max(1));
            let over =
                self.config.budgets.of(*scope).is_some_and(|b| nanos[k] > b.as_nanos() as u64);
            if over {
                report.overruns[k] += 1;
                self.overruns[k] += 1;
            }
        }
        let late = lateness.as_nanos() as u64;
        self.lateness.saturating_record(late.max(1));
        if lateness > self.config.budgets.lateness {
            report.late_ticks += 1;
        }
    }

    /// Closes a room nobody has been in for `room_idle_close`.
    fn close_if_idle(&mut self, id: u64, now: Instant) {
        let Some(hosted) = self.rooms.get_mut(&id) else { return };
        let clients = hosted.room.clients().count();
        hosted.report.clients = clients;
        if clients > 0 {
            hosted.empty_since = None;
            return;
        }
        let since = *hosted.empty_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= self.config.room_idle_close {
            self.close(id);
            self.routes.retain(|_, room| *room != id);
        }
    }

    /// Removes room `id`; whether it was there.
    fn close(&mut self, id: u64) -> bool {
        let Some(hosted) = self.rooms.remove(&id) else { return false };
        self.fast_rooms -= usize::from(hosted.room.config().pipeline == Pipeline::Fast);
        true
    }

    /// Starts every figure afresh.
    fn reset(&mut self) {
        self.histograms.iter_mut().for_each(Histogram::reset);
        self.lateness.reset();
        self.overruns = [0; ROOM_SCOPES.len()];
        self.room_ticks = 0;
        self.rooms_failed = 0;
        for hosted in self.rooms.values_mut() {
            let (room_id, worker) = (hosted.report.room_id, hosted.report.worker);
            hosted.report = RoomReport { room_id, worker, ..RoomReport::default() };
        }
    }
}

/// A worker thread's state.
pub(super) struct Worker<G: Game> {
    index: usize,
    driver: UdpDriver,
    rooms: Rooms<G>,
    shared: Arc<Shared>,
    epoch: u64,
    /// Figures at the last reset: CPU microseconds, scope nanoseconds, when.
    baseline: (u64, [u64; SCOPES.len()], Instant, u64),
    last_publish: Instant,
}

impl<G: Game> Worker<G> {
    pub(super) fn new(
        index: usize,
        mut driver: UdpDriver,
        game: Arc<G>,
        shared: Arc<Shared>,
        config: HostConfig,
    ) -> Self {
        let clock = driver.clock();
        let scopes = Arc::new(ScopeClock::default());
        driver.set_spin(config.spin);
        driver.set_scopes(scopes.clone());
        let timer = StageTimer { clock, scopes: scopes.clone(), started: 0 };
        driver.endpoint().set_observer(Box::new(timer));
        let rooms = Rooms {
            worker: index,
            rooms: BTreeMap::new(),
            routes: HashMap::new(),
            schedule: BinaryHeap::new(),
            game,
            config,
            clock,
            scopes,
            histograms: std::array::from_fn(|_| histogram()),
            lateness: histogram(),
            overruns: [0; ROOM_SCOPES.len()],
            room_ticks: 0,
            rooms_failed: 0,
            opened: 0,
            fast_rooms: 0,
            draining: false,
        };
        let now = clock.now();
        let baseline = (crate::cpu::thread_cpu_us(), [0; SCOPES.len()], now, 0);
        Self { index, driver, rooms, shared, epoch: 0, baseline, last_publish: now }
    }

    /// The loop, until the host drains.
    pub(super) fn run(mut self) -> io::Result<DrainReport> {
        let cores = &self.rooms.config.worker_cores;
        if !cores.is_empty() {
            crate::cpu::pin_current_thread(&[cores[self.index % cores.len()]])?;
        }
        while !self.shared.draining.load(Ordering::Acquire) {
            let now = self.driver.now();
            let next = self.rooms.next_deadline().unwrap_or(now + IDLE_WAIT).min(now + IDLE_WAIT);
            let wait = next.saturating_duration_since(now);
            let fast = self.rooms.fast_rooms > 0;
            // A worker without rooms has no deadline to keep: it sleeps in one go.
            let idle = self.rooms.rooms.is_empty();
            let step = if idle { Duration::MAX } else { self.rooms.config.sleep_step };
            self.driver.set_sleep_step(step);
            let rooms = &mut self.rooms;
            let handler =
                |endpoint: &mut Endpoint, handle, event| rooms.on_event(endpoint, handle, event);
            // Fast-path rooms answer each input on arrival: wake for every datagram. Other
            // rooms answer at their ticks: take what arrived in one go at each wake.
            if fast {
                self.driver.run_for(wait, handler)?;
            } else {
                self.driver.run_batched(wait, handler)?;
            }
            self.rooms.tick_due(self.driver.endpoint());
            self.housekeeping();
        }
        self.drain()
    }

    /// Resets figures when asked, publishes them every `PUBLISH_INTERVAL`.
    fn housekeeping(&mut self) {
        let epoch = self.shared.reset_epoch.load(Ordering::Relaxed);
        if epoch != self.epoch {
            self.epoch = epoch;
            self.rooms.reset();
            let nanos = self.rooms.scopes.read();
            let send_errors = self.driver.send_errors;
            self.baseline = (crate::cpu::thread_cpu_us(), nanos, self.driver.now(), send_errors);
        }
        let now = self.driver.now();
        if now - self.last_publish >= PUBLISH_INTERVAL {
            self.last_publish = now;
            let report = self.report(now);
            lock(&self.shared.reports)[self.index] = Some(report);
        }
    }

    fn report(&mut self, now: Instant) -> WorkerReport {
        let (cpu0, nanos0, since, errors0) = self.baseline;
        let nanos = self.rooms.scopes.read();
        let rooms = &self.rooms;
        let per_room_tick: Vec<(Scope, Summary)> =
            ROOM_SCOPES.iter().zip(&rooms.histograms).map(|(s, h)| (*s, Summary::of(h))).collect();
        let stats = self.driver.endpoint().stats();
        WorkerReport {
            worker: self.index,
            address: self.driver.local_addr().unwrap_or_else(|_| ([0, 0, 0, 0], 0).into()),
            rooms: rooms.rooms.len(),
            connections: rooms.routes.len(),
            room_ticks: rooms.room_ticks,
            cpu_us: crate::cpu::thread_cpu_us().saturating_sub(cpu0),
            wall_us: (now - since).as_micros() as u64,
            scope_nanos: std::array::from_fn(|k| nanos[k].saturating_sub(nanos0[k])),
            per_room_tick,
            lateness: Summary::of(&rooms.lateness),
            overruns: rooms.overruns,
            rooms_failed: rooms.rooms_failed,
            send_errors: self.driver.send_errors.saturating_sub(errors0),
            dropped: stats.malformed
                + stats.unknown_peer
                + stats.bad_cookie
                + stats.unauthenticated
                + stats.replayed
                + stats.rate_limited
                + stats.rate_table_full,
            room_reports: rooms.rooms.values().map(|h| h.report.clone()).collect(),
        }
    }

    /// Refuses new connections, lets rooms hand over what they queued, waits for reliable
    /// messages to be acknowledged (up to the drain timeout), then says goodbye to everyone.
    fn drain(mut self) -> io::Result<DrainReport> {
        self.rooms.draining = true;
        let timeout = Duration::from_micros(self.shared.drain_timeout_us.load(Ordering::Relaxed));
        let deadline = self.driver.now() + timeout;
        let handles: Vec<u64> = self.rooms.rooms.keys().copied().collect();
        for id in handles {
            let endpoint = self.driver.endpoint();
            if !self.rooms.guarded(id, |room| room.transmit(endpoint)) {
                self.rooms.fail(self.driver.endpoint(), id);
            }
        }
        let mut undelivered = self.undelivered();
        while undelivered.iter().any(|n| *n > 0) && self.driver.now() < deadline {
            let rooms = &mut self.rooms;
            self.driver.run_for(Duration::from_millis(2), |endpoint, handle, event| {
                rooms.on_event(endpoint, handle, event)
            })?;
            undelivered = self.undelivered();
        }
        let handles: Vec<ConnectionHandle> = self.rooms.routes.keys().copied().collect();
        for handle in &handles {
            self.driver.endpoint().disconnect(*handle, DisconnectReason::ServerShutdown);
        }
        let rooms = &mut self.rooms;
        self.driver
            .run_for(GOODBYE, |endpoint, handle, event| rooms.on_event(endpoint, handle, event))?;
        Ok(DrainReport {
            worker: self.index,
            connections: handles.len(),
            drained: undelivered.iter().filter(|n| **n == 0).count(),
            undelivered: undelivered.iter().sum(),
        })
    }

    /// Messages each routed connection has not had acknowledged yet.
    fn undelivered(&mut self) -> Vec<usize> {
        let endpoint = self.driver.endpoint();
        self.rooms
            .routes
            .keys()
            .map(|h| endpoint.connection(*h).map_or(0, |c| c.stats().send_queue.iter().sum()))
            .collect()
    }
}
