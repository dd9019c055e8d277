//! The server side: a room runs its world one tick at a time, in explicit phases.

use crate::config::{self, ConfigError};
use crate::protocol::{
    decode_frame_into, hold_micros, Envelope, FrameHead, SessionTicket, StatePrefix,
};
use crate::protocol::{FAST, HOLDS_MAX, RELIABLE, STATE, STATE_PREFIX_MAX, UNRELIABLE};
use crate::replication::{Baseline, Replicator};
use crate::rpc::{frame, Body, Delivery, Outbox, Pending, RequestId, REQUEST_TIMEOUT};
use crate::world::World;
use rally_proto::{ConnectionHandle, DisconnectReason, Endpoint, Event, Instant};
use rally_wire::seq::seq32_newer;
use rally_wire::varint::write_varint;
use rally_wire::{
    EntityState, MessageCodec, NextSnapshot, Snapshot, SnapshotConfig, SnapshotHistory,
};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

mod sessions;
use sessions::{Connections, Joined, Sessions};

/// A client's id in its room; it survives a reconnect within the resume window.
pub type ClientId = u32;

/// The phases of one tick, in the order [`Room::tick`] runs them (see docs/design.md,
/// section 4: nothing waits for the next tick).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Bookkeeping of what arrived: inputs were applied on arrival; sessions past their resume
    /// window and requests past their deadline expire here.
    Ingest,
    /// Grabbed entities follow their grabbers, root first, within this tick.
    Interact,
    /// User code and physics advance the world by one dt.
    Simulate,
    /// The world is quantized once and each client's snapshot is built and encoded.
    Replicate,
    /// Snapshots and queued RPCs go to the endpoint.
    Transmit,
}

/// The order of the phases, stated once.
pub const PHASES: [Phase; 5] =
    [Phase::Ingest, Phase::Interact, Phase::Simulate, Phase::Replicate, Phase::Transmit];

/// Watches a tick's phases, for telemetry: the host times each one (the room itself reads no
/// clock). `enter` and `exit` bracket every phase of [`PHASES`], in order.
pub trait PhaseObserver {
    /// `phase` starts.
    fn enter(&mut self, phase: Phase);
    /// `phase` ended.
    fn exit(&mut self, phase: Phase);
}

/// An observer that watches nothing.
impl PhaseObserver for () {
    fn enter(&mut self, _phase: Phase) {}
    fn exit(&mut self, _phase: Phase) {}
}

/// The game's code in a room: how inputs move the world and how the world advances.
pub trait Simulation {
    /// A client's input sample (controller and headset poses, buttons).
    type Input: Serialize + DeserializeOwned;
    /// The game's RPC type, both directions.
    type Message: Serialize + DeserializeOwned;

    /// Applies one input the moment it arrives (not at the next tick).
    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &Self::Input);

    /// Reads one input from the front of `bytes`, the bytes postcard writes for
    /// `Self::Input` (an input frame holds its inputs back to back, docs/protocol.md), and
    /// returns it with the bytes after it, or `None` if `bytes` do not start with one. The
    /// default reads through serde; a game whose input has a fixed layout may read it
    /// directly (a room decodes every client's input on arrival, every tick), provided it
    /// takes and refuses exactly what the default does. The bytes are a client's: untrusted.
    fn decode_input(bytes: &[u8]) -> Option<(Self::Input, &[u8])> {
        postcard::take_from_bytes(bytes).ok()
    }

    /// Like [`Simulation::apply_input`], with the moment the input arrived on the room's clock
    /// (with [`Pipeline::Naive`], the tick that applies it), for a game that measures motion
    /// from its inputs (a hand's velocity). The room calls this one; it calls `apply_input`
    /// unless the game overrides it.
    fn apply_input_at(
        &mut self,
        world: &mut World,
        client: ClientId,
        input: &Self::Input,
        _now: Instant,
    ) {
        self.apply_input(world, client, input);
    }

    /// Advances the world by `dt` (physics, game rules). Grabbed entities have already
    /// followed their grabbers this tick.
    fn step(&mut self, world: &mut World, dt: Duration);

    /// The entity `client`'s inputs move (its controller), if any: with [`Pipeline::Fast`], the
    /// grab chain under it goes to every client as soon as an input arrives.
    fn driven(&self, _client: ClientId) -> Option<crate::EntityId> {
        None
    }

    /// Every entity `client`'s inputs move, pushed onto `out` (empty when the room calls it):
    /// with [`Pipeline::Fast`], the grab chains under all of them go to every client in one
    /// fast message as soon as an input arrives. For a player with several driven entities (a
    /// head and two hands); the default pushes [`Simulation::driven`]'s.
    fn driven_into(&self, client: ClientId, out: &mut Vec<crate::EntityId>) {
        out.extend(self.driven(client));
    }

    /// A new client joined (not called on a resume).
    fn joined(&mut self, _world: &mut World, _client: ClientId) {}

    /// A client left for good: it disconnected and its resume window passed.
    fn left(&mut self, _world: &mut World, _client: ClientId) {}
}

/// How a room turns inputs into state on clients (docs/design.md, section 4, and the
/// latency source's three implementations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pipeline {
    /// The source's first implementation, kept to measure against: inputs wait for the tick,
    /// grabbables follow their grabbers' poses of the tick before, and each snapshot goes out
    /// one tick after it was built (a [`ClientSession`](crate::ClientSession) with
    /// `defer_inputs` adds the client's own deferral). About three frames slower than greedy.
    Naive,
    /// Inputs applied on arrival, grab chains followed in the same tick, snapshots sent right
    /// after the step.
    #[default]
    Greedy,
    /// Greedy, and when an input arrives the grab chains it drives
    /// ([`Simulation::driven_into`]) are propagated and sent to every client at once, in one
    /// message, outside the tick; physics still runs on the tick.
    Fast,
}

/// A room's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomConfig {
    /// Ticks per second.
    pub tick_rate: u32,
    /// How inputs become state on clients.
    pub pipeline: Pipeline,
    /// Quantization and limits of snapshots.
    pub snapshot: SnapshotConfig,
    /// Snapshot bytes per client per tick at most; changes that do not fit wait, the most
    /// important first. The default fits one datagram.
    pub snapshot_budget_bytes: usize,
    /// Views kept per client as possible baselines (64 is half a second at 128 Hz), at least
    /// 2: the one acknowledged and the one being sent.
    pub views_kept: usize,
    /// How long a disconnected client's session may be resumed.
    pub resume_window: Duration,
    /// How long a request waits for its response.
    pub request_timeout: Duration,
    /// Requests awaiting responses at most.
    pub requests_max: usize,
    /// Inputs in one input frame at most; larger frames are dropped.
    pub inputs_per_frame_max: usize,
    /// Clients (connected or resumable) at most; more are refused with `ServerFull`.
    pub clients_max: usize,
    /// Messages waiting for `transmit` at most; more are dropped and counted. At least
    /// `clients_max`, so that every client's snapshot of a tick fits.
    pub outbox_max: usize,
    /// Clients' messages, requests and responses waiting for [`Room::poll_event`] at most;
    /// more are dropped and counted in [`RoomStats::events_dropped`] (a response dropped so
    /// leaves its request to time out). The room's own events (joins, leaves, timeouts) are
    /// always queued, since the game's bookkeeping depends on each: they come a few per
    /// connection, and a game that polls after every tick holds them bounded.
    pub events_max: usize,
    /// User messages' size limit.
    pub codec: MessageCodec,
}

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            tick_rate: 128,
            pipeline: Pipeline::Greedy,
            snapshot: SnapshotConfig::default(),
            snapshot_budget_bytes: 1100,
            views_kept: 64,
            resume_window: Duration::from_secs(10),
            request_timeout: REQUEST_TIMEOUT,
            requests_max: 1024,
            inputs_per_frame_max: INPUTS_PER_FRAME_MAX_DEFAULT,
            clients_max: CLIENTS_MAX_DEFAULT,
            outbox_max: 4096,
            events_max: 4096,
            codec: MessageCodec::default(),
        }
    }
}

/// The default of [`RoomConfig::clients_max`].
pub(crate) const CLIENTS_MAX_DEFAULT: usize = 64;

/// The default of [`RoomConfig::inputs_per_frame_max`].
pub(crate) const INPUTS_PER_FRAME_MAX_DEFAULT: usize = 64;

impl RoomConfig {
    /// The length of one tick. A room's tick rate is at least 1 ([`RoomConfig::validate`]);
    /// an unchecked config with 0 gets one tick a second rather than a division by zero.
    pub fn dt(&self) -> Duration {
        Duration::from_secs(1) / self.tick_rate.max(1)
    }

    /// Checks every setting against its range (see [`crate::config`]); [`Room::new`] calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let tick_rate = usize::try_from(self.tick_rate).unwrap_or(usize::MAX);
        config::count("tick_rate", tick_rate, 1..=config::TICK_RATE_MAX as usize)?;
        config::shared(&self.snapshot, &self.codec)?;
        let budget = config::SNAPSHOT_BUDGET_BYTES_MIN..=config::SNAPSHOT_BUDGET_BYTES_MAX;
        config::count("snapshot_budget_bytes", self.snapshot_budget_bytes, budget)?;
        config::count("views_kept", self.views_kept, 2..=config::VIEWS_KEPT_MAX)?;
        let wait = Duration::ZERO..=config::WAIT_MAX;
        config::duration("resume_window", self.resume_window, wait)?;
        let timeout = Duration::from_millis(1)..=config::WAIT_MAX;
        config::duration("request_timeout", self.request_timeout, timeout)?;
        config::count("requests_max", self.requests_max, 1..=config::REQUESTS_MAX)?;
        let inputs = 1..=config::INPUTS_MAX;
        config::count("inputs_per_frame_max", self.inputs_per_frame_max, inputs)?;
        config::count("clients_max", self.clients_max, 1..=config::CLIENTS_MAX)?;
        let outbox = self.clients_max..=config::QUEUE_MAX;
        config::count("outbox_max", self.outbox_max, outbox)?;
        config::count("events_max", self.events_max, 1..=config::QUEUE_MAX)
    }
}

/// Who an RPC goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One client.
    One(ClientId),
    /// Every connected client.
    All,
    /// Every connected client but one (typically the one whose action caused it).
    AllBut(ClientId),
}

