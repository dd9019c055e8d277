//! One worker: a socket, its endpoint, its rooms, one loop.

use super::telemetry::{split_lateness, Lateness, INGEST_SAMPLING, SAMPLE_NANOS_MAX};
use super::telemetry::{Countdown, Distributions, RoomReport, Scope, ScopeClock, StageTimer};
use super::telemetry::{TransportCounters, WorkerHistograms, WorkerReport, ROOM_SCOPES, SCOPES};
use super::{lock, DrainReport, Game, HostConfig, Shared};
use crate::{Clock, Sleep, UdpDriver};
use rally_engine::{Phase, PhaseObserver, Pipeline, Room, Simulation};
use rally_proto::{ConnectionHandle, DisconnectReason, Endpoint, Event, Instant};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a worker publishes its report.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);
/// How soon a worker publishes again when a room opened or closed, its players changed or a
/// tick started late: a fleet manager's counters and health follow within milliseconds, and a
/// churn of joins or an overloaded worker still costs at most one report per this interval.
const CHANGE_PUBLISH_INTERVAL: Duration = Duration::from_millis(5);
/// How often a worker samples each connection's quality (RTT, jitter, loss) into its
/// histograms: one sample per connection-second.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// The least time between two log lines of a worker's refused handshakes (they are counted
/// always; the log says how many since its last line).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
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
    /// The room's own views built before the figures were last reset (its stats count from
    /// its start).
    views_own_before: u64,
}

/// A worker's rooms by slot: a connection's route and a schedule entry name a room's slot, so
/// that a message or a tick finds its room by an index rather than a search of the room ids
/// (a `BTreeMap` search per message cost about 1,000 instructions a room-tick at 32 rooms).
/// The ids are searched only when a connection is routed.
struct Slots<S: Simulation> {
    slots: Vec<Option<Hosted<S>>>,
    /// Each open room's slot, by room id.
    ids: BTreeMap<u64, usize>,
}

impl<S: Simulation> Hosted<S> {
    /// The room's figures since the last reset, its own views read from its stats.
    fn report(&self) -> RoomReport {
        let views_own = self.room.stats().views_own - self.views_own_before;
        RoomReport { views_own, ..self.report.clone() }
    }
}

impl<S: Simulation> Slots<S> {
    fn new() -> Self {
        Self { slots: Vec::new(), ids: BTreeMap::new() }
    }

    /// The slot of room `id`, if it is open.
    fn slot_of(&self, id: u64) -> Option<usize> {
        self.ids.get(&id).copied()
    }

    fn get(&self, slot: usize) -> Option<&Hosted<S>> {
        self.slots.get(slot)?.as_ref()
    }

    fn get_mut(&mut self, slot: usize) -> Option<&mut Hosted<S>> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// Puts a room in the first free slot (or a new one) and returns it.
    fn insert(&mut self, hosted: Hosted<S>) -> usize {
        let id = hosted.report.room_id;
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(hosted);
        self.ids.insert(id, slot);
        slot
    }

    fn remove(&mut self, slot: usize) -> Option<Hosted<S>> {
        let hosted = self.slots.get_mut(slot)?.take()?;
        self.ids.remove(&hosted.report.room_id);
        Some(hosted)
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The open rooms' slots, in room id order.
    fn keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.ids.values().copied()
    }

    /// The open rooms, in room id order.
    fn values(&self) -> impl Iterator<Item = &Hosted<S>> + '_ {
        self.keys().filter_map(|slot| self.get(slot))
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Hosted<S>> + '_ {
        self.slots.iter_mut().flatten()
    }
}

/// The rooms of a worker and the connections routed to them.
pub(super) struct Rooms<G: Game> {
    worker: usize,
    rooms: Slots<G::Simulation>,
    routes: Routes,
    /// Rooms' slots by their next tick (stale entries are skipped).
    schedule: BinaryHeap<Reverse<(Instant, usize)>>,
    game: Arc<G>,
    config: HostConfig,
    clock: Clock,
    scopes: Arc<ScopeClock>,
    /// Per room-tick histograms of each room scope, and of lateness.
    distributions: Arc<Mutex<Distributions>>,
    overruns: [u64; ROOM_SCOPES.len()],
    /// The same figures in fixed buckets, for `/metrics`, and the clients' quality.
    buckets: WorkerHistograms,
    late_ticks: u64,
    room_ticks: u64,
    rooms_failed: u64,
    rooms_opened: u64,
    rooms_closed: u64,
    /// Each connection's resends when last looked at, by its slot (as [`Routes`] keeps
    /// them: an index, not a hash, per connection per report), and those of connections gone.
    resends_seen: Vec<u64>,
    resends_departed: u64,
    /// Rooms opened so far: spreads their tick deadlines over the tick.
    opened: u64,
    /// Rooms on the fast pipeline, which answer each input the moment it arrives.
    fast_rooms: usize,
    draining: bool,
    /// A room opened or closed, a room's players changed or a tick started late, since the
    /// last report.
    changed: bool,
    /// Which messages' ingest on arrival is timed.
    ingest_sampler: Countdown,
    /// The worker's last idle sleep before the ticks it runs now, which splits their
    /// lateness into its wake-up's and its work's ([`split_lateness`]).
    last_sleep: Option<Sleep>,
}

