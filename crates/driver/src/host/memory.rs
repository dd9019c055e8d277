//! A worker without its socket: the host's per-datagram and per-tick code, fed datagrams in
//! memory and run on a caller's time, for counting its instructions (`rally-bench count`).

use super::telemetry::{Distributions, ScopeClock, StageTimer, TransportCounters};
use super::worker::{Outside, Rooms};
use super::{Game, HostConfig, WorkerReport};
use crate::{Clock, Traffic};
use rally_proto::{Endpoint, Instant, Transmit};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How often a worker publishes its report, as [`super::worker`]'s loop does.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);
/// How often a worker samples its connections' quality, as [`super::worker`]'s loop does.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// One worker's rooms and endpoint, with everything a worker thread does between its socket's
/// syscalls: routing, each room's tick at its deadline, the telemetry it records (when
/// [`HostConfig::telemetry`] is on), the report it publishes ten times a second. The caller
/// hands datagrams in and takes them out, and says what time it is, so a run repeats exactly;
/// the telemetry still times its scopes on the OS clock, as a worker does, since those clock
/// reads are part of what telemetry costs.
///
/// The loop is the batched worker's (rooms on the greedy pipeline): [`MemoryWorker::receive`]
/// a batch, [`MemoryWorker::tick_due`], [`MemoryWorker::flush`], and
/// [`MemoryWorker::housekeeping`] after each pass.
pub struct MemoryWorker<G: Game> {
    endpoint: Endpoint,
    rooms: Rooms<G>,
    clock: Clock,
    /// Datagrams and bytes handed in and out.
    pub traffic: Traffic,
    last_publish: Instant,
    last_sample: Instant,
    address: SocketAddr,
    report: Option<WorkerReport>,
}

impl<G: Game> MemoryWorker<G> {
    /// A worker over `endpoint` (bound, in the caller's mind, at `address`), running `game`'s
    /// rooms with `config`'s telemetry switch, limits and budgets.
    pub fn new(mut endpoint: Endpoint, address: SocketAddr, game: G, config: HostConfig) -> Self {
        let clock = Clock::start();
        let scopes = Arc::new(ScopeClock::default());
        if config.telemetry {
            let timer = StageTimer::new(clock, scopes.clone());
            endpoint.set_observer(Box::new(timer));
        }
        let rooms = Rooms::new(0, Arc::new(game), config, clock, scopes);
        Self {
            endpoint,
            rooms,
            clock,
            traffic: Traffic::default(),
            last_publish: Instant::ZERO,
            last_sample: Instant::ZERO,
            address,
            report: None,
        }
    }

    /// Datagrams that arrived by `now`, as a worker hands a `recvmmsg` batch to its endpoint
    /// (each datagram's connection asked for first, [`Endpoint::prefetch`]): their events
    /// reach the rooms right after the batch, at its time, `now` (a worker reads no clock for
    /// them); the timers' at the next [`MemoryWorker::flush`].
    pub fn receive<'a, I>(&mut self, now: Instant, datagrams: I)
    where
        I: IntoIterator<Item = (SocketAddr, &'a [u8])>,
        I::IntoIter: Clone,
    {
        let datagrams = datagrams.into_iter();
        for (from, _) in datagrams.clone() {
            self.endpoint.prefetch(from);
        }
        for (from, bytes) in datagrams {
            self.traffic.datagrams_in += 1;
            self.traffic.bytes_in += bytes.len() as u64;
            self.endpoint.handle_datagram(now, from, bytes);
        }
        self.hand_events(now);
        self.endpoint.handle_timeout(now);
    }

    /// Hands every event the endpoint has to its room, at `now`; whether there was one.
    fn hand_events(&mut self, now: Instant) -> bool {
        let mut any = false;
        while let Some((handle, event)) = self.endpoint.poll_event() {
            any = true;
            self.rooms.on_event_at(&mut self.endpoint, handle, event, now, None);
        }
        any
    }

    /// Ticks every room whose deadline is at most `now` (or within its tick window of it, as
    /// a worker does: [`HostConfig::tick_window`]), each starting at `now`, and hands
    /// each room's datagrams to `send` right after its tick, as a worker builds them.
    pub fn tick_due(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        mut send: impl FnMut(Transmit, &[u8]),
    ) {
        // A worker reads its clock as each tick starts, telemetry or not (that reading is its
        // `now`, and starts the phases' timing when it is on): so does this one.
        let clock = self.clock;
        let start = |_: &Rooms<G>| (now, Some(clock.now()));
        while self.rooms.tick_next_due(&mut self.endpoint, now, start) {
            while let Some(t) = self.endpoint.poll_transmit(now, buf) {
                self.traffic.datagrams_out += 1;
                self.traffic.bytes_out += t.len as u64;
                send(t, &buf[..t.len]);
            }
        }
    }

    /// Hands every datagram the endpoint has to `send` and every event to its room, until
    /// both are empty, as a worker's loop does before it waits.
    pub fn flush(&mut self, now: Instant, buf: &mut [u8], mut send: impl FnMut(Transmit, &[u8])) {
        loop {
            let mut busy = false;
            while let Some(t) = self.endpoint.poll_transmit(now, buf) {
                busy = true;
                self.traffic.datagrams_out += 1;
                self.traffic.bytes_out += t.len as u64;
                send(t, &buf[..t.len]);
            }
            // A worker hands these events the time its timers ran at, reading no clock for
            // them: nor does this one.
            busy |= self.hand_events(now);
            if !busy {
                break;
            }
        }
        // What the worker's loop asks before it sleeps toward its next tick (and what that
        // costs it: timers left early are armed again here).
        let next_tick = self.rooms.next_deadline().unwrap_or(now);
        let _ = self.endpoint.next_wake(next_tick);
    }

    /// Samples the connections and builds the report when a worker would (every 100 ms and
    /// every second of `now`).
    pub fn housekeeping(&mut self, now: Instant) {
        if now - self.last_publish < PUBLISH_INTERVAL {
            return;
        }
        self.last_publish = now;
        let sample = now - self.last_sample >= SAMPLE_INTERVAL;
        if sample {
            self.last_sample = now;
        }
        if self.rooms.config().telemetry {
            self.rooms.look_at_connections(&self.endpoint, sample);
        }
        let stats = self.endpoint.stats();
        let resends = self.rooms.resends();
        let transport = TransportCounters::gather(&stats, &self.traffic, 0, 0, resends);
        let nanos = self.rooms.scopes().read();
        let outside = Outside {
            worker: 0,
            address: self.address,
            cpu_us: 0,
            wall_us: self.clock.now().as_nanos() / 1_000,
            scope_nanos: nanos,
            transport,
        };
        self.report = Some(self.rooms.report(&self.endpoint, outside));
    }

    /// The last report [`MemoryWorker::housekeeping`] built, its summaries taken now (as a
    /// host's reader takes them).
    pub fn report(&self) -> Option<WorkerReport> {
        let mut report = self.report.clone()?;
        Distributions::summarize(self.rooms.distributions(), &mut report);
        Some(report)
    }

    /// Rooms open.
    pub fn rooms(&self) -> usize {
        self.rooms.len()
    }

    /// Room-ticks run.
    pub fn room_ticks(&self) -> u64 {
        self.rooms.room_ticks()
    }
}