/// What a room tells its game.
#[derive(Debug, Clone, PartialEq)]
pub enum RoomEvent<M> {
    /// A new client joined.
    Joined(ClientId),
    /// A client reconnected within the resume window and kept its session.
    Resumed(ClientId),
    /// A client's connection ended; its session may still resume.
    Disconnected(ClientId, DisconnectReason),
    /// A client left for good.
    Left(ClientId),
    /// A one-way message from a client.
    Message {
        /// From whom.
        client: ClientId,
        /// What.
        message: M,
    },
    /// A request from a client; answer with [`Room::respond`].
    Request {
        /// From whom.
        client: ClientId,
        /// Its id, for the response.
        id: RequestId,
        /// What.
        message: M,
    },
    /// The response to one of the room's requests.
    Response {
        /// From whom.
        client: ClientId,
        /// The request's id.
        id: RequestId,
        /// What.
        message: M,
    },
    /// A request of the room's got no response in time.
    RequestTimedOut {
        /// To whom it went.
        client: ClientId,
        /// Its id.
        id: RequestId,
    },
}

/// Why an RPC could not be queued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// No such client, or it is not connected.
    #[error("client {0} is not connected")]
    NotConnected(ClientId),
    /// The message did not encode (or exceeds the size limit).
    #[error(transparent)]
    Encode(#[from] rally_wire::MessageError),
    /// Too many requests await responses, or the outbox is full.
    #[error("too many messages or requests waiting")]
    Full,
}

/// What a room counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomStats {
    /// Ticks run.
    pub ticks: u64,
    /// Inputs applied.
    pub inputs_applied: u64,
    /// Input frames or RPCs that failed to decode, came before the join handshake, or broke a
    /// limit: dropped.
    pub messages_dropped: u64,
    /// Responses to no pending request (late, duplicated or forged): dropped.
    pub responses_unknown: u64,
    /// Snapshot bytes written.
    pub snapshot_bytes: u64,
    /// Changed entities that did not fit a client's budget in some tick (sent later).
    pub changes_deferred: u64,
    /// Snapshots built as a view of the client's own rather than the room's shared encoding:
    /// its changes did not fit the budget at once (a late joiner, or a client whose
    /// acknowledgements fell behind) or its baseline was such a view. Each costs a ranking and
    /// an encode of its own, where a shared one costs a copy.
    pub views_own: u64,
    /// Messages the endpoint refused (queue full) or the outbox had no room for.
    pub sends_failed: u64,
    /// Connections refused (room full, or a bad resume ticket).
    pub joins_refused: u64,
    /// Clients' messages, requests and responses dropped because `events_max` events waited
    /// for [`Room::poll_event`].
    pub events_dropped: u64,
}

/// One client's session. Laid out in the order written (`repr(C)`) and from a line's start:
/// what an input frame reads and writes on the first line (its arrivals inline, where a
/// queue's buffer was a line or two of its own), what the tick's replication reads and writes
/// besides on the second (the replicator's own hot fields end it), the rest after. At 32
/// rooms a worker each line a room-tick touches is a miss (the room last touched it a tick
/// ago), and so is a line an input touched by the time the room ticks (the other rooms'
/// inputs came between): the compiler's order spread a client's tick over five lines, and
/// its input over four.
#[derive(Debug)]
#[repr(C, align(64))]
struct Session {
    /// When the newest inputs arrived: input `arrived_seq[k]` at `arrived_at[k]`, for `k` in
    /// `0..arrived`, oldest first, until a snapshot reports their holds.
    arrived_at: [Instant; HOLDS_MAX],
    arrived_seq: [u32; HOLDS_MAX],
    last_input: Option<u32>,
    /// The newest snapshot the client acknowledged since the last replication, while
    /// `ack_pending`; handed to the replicator then: an input frame touches none of the
    /// replicator's lines. (A forged acknowledgement of a tick never sent, newer than a true
    /// one in the same tick, costs the client that true one: a delta against an older
    /// baseline, never a wrong one.)
    ack: u32,
    arrived: u8,
    ack_pending: bool,
    /// The last input whose effects, grab chains included, the world shows: what snapshots
    /// report to the client's latency meter.
    reflected: Option<u32>,
    connection: Option<ConnectionHandle>,
    replicator: Replicator,
    secret: u64,
    /// When the connection ended, while it has none.
    disconnected_at: Option<Instant>,
    /// Naive pipeline: the last input applied before this tick's ingest.
    last_input_before_tick: Option<u32>,
}

// An input frame's fields fill the first line, and replication's the second.
const _: () = assert!(std::mem::offset_of!(Session, reflected) == 64);
const _: () = assert!(std::mem::offset_of!(Session, replicator) + Replicator::HOT_BYTES <= 128);

impl Session {
    /// A new client's session on `connection`, its secret `secret`.
    fn new(connection: ConnectionHandle, secret: u64, views: usize) -> Self {
        Self {
            arrived_at: [Instant::ZERO; HOLDS_MAX],
            arrived_seq: [0; HOLDS_MAX],
            last_input: None,
            ack: 0,
            arrived: 0,
            ack_pending: false,
            reflected: None,
            connection: Some(connection),
            replicator: Replicator::new(views),
            secret,
            disconnected_at: None,
            last_input_before_tick: None,
        }
    }

    /// Input `seq` arrived `now`; the oldest arrival is forgotten past [`HOLDS_MAX`].
    fn arrive(&mut self, seq: u32, now: Instant) {
        if usize::from(self.arrived) >= HOLDS_MAX {
            self.arrived_at.copy_within(1.., 0);
            self.arrived_seq.copy_within(1.., 0);
            self.arrived -= 1;
        }
        let k = usize::from(self.arrived).min(HOLDS_MAX - 1);
        (self.arrived_at[k], self.arrived_seq[k]) = (now, seq);
        self.arrived += 1;
    }

    /// Keeps `seq` as the acknowledged snapshot to hand the replicator if it is the newest.
    fn acknowledge(&mut self, tick: u32) {
        if !self.ack_pending || seq32_newer(tick, self.ack) {
            (self.ack, self.ack_pending) = (tick, true);
        }
    }

    /// The arrivals of the inputs up to `reflected`, newest first, taken: the next snapshot
    /// reports their holds.
    fn take_arrivals(&mut self) -> Arrivals {
        let mut taken = Arrivals::default();
        let Some(reflected) = self.reflected else { return taken };
        let held = usize::from(self.arrived).min(HOLDS_MAX);
        // Ascending, so those up to `reflected` are the oldest.
        let seqs = &self.arrived_seq[..held];
        let n = seqs.iter().take_while(|seq| !seq32_newer(**seq, reflected)).count();
        for (hold, at) in taken.at.iter_mut().zip(self.arrived_at[..n].iter().rev()) {
            *hold = *at;
        }
        taken.len = n;
        // The rest moved to the front: every slot copied, past `held` too (what is there is
        // not read), so that the copy is four moves, not a call with its ranges checked.
        for k in 0..HOLDS_MAX {
            let from = (k + n).min(HOLDS_MAX - 1);
            (self.arrived_at[k], self.arrived_seq[k]) =
                (self.arrived_at[from], self.arrived_seq[from]);
        }
        self.arrived = (held - n) as u8;
        taken.reflected = Some(reflected);
        taken
    }
}

/// The inputs a snapshot is the first to report, and when each arrived, newest first.
#[derive(Debug, Clone, Copy, Default)]
struct Arrivals {
    reflected: Option<u32>,
    at: [Instant; HOLDS_MAX],
    len: usize,
}

impl Arrivals {
    /// The snapshot prefix for a message sent at `now`.
    fn prefix(&self, now: Instant) -> StatePrefix {
        let mut prefix =
            StatePrefix { reflected: self.reflected, holds_len: self.len, ..Default::default() };
        for (hold, at) in prefix.holds.iter_mut().zip(&self.at[..self.len]) {
            *hold = hold_micros(now.saturating_duration_since(*at));
        }
        prefix
    }
}

/// The history's newest snapshot: the room's, quantized at the last tick (empty before it).
fn newest(history: &SnapshotHistory) -> &Snapshot {
    static BEFORE_FIRST_TICK: Snapshot = Snapshot::new(0);
    history.newest().unwrap_or(&BEFORE_FIRST_TICK)
}

/// A naive pipeline's snapshot, sent a tick after it was built.
#[derive(Debug)]
struct DeferredSnapshot {
    connection: ConnectionHandle,
    arrivals: Arrivals,
    snapshot: Vec<u8>,
}

/// One game instance: an authoritative world, its clients, and the tick that advances it.
pub struct Room<S: Simulation> {
    config: RoomConfig,
    world: World,
    simulation: S,
    tick: u32,
    /// When the last tick ran: fast-path poses say how long after it they were sent.
    last_tick_at: Instant,
    sessions: Sessions,
    /// Connections that have not said hello yet, and the client (and its session's slot) each
    /// joined one is.
    connections: Connections,
    next_client: ClientId,
    rng: Xoshiro256PlusPlus,
    events: VecDeque<RoomEvent<S::Message>>,
    requests: Pending<(ClientId, u32)>,
    outbox: Outbox<ConnectionHandle>,
    /// Naive pipeline: inputs waiting for the next tick, and the snapshots built last tick.
    deferred_inputs: VecDeque<(ClientId, S::Input)>,
    deferred_snapshots: Vec<DeferredSnapshot>,
    /// Connections refused or replaced since the last transmit, to be closed then.
    closing: Vec<(ConnectionHandle, DisconnectReason)>,
    stats: RoomStats,
    /// The phase running, while a tick runs.
    phase: Option<Phase>,
    /// Each entity's unquantized state as bits, parallel to the newest snapshot, as the last
    /// walk that compared it saw it (rows in `stale` are older), and a buffer for this tick's.
    raw: Vec<StateBits>,
    raw_next: Vec<StateBits>,
    /// The rows of `raw` the lent-rows walk quantized since the last whole-world walk, without
    /// recording their states.
    stale: StaleRows,
    /// The serial of the world `raw` and the newest snapshot were last walked from,
    /// row for row, since when the world has counted the rows it lent to change.
    walked: Option<u64>,
    /// The last `views_kept` snapshots, with change ticks: the baselines of complete views. The
    /// world is quantized straight into it; its newest is the room's snapshot.
    history: SnapshotHistory,
    /// This tick's encodings shared by every client with the same baseline (none for a full
    /// snapshot): whether it is this tick's, the baseline, and its bytes (`None`: over the
    /// budget), which each client's send queue shares rather than copies
    /// (`Endpoint::send_parts`). Earlier ticks' entries stay for their buffers, refilled once
    /// no send queue holds them (allocating two a tick and freeing them cost 300 instructions).
    shared: Vec<(bool, Option<u32>, Option<Body>)>,
    datagram: Vec<u8>,
    /// Reused on every fast-path input: the driven roots, their chains' ids, and the chains.
    fast_roots: Vec<crate::EntityId>,
    fast_ids: Vec<crate::EntityId>,
    fast_chain: Snapshot,
    /// Reused for every input frame: its decoded inputs, empty between frames.
    frame_inputs: Vec<S::Input>,
}

