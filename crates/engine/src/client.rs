//! The client side: a session in a room, over one connection of a client endpoint.

use crate::config::{self, ConfigError};
use crate::interpolation::{Interpolated, InterpolationConfig, Interpolator};
use crate::latency::LatencyMeter;
use crate::protocol::{
    encode_frame, Envelope, InputFrame, SessionTicket, StatePrefix, FAST, RELIABLE, STATE,
    UNRELIABLE,
};
use crate::room::ClientId;
use crate::rpc::{frame, Delivery, Outbox, Pending, RequestId, REQUEST_TIMEOUT};
use rally_proto::{ConnectionHandle, ConnectionStats, Endpoint, Event, Instant};
use rally_wire::seq::seq32_newer;
use rally_wire::varint::read_varint;
use rally_wire::{EntityState, MessageCodec, Snapshot, SnapshotConfig, SnapshotKind};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::time::Duration;

/// A client session's settings; the snapshot settings must match the room's.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// Quantization and limits of snapshots, as the room's.
    pub snapshot: SnapshotConfig,
    /// Snapshots kept as possible baselines (the room deltas against the one acknowledged), at
    /// least 2: the one shown and the one being decoded.
    pub views_kept: usize,
    /// Inputs kept for resending until the room reports them applied; older ones are dropped
    /// and counted. At most the room's `inputs_per_frame_max`, or the room drops whole frames.
    pub inputs_kept: usize,
    /// How long a request waits for its response.
    pub request_timeout: Duration,
    /// Requests awaiting responses at most.
    pub requests_max: usize,
    /// Messages waiting for `transmit` at most.
    pub outbox_max: usize,
    /// Events waiting for [`ClientSession::poll_event`] at most; past it the room's messages,
    /// requests and responses are dropped (a response dropped so leaves its request to time
    /// out) and snapshots are applied without an event, counted in
    /// [`ClientStats::events_dropped`]. Joins and timeouts always queue.
    pub events_max: usize,
    /// User messages' size limit.
    pub codec: MessageCodec,
    /// Send each input at the next frame ([`ClientSession::present`]) instead of at once: the
    /// naive pipeline's client half, kept to measure against.
    pub defer_inputs: bool,
    /// How remote entities are buffered for [`ClientSession::interpolated`].
    pub interpolation: InterpolationConfig,
    /// Whether to feed the interpolator at all. A client that shows the newest state as it is
    /// ([`ClientSession::entities`]) or interpolates in its game engine turns it off and saves
    /// the work per entity per snapshot; [`ClientSession::interpolated`] then has nothing.
    pub interpolate: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            snapshot: SnapshotConfig::default(),
            views_kept: 64,
            inputs_kept: INPUTS_KEPT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT,
            requests_max: 256,
            outbox_max: 1024,
            events_max: 4096,
            codec: MessageCodec::default(),
            defer_inputs: false,
            interpolation: InterpolationConfig::default(),
            interpolate: true,
        }
    }
}

/// The default of [`ClientConfig::inputs_kept`].
const INPUTS_KEPT_DEFAULT: usize = 32;

// A default client's whole resend window fits a default room's frame limit.
const _: () = assert!(INPUTS_KEPT_DEFAULT <= crate::room::INPUTS_PER_FRAME_MAX_DEFAULT);

impl ClientConfig {
    /// Checks every setting against its range (see [`crate::config`]);
    /// [`ClientSession::new`] calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        config::shared(&self.snapshot, &self.codec)?;
        config::count("views_kept", self.views_kept, 2..=config::VIEWS_KEPT_MAX)?;
        config::count("inputs_kept", self.inputs_kept, 1..=config::INPUTS_MAX)?;
        let timeout = Duration::from_millis(1)..=config::WAIT_MAX;
        config::duration("request_timeout", self.request_timeout, timeout)?;
        config::count("requests_max", self.requests_max, 1..=config::REQUESTS_MAX)?;
        config::count("outbox_max", self.outbox_max, 1..=config::QUEUE_MAX)?;
        config::count("events_max", self.events_max, 1..=config::QUEUE_MAX)?;
        self.interpolation.validate()
    }
}

/// What a session tells its game.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent<M> {
    /// The room accepted the session (`resumed` if it kept an earlier one).
    Joined {
        /// This client's id in the room.
        client: ClientId,
        /// Whether an earlier session continued.
        resumed: bool,
    },
    /// A newer snapshot was applied; [`ClientSession::entities`] shows it.
    Snapshot {
        /// Its tick.
        tick: u32,
    },
    /// A one-way message from the room.
    Message(M),
    /// A request from the room; answer with [`ClientSession::respond`].
    Request {
        /// Its id.
        id: RequestId,
        /// What.
        message: M,
    },
    /// The response to one of this session's requests.
    Response {
        /// The request's id.
        id: RequestId,
        /// What.
        message: M,
    },
    /// A request got no response in time.
    RequestTimedOut(RequestId),
}

/// What a session counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Snapshots applied.
    pub snapshots: u64,
    /// Snapshots dropped: older than one applied, against a baseline no longer held, or
    /// malformed.
    pub snapshots_dropped: u64,
    /// RPCs that failed to decode, or responses to no pending request.
    pub messages_dropped: u64,
    /// Inputs dropped unsent because `inputs_kept` newer ones were waiting.
    pub inputs_dropped: u64,
    /// Messages the endpoint refused.
    pub sends_failed: u64,
    /// Events not queued because `events_max` events waited for
    /// [`ClientSession::poll_event`].
    pub events_dropped: u64,
}