/// Times a tick's phases. They run back to back, so one clock read ends a phase and starts
/// the next, and the first starts at the reading the worker took for the tick's `now`: five
/// reads a tick instead of ten (each costs 25-50 ns on the virtual machines measured).
struct PhaseTimes {
    clock: Clock,
    started: u64,
    /// When the last phase ended, if one has.
    ended: Option<u64>,
    nanos: [u64; ROOM_SCOPES.len()],
}

impl PhaseTimes {
    /// Times from `started`, the clock's reading as the tick began, if the caller took one.
    fn new(clock: Clock, started: Option<Instant>) -> Self {
        let ended = started.map(Instant::as_nanos);
        Self { clock, started: 0, ended, nanos: [0; ROOM_SCOPES.len()] }
    }
}

impl PhaseObserver for PhaseTimes {
    fn enter(&mut self, _phase: Phase) {
        self.started = self.ended.take().unwrap_or_else(|| self.clock.now().as_nanos());
    }

    fn exit(&mut self, phase: Phase) {
        let index = Scope::of_phase(phase).room_index();
        let now = self.clock.now().as_nanos();
        self.nanos[index] = now.saturating_sub(self.started);
        self.ended = Some(now);
    }
}

impl<G: Game> Rooms<G> {
    /// A worker's rooms, none open yet; `scopes` receives the room scopes' times.
    pub(super) fn new(
        worker: usize,
        game: Arc<G>,
        config: HostConfig,
        clock: Clock,
        scopes: Arc<ScopeClock>,
    ) -> Self {
        Rooms {
            worker,
            rooms: Slots::new(),
            routes: Routes::default(),
            schedule: BinaryHeap::new(),
            game,
            config,
            clock,
            scopes,
            distributions: Arc::new(Mutex::new(Distributions::new())),
            overruns: [0; ROOM_SCOPES.len()],
            buckets: WorkerHistograms::default(),
            late_ticks: 0,
            room_ticks: 0,
            rooms_failed: 0,
            rooms_opened: 0,
            rooms_closed: 0,
            resends_seen: Vec::new(),
            resends_departed: 0,
            opened: 0,
            fast_rooms: 0,
            draining: false,
            changed: false,
            ingest_sampler: Countdown::new(INGEST_SAMPLING),
            last_sleep: None,
        }
    }

    /// Hands an endpoint event to the room of its connection, now.
    fn on_event(&mut self, endpoint: &mut Endpoint, handle: ConnectionHandle, event: Event) {
        let now = self.clock.now();
        self.on_event_at(endpoint, handle, event, now, Some(now));
    }