impl<S: Simulation> std::fmt::Debug for Room<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("tick", &self.tick)
            .field("clients", &self.sessions.len())
            .field("world", &self.world)
            .finish()
    }
}

impl<S: Simulation> Room<S> {
    /// A room running `simulation` on an empty world; `seed` makes its session secrets.
    /// Refuses a config that [`RoomConfig::validate`] refuses.
    pub fn new(config: RoomConfig, simulation: S, seed: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        let entities_max = config.snapshot.entities_max;
        Ok(Self {
            world: World::new(entities_max),
            simulation,
            tick: 0,
            last_tick_at: Instant::ZERO,
            sessions: Sessions::default(),
            connections: Connections::default(),
            next_client: 1,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            events: VecDeque::new(),
            requests: Pending::new(config.requests_max),
            outbox: Outbox::new(config.outbox_max),
            closing: Vec::new(),
            deferred_inputs: VecDeque::new(),
            deferred_snapshots: Vec::new(),
            stats: RoomStats::default(),
            phase: None,
            raw: Vec::new(),
            raw_next: Vec::new(),
            stale: StaleRows::default(),
            walked: None,
            history: SnapshotHistory::new(config.views_kept + 1),
            shared: Vec::new(),
            // One datagram's worth: an encoding that does not fit is over the budget anyway.
            datagram: vec![0; config.snapshot_budget_bytes + 16],
            fast_roots: Vec::new(),
            fast_ids: Vec::new(),
            fast_chain: Snapshot::default(),
            frame_inputs: Vec::new(),
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &RoomConfig {
        &self.config
    }

    /// The world.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The world, to change between ticks (spawns, grabs, game rules).
    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// The game's code.
    pub fn simulation(&self) -> &S {
        &self.simulation
    }

    /// The game's code, to change.
    pub fn simulation_mut(&mut self) -> &mut S {
        &mut self.simulation
    }

    /// The last tick run (0 before the first).
    pub fn tick_number(&self) -> u32 {
        self.tick
    }

    /// The world as quantized at the last tick: what clients converge to.
    pub fn snapshot(&self) -> &Snapshot {
        newest(&self.history)
    }

    /// What the room counted.
    pub fn stats(&self) -> &RoomStats {
        &self.stats
    }

    /// Clients with a live connection.
    pub fn clients(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.sessions.iter().filter(|(_, s)| s.connection.is_some()).map(|(id, _)| *id)
    }

    /// The last input sequence applied for `client`.
    pub fn last_input(&self, client: ClientId) -> Option<u32> {
        self.sessions.get(&client)?.last_input
    }

    /// The next thing the game should know.
    pub fn poll_event(&mut self) -> Option<RoomEvent<S::Message>> {
        self.events.pop_front()
    }

    /// Hands the room an endpoint's event for one of its connections: a connection joins
    /// ([`Room::accept`]), a message arrives ([`Room::receive`]) or a connection ends
    /// ([`Room::disconnected`]), at `now`. The whole of a server loop's event handling.
    pub fn handle_event(&mut self, now: Instant, connection: ConnectionHandle, event: Event) {
        match event {
            Event::Connected => self.accept(connection),
            Event::Message { channel, payload } => self.receive(now, connection, channel, &payload),
            Event::Disconnected { reason } => self.disconnected(now, connection, reason),
        }
    }

    /// A connection routed to this room completed its handshake; it joins when it says hello.
    pub fn accept(&mut self, connection: ConnectionHandle) {
        self.connections.insert(connection, None);
    }

    /// A connection of this room ended. Its client's session waits `resume_window` for a
    /// reconnect.
    pub fn disconnected(
        &mut self,
        now: Instant,
        connection: ConnectionHandle,
        reason: DisconnectReason,
    ) {
        let Some(Some(Joined { client, .. })) = self.connections.remove(&connection) else {
            return;
        };
        if let Some(session) = self.sessions.get_mut(&client) {
            session.connection = None;
            session.disconnected_at = Some(now);
            self.events.push_back(RoomEvent::Disconnected(client, reason));
        }
    }

    /// Takes a message that arrived on `connection` at `now`, at once: an input is applied to
    /// the world now, an RPC becomes an event. Bad messages are dropped and counted.
    // A function of its own in profiles: scripts/room-instructions.sh counts each phase.
    #[inline(never)]
    pub fn receive(
        &mut self,
        now: Instant,
        connection: ConnectionHandle,
        channel: u8,
        payload: &[u8],
    ) {
        let Some(&joined) = self.connections.get(&connection) else {
            self.stats.messages_dropped += 1;
            return;
        };
        match (joined, channel) {
            (None, RELIABLE) => self.hello(connection, payload),
            (Some(joined), STATE) => self.input_frame(now, joined, payload),
            (Some(joined), RELIABLE | UNRELIABLE) => self.envelope(joined.client, payload),
            _ => self.stats.messages_dropped += 1,
        }
        self.assert_bounded();
    }

    /// Asserts that every collection a peer can make the room grow is within its limit: after
    /// each message received and after each phase of a tick.
    fn assert_bounded(&self) {
        let config = &self.config;
        debug_assert!(self.sessions.len() <= config.clients_max, "sessions past clients_max");
        debug_assert!(self.outbox.queue.len() <= config.outbox_max, "outbox past outbox_max");
        debug_assert!(self.requests.len() <= config.requests_max, "requests past requests_max");
        debug_assert!(self.world.len() <= config.snapshot.entities_max, "world past entities_max");
        let deferred_max = config.inputs_per_frame_max * config.clients_max;
        debug_assert!(self.deferred_inputs.len() <= deferred_max, "deferred inputs unbounded");
        debug_assert!(self.sessions.values().all(|s| usize::from(s.arrived) <= HOLDS_MAX));
    }

    fn hello(&mut self, connection: ConnectionHandle, payload: &[u8]) {
        let Ok(Envelope::Hello { resume }) = self.config.codec.decode(payload) else {
            self.stats.messages_dropped += 1;
            return;
        };
        let resumed = resume.and_then(|ticket| self.resume(connection, ticket));
        let client = match resumed {
            Some(client) => client,
            None if self.sessions.len() >= self.config.clients_max => {
                self.stats.joins_refused += 1;
                self.connections.remove(&connection);
                self.refuse(connection);
                return;
            }
            None => self.join(connection),
        };
        self.connections.insert(connection, self.sessions.joined(client));
        let secret = self.sessions[&client].secret;
        let welcome = Envelope::Welcome {
            ticket: SessionTicket { client, secret },
            tick_rate: self.config.tick_rate,
            resumed: resumed.is_some(),
        };
        match self.config.codec.encode(&welcome) {
            Ok(bytes) => self.queue(connection, RELIABLE, bytes),
            Err(_) => self.stats.sends_failed += 1,
        }
    }

    /// Resumes the session of `ticket` on `connection` if it is valid and not connected.
    fn resume(&mut self, connection: ConnectionHandle, ticket: SessionTicket) -> Option<ClientId> {
        let session = self.sessions.get_mut(&ticket.client)?;
        if session.secret != ticket.secret {
            self.stats.joins_refused += 1;
            return None;
        }
        if let Some(stale) = session.connection.replace(connection) {
            // The client came back before the room noticed it had gone: the ticket proves it
            // is the same client, so the new connection takes over and the old one is closed.
            self.connections.remove(&stale);
            self.closing.push((stale, DisconnectReason::Closed));
        }
        session.disconnected_at = None;
        // The client may have lost its state with its connection: start it from nothing.
        session.ack_pending = false;
        session.replicator.reset();
        self.events.push_back(RoomEvent::Resumed(ticket.client));
        Some(ticket.client)
    }

    fn join(&mut self, connection: ConnectionHandle) -> ClientId {
        let client = self.next_client;
        self.next_client += 1;
        let session = Session::new(connection, self.rng.next_u64(), self.config.views_kept);
        self.sessions.insert(client, session);
        self.simulation.joined(&mut self.world, client);
        self.events.push_back(RoomEvent::Joined(client));
        client
    }

    /// Marks a connection to be closed as full; the host closes it (the room holds no
    /// endpoint outside `tick` and `transmit`).
    fn refuse(&mut self, connection: ConnectionHandle) {
        self.closing.push((connection, DisconnectReason::ServerFull));
    }

    fn input_frame(&mut self, now: Instant, joined: Joined, payload: &[u8]) {
        let bytes_max = self.config.codec.message_bytes_max;
        let inputs_max = self.config.inputs_per_frame_max;
        // The buffer is the room's, taken for the frame and put back: no allocation per frame.
        let mut inputs = std::mem::take(&mut self.frame_inputs);
        let head = decode_frame_into(payload, bytes_max, inputs_max, &mut inputs, S::decode_input);
        match head {
            Some(head) => self.apply_frame(now, joined, head, &mut inputs),
            None => self.stats.messages_dropped += 1,
        }
        inputs.clear();
        self.frame_inputs = inputs;
    }

    /// Acknowledges a decoded frame's snapshot and applies its inputs the room has not applied
    /// yet, in order, leaving `inputs` empty.
    fn apply_frame(
        &mut self,
        now: Instant,
        joined: Joined,
        head: FrameHead,
        inputs: &mut Vec<S::Input>,
    ) {
        let client = joined.client;
        // The connection's slot, not a search of the ids: every input of every client comes
        // this way.
        let Some(session) = self.sessions.at_mut(joined) else { return };
        if let Some(tick) = head.snapshot_ack {
            session.acknowledge(tick);
        }
        // Inputs ride again in later frames until acknowledged; apply each once, in order.
        // Sequences ascend through the frame, so the fresh ones are its tail.
        let stale = session.last_input.map_or(0, |last| {
            let seqs = (0..inputs.len() as u32).map(|i| head.first_seq.wrapping_add(i));
            seqs.take_while(|seq| !seq32_newer(*seq, last)).count()
        });
        let fresh = stale < inputs.len();
        for i in stale..inputs.len() {
            let seq = head.first_seq.wrapping_add(i as u32);
            session.last_input = Some(seq);
            session.arrive(seq, now);
        }
        if self.config.pipeline == Pipeline::Naive {
            // Bounded: what every client may send in one frame.
            let max = self.config.inputs_per_frame_max * self.config.clients_max;
            for input in inputs.drain(stale..) {
                if self.deferred_inputs.len() >= max {
                    self.stats.messages_dropped += 1;
                    continue;
                }
                self.deferred_inputs.push_back((client, input));
            }
        } else {
            // Applied where they were decoded: an input is not moved out of the buffer (an XR
            // input is 128 bytes, copied twice on its way out).
            for input in &inputs[stale..] {
                self.simulation.apply_input_at(&mut self.world, client, input, now);
            }
            self.stats.inputs_applied += (inputs.len() - stale) as u64;
        }
        inputs.clear();
        // Only a new input moves the chain: a frame that merely repeats applied inputs (a
        // resend, a duplicate, an acknowledgement) would send every client the same poses again.
        if fresh && self.config.pipeline == Pipeline::Fast {
            self.fast_forward(now, client);
        }
    }

    /// The fast path: the entities `client` drives and the grab chains under them, propagated
    /// now and sent to every client at once. A fast message is the client's id, its last input plus
    /// one and the microseconds since the last tick ran (each a varint), and a full snapshot of
    /// those entities labelled with that tick: a snapshot of a later tick supersedes it.
    fn fast_forward(&mut self, now: Instant, client: ClientId) {
        // Scratch buffers kept in the room: this runs on every input of a driving client.
        let mut roots = std::mem::take(&mut self.fast_roots);
        let mut ids = std::mem::take(&mut self.fast_ids);
        roots.clear();
        self.simulation.driven_into(client, &mut roots);
        self.driven_chains(&roots, &mut ids);
        self.forward_chains(now, client, &ids);
        self.fast_roots = roots;
        self.fast_ids = ids;
    }

    /// Encodes the entities `ids` once and queues a copy to every connected client, in buffers
    /// the outbox recycles (no allocation per recipient once the room has run a tick). Out of
    /// line, so that how much of `Room::receive` the compiler inlines does not decide whether
    /// the walk over the sessions here is (outlined, it cost the fast pipeline 200 a tick).
    #[inline(never)]
    fn forward_chains(&mut self, now: Instant, client: ClientId, ids: &[crate::EntityId]) {
        if ids.is_empty() {
            return;
        }
        let Some(seq) = self.sessions.get(&client).and_then(|s| s.last_input) else { return };
        let chain = &mut self.fast_chain;
        chain.clear(self.tick);
        for &id in ids {
            let Some(entity) = self.world.get(id) else { continue };
            let pushed = chain.push(self.config.snapshot.quantize(&entity_state(id, entity)));
            debug_assert!(pushed.is_ok(), "a chain holds each entity once");
        }
        let mut message = self.outbox.buffer();
        message.resize(20, 0);
        let since_tick = now.saturating_duration_since(self.last_tick_at);
        let mut len = 0;
        for value in [u64::from(client), u64::from(seq) + 1, since_tick.as_micros() as u64] {
            // Twenty bytes hold three varints of these sizes.
            len += write_varint(value, &mut message[len..]).unwrap_or(0);
        }
        message.truncate(len);
        let Ok(len) = self.config.snapshot.encode_full(&self.fast_chain, &mut self.datagram) else {
            self.stats.sends_failed += 1;
            self.outbox.recycle(message);
            return;
        };
        message.extend_from_slice(&self.datagram[..len]);
        for connection in self.sessions.values().filter_map(|s| s.connection) {
            let mut copy = self.outbox.buffer();
            copy.extend_from_slice(&message);
            if !self.outbox.push(connection, FAST, copy) {
                self.stats.sends_failed += 1;
            }
        }
        self.outbox.recycle(message);
    }

    /// The grab chains under `roots`, propagated now, into `ids`: each entity once, in
    /// ascending order (a chain lists grabbers first; a snapshot takes ids in ascending order,
    /// a grabber may hold what was spawned before it, and two roots' chains never share an
    /// entity but a game may name a root twice).
    fn driven_chains(&mut self, roots: &[crate::EntityId], ids: &mut Vec<crate::EntityId>) {
        ids.clear();
        if roots.is_empty() {
            return;
        }
        self.world.propagate_grabs();
        for root in roots {
            self.world.chain_into(*root, ids);
        }
        ids.sort_unstable();
        ids.dedup();
    }

    fn envelope(&mut self, client: ClientId, payload: &[u8]) {
        if self.events.len() >= self.config.events_max {
            // Checked before a response completes its request, which then times out instead.
            self.stats.events_dropped += 1;
            return;
        }
        let codec = self.config.codec;
        let event = match codec.decode::<Envelope>(payload) {
            Ok(Envelope::Message(bytes)) => {
                codec.decode(&bytes).map(|message| RoomEvent::Message { client, message })
            }
            Ok(Envelope::Request { id, payload }) => codec
                .decode(&payload)
                .map(|message| RoomEvent::Request { client, id: RequestId(id), message }),
            Ok(Envelope::Response { id, payload }) => {
                if !self.requests.complete((client, id)) {
                    self.stats.responses_unknown += 1;
                    return;
                }
                codec.decode(&payload).map(|message| RoomEvent::Response {
                    client,
                    id: RequestId(id),
                    message,
                })
            }
            Ok(_) | Err(_) => return self.stats.messages_dropped += 1,
        };
        match event {
            Ok(event) => self.events.push_back(event),
            Err(_) => self.stats.messages_dropped += 1,
        }
    }

    /// Sends `message` to `target`, in this tick's transmit (or the next `transmit` call).
    pub fn send(
        &mut self,
        target: Target,
        delivery: Delivery,
        message: &S::Message,
    ) -> Result<(), RpcError> {
        let bytes = frame(&self.config.codec, message, Envelope::Message)?;
        let connections: Vec<ConnectionHandle> = match target {
            Target::One(client) => vec![self.connection(client)?],
            Target::All => self.sessions.values().filter_map(|s| s.connection).collect(),
            Target::AllBut(skip) => self
                .sessions
                .iter()
                .filter(|(id, _)| **id != skip)
                .filter_map(|(_, s)| s.connection)
                .collect(),
        };
        for connection in connections {
            if !self.outbox.push(connection, delivery.channel(), bytes.clone()) {
                self.stats.sends_failed += 1;
                return Err(RpcError::Full);
            }
        }
        Ok(())
    }

    /// Sends a request to `client`; its response or its timeout comes back as an event.
    pub fn request(
        &mut self,
        now: Instant,
        client: ClientId,
        message: &S::Message,
    ) -> Result<RequestId, RpcError> {
        let connection = self.connection(client)?;
        let id = self.requests.next_id().ok_or(RpcError::Full)?;
        let bytes =
            frame(&self.config.codec, message, |payload| Envelope::Request { id, payload })?;
        if !self.outbox.push(connection, RELIABLE, bytes) {
            return Err(RpcError::Full);
        }
        self.requests.insert((client, id), now + self.config.request_timeout);
        Ok(RequestId(id))
    }

    /// Answers request `id` of `client`.
    pub fn respond(
        &mut self,
        client: ClientId,
        id: RequestId,
        message: &S::Message,
    ) -> Result<(), RpcError> {
        let connection = self.connection(client)?;
        let wrap = |payload| Envelope::Response { id: id.0, payload };
        let bytes = frame(&self.config.codec, message, wrap)?;
        if !self.outbox.push(connection, RELIABLE, bytes) {
            return Err(RpcError::Full);
        }
        Ok(())
    }

    fn connection(&self, client: ClientId) -> Result<ConnectionHandle, RpcError> {
        self.sessions.get(&client).and_then(|s| s.connection).ok_or(RpcError::NotConnected(client))
    }

    fn queue(&mut self, connection: ConnectionHandle, channel: u8, bytes: Vec<u8>) {
        if !self.outbox.push(connection, channel, bytes) {
            self.stats.sends_failed += 1;
        }
    }

    /// Runs one tick at `now`: every phase of [`PHASES`], in order, then hands everything to
    /// `endpoint`.
    pub fn tick(&mut self, now: Instant, endpoint: &mut Endpoint) {
        self.tick_observed(now, endpoint, &mut ());
    }

    /// [`Room::tick`], telling `observer` when each phase starts and ends.
    pub fn tick_observed(
        &mut self,
        now: Instant,
        endpoint: &mut Endpoint,
        observer: &mut impl PhaseObserver,
    ) {
        self.tick = self.tick.wrapping_add(1);
        self.last_tick_at = now;
        for phase in PHASES {
            self.enter(phase);
            observer.enter(phase);
            match phase {
                Phase::Ingest => self.ingest(now),
                Phase::Interact => self.interact(),
                Phase::Simulate => self.simulation.step(&mut self.world, self.config.dt()),
                Phase::Replicate => {
                    self.prefetch_replication(endpoint);
                    self.replicate(now)
                }
                Phase::Transmit => self.transmit(endpoint),
            }
            observer.exit(phase);
            self.assert_bounded();
        }
        self.phase = None;
        self.stats.ticks += 1;
    }

    /// Asks `endpoint` for each client's connection lines that its snapshot will read on its
    /// way out, and the core for the line of its newest view (which its ack most likely
    /// names) and for the message buffers the snapshots will be written into (see
    /// [`Endpoint::prefetch_connection`]). At many rooms a worker, these are out of the
    /// core's caches by the room's next tick, and the snapshots' building gives them time to
    /// arrive.
    fn prefetch_replication(&mut self, endpoint: &Endpoint) {
        for session in self.sessions.values() {
            if let Some(connection) = session.connection {
                endpoint.prefetch_connection(connection);
            }
            session.replicator.prefetch();
        }
        self.outbox.prefetch_buffers(self.sessions.len());
    }

    /// Asserts that phases run in the stated order, each once per tick.
    fn enter(&mut self, phase: Phase) {
        let expected = match self.phase {
            None => PHASES[0],
            Some(previous) => PHASES[PHASES.iter().position(|p| *p == previous).unwrap_or(0) + 1],
        };
        assert_eq!(phase, expected, "tick phases out of order");
        self.phase = Some(phase);
    }

    /// The phase running, if a tick is running.
    pub fn phase(&self) -> Option<Phase> {
        self.phase
    }

    /// Grab chains follow their grabbers; every input applied so far is now reflected. The
    /// naive pipeline did this in ingest, before applying the tick's inputs.
    // A function of its own in profiles: scripts/room-instructions.sh counts each phase.
    #[inline(never)]
    fn interact(&mut self) {
        if self.config.pipeline != Pipeline::Naive {
            self.world.propagate_grabs();
            for session in self.sessions.values_mut() {
                session.reflected = session.last_input;
            }
        }
    }

    /// Naive: chains follow the poses of the tick before, then the tick's inputs apply.
    fn apply_deferred_inputs(&mut self, now: Instant) {
        self.world.propagate_grabs();
        for session in self.sessions.values_mut() {
            session.reflected = session.last_input_before_tick;
        }
        while let Some((client, input)) = self.deferred_inputs.pop_front() {
            self.simulation.apply_input_at(&mut self.world, client, &input, now);
            self.stats.inputs_applied += 1;
        }
        for session in self.sessions.values_mut() {
            session.last_input_before_tick = session.last_input;
        }
    }

    // A function of its own in profiles: scripts/room-instructions.sh counts each phase.
    #[inline(never)]
    fn ingest(&mut self, now: Instant) {
        if self.config.pipeline == Pipeline::Naive {
            self.apply_deferred_inputs(now);
        }
        let window = self.config.resume_window;
        let expired: Vec<ClientId> = self
            .sessions
            .iter()
            // A session has a disconnection time only while it has no connection, and the
            // connection is on a line the tick reads anyway: the time's (cold) line is read
            // only for the sessions that wait to resume.
            .filter(|(_, s)| s.connection.is_none())
            .filter(|(_, s)| s.disconnected_at.is_some_and(|at| now >= at + window))
            .map(|(id, _)| *id)
            .collect();
        for client in expired {
            self.sessions.remove(&client);
            self.requests.forget(|(c, _)| *c == client);
            self.simulation.left(&mut self.world, client);
            self.events.push_back(RoomEvent::Left(client));
        }
        let events = &mut self.events;
        self.requests.expire(now, |(client, id)| {
            events.push_back(RoomEvent::RequestTimedOut { client, id: RequestId(id) });
        });
    }

    // A function of its own in profiles: scripts/room-instructions.sh counts each phase.
    #[inline(never)]
    fn replicate(&mut self, now: Instant) {
        // Naive: last tick's snapshots go now; this tick's wait for the next.
        for deferred in std::mem::take(&mut self.deferred_snapshots) {
            let mut message = Vec::with_capacity(STATE_PREFIX_MAX + deferred.snapshot.len());
            deferred.arrivals.prefix(now).write(&mut message);
            message.extend_from_slice(&deferred.snapshot);
            self.queue(deferred.connection, STATE, message);
        }
        self.quantize();
        self.shared.iter_mut().for_each(|(current, ..)| *current = false);
        // Out of the room while each is replicated to, so that each session is at hand without
        // a look-up by id (two a client). Nothing here adds or removes sessions; a panic on the
        // way loses them, and a host closes a room that panicked.
        let mut sessions = std::mem::take(&mut self.sessions);
        for session in sessions.values_mut() {
            self.replicate_to(now, session);
        }
        self.sessions = sessions;
    }

    /// Builds, encodes and queues `session`'s snapshot of this tick, sent at `now`, if it is
    /// connected.
    fn replicate_to(&mut self, now: Instant, session: &mut Session) {
        let Some(connection) = session.connection else { return };
        let arrivals = session.take_arrivals();
        let naive = self.config.pipeline == Pipeline::Naive;
        // Naive: the prefix is written when the snapshot goes, a tick later.
        let mut message = self.outbox.buffer();
        message.reserve(self.config.snapshot_budget_bytes);
        if !naive {
            arrivals.prefix(now).write(&mut message);
        }
        let prefix = STATE_PREFIX_MAX;
        let budget = self.config.snapshot_budget_bytes;
        let tick = self.tick;
        if std::mem::take(&mut session.ack_pending) {
            session.replicator.ack(session.ack);
        }
        let baseline = session.replicator.baseline();
        // The shared encoding goes behind the prefix by reference, copied once, into the
        // packet: copied into each client's message first, it wrote a cold buffer per client.
        let mut body = None;
        if let Some(shared) = self.shared_encoding(baseline) {
            if naive {
                message.extend_from_slice(&shared);
            } else {
                body = Some(shared);
            }
            session.replicator.sent_complete(tick);
        } else {
            let (config, history) = (&self.config.snapshot, &self.history);
            let room = newest(history);
            let out = &mut self.datagram;
            let built = session.replicator.build(
                config,
                room,
                history,
                &self.world,
                budget.saturating_sub(prefix),
                out,
            );
            let Ok(built) = built else {
                self.stats.sends_failed += 1;
                return;
            };
            self.stats.changes_deferred += built.deferred as u64;
            self.stats.views_own += 1;
            message.extend_from_slice(&self.datagram[..built.len]);
        }
        let body_len = body.as_ref().map_or(0, |b| b.len());
        self.stats.snapshot_bytes += (message.len() + body_len) as u64;
        if naive {
            self.deferred_snapshots.push(DeferredSnapshot {
                connection,
                arrivals,
                snapshot: message,
            });
        } else if !self.outbox.push_parts(connection, STATE, message, body) {
            self.stats.sends_failed += 1;
        }
    }

    /// The room's whole snapshot as a delta against `baseline` (or in full), encoded once per
    /// tick and baseline and shared by every client on that baseline; `None` if the client's
    /// baseline is a view of its own, or if the encoding exceeds the budget.
    fn shared_encoding(&mut self, baseline: Baseline) -> Option<Body> {
        let key = match baseline {
            Baseline::Nothing => None,
            Baseline::Room(tick) => Some(tick),
            Baseline::Own(_) => return None,
        };
        if let Some((.., body)) = self.shared.iter().find(|(c, k, _)| *c && *k == key) {
            return body.clone();
        }
        // An earlier tick's entry is taken over, its buffer refilled if no queue holds it.
        let at = match self.shared.iter().position(|(current, ..)| !current) {
            Some(at) => at,
            None => {
                self.shared.push((false, key, None));
                self.shared.len() - 1
            }
        };
        let (current, entry_key, entry) = &mut self.shared[at];
        (*current, *entry_key) = (true, key);
        // Encoded in place, into a buffer no queue holds: written into a scratch buffer and
        // copied, it touched the scratch buffer's lines too, a tick cold at 32 rooms a worker.
        if entry.as_mut().and_then(Arc::get_mut).is_none() {
            *entry = Some(Arc::default());
        }
        // Held by nothing else now, so this does not copy.
        let buffer = Arc::make_mut(entry.get_or_insert_with(Arc::default));
        // Room for the largest prefix, so that the encoding fits every client's budget: one
        // that does not fit this is refused by the encoder.
        let room = self.config.snapshot_budget_bytes.saturating_sub(STATE_PREFIX_MAX);
        let config = &self.config.snapshot;
        let written = match key {
            None => {
                buffer.resize(room, 0);
                config.encode_full(newest(&self.history), buffer)
            }
            // Grown to the encoding's length only: grown to `room` first, it zeroed the ~800
            // bytes past the encoding every tick, lines nothing else touched.
            Some(tick) => self.history.encode_delta_into(config, tick, buffer, room),
        };
        match written {
            Ok(len) => buffer.truncate(len),
            // Remembered as `None` when over, so that other clients skip the attempt.
            Err(_) => *entry = None,
        }
        entry.clone()
    }

    /// Quantizes the world into this tick's snapshot, once for every client, straight into the
    /// history's next slot. Between spawns and despawns only the rows the world lent are
    /// quantized; a tick that walks the whole world compares each entity with its state in
    /// `raw`, and one bit for bit unchanged (and not `stale`) keeps its code (and its change
    /// tick) without quantizing.
    fn quantize(&mut self) {
        let Self { world, history, raw, raw_next, stale, config, tick, walked, .. } = self;
        let config = &config.snapshot;
        let mut in_place = true;
        // The rows lent since the last walk, if that walk was of this world.
        let touched = world.touched_rows().filter(|_| *walked == Some(world.serial()));
        // Ticks only increase (wrapping), so the push cannot fail.
        let pushed = history.push_with(*tick, |next| match touched {
            Some(rows) if lined_up(world, raw, next) => {
                walk_touched(world, rows, next, config);
                stale.absorb(world.touched_words());
            }
            _ => {
                let walked = walk_aligned(world, (raw, stale), next, config);
                let raws = (&mut raw[..], &mut *raw_next, &*stale);
                in_place = walk_rest(world, walked, raws, next, config);
                // Every row's state is recorded now, in `raw` or `raw_next`.
                stale.clear();
            }
        });
        debug_assert!(pushed.is_ok(), "snapshot history refused tick {tick}");
        if in_place {
            raw.truncate(world.len());
        } else {
            std::mem::swap(raw, raw_next);
        }
        // A refused push walked nothing: the next tick walks the whole world.
        *walked = pushed.is_ok().then(|| world.serial());
        world.untouch();
    }

    /// Whether [`Room::transmit`] has anything to hand an endpoint (a message queued, a
    /// connection to close): a host answering each message between ticks asks first, as most
    /// messages (inputs) are answered by nothing until the tick.
    pub fn has_output(&self) -> bool {
        !self.closing.is_empty() || !self.outbox.queue.is_empty()
    }

    /// Hands every queued message to `endpoint` now. `tick` does this in its last phase; call
    /// it also after answering events between ticks, so that nothing waits for the next tick.
    // A function of its own in profiles: scripts/room-instructions.sh counts each phase.
    #[inline(never)]
    pub fn transmit(&mut self, endpoint: &mut Endpoint) {
        for (connection, reason) in self.closing.drain(..) {
            endpoint.disconnect(connection, reason);
        }
        // Every message's lines asked for first: their misses overlap (`prefetch_replication`
        // asked for the lines these reads reach them through).
        for (connection, channel, ..) in &self.outbox.queue {
            endpoint.prefetch_queue(*connection, *channel);
        }
        while let Some((connection, channel, mut bytes, body)) = self.outbox.queue.pop_front() {
            // Handed over, not copied: what comes back is an empty buffer for a next message.
            if endpoint.send_parts(connection, channel, &mut bytes, body).is_err() {
                self.stats.sends_failed += 1;
            }
            self.outbox.recycle(bytes);
        }
    }

    /// The earliest request deadline, for hosts that sleep between ticks.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.requests.earliest()
    }
}

/// Whether `raw` and the newest snapshot hold a row each for every row of `world`.
fn lined_up(world: &World, raw: &[StateBits], next: &NextSnapshot<'_>) -> bool {
    let rows = world.len();
    raw.len() == rows && next.previous().len() == rows
}

/// The world walk of ticks with no spawn or despawn since the last one's: only the rows the
/// world lent to change (`rows`, ascending) are quantized, and the rows between are kept a run
/// at a time. Most bodies at rest are not looked at: the reference room lends 64 of its 256
/// rows a tick. A lent row is not compared with its last state (`raw`, which this walk neither
/// reads nor writes; the caller marks the rows `stale`): nearly every lent row moved, and at 32
/// rooms a worker its `raw` line was a miss to read and to write (the room last touched it a
/// tick ago). A lent row that did not move costs a quantize, and its code the encoder's compare
/// (never a byte).
fn walk_touched(
    world: &World,
    rows: impl Iterator<Item = usize>,
    next: &mut NextSnapshot<'_>,
    config: &SnapshotConfig,
) {
    let n = world.len();
    // Rows `kept..k` are unmoved and not yet written out.
    let mut kept = 0;
    for k in rows {
        let Some((id, entity)) = world.row(k) else { break };
        // The run kept before the quantize: its call (rare) then saves no quantized codes.
        let kept_run = next.keep_run(kept..k);
        let code = config.quantize(&entity_state(id, entity));
        // It was lent to change: its codes almost always did, and the encoder compares them.
        let pushed = next.push_changed(code);
        debug_assert!(kept_run.is_ok() && pushed.is_ok(), "world ids out of order");
        kept = k + 1;
    }
    let pushed = next.keep_run(kept..n);
    debug_assert!(pushed.is_ok(), "the kept run left the newest snapshot");
}

/// The whole-world walk, while the world's ids are last tick's, entity for entity: compares
/// each state with its last (`raw`; a `stale` row counts as moved) and keeps the unmoved
/// entities a run at a time (one copy for the bodies at rest between two that moved); a moved
/// one is quantized and its state updated in place. Stops at the first entity whose id differs
/// (a spawn or despawn) and returns how many it took.
fn walk_aligned(
    world: &World,
    (raw, stale): (&mut [StateBits], &StaleRows),
    next: &mut NextSnapshot<'_>,
    config: &SnapshotConfig,
) -> usize {
    if raw.len() != next.previous().len() {
        return 0;
    }
    // Entities `kept..k` are unmoved and not yet written out.
    let (mut kept, mut k) = (0, 0);
    for ((id, entity), old) in world.iter().zip(raw.iter_mut()) {
        let bits = state_bits(id, entity);
        if !same_bits(old, &bits) || stale.contains(k) {
            if old[0] != id {
                break;
            }
            // Stored before the quantize, while the bits are still in registers.
            *old = bits;
            // The run kept before the quantize: its call (rare) then saves no quantized codes.
            let kept_run = next.keep_run(kept..k);
            let code = config.quantize(&entity_state(id, entity));
            let pushed = next.push_changed(code);
            // Ids ascend and the world holds at most entities_max.
            debug_assert!(kept_run.is_ok() && pushed.is_ok(), "world ids out of order");
            kept = k + 1;
        }
        k += 1;
    }
    let pushed = next.keep_run(kept..k);
    debug_assert!(pushed.is_ok(), "the kept run left the newest snapshot");
    k
}

/// The world walk from entity `from` on, after a spawn or despawn: finds each entity's state of
/// last tick by id. Entities before `from` sit at their own index in `raw` and were handled; so
/// is each one here while no spawn or despawn came yet, and `raw` is updated in place. From the
/// first that does, this tick's states are gathered in `raw_next` instead, and this returns
/// false.
fn walk_rest(
    world: &World,
    from: usize,
    (raw, raw_next, stale): (&mut [StateBits], &mut Vec<StateBits>, &StaleRows),
    next: &mut NextSnapshot<'_>,
    config: &SnapshotConfig,
) -> bool {
    if from == world.len() {
        // Skipping to `from` would step through every entity.
        return true;
    }
    let (mut in_place, mut j) = (true, from);
    for (k, (id, entity)) in world.iter().enumerate().skip(from) {
        let bits = state_bits(id, entity);
        while raw.get(j).is_some_and(|r| r[0] < id) {
            j += 1;
        }
        let same = !stale.contains(j) && raw.get(j).is_some_and(|old| same_bits(old, &bits));
        let pushed = match next.previous().get(j) {
            Some(code) if same && code.id == id => next.keep(j),
            _ => next.push(config.quantize(&entity_state(id, entity))),
        };
        // Ids ascend and the world holds at most entities_max.
        debug_assert!(pushed.is_ok(), "world ids out of order");
        if in_place && j == k && raw.get(k).is_some_and(|r| r[0] == id) {
            if !same {
                raw[k] = bits;
            }
            continue;
        }
        if in_place {
            // Entities before this one are in place already (the rest of `raw` is last tick's,
            // still read above: `j` never goes back below `k`).
            in_place = false;
            raw_next.clear();
            raw_next.extend_from_slice(&raw[..k]);
        }
        raw_next.push(bits);
    }
    in_place
}

/// Rows of `raw` whose recorded state may be older than the entity's, a bit a row.
#[derive(Debug, Default)]
struct StaleRows {
    words: Vec<u64>,
}

impl StaleRows {
    /// Marks the rows set in `rows` (a bit a row, as [`World::touched_words`]).
    fn absorb(&mut self, rows: &[u64]) {
        if self.words.len() < rows.len() {
            self.words.resize(rows.len(), 0);
        }
        for (word, row) in self.words.iter_mut().zip(rows) {
            *word |= row;
        }
    }

    #[inline(always)]
    fn contains(&self, row: usize) -> bool {
        self.words.get(row / 64).is_some_and(|word| word >> (row % 64) & 1 == 1)
    }

    fn clear(&mut self) {
        self.words.clear();
    }
}

/// An entity's id and state as bits ([`entity_state`]'s fields, in order): equal bits quantize
/// to equal codes. Comparing bits rather than floats costs a few vector compares, and errs only
/// towards quantizing again (-0.0 against 0.0), never towards keeping a code that moved.
type StateBits = [u32; 14];

#[inline(always)]
fn state_bits(id: crate::EntityId, entity: &crate::Entity) -> StateBits {
    let [px, py, pz] = entity.transform.position.to_array().map(f32::to_bits);
    let [rx, ry, rz, rw] = entity.transform.rotation.to_array().map(f32::to_bits);
    let [lx, ly, lz] = entity.linear_velocity.to_array().map(f32::to_bits);
    let [ax, ay, az] = entity.angular_velocity.to_array().map(f32::to_bits);
    [id, px, py, pz, rx, ry, rz, rw, lx, ly, lz, ax, ay, az]
}

/// Whether `a` and `b` are the same bits: or-ing their differences lets the compiler compare
/// them in a few vector instructions, where `==` on arrays calls `memcmp`.
#[inline(always)]
fn same_bits(a: &StateBits, b: &StateBits) -> bool {
    a.iter().zip(b).fold(0, |differ, (x, y)| differ | (x ^ y)) == 0
}

/// An entity as the wire layer sees it.
fn entity_state(id: crate::EntityId, entity: &crate::Entity) -> EntityState {
    EntityState {
        id,
        position: entity.transform.position,
        rotation: entity.transform.rotation,
        linear_velocity: entity.linear_velocity,
        angular_velocity: entity.angular_velocity,
    }
}

/// The room's limits, at the level of the messages a connection sends: each test crafts what a
/// client (or a peer that is not one of ours) could send, hands it to the room, and checks
/// what the room kept, counted and queued.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{encode_frame, InputFrame};

    /// Every input moves nothing; client `n` drives entity `n` (for the fast path).
    struct Inert;

    impl Simulation for Inert {
        type Input = u8;
        type Message = u8;
        fn apply_input(&mut self, _world: &mut World, _client: ClientId, _input: &u8) {}
        fn step(&mut self, _world: &mut World, _dt: Duration) {}
        fn driven(&self, client: ClientId) -> Option<crate::EntityId> {
            Some(client)
        }
    }

    const NOW: Instant = Instant::ZERO;

    fn room(config: RoomConfig) -> Room<Inert> {
        let mut room = Room::new(config, Inert, 1).unwrap();
        room.world_mut().spawn(crate::Entity::at(crate::Transform::IDENTITY)).unwrap();
        room
    }

    /// Connection `handle` completes its handshake and says hello; returns the client it is.
    fn join(room: &mut Room<Inert>, handle: usize) -> ClientId {
        let connection = ConnectionHandle(handle);
        room.accept(connection);
        let hello = room.config.codec.encode(&Envelope::Hello { resume: None }).unwrap();
        room.receive(NOW, connection, RELIABLE, &hello);
        room.connections[&connection].expect("joined").client
    }

    /// An input frame of `count` inputs from `first_seq` on.
    fn inputs(first_seq: u32, count: usize) -> Vec<u8> {
        let inputs = vec![7u8; count];
        let frame = InputFrame { snapshot_ack: None, first_seq, inputs: inputs.iter().collect() };
        encode_frame(&frame).unwrap()
    }

    /// Fast-path messages queued so far.
    fn fast_messages(room: &Room<Inert>) -> usize {
        room.outbox.queue.iter().filter(|(_, channel, ..)| *channel == FAST).count()
    }

    #[test]
    fn each_snapshot_is_the_world_quantized_afresh_across_moves_spawns_and_despawns() {
        // Goal: however the world changed since the last tick, the tick's snapshot holds each
        // entity's code as quantizing it afresh gives (kept codes of unmoved entities too).
        // Method: quantize tick by tick through moves, a despawn in the middle, a spawn at the
        // end and one that empties the world's tail, and compare with `quantize` of each.
        let mut room = room(RoomConfig::default());
        let at = |x: f32| {
            crate::Entity::at(crate::Transform {
                position: glam::Vec3::X * x,
                ..crate::Transform::IDENTITY
            })
        };
        let ids: Vec<_> = (1..8).map(|x| room.world_mut().spawn(at(x as f32)).unwrap()).collect();
        let step = |room: &mut Room<Inert>, change: &dyn Fn(&mut World)| {
            change(room.world_mut());
            room.tick = room.tick.wrapping_add(1);
            room.quantize();
            let config = &room.config.snapshot;
            let fresh: Vec<_> =
                room.world.iter().map(|(id, e)| config.quantize(&entity_state(id, e))).collect();
            assert_eq!(newest(&room.history).entities(), &fresh[..]);
        };
        step(&mut room, &|_| {});
        step(&mut room, &|w| w.get_mut(ids[3]).unwrap().transform.position.y = 2.0);
        // A despawn in the middle, and a move after it, on the same tick.
        step(&mut room, &|w| {
            w.despawn(ids[1]).unwrap();
            w.get_mut(ids[4]).unwrap().linear_velocity.z = 1.5;
        });
        // Back where they were: a stale state kept for either would keep its moved code.
        step(&mut room, &|w| {
            w.get_mut(ids[4]).unwrap().linear_velocity.z = 0.0;
            w.get_mut(ids[3]).unwrap().transform.position.y = 0.0;
        });
        step(&mut room, &|w| {
            w.spawn(at(9.0)).unwrap();
        });
        step(&mut room, &|w| w.get_mut(ids[2]).unwrap().transform.position.x = -3.0);
        // The newest entity goes: the world's tail shrinks.
        step(&mut room, &|w| {
            w.despawn(w.iter().last().unwrap().0).unwrap();
        });
        step(&mut room, &|w| w.get_mut(ids[2]).unwrap().transform.position.x = 3.0);
        // A row lent and moved on a tick of lent rows, then back on a tick that walks the whole
        // world (a despawn, a spawn) to the state the last whole walk saw: that walk must not
        // take it for unmoved and keep its moved code. Rows before the despawn are walked in
        // place, rows after it by id.
        step(&mut room, &|w| {
            w.get_mut(ids[2]).unwrap().transform.position.x = 5.0;
            w.get_mut(ids[6]).unwrap().transform.position.x = -7.0;
        });
        step(&mut room, &|w| {
            w.despawn(ids[5]).unwrap();
            w.get_mut(ids[2]).unwrap().transform.position.x = -3.0;
            w.get_mut(ids[6]).unwrap().transform.position.x = 7.0;
        });
        step(&mut room, &|w| w.get_mut(ids[2]).unwrap().transform.position.x = 5.0);
        step(&mut room, &|w| {
            w.spawn(at(11.0)).unwrap();
            w.get_mut(ids[2]).unwrap().transform.position.x = -3.0;
        });
        // Between spawns and despawns only the rows the world lent are walked: every way of
        // lending one must be seen.
        step(&mut room, &|w| {
            let [a, b] = w.get_many_mut([ids[0], ids[4]]);
            a.unwrap().angular_velocity.x = 1.0;
            b.unwrap().transform.position.z = 4.0;
        });
        step(&mut room, &|w| {
            let [a, b] = w.get_many_mut([ids[2], ids[3]]);
            a.unwrap().transform.position.x = 5.0;
            b.unwrap().priority = 3.0;
        });
        step(&mut room, &|w| w.iter_mut().last().unwrap().1.linear_velocity.y = -1.0);
        step(&mut room, &|w| {
            w.grab(ids[0], ids[3]).unwrap();
            w.get_mut(ids[0]).unwrap().transform.position.y = 7.0;
            w.propagate_grabs();
        });
        step(&mut room, &|_| {});
    }

    #[test]
    fn a_world_swapped_into_a_room_is_walked_whole() {
        // Goal: a room walks only the rows its world lent since its last tick; a world put in
        // its place (lent nothing since the other room's tick) must not be taken for that.
        // Method: two rooms ticked once with the same ids and different poses, worlds
        // swapped, the snapshot compared with quantizing the swapped-in world afresh.
        let (mut a, mut b) = (room(RoomConfig::default()), room(RoomConfig::default()));
        b.world_mut().get_mut(1).unwrap().transform.position.x = 2.0;
        for room in [&mut a, &mut b] {
            room.tick = 1;
            room.quantize();
        }
        std::mem::swap(a.world_mut(), b.world_mut());
        a.tick = 2;
        a.quantize();
        let config = &a.config.snapshot;
        let fresh: Vec<_> =
            a.world.iter().map(|(id, e)| config.quantize(&entity_state(id, e))).collect();
        assert_eq!(newest(&a.history).entities(), &fresh[..]);
    }

    #[test]
    fn a_frame_past_inputs_per_frame_max_is_dropped_and_the_next_applies() {
        // Goal: a frame of one input more than the limit applies nothing and is counted; the
        // client's next frame, at the limit, applies every input. Method: crafted frames.
        let mut room = room(RoomConfig { inputs_per_frame_max: 64, ..RoomConfig::default() });
        let client = join(&mut room, 1);
        room.receive(NOW, ConnectionHandle(1), STATE, &inputs(0, 65));
        assert_eq!((room.stats.messages_dropped, room.stats.inputs_applied), (1, 0));
        assert_eq!(room.last_input(client), None);
        room.receive(NOW, ConnectionHandle(1), STATE, &inputs(0, 64));
        assert_eq!((room.stats.messages_dropped, room.stats.inputs_applied), (1, 64));
        assert_eq!(room.last_input(client), Some(63));
    }

    /// Reads its one-byte inputs itself, refusing odd ones, and keeps what it applied.
    #[derive(Default)]
    struct EvenOnly(Vec<u8>);

    impl Simulation for EvenOnly {
        type Input = u8;
        type Message = u8;
        fn decode_input(bytes: &[u8]) -> Option<(u8, &[u8])> {
            bytes.split_first().filter(|(b, _)| *b % 2 == 0).map(|(b, rest)| (*b, rest))
        }
        fn apply_input(&mut self, _world: &mut World, _client: ClientId, input: &u8) {
            self.0.push(*input);
        }
        fn step(&mut self, _world: &mut World, _dt: Duration) {}
    }

    #[test]
    fn the_room_reads_inputs_with_the_simulations_decoder() {
        // Goal: a game that reads its own input bytes gets exactly what it read, and a frame
        // holding an input it refuses is dropped whole and counted. Method: a decoder that
        // refuses odd bytes, given a frame of even inputs and then one with an odd input.
        let mut room = Room::new(RoomConfig::default(), EvenOnly::default(), 1).unwrap();
        let connection = ConnectionHandle(1);
        room.accept(connection);
        let hello = room.config.codec.encode(&Envelope::Hello { resume: None }).unwrap();
        room.receive(NOW, connection, RELIABLE, &hello);
        let frame = |first_seq, inputs: &[u8]| {
            encode_frame(&InputFrame {
                snapshot_ack: None,
                first_seq,
                inputs: inputs.iter().collect(),
            })
            .unwrap()
        };
        room.receive(NOW, connection, STATE, &frame(0, &[2, 4]));
        room.receive(NOW, connection, STATE, &frame(2, &[6, 7]));
        assert_eq!(room.simulation().0, [2, 4]);
        assert_eq!((room.stats.inputs_applied, room.stats.messages_dropped), (2, 1));
    }

    #[test]
    fn inputs_riding_again_in_later_frames_apply_once_and_in_order() {
        // Goal: an input a client sends again until acknowledged is applied once, whichever
        // pipeline, and a frame of only old inputs applies nothing; across the sequence's wrap
        // too. Method: overlapping frames (a resend with new inputs behind, an exact repeat, an
        // older one) from just below u32::MAX, and what the game was handed.
        for pipeline in [Pipeline::Greedy, Pipeline::Fast, Pipeline::Naive] {
            let config = RoomConfig { pipeline, ..RoomConfig::default() };
            let mut room = Room::new(config, EvenOnly::default(), 1).unwrap();
            let connection = ConnectionHandle(1);
            room.accept(connection);
            let hello = room.config.codec.encode(&Envelope::Hello { resume: None }).unwrap();
            room.receive(NOW, connection, RELIABLE, &hello);
            let first = u32::MAX - 1;
            let frame = |first_seq: u32, inputs: &[u8]| {
                let inputs = inputs.iter().collect();
                encode_frame(&InputFrame { snapshot_ack: None, first_seq, inputs }).unwrap()
            };
            room.receive(NOW, connection, STATE, &frame(first, &[2, 4]));
            room.receive(NOW, connection, STATE, &frame(first, &[2, 4, 6, 8]));
            room.receive(NOW, connection, STATE, &frame(first.wrapping_add(2), &[6, 8]));
            room.receive(NOW, connection, STATE, &frame(first.wrapping_add(1), &[4]));
            room.receive(NOW, connection, STATE, &frame(first.wrapping_add(3), &[8, 10]));
            if pipeline == Pipeline::Naive {
                room.apply_deferred_inputs(NOW);
            }
            assert_eq!(room.simulation().0, [2, 4, 6, 8, 10], "{pipeline:?}");
            assert_eq!(room.stats.inputs_applied, 5, "{pipeline:?}");
            assert_eq!(room.last_input(1), Some(first.wrapping_add(4)), "{pipeline:?}");
        }
    }

    #[test]
    fn naive_inputs_waiting_for_the_tick_stop_at_their_bound() {
        // Goal: the naive pipeline's queue of inputs waiting for the tick holds at most a
        // frame's worth per client; past it inputs are dropped and counted, and after the
        // tick drains it new inputs queue again. Method: three one-input frames between ticks
        // against a bound of two.
        let config = RoomConfig {
            pipeline: Pipeline::Naive,
            inputs_per_frame_max: 2,
            clients_max: 1,
            ..RoomConfig::default()
        };
        let mut room = room(config);
        join(&mut room, 1);
        for seq in 0..3 {
            room.receive(NOW, ConnectionHandle(1), STATE, &inputs(seq, 1));
        }
        assert_eq!((room.deferred_inputs.len(), room.stats.messages_dropped), (2, 1));
        // What the next tick's ingest does first.
        room.apply_deferred_inputs(NOW);
        assert_eq!(room.stats.inputs_applied, 2);
        room.receive(NOW, ConnectionHandle(1), STATE, &inputs(3, 1));
        assert_eq!(room.deferred_inputs.len(), 1);
    }

    #[test]
    fn clients_past_clients_max_are_refused_as_full_and_the_others_keep_playing() {
        // Goal: the connection one past the limit is refused with `ServerFull` and gets no
        // session; those within it were welcomed and their inputs still apply. Method: three
        // hellos against a limit of two.
        let mut room = room(RoomConfig { clients_max: 2, ..RoomConfig::default() });
        let (a, b) = (join(&mut room, 1), join(&mut room, 2));
        room.accept(ConnectionHandle(3));
        let hello = room.config.codec.encode(&Envelope::Hello { resume: None }).unwrap();
        room.receive(NOW, ConnectionHandle(3), RELIABLE, &hello);
        assert_eq!(room.closing, vec![(ConnectionHandle(3), DisconnectReason::ServerFull)]);
        assert_eq!((room.sessions.len(), room.stats.joins_refused), (2, 1));
        assert!(!room.connections.contains_key(&ConnectionHandle(3)));
        room.receive(NOW, ConnectionHandle(1), STATE, &inputs(0, 1));
        room.receive(NOW, ConnectionHandle(2), STATE, &inputs(0, 1));
        assert_eq!((room.last_input(a), room.last_input(b)), (Some(0), Some(0)));
    }

    #[test]
    fn the_event_queue_stops_at_events_max_but_keeps_the_rooms_own_events() {
        // Goal: clients' messages beyond `events_max` waiting events are dropped and counted,
        // a disconnect is still reported, and once the game polls messages queue again.
        // Method: a game that does not poll, five messages against a queue of three.
        let mut room = room(RoomConfig { events_max: 3, ..RoomConfig::default() });
        join(&mut room, 1);
        let codec = room.config.codec;
        for n in 0..5u8 {
            let bytes = message(&codec, n);
            room.receive(NOW, ConnectionHandle(1), RELIABLE, &bytes);
        }
        // Joined, then messages 0 and 1.
        assert_eq!((room.events.len(), room.stats.events_dropped), (3, 3));
        room.disconnected(NOW, ConnectionHandle(1), DisconnectReason::Closed);
        let events: Vec<_> = std::iter::from_fn(|| room.poll_event()).collect();
        assert_eq!(events.len(), 4);
        assert_eq!(events[2], RoomEvent::Message { client: 1, message: 1 });
        assert!(matches!(events[3], RoomEvent::Disconnected(1, DisconnectReason::Closed)));
        let client = join(&mut room, 2);
        room.receive(NOW, ConnectionHandle(2), RELIABLE, &message(&codec, 9));
        assert_eq!(room.poll_event(), Some(RoomEvent::Joined(client)));
        assert_eq!(room.poll_event(), Some(RoomEvent::Message { client, message: 9 }));
    }

    #[test]
    fn an_input_reaches_its_own_clients_session_after_an_earlier_session_left() {
        // Goal: a connection finds its session by the slot it joined at, and a session that
        // leaves moves the later ones down a slot: an input must still reach its own client,
        // never the one that moved into its slot, and a slot past the end finds no stranger.
        // Method: three clients; the first's session expires; inputs from the other two.
        let window = Duration::from_secs(1);
        let mut room = room(RoomConfig { resume_window: window, ..RoomConfig::default() });
        let (first, second, third) = (join(&mut room, 1), join(&mut room, 2), join(&mut room, 3));
        room.disconnected(NOW, ConnectionHandle(1), DisconnectReason::Closed);
        room.ingest(NOW + window);
        assert_eq!(room.sessions.len(), 2, "the first client's session expired");
        // The second client's slot now holds the third's session; the third's is past the end.
        room.receive(NOW, ConnectionHandle(2), STATE, &inputs(5, 1));
        assert_eq!((room.last_input(second), room.last_input(third)), (Some(5), None));
        room.receive(NOW, ConnectionHandle(3), STATE, &inputs(9, 1));
        assert_eq!((room.last_input(second), room.last_input(third)), (Some(5), Some(9)));
        // The expired client's connection is gone: its input is a counted drop.
        let dropped = room.stats.messages_dropped;
        room.receive(NOW, ConnectionHandle(1), STATE, &inputs(0, 1));
        assert_eq!(room.stats.messages_dropped, dropped + 1);
        assert_eq!(room.last_input(first), None);
        // A stale hint naming a client that has no session finds nothing.
        let stale = Joined { client: first, slot: 0 };
        assert!(room.sessions.at_mut(stale).is_none());
    }

    #[test]
    fn the_newest_acknowledgement_before_a_tick_is_the_next_baseline_whatever_the_order() {
        // Goal: a client's acknowledgements are kept until the tick replicates; the newest one
        // becomes its baseline, one arriving late (older) does not take it back, and one of a
        // reconnected client's old connection is forgotten.
        // Method: three ticks sent whole, frames acknowledging 3 then 2, a tick; then a frame
        // acknowledging 4 and a resume before the next tick.
        let mut room = room(RoomConfig::default());
        let client = join(&mut room, 1);
        let replicate = |room: &mut Room<Inert>| {
            room.tick += 1;
            room.replicate(NOW);
        };
        (0..3).for_each(|_| replicate(&mut room));
        let ack = |tick| {
            let frame: InputFrame<&u8> =
                InputFrame { snapshot_ack: Some(tick), first_seq: 0, inputs: vec![] };
            encode_frame(&frame).unwrap()
        };
        for tick in [3, 2] {
            room.receive(NOW, ConnectionHandle(1), STATE, &ack(tick));
        }
        replicate(&mut room);
        let baseline = |room: &Room<Inert>| room.sessions[&client].replicator.baseline();
        assert_eq!(baseline(&room), Baseline::Room(3));
        room.receive(NOW, ConnectionHandle(1), STATE, &ack(4));
        let secret = room.sessions[&client].secret;
        let hello = Envelope::Hello { resume: Some(SessionTicket { client, secret }) };
        let hello = room.config.codec.encode(&hello).unwrap();
        room.accept(ConnectionHandle(2));
        room.receive(NOW, ConnectionHandle(2), RELIABLE, &hello);
        replicate(&mut room);
        assert_eq!(baseline(&room), Baseline::Nothing);
    }

    #[test]
    fn a_snapshot_reports_the_holds_of_the_inputs_it_reflects_newest_first_once() {
        // Goal: each snapshot reports when the inputs it is the first to reflect arrived,
        // newest first, at most HOLDS_MAX of them (the oldest forgotten), each once.
        // Method: six inputs arrive a millisecond apart (the last four kept); the snapshot
        // reflecting the fifth reports the third to fifth, the next one the sixth, the one
        // after none.
        let mut session = Session::new(ConnectionHandle(1), 0, 2);
        let at = |seq: u32| Instant::ZERO + Duration::from_millis(u64::from(seq));
        (0..6).for_each(|seq| session.arrive(seq, at(seq)));
        let mut take = |reflected| {
            session.reflected = Some(reflected);
            let taken = session.take_arrivals();
            taken.at[..taken.len].to_vec()
        };
        assert_eq!(take(4), [at(4), at(3), at(2)]);
        assert_eq!(take(5), [at(5)]);
        assert_eq!(take(5), []);
    }

    #[test]
    fn has_output_says_whether_transmit_has_anything_to_hand_over() {
        // Goal: a host may skip `transmit` after a message exactly when it would hand over
        // nothing. Method: a naive room (no fast path) of one client: a hello queues a welcome,
        // an input queues nothing, a hello past `clients_max` queues a close.
        let config =
            RoomConfig { pipeline: Pipeline::Naive, clients_max: 1, ..RoomConfig::default() };
        let mut room = room(config);
        assert!(!room.has_output());
        join(&mut room, 1);
        assert!(room.has_output(), "the welcome waits");
        room.outbox.queue.clear();
        room.receive(NOW, ConnectionHandle(1), STATE, &inputs(0, 1));
        assert!(!room.has_output(), "an input is answered at the tick");
        room.accept(ConnectionHandle(2));
        let hello = room.config.codec.encode(&Envelope::Hello { resume: None }).unwrap();
        room.receive(NOW, ConnectionHandle(2), RELIABLE, &hello);
        assert!(room.has_output(), "the refused connection waits to be closed");
    }

    /// A one-way message as a client sends it.
    fn message(codec: &MessageCodec, message: u8) -> Vec<u8> {
        crate::rpc::frame(codec, &message, Envelope::Message).unwrap()
    }

    #[test]
    fn the_fast_path_forwards_once_per_frame_that_applies_a_new_input() {
        // Goal: a frame that only repeats applied inputs (a resend, a duplicate, a bare
        // acknowledgement) sends nobody the chain again, and a frame with one new input among
        // old ones does. Method: two clients; client 1's frames, counted in the outbox as
        // fast-path messages (one per client per forward).
        let config = RoomConfig { pipeline: Pipeline::Fast, ..RoomConfig::default() };
        let mut room = room(config);
        join(&mut room, 1);
        join(&mut room, 2);
        let sender = ConnectionHandle(1);
        room.receive(NOW, sender, STATE, &inputs(0, 1));
        assert_eq!(fast_messages(&room), 2, "one forward, to both clients");
        for _ in 0..5 {
            room.receive(NOW, sender, STATE, &inputs(0, 1));
        }
        room.receive(NOW, sender, STATE, &inputs(1, 0));
        assert_eq!(fast_messages(&room), 2, "resends and acknowledgements forward nothing");
        room.receive(NOW, sender, STATE, &inputs(0, 2));
        assert_eq!(fast_messages(&room), 4, "a new input among old ones forwards");
        assert_eq!(room.stats.inputs_applied, 2);
    }

    #[test]
    fn the_fast_path_sends_a_chain_whose_grabber_is_newer_than_what_it_holds() {
        // Goal: every entity of the chain goes out, even one spawned before its grabber (a
        // hand that picks up a ball already on the table). Method: entity 2 holds entity 1;
        // client 2 drives entity 2; decode the fast-path message its input causes.
        let mut room = room(RoomConfig { pipeline: Pipeline::Fast, ..RoomConfig::default() });
        let hand = room.world_mut().spawn(crate::Entity::at(crate::Transform::IDENTITY));
        room.world_mut().grab(hand.unwrap(), 1).unwrap();
        join(&mut room, 1);
        let client = join(&mut room, 2);
        room.receive(NOW, ConnectionHandle(2), STATE, &inputs(0, 1));
        let (_, _, payload, _) = room.outbox.queue.iter().find(|(_, c, ..)| *c == FAST).unwrap();
        let (sender, seq, _, bytes) = crate::client::parse_fast(payload).unwrap();
        assert_eq!((sender, seq), (client, Some(0)));
        let mut chain = Snapshot::default();
        room.config.snapshot.decode(bytes, None, &mut chain).unwrap();
        let ids: Vec<u32> = chain.entities().iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2]);
    }
}