/// A client's session in a room: sends inputs the moment they are sampled, applies each
/// snapshot the moment it arrives, and keeps the newest state for the renderer.
#[derive(Debug)]
pub struct ClientSession<I, M> {
    config: ClientConfig,
    connection: Option<ConnectionHandle>,
    ticket: Option<SessionTicket>,
    /// Recent snapshots, a ring; the newest is the state shown.
    views: Vec<Snapshot>,
    newest: Option<usize>,
    /// Inputs not yet reported applied, oldest first, and the sequence of the first.
    inputs: VecDeque<I>,
    first_input: u32,
    /// Whether something new (an input, a snapshot to acknowledge) waits for `transmit`.
    frame_due: bool,
    /// With `defer_inputs`: the newest input sampled before the last presented frame, the
    /// newest that may go out.
    released: Option<u32>,
    /// Whether the hello for the current connection waits for `transmit`.
    hello_due: bool,
    /// Whether the room welcomed the current connection; until then only the hello goes out,
    /// as the room drops anything else a connection sends before its hello.
    welcomed: bool,
    last_applied: Option<u32>,
    requests: Pending<u32>,
    outbox: Outbox<()>,
    events: VecDeque<ClientEvent<M>>,
    stats: ClientStats,
    scratch: Snapshot,
    /// The newest snapshot's entities dequantized, ids ascending, with the fresh fast-path
    /// chains' states over them: what [`ClientSession::entities`] shows. Kept up to date as
    /// snapshots and chains arrive, in place: an entity is dequantized once, when a snapshot
    /// changes its codes, for the interpolator and every read alike, and a read searches
    /// nothing.
    shown: Vec<EntityState>,
    /// The snapshot's own states where `shown` holds a chain's instead, by index, to put back
    /// before the next snapshot or chain is applied.
    covered: Vec<(usize, EntityState)>,
    /// A buffer for rebuilding `shown` when entities come or go.
    spare: Vec<EntityState>,
    /// Fast-path chains, by sender.
    overlays: Vec<Overlay>,
    /// The total-latency meter.
    meter: LatencyMeter,
    interpolator: Interpolator,
    tick_rate: u32,
    _message: PhantomData<M>,
}