    /// Hands an endpoint event to the room of its connection at `now` (its datagram's time on
    /// the worker's clock, or a [`super::MemoryWorker`]'s caller's virtual time). `clock_now`
    /// is the clock's reading if the caller took one just now, else a timed ingest reads it
    /// afresh (a datagram's time is its read's, before the batch's decode: not a start).
    pub(super) fn on_event_at(
        &mut self,
        endpoint: &mut Endpoint,
        handle: ConnectionHandle,
        event: Event,
        now: Instant,
        clock_now: Option<Instant>,
    ) {
        match event {
            Event::Connected => self.route(endpoint, handle, now),
            Event::Message { channel, payload } => {
                let Some(id) = self.routes.get(handle) else { return };
                // One message in `INGEST_SAMPLING` is timed, for that many: two clock reads per
                // message would cost more than most messages' ingest.
                let timed = self.config.telemetry && self.ingest_sampler.next();
                let started = timed.then(|| clock_now.unwrap_or_else(|| self.clock.now()));
                let Some(hosted) = self.rooms.get_mut(id) else { return };
                let (game, clock) = (&*self.game, self.clock);
                let mut ingest = 0;
                let ok = guard(&mut hosted.room, game, |room| {
                    room.receive(now, handle, channel, &payload);
                    // The game hears of the message before the room's answers go: what it
                    // queues goes with them. Ingest's time includes the game's.
                    tell(room, game);
                    if let Some(started) = started {
                        let nanos = clock.now().as_nanos().saturating_sub(started.as_nanos());
                        ingest = nanos.min(SAMPLE_NANOS_MAX) * INGEST_SAMPLING;
                    }
                    // What the room answered (the fast path's poses) goes now, not at its tick;
                    // an input is mostly answered by nothing, and the call is spared.
                    if room.has_output() {
                        room.transmit(endpoint);
                    }
                });
                hosted.ingest_pending += ingest;
                if !ok {
                    self.fail(endpoint, id);
                }
                // The connection's next message is copied into it: no allocation per message.
                endpoint.recycle(handle, channel, payload);
            }
            Event::Disconnected { reason } => {
                self.resends_departed +=
                    self.resends_seen.get_mut(handle.0).map_or(0, std::mem::take);
                let Some(id) = self.routes.remove(handle) else { return };
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
        let slot = match self.rooms.slot_of(id) {
            Some(slot) => slot,
            None if self.rooms.len() >= self.config.rooms_per_worker_max => {
                endpoint.disconnect(handle, DisconnectReason::ServerFull);
                return;
            }
            None => {
                let Some(slot) = self.open(id, now) else {
                    endpoint.disconnect(handle, DisconnectReason::RoomFailed);
                    return;
                };
                slot
            }
        };
        self.routes.insert(handle, slot);
        self.guarded(slot, |room| room.accept(handle));
    }

    /// Opens room `id`, its slot if the game opened it; its ticks are spread from other
    /// rooms' by the golden ratio of a tick.
    fn open(&mut self, id: u64, now: Instant) -> Option<usize> {
        let Ok(room) = catch_unwind(AssertUnwindSafe(|| self.game.open(id))) else {
            self.rooms_failed += 1;
            tracing::error!(worker = self.worker, room = id, "the game panicked opening a room");
            return None;
        };
        self.rooms_opened += 1;
        self.changed = true;
        tracing::info!(worker = self.worker, room = id, "room opened");
        let dt = room.config().dt();
        let spread = (self.opened as f64 * 0.618_033_988_75).fract();
        self.opened += 1;
        let next_tick = now + dt.mul_f64(spread);
        let report = RoomReport { room_id: id, worker: self.worker, ..RoomReport::default() };
        self.fast_rooms += usize::from(room.config().pipeline == Pipeline::Fast);
        let hosted = Hosted {
            room,
            next_tick,
            ingest_pending: 0,
            empty_since: None,
            report,
            views_own_before: 0,
        };
        let slot = self.rooms.insert(hosted);
        self.schedule.push(Reverse((next_tick, slot)));
        Some(slot)
    }

    /// Runs `f` on the room in `slot`, then hands the game the room's events; false if the
    /// game's code panicked (the caller then fails the room).
    fn guarded(&mut self, slot: usize, f: impl FnOnce(&mut Room<G::Simulation>)) -> bool {
        let Some(hosted) = self.rooms.get_mut(slot) else { return true };
        guard(&mut hosted.room, &*self.game, f)
    }

    /// Closes a room whose code panicked: its clients are told why; other rooms go on.
    fn fail(&mut self, endpoint: &mut Endpoint, slot: usize) {
        let Some(id) = self.close(slot, "failed") else { return };
        self.rooms_failed += 1;
        tracing::error!(
            worker = self.worker,
            room = id,
            "the room's game code panicked: room closed, its clients told RoomFailed"
        );
        self.routes.retain(|handle, room| {
            if room == slot {
                endpoint.disconnect(handle, DisconnectReason::RoomFailed);
            }
            room != slot
        });
    }

    /// The earliest tick deadline, skipping entries of closed rooms.
    pub(super) fn next_deadline(&mut self) -> Option<Instant> {
        // A slot reused by another room since an entry was pushed is not ticked twice by it:
        // its first tick moves its `next_tick` past the entry.
        while let Some(Reverse((at, slot))) = self.schedule.peek().copied() {
            if self.rooms.get(slot).is_some_and(|h| h.next_tick == at) {
                return Some(at);
            }
            self.schedule.pop();
        }
        None
    }

    /// Ticks the room whose deadline comes first, if it is at most `due_by` (or at most the
    /// room's tick window past it: see [`HostConfig::tick_window`]), starting at the
    /// time `start()` says (the clock; a [`super::MemoryWorker`]'s virtual time) with the
    /// clock's reading then, if it took one (the phases' timing starts from it): whether one
    /// was ticked. Called until it says no, it ticks every room due, earliest first; a worker
    /// builds each room's datagrams between two calls, while what the tick wrote is still in
    /// the core's caches.
    pub(super) fn tick_next_due(
        &mut self,
        endpoint: &mut Endpoint,
        due_by: Instant,
        mut start: impl FnMut(&Self) -> (Instant, Option<Instant>),
    ) -> bool {
        let Some(at) = self.next_deadline() else { return false };
        let Some(&Reverse((_, slot))) = self.schedule.peek() else { return false };
        if at > due_by + self.early_by_at_most(slot) {
            return false;
        }
        self.schedule.pop();
        let (now, clock_now) = start(self);
        self.tick(endpoint, slot, at, now, clock_now);
        true
    }

    /// How much before its deadline the room in `slot` may tick ([`HostConfig::tick_window`],
    /// at most a quarter of the room's period).
    fn early_by_at_most(&self, slot: usize) -> Duration {
        let dt = self.rooms.get(slot).map_or(Duration::ZERO, |h| h.room.config().dt());
        self.config.tick_window.min(dt / 4)
    }

    /// One room's tick, timed by phase; a tick that would start more than a tick late is
    /// skipped (the world does not replay missed ticks), so an overloaded worker sheds ticks
    /// instead of falling ever further behind.
    fn tick(
        &mut self,
        endpoint: &mut Endpoint,
        slot: usize,
        at: Instant,
        now: Instant,
        clock_now: Option<Instant>,
    ) {
        let Some(hosted) = self.rooms.get_mut(slot) else { return };
        let dt = hosted.room.config().dt();
        let ingest_pending = std::mem::take(&mut hosted.ingest_pending);
        let mut times = PhaseTimes::new(self.clock, clock_now);
        let game = self.game.clone();
        let observed = self.config.telemetry;
        let ticked = self.guarded(slot, |room| {
            if observed {
                room.tick_observed(now, endpoint, &mut times);
            } else {
                room.tick(now, endpoint);
            }
            game.after_tick(room);
            room.transmit(endpoint);
        });
        if !ticked {
            self.fail(endpoint, slot);
            return;
        }
        times.nanos[0] += ingest_pending;
        let Some(hosted) = self.rooms.get_mut(slot) else { return };
        let lateness = split_lateness(at, now, self.last_sleep);
        hosted.next_tick = if lateness.total() > dt { now + dt } else { at + dt };
        self.schedule.push(Reverse((hosted.next_tick, slot)));
        self.record(slot, &times.nanos, &lateness);
        self.close_if_idle(slot, now);
    }

    /// Adds one room-tick's figures to the room's and the worker's.
    fn record(&mut self, slot: usize, nanos: &[u64; ROOM_SCOPES.len()], lateness: &Lateness) {
        let Some(hosted) = self.rooms.get_mut(slot) else { return };
        let report = &mut hosted.report;
        report.ticks += 1;
        self.room_ticks += 1;
        if !self.config.telemetry {
            return;
        }
        for (k, scope) in ROOM_SCOPES.iter().enumerate() {
            report.scope_nanos[k] += nanos[k];
            report.scope_max_nanos[k] = report.scope_max_nanos[k].max(nanos[k]);
            self.scopes.add(*scope, nanos[k]);
            self.buckets.phase_seconds[k].record(nanos[k] as f64 * 1e-9);
            let over =
                self.config.budgets.of(*scope).is_some_and(|b| nanos[k] > b.as_nanos() as u64);
            if over {
                report.overruns[k] += 1;
                self.overruns[k] += 1;
            }
        }
        lock(&self.distributions).record(nanos, lateness);
        let total = lateness.total();
        self.buckets.lateness_seconds.record(total.as_secs_f64());
        self.buckets.wake_lateness_seconds.record(lateness.wake.as_secs_f64());
        self.buckets.lateness_busy_seconds.record(lateness.busy.as_secs_f64());
        if total > self.config.budgets.lateness {
            report.late_ticks += 1;
            self.late_ticks += 1;
            // A health check reads late ticks from the report: publish them promptly.
            self.changed = true;
        }
    }

    /// Closes a room nobody has been in for `room_idle_close`.
    fn close_if_idle(&mut self, slot: usize, now: Instant) {
        let Some(hosted) = self.rooms.get_mut(slot) else { return };
        let clients = hosted.room.clients().count();
        self.changed |= clients != hosted.report.clients;
        hosted.report.clients = clients;
        if clients > 0 {
            hosted.empty_since = None;
            return;
        }
        let since = *hosted.empty_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= self.config.room_idle_close {
            self.close(slot, "idle");
            self.routes.retain(|_, room| room != slot);
        }
    }

    /// Removes the room in `slot`, saying why; its id, if it was there.
    fn close(&mut self, slot: usize, reason: &'static str) -> Option<u64> {
        let hosted = self.rooms.remove(slot)?;
        let id = hosted.report.room_id;
        self.fast_rooms -= usize::from(hosted.room.config().pipeline == Pipeline::Fast);
        self.rooms_closed += 1;
        self.changed = true;
        let ticks = hosted.report.ticks;
        tracing::info!(worker = self.worker, room = id, reason, ticks, "room closed");
        Some(id)
    }

    /// Notes each connection's resends and, when `sample`, its quality in the histograms.
    pub(super) fn look_at_connections(&mut self, endpoint: &Endpoint, sample: bool) {
        for handle in self.routes.handles() {
            let Some(connection) = endpoint.connection(handle) else { continue };
            if handle.0 >= self.resends_seen.len() {
                self.resends_seen.resize(handle.0 + 1, 0);
            }
            self.resends_seen[handle.0] = connection.resends();
            if sample {
                // Its three figures only, not the whole statistics (two allocations).
                let quality = connection.quality();
                let buckets = &mut self.buckets;
                buckets.client_rtt_seconds.record(quality.rtt.as_secs_f64());
                buckets.client_jitter_seconds.record(quality.rtt_variance.as_secs_f64());
                buckets.client_loss_ratio.record(quality.loss.clamp(0.0, 1.0));
            }
        }
    }

    /// Resends over the connections open now and those gone.
    pub(super) fn resends(&self) -> u64 {
        self.resends_departed + self.resends_seen.iter().sum::<u64>()
    }

    /// The worker's report: the rooms' figures, and what `outside` says of the rest; its
    /// summaries are left empty, for the reader to take from [`Rooms::distributions`] when
    /// it reads the report.
    pub(super) fn report(&self, endpoint: &Endpoint, outside: Outside) -> WorkerReport {
        let stats = endpoint.stats();
        WorkerReport {
            worker: outside.worker,
            address: outside.address,
            rooms: self.rooms.len(),
            connections: self.routes.len(),
            room_ticks: self.room_ticks,
            cpu_us: outside.cpu_us,
            wall_us: outside.wall_us,
            scope_nanos: outside.scope_nanos,
            per_room_tick: Vec::new(),
            lateness: Default::default(),
            wake_lateness: Default::default(),
            lateness_busy: Default::default(),
            overruns: self.overruns,
            rooms_failed: self.rooms_failed,
            send_errors: outside.transport.send_errors,
            dropped: stats.malformed
                + stats.unknown_peer
                + stats.bad_cookie
                + stats.unauthenticated
                + stats.replayed
                + stats.rate_limited
                + stats.rate_table_full,
            room_reports: self.rooms.values().map(Hosted::report).collect(),
            players: self.rooms.values().map(|h| h.report.clients).sum(),
            rooms_opened: self.rooms_opened,
            rooms_closed: self.rooms_closed,
            late_ticks: self.late_ticks,
            transport: outside.transport,
            histograms: self.buckets.clone(),
        }
    }

    /// The per room-tick distributions (empty with telemetry off), shared with readers.
    pub(super) fn distributions(&self) -> &Arc<Mutex<Distributions>> {
        &self.distributions
    }

    /// The host's settings.
    pub(super) fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Where the room scopes' times add up.
    pub(super) fn scopes(&self) -> &ScopeClock {
        &self.scopes
    }

    /// Rooms open.
    pub(super) fn len(&self) -> usize {
        self.rooms.len()
    }

    /// Room-ticks run since the last reset.
    pub(super) fn room_ticks(&self) -> u64 {
        self.room_ticks
    }

    /// Starts every figure afresh.
    fn reset(&mut self) {
        lock(&self.distributions).reset();
        self.overruns = [0; ROOM_SCOPES.len()];
        self.buckets.reset();
        self.late_ticks = 0;
        self.room_ticks = 0;
        self.rooms_failed = 0;
        self.rooms_opened = 0;
        self.rooms_closed = 0;
        for hosted in self.rooms.values_mut() {
            let (room_id, worker) = (hosted.report.room_id, hosted.report.worker);
            hosted.report = RoomReport { room_id, worker, ..RoomReport::default() };
            hosted.views_own_before = hosted.room.stats().views_own;
        }
    }
}

/// Runs `f` on `room`, then tells `game` the room's events, catching a panic in either;
/// whether neither panicked.
fn guard<G: Game>(
    room: &mut Room<G::Simulation>,
    game: &G,
    f: impl FnOnce(&mut Room<G::Simulation>),
) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        f(room);
        tell(room, game);
    }))
    .is_ok()
}

