//! The client side: a session in a room, over one connection of a client endpoint.

use crate::protocol::{
    encode_frame, Envelope, InputFrame, SessionTicket, RELIABLE, STATE, UNRELIABLE,
};
use crate::room::ClientId;
use crate::rpc::{frame, Delivery, Outbox, Pending, RequestId, REQUEST_TIMEOUT};
use rally_proto::{ConnectionHandle, ConnectionStats, Endpoint, Instant};
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
    /// Snapshots kept as possible baselines (the room deltas against the one acknowledged).
    pub views_kept: usize,
    /// Inputs kept for resending until the room reports them applied; older ones are dropped.
    pub inputs_kept: usize,
    /// How long a request waits for its response.
    pub request_timeout: Duration,
    /// Requests awaiting responses at most.
    pub requests_max: usize,
    /// Messages waiting for `transmit` at most.
    pub outbox_max: usize,
    /// User messages' size limit.
    pub codec: MessageCodec,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            snapshot: SnapshotConfig::default(),
            views_kept: 64,
            inputs_kept: 32,
            request_timeout: REQUEST_TIMEOUT,
            requests_max: 256,
            outbox_max: 1024,
            codec: MessageCodec::default(),
        }
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
    tick_rate: u32,
    _message: PhantomData<M>,
}

impl<I: Serialize, M: Serialize + DeserializeOwned> ClientSession<I, M> {
    /// A session not yet connected.
    pub fn new(config: ClientConfig) -> Self {
        Self {
            views: vec![Snapshot::default(); config.views_kept.max(2)],
            requests: Pending::new(config.requests_max),
            outbox: Outbox::new(config.outbox_max),
            config,
            connection: None,
            ticket: None,
            newest: None,
            inputs: VecDeque::new(),
            first_input: 0,
            frame_due: false,
            hello_due: false,
            welcomed: false,
            last_applied: None,
            events: VecDeque::new(),
            stats: ClientStats::default(),
            scratch: Snapshot::default(),
            tick_rate: 0,
            _message: PhantomData,
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
        self.hello_due = true;
        self.welcomed = false;
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

    /// The newest state of every entity, for the renderer.
    pub fn entities(&self) -> impl Iterator<Item = EntityState> + '_ {
        let config = &self.config.snapshot;
        self.snapshot().into_iter().flat_map(|s| s.entities().iter().map(|e| config.dequantize(e)))
    }

    /// The last input sequence the room reported applied.
    pub fn last_applied_input(&self) -> Option<u32> {
        self.last_applied
    }

    /// The next thing the game should know.
    pub fn poll_event(&mut self) -> Option<ClientEvent<M>> {
        self.events.pop_front()
    }

    /// Queues an input sample and returns its sequence number; it goes out at the next
    /// `transmit` (call it now) and again in later frames until the room reports it applied.
    pub fn send_input(&mut self, input: I) -> u32 {
        if self.inputs.len() >= self.config.inputs_kept.max(1) {
            self.inputs.pop_front();
            self.first_input = self.first_input.wrapping_add(1);
            self.stats.inputs_dropped += 1;
        }
        self.inputs.push_back(input);
        self.frame_due = true;
        self.first_input.wrapping_add(self.inputs.len() as u32 - 1)
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

    /// Takes a message that arrived on the session's connection: a snapshot is applied at
    /// once. Bad messages are dropped and counted.
    pub fn receive(&mut self, channel: u8, payload: &[u8]) {
        match channel {
            STATE => self.apply_snapshot(payload),
            RELIABLE | UNRELIABLE => self.envelope(payload),
            _ => self.stats.messages_dropped += 1,
        }
    }

    fn apply_snapshot(&mut self, payload: &[u8]) {
        if !self.welcomed {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let Ok((applied, prefix)) = read_varint(payload) else {
            self.stats.snapshots_dropped += 1;
            return;
        };
        let bytes = &payload[prefix..];
        let Ok(header) = SnapshotConfig::peek_header(bytes) else {
            self.stats.snapshots_dropped += 1;
            return;
        };
        let newest_tick = self.snapshot().map(|s| s.tick());
        if newest_tick.is_some_and(|n| !seq32_newer(header.tick, n)) {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let baseline = match header.kind {
            SnapshotKind::Full => None,
            SnapshotKind::Delta { baseline_tick } => {
                let found = self.views.iter().find(|v| v.tick() == baseline_tick && !v.is_empty());
                if found.is_none() {
                    // Not held (any more): the room will delta against a newer acknowledgement.
                    self.stats.snapshots_dropped += 1;
                    return;
                }
                found
            }
        };
        if self.config.snapshot.decode(bytes, baseline, &mut self.scratch).is_err() {
            self.stats.snapshots_dropped += 1;
            return;
        }
        let slot = self.newest.map_or(0, |i| (i + 1) % self.views.len());
        std::mem::swap(&mut self.views[slot], &mut self.scratch);
        self.newest = Some(slot);
        self.stats.snapshots += 1;
        self.frame_due = true;
        if applied > 0 {
            self.input_applied((applied - 1) as u32);
        }
        self.events.push_back(ClientEvent::Snapshot { tick: header.tick });
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
        let event = match codec.decode::<Envelope>(payload) {
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
                inputs: self.inputs.iter().collect::<Vec<_>>(),
            };
            match encode_frame(&frame) {
                Some(bytes) => self.queue(STATE, bytes),
                None => self.stats.sends_failed += 1,
            }
        }
        while let Some(((), channel, bytes)) = self.outbox.queue.pop_front() {
            if endpoint.send(connection, channel, &bytes).is_err() {
                self.stats.sends_failed += 1;
            }
        }
    }
}