impl<I: Serialize, M: Serialize + DeserializeOwned> ClientSession<I, M> {
    /// A session not yet connected. Refuses a config that [`ClientConfig::validate`] refuses.
    pub fn new(config: ClientConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            views: vec![Snapshot::default(); config.views_kept],
            // validate() above checked the interpolation config too.
            interpolator: Interpolator::new(config.interpolation).expect("validated"),
            requests: Pending::new(config.requests_max),
            outbox: Outbox::new(config.outbox_max),
            config,
            connection: None,
            ticket: None,
            newest: None,
            inputs: VecDeque::new(),
            first_input: 0,
            frame_due: false,
            released: None,
            hello_due: false,
            welcomed: false,
            last_applied: None,
            events: VecDeque::new(),
            stats: ClientStats::default(),
            scratch: Snapshot::default(),
            shown: Vec::new(),
            covered: Vec::new(),
            spare: Vec::new(),
            overlays: Vec::new(),
            meter: LatencyMeter::default(),
            tick_rate: 0,
            _message: PhantomData,
        })
    }

    /// Hands the session an endpoint's event for its connection, at `now`: connected
    /// ([`ClientSession::connected`]), a message ([`ClientSession::receive`]) or the end
    /// ([`ClientSession::disconnected`]). The whole of a client loop's event handling.
    pub fn handle_event(&mut self, now: Instant, connection: ConnectionHandle, event: Event) {
        match event {
            Event::Connected => self.connected(connection),
            Event::Message { channel, payload } => self.receive(now, channel, &payload),
            Event::Disconnected { .. } => self.disconnected(),
        }
    }

    /// The endpoint reported `connection` connected: say hello, resuming the earlier session
    /// if there was one. Call again with a new connection to reconnect.
    pub fn connected(&mut self, connection: ConnectionHandle) {
        self.connection = Some(connection);
        for view in &mut self.views {
            view.clear(0);
        }
        self.newest = None;
        self.shown.clear();
        self.covered.clear();
        self.hello_due = true;
        self.welcomed = false;
    }

    /// The endpoint reported the session's connection ended: nothing more goes out on it, and
    /// nothing but a hello goes out on the next one until the room welcomes it.
    pub fn disconnected(&mut self) {
        self.connection = None;
        self.welcomed = false;
        self.hello_due = false;
    }

    /// The connection this session uses.
    pub fn connection(&self) -> Option<ConnectionHandle> {
        self.connection
    }

    /// This client's id, once joined.
    pub fn client_id(&self) -> Option<ClientId> {
        self.ticket.map(|t| t.client)
    }

    /// The room's tick rate, once joined.
    pub fn tick_rate(&self) -> Option<u32> {
        (self.tick_rate > 0).then_some(self.tick_rate)
    }

    /// What the session counted.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// The transport's statistics for this session's connection: RTT, jitter, loss.
    pub fn connection_stats(&self, endpoint: &Endpoint) -> Option<ConnectionStats> {
        endpoint.connection(self.connection?).map(|c| c.stats())
    }

    /// The newest snapshot applied.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.newest.map(|i| &self.views[i])
    }

    /// The newest state of every entity, for the renderer, ids ascending.
    pub fn entities(&self) -> impl Iterator<Item = EntityState> + '_ {
        self.shown.iter().copied()
    }

    /// The newest state of every entity, ids ascending: what [`ClientSession::entities`]
    /// gives, as a slice (to copy for another thread).
    pub fn entity_states(&self) -> &[EntityState] {
        &self.shown
    }

    /// How many entities [`ClientSession::entities`] gives.
    pub fn entity_count(&self) -> usize {
        self.shown.len()
    }

    /// Entity `id` as a frame at `now` should show it: buffered against the link's jitter,
    /// interpolated, extrapolated a little at most (see [`crate::interpolation`]). For remote
    /// objects; a player's own hand is best shown where the player holds it.
    pub fn interpolated(&mut self, now: Instant, id: crate::EntityId) -> Option<Interpolated> {
        self.interpolator.sample(now, id)
    }

    /// Every entity of [`ClientSession::entities`] as a frame at `now` should show it: its
    /// [`ClientSession::interpolated`] state, or its newest where it has none (interpolation
    /// off, or no update yet). One pass for a whole frame, ids ascending.
    pub fn interpolated_entities(
        &mut self,
        now: Instant,
    ) -> impl Iterator<Item = EntityState> + '_ {
        self.interpolator.sample_each(now, &self.shown)
    }

    /// The interpolator: to copy for a reader on another thread, which samples its copy with
    /// [`Interpolator::sample_each`] over [`ClientSession::entity_states`].
    pub fn interpolator(&self) -> &Interpolator {
        &self.interpolator
    }

    /// The interpolator: to put entities in classes and read what it measured.
    pub fn interpolator_mut(&mut self) -> &mut Interpolator {
        &mut self.interpolator
    }

    /// The server time of tick `tick` plus `offset`, on the room's tick clock.
    fn server_time(&self, tick: u32, offset: Duration) -> Duration {
        let rate = self.tick_rate.max(1);
        Duration::from_secs(u64::from(tick / rate))
            + Duration::from_secs(1) * (tick % rate) / rate
            + offset
    }

    /// The last input sequence the room reported applied.
    pub fn last_applied_input(&self) -> Option<u32> {
        self.last_applied
    }

    /// The next thing the game should know.
    pub fn poll_event(&mut self) -> Option<ClientEvent<M>> {
        self.events.pop_front()
    }

    /// Queues an input sampled at `now` and returns its sequence number; it goes out at the
    /// next `transmit` (call it now) and again in later frames until the room reports it
    /// applied. The meter times it from `now` to the frame that first presents its effect.
    pub fn send_input(&mut self, now: Instant, input: I) -> u32 {
        if self.inputs.len() >= self.config.inputs_kept {
            self.inputs.pop_front();
            self.first_input = self.first_input.wrapping_add(1);
            self.stats.inputs_dropped += 1;
        }
        self.inputs.push_back(input);
        self.frame_due |= !self.config.defer_inputs;
        let seq = self.first_input.wrapping_add(self.inputs.len() as u32 - 1);
        self.meter.sampled(seq, now, !self.config.defer_inputs);
        seq
    }

    /// [`ClientSession::send_input`] for an input sampled at `sampled` on another thread and
    /// handed to the thread that owns the session, which sends it at `now`: the meter counts
    /// the hand-off as the client's send wait, not as part of the network's round trip.
    pub fn send_input_handed(&mut self, sampled: Instant, now: Instant, input: I) -> u32 {
        let seq = self.send_input(sampled, input);
        if !self.config.defer_inputs {
            self.meter.sent_at(seq, now);
        }
        seq
    }

    /// The game presents a frame at `now` showing [`ClientSession::entities`]: every input
    /// whose effect this is the first frame to show gets its total latency measured. With
    /// `defer_inputs`, the inputs sampled before this frame go out at the next `transmit`.
    pub fn present(&mut self, now: Instant) {
        self.meter.presented(now);
        if self.config.defer_inputs && !self.inputs.is_empty() {
            // Only what was sampled before this frame goes out now.
            let released = self.first_input.wrapping_add(self.inputs.len() as u32 - 1);
            self.released = Some(released);
            self.meter.released(released, now);
            self.frame_due = true;
        }
    }

    /// [`ClientSession::present`] for a frame that showed what had arrived by `arrived_by`
    /// (the newest arrival time the session had handled when the frame read its entities),
    /// told after more may have arrived: a game thread that reads a copy of the session and
    /// hands its presents to the thread that owns it. Inputs whose state arrived later wait
    /// for a later frame. Not for `defer_inputs` (its release is timed by the present).
    pub fn present_through(&mut self, now: Instant, arrived_by: Instant) {
        self.meter.presented_through(now, arrived_by);
    }

    /// The total-latency meter: this client's inputs, sampled to presented.
    pub fn latency(&self) -> &LatencyMeter {
        &self.meter
    }

    /// The meter, to take its samples.
    pub fn latency_mut(&mut self) -> &mut LatencyMeter {
        &mut self.meter
    }

    /// Sends `message` to the room.
    pub fn send(&mut self, delivery: Delivery, message: &M) -> Result<(), crate::RpcError> {
        let bytes = frame(&self.config.codec, message, Envelope::Message)?;
        self.push(delivery.channel(), bytes)
    }

    /// Sends a request to the room; its response or its timeout comes back as an event.
    pub fn request(&mut self, now: Instant, message: &M) -> Result<RequestId, crate::RpcError> {
        let id = self.requests.next_id().ok_or(crate::RpcError::Full)?;
        let bytes =
            frame(&self.config.codec, message, |payload| Envelope::Request { id, payload })?;
        self.push(RELIABLE, bytes)?;
        self.requests.insert(id, now + self.config.request_timeout);
        Ok(RequestId(id))
    }

    /// Answers the room's request `id`.
    pub fn respond(&mut self, id: RequestId, message: &M) -> Result<(), crate::RpcError> {
        let wrap = |payload| Envelope::Response { id: id.0, payload };
        let bytes = frame(&self.config.codec, message, wrap)?;
        self.push(RELIABLE, bytes)
    }

    fn push(&mut self, channel: u8, bytes: Vec<u8>) -> Result<(), crate::RpcError> {
        if !self.outbox.push((), channel, bytes) {
            return Err(crate::RpcError::Full);
        }
        Ok(())
    }

    fn queue(&mut self, channel: u8, bytes: Vec<u8>) {
        if !self.outbox.push((), channel, bytes) {
            self.stats.sends_failed += 1;
        }
    }

    /// Takes a message that arrived on the session's connection at `now`: a snapshot is
    /// applied at once. Bad messages are dropped and counted.
    pub fn receive(&mut self, now: Instant, channel: u8, payload: &[u8]) {
        match channel {
            STATE => self.apply_snapshot(now, payload),
            FAST => self.apply_fast(now, payload),
            RELIABLE | UNRELIABLE => self.envelope(payload),
            _ => self.stats.messages_dropped += 1,
        }
    }

    fn apply_snapshot(&mut self, now: Instant, payload: &[u8]) {
        if !self.welcomed {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let Some((prefix, len)) = StatePrefix::read(payload) else {
            self.stats.snapshots_dropped += 1;
            return;
        };
        let bytes = &payload[len..];
        let Ok(header) = SnapshotConfig::peek_header(bytes) else {
            self.stats.snapshots_dropped += 1;
            return;
        };
        let newest_tick = self.snapshot().map(|s| s.tick());
        if newest_tick.is_some_and(|n| !seq32_newer(header.tick, n)) {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let at = match header.kind {
            SnapshotKind::Full => None,
            SnapshotKind::Delta { baseline_tick } => {
                let found =
                    self.views.iter().position(|v| v.tick() == baseline_tick && !v.is_empty());
                if found.is_none() {
                    // Not held (any more): the room will delta against a newer acknowledgement.
                    self.stats.snapshots_dropped += 1;
                    return;
                }
                found
            }
        };
        let applied = UPDATED.with_borrow_mut(|updated| {
            let baseline = at.map(|i| &self.views[i]);
            let config = &self.config.snapshot;
            let decoded =
                config.decode_listing_updates(bytes, baseline, &mut self.scratch, updated);
            let Ok((_, listed)) = decoded else { return false };
            self.uncover();
            // Against the newest view (the steady state on a link faster than a tick), the
            // listed updates are all that differs from it.
            match listed && at.is_some() && at == self.newest {
                true => self.dequantize_updated(updated),
                false => self.dequantize_scratch(),
            }
            true
        });
        if !applied {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let slot = self.newest.map_or(0, |i| (i + 1) % self.views.len());
        std::mem::swap(&mut self.views[slot], &mut self.scratch);
        self.newest = Some(slot);
        // `shown` is the snapshot's own states until the chains cover it again.
        self.interpolate(now, header.tick);
        self.cover();
        self.stats.snapshots += 1;
        self.frame_due = true;
        if let Some(reflected) = prefix.reflected {
            self.input_applied(reflected);
            self.meter.arrived(now, reflected, |seq| prefix.hold(seq));
        }
        if self.admits_event() {
            self.events.push_back(ClientEvent::Snapshot { tick: header.tick });
        }
    }

    /// Whether an event may queue (fewer than `events_max` wait); counts the drop if not.
    fn admits_event(&mut self) -> bool {
        let admits = self.events.len() < self.config.events_max;
        if !admits {
            self.stats.events_dropped += 1;
        }
        admits
    }

    /// [`ClientSession::dequantize_scratch`] for a snapshot in `scratch` decoded against the
    /// newest view without spawns or despawns: only the entities `updated` lists can differ
    /// from the newest view's, so only they are dequantized, and no entity is compared (the
    /// comparison of every entity cost about 40 instructions an entity, 10,000 a snapshot of
    /// the reference room's 256: a fifth of the client's snapshot).
    fn dequantize_updated(&mut self, updated: &[u32]) {
        let config = &self.config.snapshot;
        let next = self.scratch.entities();
        debug_assert_eq!(next.len(), self.shown.len(), "the newest view's entities, in order");
        for &i in updated {
            let i = i as usize;
            if let (Some(state), Some(n)) = (self.shown.get_mut(i), next.get(i)) {
                *state = config.dequantize(n);
            }
        }
    }

    /// Turns `shown` (the newest view's states, uncovered) into the just-decoded snapshot in
    /// `scratch`: an entity whose codes equal its codes in the newest view (most of a room,
    /// at rest) keeps its state, the rest are dequantized. With the same entities as the
    /// newest view (the steady state) in place; when entities came or went, rebuilt.
    fn dequantize_scratch(&mut self) {
        let config = &self.config.snapshot;
        let previous = self.newest.map_or(&[][..], |i| self.views[i].entities());
        let next = self.scratch.entities();
        debug_assert_eq!(previous.len(), self.shown.len(), "shown mirrors the newest view");
        let same = previous.len() == next.len()
            && self.shown.len() == next.len()
            && previous.iter().zip(next).all(|(p, n)| p.id == n.id);
        if same {
            for ((state, p), n) in self.shown.iter_mut().zip(previous).zip(next) {
                if p != n {
                    *state = config.dequantize(n);
                }
            }
            return;
        }
        self.spare.clear();
        let mut at = 0;
        for entity in next {
            while previous.get(at).is_some_and(|p| p.id < entity.id) {
                at += 1;
            }
            let kept = previous.get(at).filter(|p| *p == entity).and_then(|_| self.shown.get(at));
            self.spare.push(kept.copied().unwrap_or_else(|| config.dequantize(entity)));
        }
        std::mem::swap(&mut self.shown, &mut self.spare);
    }

    /// Shows the fresh fast-path chains' states over the snapshot's, keeping what they cover.
    /// A chain sent after tick t is newer than the snapshot of t, not of t + 1; where two
    /// chains hold an entity, the first listed shows (it is written last).
    fn cover(&mut self) {
        let tick = self.snapshot().map_or(0, |s| s.tick());
        for overlay in self.overlays.iter().rev().filter(|o| !seq32_newer(tick, o.sent)) {
            for state in &overlay.states {
                let Ok(at) = self.shown.binary_search_by_key(&state.id, |s| s.id) else {
                    continue;
                };
                // The snapshot's state is kept once, not a chain's written over it before.
                if !self.covered.iter().any(|(i, _)| *i == at) {
                    self.covered.push((at, self.shown[at]));
                }
                self.shown[at] = *state;
            }
        }
    }

    /// Puts the snapshot's own states back where chains covered them.
    fn uncover(&mut self) {
        for (at, state) in self.covered.drain(..) {
            if let Some(shown) = self.shown.get_mut(at) {
                *shown = state;
            }
        }
    }

    /// Hands the newest snapshot's entities (`shown`, uncovered) to the interpolator, as of
    /// `tick`, and tells it which entities are gone.
    fn interpolate(&mut self, now: Instant, tick: u32) {
        if !self.config.interpolate {
            return;
        }
        let time = self.server_time(tick, Duration::ZERO);
        self.interpolator.update(now, time, self.shown.iter().copied());
        self.interpolator.retain_present(&self.shown);
    }

    /// A fast-path chain: shown over the snapshot until a snapshot of a later tick arrives;
    /// if it answers this client's own input, that input's effect is now on screen.
    fn apply_fast(&mut self, now: Instant, payload: &[u8]) {
        let Some((client, seq, offset, bytes)) = parse_fast(payload) else {
            self.stats.snapshots_dropped += 1;
            return;
        };
        // The scratch snapshot is free between snapshots: decoding into it allocates nothing.
        let chain = &mut self.scratch;
        if !self.welcomed || self.config.snapshot.decode(bytes, None, chain).is_err() {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let sent = chain.tick();
        let slot = self.overlays.iter().position(|o| o.client == client);
        if slot.is_some_and(|i| seq32_newer(self.overlays[i].sent, sent)) {
            return;
        }
        // The replaced chain's buffer takes the new states.
        let mut states = match slot {
            Some(i) => std::mem::take(&mut self.overlays[i].states),
            None => Vec::new(),
        };
        states.clear();
        let config = &self.config.snapshot;
        states.extend(self.scratch.entities().iter().map(|e| config.dequantize(e)));
        if self.config.interpolate {
            let time = self.server_time(sent, offset);
            self.interpolator.update(now, time, states.iter().copied());
        }
        let overlay = Overlay { client, sent, states };
        match slot {
            Some(i) => self.overlays[i] = overlay,
            None if self.overlays.len() < OVERLAYS_MAX => self.overlays.push(overlay),
            None => return,
        }
        self.uncover();
        self.cover();
        if self.client_id() == Some(client) {
            if let Some(seq) = seq {
                self.input_applied(seq);
                // Built the moment the input arrived: the server held it for no time.
                self.meter.arrived(now, seq, |_| Some(Duration::ZERO));
            }
        }
    }

    /// The inputs the next frame carries: all those not reported applied, or with
    /// `defer_inputs` those sampled before the last presented frame.
    fn sendable_inputs(&self) -> Vec<&I> {
        let count = match (self.config.defer_inputs, self.released) {
            (false, _) => self.inputs.len(),
            (true, None) => 0,
            (true, Some(released)) if seq32_newer(self.first_input, released) => 0,
            (true, Some(released)) => (released.wrapping_sub(self.first_input).wrapping_add(1)
                as usize)
                .min(self.inputs.len()),
        };
        self.inputs.iter().take(count).collect()
    }

    /// The room applied every input up to `seq`: stop resending them.
    fn input_applied(&mut self, seq: u32) {
        if self.last_applied.is_some_and(|last| !seq32_newer(seq, last)) {
            return;
        }
        self.last_applied = Some(seq);
        while !self.inputs.is_empty() && !seq32_newer(self.first_input, seq) {
            self.inputs.pop_front();
            self.first_input = self.first_input.wrapping_add(1);
        }
        if self.inputs.is_empty() {
            self.first_input = seq.wrapping_add(1);
        }
    }

    fn envelope(&mut self, payload: &[u8]) {
        let codec = self.config.codec;
        let envelope = codec.decode::<Envelope>(payload);
        let rpc = matches!(
            envelope,
            Ok(Envelope::Message(_) | Envelope::Request { .. } | Envelope::Response { .. })
        );
        // Checked before a response completes its request, which then times out instead.
        if rpc && !self.admits_event() {
            return;
        }
        let event = match envelope {
            Ok(Envelope::Welcome { ticket, tick_rate, resumed }) => {
                self.ticket = Some(ticket);
                self.welcomed = true;
                self.frame_due = true;
                self.tick_rate = tick_rate;
                Ok(ClientEvent::Joined { client: ticket.client, resumed })
            }
            Ok(Envelope::Message(bytes)) => codec.decode(&bytes).map(ClientEvent::Message),
            Ok(Envelope::Request { id, payload }) => codec
                .decode(&payload)
                .map(|message| ClientEvent::Request { id: RequestId(id), message }),
            Ok(Envelope::Response { id, payload }) => {
                if !self.requests.complete(id) {
                    self.stats.messages_dropped += 1;
                    return;
                }
                codec
                    .decode(&payload)
                    .map(|message| ClientEvent::Response { id: RequestId(id), message })
            }
            Ok(Envelope::Hello { .. }) | Err(_) => return self.stats.messages_dropped += 1,
        };
        match event {
            Ok(event) => self.events.push_back(event),
            Err(_) => self.stats.messages_dropped += 1,
        }
    }

    /// Expires requests past their deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        let events = &mut self.events;
        self.requests
            .expire(now, |id| events.push_back(ClientEvent::RequestTimedOut(RequestId(id))));
    }

    /// Hands everything waiting to `endpoint` now: RPCs, and one input frame carrying every
    /// input not yet reported applied and the newest snapshot's tick.
    pub fn transmit(&mut self, endpoint: &mut Endpoint) {
        let Some(connection) = self.connection else { return };
        if std::mem::take(&mut self.hello_due) {
            let hello = Envelope::Hello { resume: self.ticket };
            let sent = self
                .config
                .codec
                .encode(&hello)
                .ok()
                .map(|bytes| endpoint.send(connection, RELIABLE, &bytes));
            if !matches!(sent, Some(Ok(()))) {
                self.stats.sends_failed += 1;
            }
        }
        if !self.welcomed {
            return;
        }
        if self.frame_due {
            self.frame_due = false;
            let frame = InputFrame {
                snapshot_ack: self.snapshot().map(|s| s.tick()),
                first_seq: self.first_input,
                inputs: self.sendable_inputs(),
            };
            match encode_frame(&frame) {
                Some(bytes) => self.queue(STATE, bytes),
                None => self.stats.sends_failed += 1,
            }
        }
        while let Some(((), channel, mut bytes, body)) = self.outbox.queue.pop_front() {
            if endpoint.send_parts(connection, channel, &mut bytes, body).is_err() {
                self.stats.sends_failed += 1;
            }
        }
    }
}

thread_local! {
    /// The entities a snapshot's decode updated, by index, when it listed them (see
    /// [`SnapshotConfig::decode_listing_updates`]), for its dequantize: one buffer a thread.
    /// A session's own was four lines written a snapshot, cold in a thread serving hundreds of
    /// sessions (the load bench's bots): about five more misses a snapshot in the count's
    /// clients than with no list.
    static UPDATED: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A fast-path chain: its sender, the last tick run when it was sent, and its entities,
/// dequantized once as it arrives.
#[derive(Debug)]
struct Overlay {
    client: ClientId,
    sent: u32,
    states: Vec<EntityState>,
}

/// Fast-path chains shown at once at most (one per sending client). In a room of more
/// clients, the chains of senders past it show at the next snapshot instead.
const OVERLAYS_MAX: usize = 64;
// Every other client of a default room has its chain shown.
const _: () = assert!(OVERLAYS_MAX >= crate::room::CLIENTS_MAX_DEFAULT - 1);

/// Splits a fast-path message into its sender, its input, how long after its tick it was
/// sent, and its snapshot bytes.
pub(crate) fn parse_fast(payload: &[u8]) -> Option<(ClientId, Option<u32>, Duration, &[u8])> {
    let (client, a) = read_varint(payload).ok()?;
    let (seq, b) = read_varint(payload.get(a..)?).ok()?;
    let (offset, c) = read_varint(payload.get(a + b..)?).ok()?;
    let client = u32::try_from(client).ok()?;
    let seq = seq.checked_sub(1).and_then(|s| u32::try_from(s).ok());
    Some((client, seq, Duration::from_micros(offset), payload.get(a + b + c..)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HOLDS_MAX;

    fn message(codec: &MessageCodec, message: u8) -> Vec<u8> {
        frame(codec, &message, Envelope::Message).unwrap()
    }

    #[test]
    fn the_event_queue_stops_at_events_max_but_keeps_joins_and_timeouts() {
        // Goal: the room's messages beyond `events_max` waiting events are dropped and
        // counted, the session's own events (its join, a request's timeout) still queue, and
        // once the game polls messages queue again. Method: crafted envelopes, a game that
        // does not poll, five messages against a queue of three.
        let config = ClientConfig { events_max: 3, ..ClientConfig::default() };
        let mut session: ClientSession<u8, u8> = ClientSession::new(config).unwrap();
        let codec = MessageCodec::default();
        let ticket = SessionTicket { client: 1, secret: 2 };
        let welcome = Envelope::Welcome { ticket, tick_rate: 128, resumed: false };
        session.receive(Instant::ZERO, RELIABLE, &codec.encode(&welcome).unwrap());
        for n in 0..5 {
            session.receive(Instant::ZERO, RELIABLE, &message(&codec, n));
        }
        assert_eq!(session.stats().events_dropped, 3);
        let id = session.request(Instant::ZERO, &9).unwrap();
        session.handle_timeout(Instant::ZERO + REQUEST_TIMEOUT);
        let events: Vec<_> = std::iter::from_fn(|| session.poll_event()).collect();
        let expected = [
            ClientEvent::Joined { client: 1, resumed: false },
            ClientEvent::Message(0),
            ClientEvent::Message(1),
            ClientEvent::RequestTimedOut(id),
        ];
        assert_eq!(events, expected);
        session.receive(Instant::ZERO, RELIABLE, &message(&codec, 7));
        assert_eq!(session.poll_event(), Some(ClientEvent::Message(7)));
    }

    /// A fast-path message from `client`: its chain is one entity, its own id.
    fn fast(client: u32) -> Vec<u8> {
        fast_chain(client, 1, &[(client, 0.0)])
    }

    /// Entity `id` at `x` on the x axis, at rest.
    fn at_x(id: u32, x: f32) -> EntityState {
        EntityState {
            id,
            position: glam::Vec3::new(x, 0.0, 0.0),
            rotation: glam::Quat::IDENTITY,
            linear_velocity: glam::Vec3::ZERO,
            angular_velocity: glam::Vec3::ZERO,
        }
    }

    /// A snapshot of `tick` holding `entities` (id, x), full, encoded as its bytes.
    fn encoded(tick: u32, entities: &[(u32, f32)], out: &mut [u8]) -> usize {
        let config = SnapshotConfig::default();
        let mut snapshot = Snapshot::new(tick);
        for (id, x) in entities {
            snapshot.push(config.quantize(&at_x(*id, *x))).unwrap();
        }
        config.encode_full(&snapshot, out).unwrap()
    }

    /// A fast-path message from `client`, sent after `tick`, its chain `entities` (id, x).
    fn fast_chain(client: u32, tick: u32, entities: &[(u32, f32)]) -> Vec<u8> {
        let mut out = vec![0u8; 512];
        let mut len = 0;
        for value in [u64::from(client), 0, 0] {
            len += rally_wire::varint::write_varint(value, &mut out[len..]).unwrap();
        }
        len += encoded(tick, entities, &mut out[len..]);
        out.truncate(len);
        out
    }

    /// A snapshot message (no input reflected) of `tick` holding `entities` (id, x).
    fn state(tick: u32, entities: &[(u32, f32)]) -> Vec<u8> {
        let prefix = StatePrefix { reflected: None, holds: [0; HOLDS_MAX], holds_len: 0 };
        let mut out = Vec::new();
        prefix.write(&mut out);
        let mut bytes = vec![0u8; 512];
        let len = encoded(tick, entities, &mut bytes);
        out.extend_from_slice(&bytes[..len]);
        out
    }

    /// A snapshot message (no input reflected) of `snapshot`: a delta against `baseline`, or
    /// full.
    fn state_of(snapshot: &Snapshot, baseline: Option<&Snapshot>) -> Vec<u8> {
        let config = SnapshotConfig::default();
        let mut bytes = vec![0u8; 64 * 1024];
        let len = match baseline {
            Some(baseline) => config.encode_delta(baseline, snapshot, &mut bytes),
            None => config.encode_full(snapshot, &mut bytes),
        };
        let prefix = StatePrefix { reflected: None, holds: [0; HOLDS_MAX], holds_len: 0 };
        let mut out = Vec::new();
        prefix.write(&mut out);
        out.extend_from_slice(&bytes[..len.unwrap()]);
        out
    }

    proptest::proptest! {
        /// Goal: whichever way a snapshot is dequantized (only the entities a delta against
        /// the newest view lists, or by comparing every entity with the newest view's when
        /// the delta is against an older one, has spawns or despawns, or is full), the states
        /// shown are the newest snapshot's, dequantized. Method: random worlds of up to 24
        /// entities changed, spawned and despawned tick by tick, each tick's snapshot sent
        /// against the newest view, an older one, or in full.
        #[test]
        fn shown_states_are_the_newest_snapshot_dequantized(
            steps in proptest::collection::vec(
                (0usize..4, proptest::collection::vec((0u32..24, 0u8..16, -500i32..500), 0..12)),
                1..24,
            ),
        ) {
            let config = SnapshotConfig::default();
            let mut session = welcomed();
            let quantized = |id: u32, x: f32| config.quantize(&at_x(id, x));
            let mut world: std::collections::BTreeMap<u32, rally_wire::QuantizedEntity> =
                (0..16).map(|id| (id, quantized(id, id as f32))).collect();
            let mut sent: Vec<Snapshot> = Vec::new();
            for (k, (back, edits)) in steps.into_iter().enumerate() {
                for (id, op, x) in edits {
                    match op {
                        0 => drop(world.remove(&id)),
                        1 => drop(world.entry(id).or_insert_with(|| quantized(id, 0.0))),
                        _ => {
                            if let Some(e) = world.get_mut(&id) {
                                *e = quantized(id, x as f32 / 100.0);
                            }
                        }
                    }
                }
                let mut snapshot = Snapshot::new(k as u32 + 1);
                for entity in world.values() {
                    snapshot.push(*entity).unwrap();
                }
                let baseline = sent.len().checked_sub(back + 1).filter(|_| back < 3);
                let message = state_of(&snapshot, baseline.map(|i| &sent[i]));
                session.receive(Instant::ZERO, STATE, &message);
                proptest::prop_assert_eq!(session.snapshot(), Some(&snapshot));
                let expected: Vec<EntityState> =
                    snapshot.entities().iter().map(|e| config.dequantize(e)).collect();
                proptest::prop_assert_eq!(session.entity_states(), &expected[..]);
                sent.push(snapshot);
            }
            proptest::prop_assert_eq!(session.stats().snapshots_dropped, 0);
        }
    }

    /// A default session the room has welcomed as client 1, at 128 Hz.
    fn welcomed() -> ClientSession<u8, u8> {
        let mut session: ClientSession<u8, u8> = ClientSession::new(Default::default()).unwrap();
        let codec = MessageCodec::default();
        let ticket = SessionTicket { client: 1, secret: 2 };
        let welcome = Envelope::Welcome { ticket, tick_rate: 128, resumed: false };
        session.receive(Instant::ZERO, RELIABLE, &codec.encode(&welcome).unwrap());
        session
    }

    /// What the session shows, as (id, x).
    fn shown(session: &ClientSession<u8, u8>) -> Vec<(u32, f32)> {
        session.entities().map(|e| (e.id, (e.position.x * 100.0).round() / 100.0)).collect()
    }

    #[test]
    fn entities_show_each_snapshot_with_the_fresh_chains_over_it() {
        // Goal: the states a session keeps in place (dequantized once, chains written over
        // them) show what the room says: a chain's entities over the snapshot until a later
        // tick's snapshot, an entity a sender's newer chain leaves out back at the snapshot's
        // state, entities that come and go. Method: crafted snapshots and chains, the shown
        // states after each.
        let mut session = welcomed();
        let now = Instant::ZERO;
        session.receive(now, STATE, &state(10, &[(2, 1.0), (3, 1.0), (4, 1.0)]));
        assert_eq!(shown(&session), [(2, 1.0), (3, 1.0), (4, 1.0)]);
        session.receive(now, FAST, &fast_chain(7, 10, &[(2, 5.0), (3, 5.0)]));
        assert_eq!(shown(&session), [(2, 5.0), (3, 5.0), (4, 1.0)]);
        // The sender's next chain holds only entity 2: entity 3 shows the snapshot again.
        session.receive(now, FAST, &fast_chain(7, 11, &[(2, 6.0)]));
        assert_eq!(shown(&session), [(2, 6.0), (3, 1.0), (4, 1.0)]);
        // A snapshot of tick 11 (entity 4 gone): the chain sent after tick 11 still shows.
        session.receive(now, STATE, &state(11, &[(2, 2.0), (3, 2.0)]));
        assert_eq!(shown(&session), [(2, 6.0), (3, 2.0)]);
        // A chain from another sender over the same entity: the first listed shows.
        session.receive(now, FAST, &fast_chain(8, 11, &[(2, 7.0), (3, 7.0)]));
        assert_eq!(shown(&session), [(2, 6.0), (3, 7.0)]);
        // Tick 12 is later than both chains: the snapshot shows, with a new entity.
        session.receive(now, STATE, &state(12, &[(2, 3.0), (3, 3.0), (5, 3.0)]));
        assert_eq!(shown(&session), [(2, 3.0), (3, 3.0), (5, 3.0)]);
        assert_eq!(session.entity_count(), 3);
        // Interpolated for a frame, each entity is still itself, in id order.
        let ids: Vec<u32> = session.interpolated_entities(now).map(|e| e.id).collect();
        assert_eq!(ids, [2, 3, 5]);
    }

    #[test]
    fn fast_path_chains_are_kept_for_overlays_max_senders() {
        // Goal: a session shows at most `OVERLAYS_MAX` senders' chains at once, whatever the
        // room sends; a sender already shown still updates. Method: crafted fast-path messages
        // from ten senders more than the limit.
        let mut session = welcomed();
        for sender in 2..OVERLAYS_MAX as u32 + 12 {
            session.receive(Instant::ZERO, FAST, &fast(sender));
        }
        assert_eq!(session.overlays.len(), OVERLAYS_MAX);
        assert_eq!(session.stats().snapshots_dropped, 0);
        session.receive(Instant::ZERO, FAST, &fast(2));
        assert_eq!(session.overlays.len(), OVERLAYS_MAX);
    }
}