/// Hands `game` every event `room` has.
fn tell<G: Game>(room: &mut Room<G::Simulation>, game: &G) {
    while let Some(event) = room.poll_event() {
        game.on_event(room, event);
    }
}

/// Which room (its slot in [`Slots`]) each connection is routed to, by its handle: the
/// endpoint's slot index, which its `connections_max` bounds. A message's look-up is an index,
/// not a hash of its handle.
#[derive(Debug, Default)]
struct Routes {
    rooms: Vec<Option<usize>>,
    len: usize,
}

impl Routes {
    fn get(&self, handle: ConnectionHandle) -> Option<usize> {
        self.rooms.get(handle.0).copied().flatten()
    }

    fn insert(&mut self, handle: ConnectionHandle, room: usize) {
        if handle.0 >= self.rooms.len() {
            self.rooms.resize(handle.0 + 1, None);
        }
        if self.rooms[handle.0].replace(room).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, handle: ConnectionHandle) -> Option<usize> {
        let room = self.rooms.get_mut(handle.0)?.take();
        self.len -= usize::from(room.is_some());
        room
    }

    /// Keeps the routes `keep` says yes to.
    fn retain(&mut self, mut keep: impl FnMut(ConnectionHandle, usize) -> bool) {
        for (index, route) in self.rooms.iter_mut().enumerate() {
            if route.is_some_and(|room| !keep(ConnectionHandle(index), room)) {
                *route = None;
                self.len -= 1;
            }
        }
    }

    /// The routed connections.
    fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        let routed = self.rooms.iter().enumerate().filter(|(_, r)| r.is_some());
        routed.map(|(index, _)| ConnectionHandle(index))
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// What a worker's report takes from outside its rooms: its socket, its clocks, its transport.
pub(super) struct Outside {
    pub(super) worker: usize,
    pub(super) address: std::net::SocketAddr,
    pub(super) cpu_us: u64,
    pub(super) wall_us: u64,
    pub(super) scope_nanos: [u64; SCOPES.len()],
    pub(super) transport: TransportCounters,
}

/// A worker thread's state.
pub(super) struct Worker<G: Game> {
    index: usize,
    driver: UdpDriver,
    rooms: Rooms<G>,
    shared: Arc<Shared>,
    epoch: u64,
    /// Figures at the last reset: CPU microseconds, scope nanoseconds, when, the transport's
    /// counters.
    baseline: (u64, [u64; SCOPES.len()], Instant, TransportCounters),
    last_publish: Instant,
    last_sample: Instant,
    /// When refusals were last logged (never: the first is logged at once), and how many
    /// there had been then.
    refusals_logged: (Option<Instant>, u64),
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
        if config.telemetry {
            driver.set_scopes(scopes.clone());
            let timer = StageTimer::new(clock, scopes.clone());
            driver.endpoint().set_observer(Box::new(timer));
        }
        let rooms = Rooms::new(index, game, config, clock, scopes);
        lock(&shared.distributions)[index] = Some(rooms.distributions().clone());
        let now = clock.now();
        let baseline =
            (crate::cpu::thread_cpu_us(), [0; SCOPES.len()], now, TransportCounters::default());
        Self {
            index,
            driver,
            rooms,
            shared,
            epoch: 0,
            baseline,
            last_publish: now,
            last_sample: now,
            refusals_logged: (None, 0),
        }
    }

    /// The loop, until the host drains.
    pub(super) fn run(mut self) -> io::Result<DrainReport> {
        let cores = &self.rooms.config.worker_cores;
        if !cores.is_empty() {
            crate::cpu::pin_current_thread(&[cores[self.index % cores.len()]])?;
        }
        if let Some(priority) = self.rooms.config.realtime_priority {
            crate::cpu::run_realtime(priority)?;
        }
        // Each step starts from the clock reading the step before it ended at: the loop reads
        // the clock once per step rather than again at its start (about 30 ns a read).
        let mut now = self.driver.now();
        while !self.shared.draining.load(Ordering::Acquire) {
            let next = self.rooms.next_deadline().unwrap_or(now + IDLE_WAIT).min(now + IDLE_WAIT);
            let fast = self.rooms.fast_rooms > 0;
            // A worker without rooms has no deadline to keep: it sleeps in one go.
            let idle = self.rooms.rooms.is_empty();
            let step = if idle { Duration::MAX } else { self.rooms.config.sleep_step };
            self.driver.set_sleep_step(step);
            let rooms = &mut self.rooms;
            // Fast-path rooms answer each input on arrival: wake for every datagram. Other
            // rooms answer at their ticks: take what arrived in one go at each wake, each
            // message at its datagram's time.
            let due_by = if fast {
                let handler = |endpoint: &mut Endpoint, handle, event| {
                    rooms.on_event(endpoint, handle, event)
                };
                // `run_for` takes a length: from now, not from the housekeeping's reading.
                let wait = next.saturating_duration_since(self.driver.now());
                self.driver.run_for(wait, handler)?;
                self.driver.now()
            } else {
                let handler = |at, endpoint: &mut Endpoint, handle, event| {
                    rooms.on_event_at(endpoint, handle, event, at, None)
                };
                self.driver.run_batched_until(next, handler)?
            };
            self.rooms.last_sleep = self.driver.last_sleep();
            self.tick_due(due_by)?;
            now = self.housekeeping();
        }
        self.drain()
    }

    /// Ticks every room whose deadline is at most `due_by` (the clock's reading as the pass
    /// begins: the first room starts at it), earliest first, and sends what they wrote. Each
    /// room's datagrams are built and sealed right after its tick, while its snapshots and
    /// connections are still in the core's caches (at 32 rooms a worker, a room's data is out
    /// of them by the time the last room has ticked), and go out in batches as full as before.
    fn tick_due(&mut self, due_by: Instant) -> io::Result<()> {
        // Only what was due when this pass began, each room once: ticks that outlast the next
        // deadline must not keep the worker from its socket (acks, timeouts, the drain flag).
        let mut first = Some(due_by);
        let mut start = |rooms: &Rooms<G>| {
            let now = first.take().unwrap_or_else(|| rooms.clock.now());
            (now, Some(now))
        };
        while self.rooms.tick_next_due(self.driver.endpoint(), due_by, &mut start) {
            self.driver.stage()?;
        }
        self.driver.transmit().map(|_| ())
    }

    /// Resets figures when asked, publishes them every `PUBLISH_INTERVAL`; returns the
    /// clock's reading it took.
    fn housekeeping(&mut self) -> Instant {
        let epoch = self.shared.reset_epoch.load(Ordering::Relaxed);
        if epoch != self.epoch {
            self.epoch = epoch;
            self.rooms.reset();
            let nanos = self.rooms.scopes.read();
            let counters = self.transport();
            self.baseline = (crate::cpu::thread_cpu_us(), nanos, self.driver.now(), counters);
        }
        let now = self.driver.now();
        let since = now - self.last_publish;
        let changed = self.rooms.changed && since >= CHANGE_PUBLISH_INTERVAL;
        if since >= PUBLISH_INTERVAL || changed {
            self.last_publish = now;
            self.rooms.changed = false;
            let sample = now - self.last_sample >= SAMPLE_INTERVAL;
            if sample {
                self.last_sample = now;
            }
            if self.rooms.config.telemetry {
                self.rooms.look_at_connections(self.driver.endpoint(), sample);
            }
            let report = self.report(now);
            self.log_refusals(now, &report.transport);
            lock(&self.shared.reports)[self.index] = Some(report);
        }
        now
    }

    /// The transport's counters since the worker started.
    fn transport(&mut self) -> TransportCounters {
        let resends = self.rooms.resends();
        let (traffic, oversized, send_errors) =
            (self.driver.traffic, self.driver.oversized, self.driver.send_errors);
        let stats = self.driver.endpoint().stats();
        TransportCounters::gather(&stats, &traffic, oversized, send_errors, resends)
    }

    /// Logs refused handshakes at most every `REFUSAL_LOG_INTERVAL`, with their reasons: an
    /// attack must not turn into a flood of log lines.
    fn log_refusals(&mut self, now: Instant, counters: &TransportCounters) {
        let c = counters;
        let refused = c.refused_expired
            + c.refused_forged
            + c.refused_wrong_server
            + c.refused_replay
            + c.refused_missing
            + c.refused_token_table_full
            + c.refused_server_full
            + c.refused_bad_cookie;
        let (at, logged) = self.refusals_logged;
        let recent = at.is_some_and(|at| now - at < REFUSAL_LOG_INTERVAL);
        if refused <= logged || recent {
            // A reset can lower the total: start counting from there.
            self.refusals_logged.1 = self.refusals_logged.1.min(refused);
            return;
        }
        self.refusals_logged = (Some(now), refused);
        tracing::warn!(
            worker = self.index,
            refused_since_last = refused - logged,
            expired = c.refused_expired,
            forged = c.refused_forged,
            wrong_server = c.refused_wrong_server,
            replay = c.refused_replay,
            missing = c.refused_missing,
            token_table_full = c.refused_token_table_full,
            server_full = c.refused_server_full,
            bad_cookie = c.refused_bad_cookie,
            rate_limited_datagrams = c.dropped_rate_limited,
            "handshakes refused (totals by reason since start)"
        );
    }

    fn report(&mut self, now: Instant) -> WorkerReport {
        let (cpu0, nanos0, since, counters0) = self.baseline;
        let nanos = self.rooms.scopes.read();
        let outside = Outside {
            worker: self.index,
            address: self.driver.local_addr().unwrap_or_else(|_| ([0, 0, 0, 0], 0).into()),
            cpu_us: crate::cpu::thread_cpu_us().saturating_sub(cpu0),
            wall_us: (now - since).as_micros() as u64,
            scope_nanos: std::array::from_fn(|k| nanos[k].saturating_sub(nanos0[k])),
            transport: self.transport().since(&counters0),
        };
        self.rooms.report(self.driver.endpoint(), outside)
    }

    /// Refuses new connections, lets rooms hand over what they queued, waits for reliable
    /// messages to be acknowledged (up to the drain timeout), then says goodbye to everyone.
    fn drain(mut self) -> io::Result<DrainReport> {
        self.rooms.draining = true;
        tracing::info!(
            worker = self.index,
            rooms = self.rooms.rooms.len(),
            connections = self.rooms.routes.len(),
            "draining: no new connections; waiting for reliable messages to be acknowledged"
        );
        let timeout = Duration::from_micros(self.shared.drain_timeout_us.load(Ordering::Relaxed));
        let deadline = self.driver.now() + timeout;
        let slots: Vec<usize> = self.rooms.rooms.keys().collect();
        for slot in slots {
            let endpoint = self.driver.endpoint();
            if !self.rooms.guarded(slot, |room| room.transmit(endpoint)) {
                self.rooms.fail(self.driver.endpoint(), slot);
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
        let handles: Vec<ConnectionHandle> = self.rooms.routes.handles().collect();
        for handle in &handles {
            self.driver.endpoint().disconnect(*handle, DisconnectReason::ServerShutdown);
        }
        let rooms = &mut self.rooms;
        self.driver
            .run_for(GOODBYE, |endpoint, handle, event| rooms.on_event(endpoint, handle, event))?;
        let report = DrainReport {
            worker: self.index,
            connections: handles.len(),
            drained: undelivered.iter().filter(|n| **n == 0).count(),
            undelivered: undelivered.iter().sum(),
        };
        tracing::info!(
            worker = report.worker,
            connections = report.connections,
            drained = report.drained,
            undelivered = report.undelivered,
            "drained: clients told the server is shutting down"
        );
        Ok(report)
    }

    /// Messages each routed connection has not had acknowledged yet.
    fn undelivered(&mut self) -> Vec<usize> {
        let endpoint = self.driver.endpoint();
        self.rooms
            .routes
            .handles()
            .map(|h| endpoint.connection(h).map_or(0, |c| c.stats().send_queue.iter().sum()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Hosted, Rooms, Slots};
    use crate::host::telemetry::ScopeClock;
    use crate::host::{HostConfig, RoomReport};
    use crate::Clock;
    use rally_engine::{Room, RoomConfig, Simulation};
    use rally_proto::{Endpoint, EndpointConfig, EndpointRandomness, Instant};
    use std::cmp::Reverse;
    use std::sync::Arc;
    use std::time::Duration;

    struct Idle;

    impl Simulation for Idle {
        type Input = ();
        type Message = ();
        fn apply_input(&mut self, _: &mut rally_engine::World, _: u32, _: &()) {}
        fn step(&mut self, _: &mut rally_engine::World, _: Duration) {}
    }

    fn hosted(room_id: u64) -> Hosted<Idle> {
        Hosted {
            room: Room::new(RoomConfig::default(), Idle, 1).expect("a valid room"),
            next_tick: Instant::ZERO,
            ingest_pending: 0,
            empty_since: None,
            report: RoomReport { room_id, ..RoomReport::default() },
            views_own_before: 0,
        }
    }

    /// A game whose rooms all tick at one rate.
    type IdleGame = Box<dyn Fn(u64) -> Room<Idle> + Send + Sync>;

    /// Rooms of `tick_rate` on a worker with `window`, one a deadline (milliseconds), and the
    /// endpoint their ticks send through.
    fn scheduled(
        window: Duration,
        tick_rate: u32,
        deadlines_ms: &[f64],
    ) -> (Rooms<IdleGame>, Endpoint) {
        let game: IdleGame = Box::new(move |_| {
            let config = RoomConfig { tick_rate, ..RoomConfig::default() };
            Room::new(config, Idle, 1).expect("a valid room")
        });
        let config = HostConfig { tick_window: window, telemetry: false, ..HostConfig::default() };
        let scopes = Arc::new(ScopeClock::default());
        let mut rooms = Rooms::new(0, Arc::new(game), config, Clock::start(), scopes);
        for (id, ms) in deadlines_ms.iter().enumerate() {
            let slot = rooms.open(id as u64, Instant::ZERO).expect("the room opens");
            let at = Instant::ZERO + Duration::from_secs_f64(ms / 1000.0);
            rooms.rooms.get_mut(slot).expect("open").next_tick = at;
            rooms.schedule.push(Reverse((at, slot)));
        }
        let randomness = EndpointRandomness::danger_from_seed(1);
        let endpoint = Endpoint::new(EndpointConfig::default(), randomness).expect("valid");
        (rooms, endpoint)
    }

    /// Ticks every room due by `due_by` (or within its window), all at `due_by`; the rooms'
    /// next deadlines afterwards, by room, milliseconds.
    fn pass(rooms: &mut Rooms<IdleGame>, endpoint: &mut Endpoint, due_by_ms: f64) -> Vec<f64> {
        let due_by = Instant::ZERO + Duration::from_secs_f64(due_by_ms / 1000.0);
        while rooms.tick_next_due(endpoint, due_by, |_| (due_by, None)) {}
        let mut next: Vec<(u64, f64)> = rooms
            .rooms
            .values()
            .map(|h| (h.report.room_id, h.next_tick.as_nanos() as f64 / 1e6))
            .collect();
        next.sort_by_key(|(id, _)| *id);
        next.into_iter().map(|(_, ms)| to_us(ms)).collect()
    }

    /// Milliseconds to the microsecond, so that deadlines compare exactly.
    fn to_us(ms: f64) -> f64 {
        (ms * 1000.0).round() / 1000.0
    }

    #[test]
    fn rooms_due_within_the_window_tick_in_the_same_pass_on_their_own_schedules() {
        // Goal: a worker waking for one room's deadline also ticks the rooms due within its
        // tick window (one wake-up, one batch), no room ticks earlier than the window allows,
        // and each room's next deadline is one period after its own (never shifted to the
        // pass's time), so that it still ticks once a period. Method: three 128 Hz rooms due
        // at 10, 10.3 and 10.5 ms, a pass at 10 ms with a 400 us window, then with none.
        let period = 1000.0 / 128.0;
        let (mut rooms, mut endpoint) =
            scheduled(Duration::from_micros(400), 128, &[10.0, 10.3, 10.5]);
        let next = pass(&mut rooms, &mut endpoint, 10.0);
        assert_eq!(next, [10.0 + period, 10.3 + period, 10.5].map(to_us));
        assert_eq!(rooms.room_ticks, 2, "the room 0.5 ms off waits for its own wake-up");
        let (mut rooms, mut endpoint) = scheduled(Duration::ZERO, 128, &[10.0, 10.3, 10.5]);
        let next = pass(&mut rooms, &mut endpoint, 10.0);
        assert_eq!(next, [10.0 + period, 10.3, 10.5].map(to_us));
    }

    #[test]
    fn no_room_ticks_more_than_a_quarter_of_its_period_early() {
        // Goal: a window wider than a quarter of a fast room's period does not pull that room
        // nearer its previous tick than three quarters of a period. Method: 1,000 Hz rooms
        // (a 250 us quarter) due at 10, 10.2 and 10.3 ms, a pass at 10 ms with a 400 us window.
        let (mut rooms, mut endpoint) =
            scheduled(Duration::from_micros(400), 1000, &[10.0, 10.2, 10.3]);
        let next = pass(&mut rooms, &mut endpoint, 10.0);
        assert_eq!(next, [11.0, 11.2, 10.3]);
    }

    #[test]
    fn rooms_by_slot_find_their_room_reuse_freed_slots_and_forget_closed_ids() {
        // Goal: a route or a schedule entry that names a slot reaches the room in it, a closed
        // room's slot and id are gone, and a new room takes a freed slot rather than growing
        // the table (bounded by the rooms open at once). Method: open three rooms, close the
        // middle one, open a fourth.
        let mut slots = Slots::new();
        let (a, b, c) = (slots.insert(hosted(7)), slots.insert(hosted(3)), slots.insert(hosted(9)));
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(slots.get(b).map(|h| h.report.room_id), Some(3));
        assert_eq!((slots.slot_of(9), slots.slot_of(4)), (Some(2), None));
        let ids: Vec<u64> = slots.values().map(|h| h.report.room_id).collect();
        assert_eq!(ids, [3, 7, 9], "in room id order, as the reports list them");
        assert_eq!(slots.remove(b).map(|h| h.report.room_id), Some(3));
        assert!(slots.get(b).is_none() && slots.slot_of(3).is_none());
        assert!(slots.remove(b).is_none(), "a slot is closed once");
        assert_eq!(slots.len(), 2);
        assert_eq!(slots.insert(hosted(4)), b, "the freed slot is taken again");
        assert_eq!(slots.slot_of(4), Some(b));
        assert_eq!(slots.slots.len(), 3, "no growth");
        assert_eq!(slots.values_mut().count(), 3);
        assert!(slots.get(99).is_none() && slots.get_mut(99).is_none());
    }
}
