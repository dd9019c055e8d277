//! The client behind a `RallyClient*`, in safe Rust: a UDP driver, a [`ClientSession`] and a
//! [`SceneState`] mirror, pumped by `update`. The C functions in `api` only check pointers and
//! copy in and out; everything here returns [`FfiError`].

use crate::error::FfiError;
use crate::publish::View;
use crate::roster::{Roster, Tagger};
use crate::types::{
    RallyConfig, RallyConnectionStats, RallyEntity, RallyLatency, RALLY_HAND_NONE, RALLY_NONE,
};
use rally_driver::UdpDriver;
use rally_engine::{
    connection_config, ClientConfig, ClientEvent, ClientSession, Delivery, LatencyModel,
    LatencySample, PresentedFrames, Verdict,
};
use rally_proto::{
    ConnectToken, ConnectionHandle, DisconnectReason, EndpointConfig, Event, Instant,
};
use rally_scene::{RelayTarget, SceneEvent, SceneMessage, SceneState, WriteScope, XrInput};
use rally_wire::EntityState;
use serde::{Serialize, Serializer};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

/// Raw input bytes in one `send_input_bytes` at most: the engine's input frames carry a few
/// inputs per datagram, so one input is small (an `XrInput` is about 100 bytes).
pub const RALLY_INPUT_BYTES_MAX: usize = 512;

/// Events waiting for `rally_client_poll_event` at most; more are dropped and counted
/// ([`RallyConnectionStats::events_dropped`]). A game that polls every frame holds a few.
pub const RALLY_EVENTS_MAX: usize = 4096;

/// Latency samples kept for the meter's figures (p99, within-model share): the newest ones.
pub const RALLY_LATENCY_SAMPLES_KEPT: usize = 4096;

/// What the game sends as its input: the standard XR input of scene rooms, or the bytes of
/// its own room's input type (postcard-encoded, as the room decodes them).
#[derive(Debug, Clone)]
pub enum Input {
    /// A scene room's input.
    Xr(XrInput),
    /// Bytes already encoded as the room's input; written as they are, with no length.
    Raw(Vec<u8>),
}

impl Serialize for Input {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        match self {
            Input::Xr(input) => input.serialize(serializer),
            // A tuple of bytes: postcard writes each byte as itself, with no length prefix, so
            // the room reads exactly the game's encoding of its own input type.
            Input::Raw(bytes) => {
                let mut tuple = serializer.serialize_tuple(bytes.len())?;
                for byte in bytes {
                    tuple.serialize_element(byte)?;
                }
                tuple.end()
            }
        }
    }
}

/// One thing the game learns, queued for `rally_client_poll_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening {
    /// The room accepted this client as `client`.
    Joined {
        /// This client's id.
        client: u32,
        /// Whether an earlier session continued.
        resumed: bool,
    },
    /// A player is in the room (or, from a scene room, joined it).
    PlayerJoined(u32),
    /// A player left.
    PlayerLeft(u32),
    /// A relayed message.
    Relayed {
        /// Its sender, or `None` for the room.
        from: Option<u32>,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// A key-value change.
    Changed {
        /// `None` for the room's scope, or the player whose scope.
        player: Option<u32>,
        /// The key.
        key: String,
        /// The value, or `None`: removed.
        value: Option<Vec<u8>>,
    },
    /// The connection ended.
    Disconnected(DisconnectReason),
    /// The I/O thread stopped (a socket error, or a bug caught there), with what happened:
    /// the connection is over.
    Failed(String),
}

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Created, not connecting.
    Idle,
    /// Connecting or connected to the address.
    Connecting(ConnectionHandle, SocketAddr),
    /// The connection ended.
    Ended(DisconnectReason, SocketAddr, bool),
    /// `rally_client_close` was called: every call but destroy is refused.
    Closed,
}

/// The client.
pub struct Client {
    driver: UdpDriver,
    session: ClientSession<Input, SceneMessage>,
    scene: SceneState,
    roster: Roster,
    phase: Phase,
    joined: bool,
    events: VecDeque<Happening>,
    events_dropped: u64,
    /// The newest latency samples, each with the time of the frame that presented it.
    latency: VecDeque<(Instant, LatencySample)>,
    /// The frames presented, to judge those samples on.
    frames: PresentedFrames,
    frame: Duration,
    /// Why the I/O thread stopped, if it did.
    failure: Option<String>,
    /// Whether the game thread's turn has returned since the I/O thread saw the end.
    end_told: bool,
    /// The newest arrival time the session handled: what a frame reading it now can show.
    arrived_by: Instant,
    /// The frame's start, as the last `update` was told: the latency meter judges the frame
    /// from it (the model's frame takes its input and its state then).
    frame_start: Instant,
    /// Whether anything a [`View`] holds changed since the last publish.
    changed: bool,
}

/// What the game thread hands the I/O thread when it must not wait for the client.
#[derive(Debug)]
pub(crate) enum Command {
    /// An input sampled at this time (us).
    Input(u64, Input),
    /// A frame presented at this time (us) showing what had arrived by the first instant, the
    /// frame started at the second.
    Present(u64, Instant, Instant),
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("phase", &self.phase).finish_non_exhaustive()
    }
}

impl Client {
    /// A client bound to the config's address (any port on all interfaces if none).
    pub fn new(config: &RallyConfig, bind: Option<&str>) -> Result<Self, FfiError> {
        if config.frame_us == 0 || config.frame_us > 1_000_000 {
            return Err(FfiError::Invalid(format!(
                "config.frame_us = {}: give the display's frame time, 1 to 1000000 us",
                config.frame_us
            )));
        }
        let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
        let bind = bind.unwrap_or("0.0.0.0:0");
        let mut driver = UdpDriver::bind(bind, endpoint)
            .map_err(|e| FfiError::Io(format!("bind {bind}: {e}")))?;
        // A game reads the socket once a frame: without the kernel's arrival stamps every
        // round trip (the connection's RTT, the latency meter's) would grow by up to a frame.
        driver
            .stamp_arrivals()
            .map_err(|e| FfiError::Io(format!("arrival stamps on {bind}: {e}")))?;
        let session_config = ClientConfig { interpolate: config.interpolate, ..Default::default() };
        let session = ClientSession::new(session_config)
            .map_err(|e| FfiError::Invalid(format!("client config: {e}")))?;
        Ok(Self {
            driver,
            session,
            scene: SceneState::new(),
            roster: Roster::default(),
            phase: Phase::Idle,
            joined: false,
            events: VecDeque::new(),
            events_dropped: 0,
            latency: VecDeque::new(),
            frames: PresentedFrames::new(RALLY_LATENCY_SAMPLES_KEPT),
            frame: Duration::from_micros(config.frame_us.into()),
            failure: None,
            end_told: false,
            arrived_by: Instant::ZERO,
            frame_start: Instant::ZERO,
            changed: true,
        })
    }

    /// The library's clock, microseconds: the time every `now_us` argument is on.
    pub fn now_us(&self) -> u64 {
        self.driver.now().as_nanos() / 1000
    }

    /// The display's frame time the game gave.
    pub(crate) fn frame(&self) -> Duration {
        self.frame
    }

    pub(crate) fn open(&self) -> Result<(), FfiError> {
        match self.phase {
            Phase::Closed => Err(FfiError::Closed),
            _ => Ok(()),
        }
    }

    fn live(&self) -> Result<ConnectionHandle, FfiError> {
        if let (Some(failure), false) = (&self.failure, self.phase == Phase::Closed) {
            return Err(FfiError::Disconnected(format!(
                "the library's I/O thread stopped: {failure}"
            )));
        }
        match self.phase {
            Phase::Closed => Err(FfiError::Closed),
            Phase::Idle => Err(FfiError::NotConnected),
            Phase::Ended(reason, address, heard) => Err(ended(reason, address, heard)),
            Phase::Connecting(connection, _) => Ok(connection),
        }
    }

    /// Starts connecting with `token` (its encoded bytes) to `address`, or to the token's first
    /// server if `None`. The token's expiry is checked against `unix_now` here, since a server
    /// refuses an expired token without answering.
    pub fn connect(
        &mut self,
        token: &[u8],
        address: Option<&str>,
        unix_now: u64,
    ) -> Result<(), FfiError> {
        self.open()?;
        if let Phase::Connecting(..) = self.phase {
            return Err(FfiError::Invalid("already connecting or connected: close first".into()));
        }
        let mut token = ConnectToken::decode(token)
            .map_err(|e| FfiError::Token(format!("not a connect token: {e}")))?;
        if token.expires_at <= unix_now {
            return Err(FfiError::Token(format!(
                "the token expired {} s ago: get a fresh one from the backend",
                unix_now - token.expires_at
            )));
        }
        if let Some(address) = address {
            let address: SocketAddr = address.parse().map_err(|e| {
                FfiError::Invalid(format!("address {address:?} is not ip:port ({e})"))
            })?;
            let Some(at) = token.server_addresses.iter().position(|a| *a == address) else {
                return Err(FfiError::Token(format!(
                    "the token does not name {address} (it names {:?})",
                    token.server_addresses
                )));
            };
            // The endpoint tries the token's servers in order: this one first.
            token.server_addresses.swap(0, at);
        }
        let server = *token
            .server_addresses
            .first()
            .ok_or_else(|| FfiError::Token("the token names no server".into()))?;
        let connection = self
            .driver
            .connect_with_token(token)
            .map_err(|e| FfiError::Token(format!("the endpoint refused the token: {e}")))?;
        self.phase = Phase::Connecting(connection, server);
        self.changed = true;
        Ok(())
    }

    /// One non-blocking turn: every datagram waiting in (each at the time it arrived, so that
    /// round trips measure the network and not the game's frame), timers, the session's events
    /// into the queue, datagrams out.
    pub fn update(&mut self, now_us: u64) -> Result<(), FfiError> {
        let Some((ours, server)) = self.pumping()? else { return Ok(()) };
        let now = Instant::from_nanos(now_us.saturating_mul(1000));
        self.frame_start = now;
        let session = &mut self.session;
        let mut ended = None;
        let (arrived_by, changed) = (&mut self.arrived_by, &mut self.changed);
        self.driver
            .pump_arrivals(|at, _, connection, event| {
                if connection != ours {
                    return;
                }
                (*arrived_by, *changed) = ((*arrived_by).max(at), true);
                if let Event::Disconnected { reason } = event {
                    ended = Some(reason);
                }
                session.handle_event(at, connection, event);
            })
            .map_err(|e| FfiError::Io(format!("socket: {e}")))?;
        self.session.handle_timeout(now);
        self.session.transmit(self.driver.endpoint());
        while let Some(event) = self.session.poll_event() {
            self.scene.handle(&event);
            if let ClientEvent::Joined { client, resumed } = event {
                self.joined = true;
                self.push(Happening::Joined { client, resumed });
            }
            while let Some(event) = self.scene.poll_event() {
                self.roster.note(&event);
                if let Some(happening) = happening(event) {
                    self.push(happening);
                }
            }
        }
        if let Some(reason) = ended {
            self.changed = true;
            self.phase = Phase::Ended(reason, server, self.joined);
            self.push(Happening::Disconnected(reason));
        }
        Ok(())
    }

    /// What `update` would pump: the connection and its server, or `None` before connecting;
    /// the error every call gives once the connection ended (it was queued as an event too).
    pub(crate) fn pumping(&self) -> Result<Option<(ConnectionHandle, SocketAddr)>, FfiError> {
        self.open()?;
        if self.failure.is_some() {
            return self.live().map(|_| None);
        }
        match self.phase {
            Phase::Connecting(connection, server) => Ok(Some((connection, server))),
            Phase::Idle => Ok(None),
            Phase::Ended(..) | Phase::Closed => self.live().map(|_| None),
        }
    }

    /// The game thread's turn with the I/O thread on: no socket work, the errors `update`
    /// gives, but `Ok` for the first turn after the connection ended, as `update`'s own turn
    /// that sees the end returns (the end is an event; the calls after it say so).
    pub(crate) fn game_turn(&mut self) -> Result<(), FfiError> {
        match self.pumping() {
            Err(FfiError::Disconnected(_)) if !std::mem::replace(&mut self.end_told, true) => {
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// One turn of the I/O thread at the clock's time: [`Client::update`] while connecting
    /// or connected, nothing before or after; how long it may wait for the socket before its
    /// next turn (the endpoint's next timer, `wait_max` at most).
    pub(crate) fn io_turn(&mut self, wait_max: Duration) -> Result<Duration, FfiError> {
        let now = self.driver.now();
        if let Ok(Some(_)) = self.pumping() {
            self.update(now.as_nanos() / 1000)?;
        }
        let next = self.driver.endpoint().poll_timeout();
        Ok(next.map_or(wait_max, |at| at.saturating_duration_since(now).min(wait_max)))
    }

    /// Copies what a frame reads into `view`, if it changed since the last call: `false` if
    /// not. `view` is an older copy; its buffers are reused, so a steady room allocates
    /// nothing here.
    pub(crate) fn publish(&mut self, view: &mut View) -> bool {
        if !std::mem::take(&mut self.changed) {
            return false;
        }
        view.interpolator.clone_from(self.session.interpolator());
        let mut tagger = Tagger::over(self.roster.tags(&self.scene));
        let shown = self.session.entity_states();
        let resting = self.session.interpolator().resting(shown);
        view.fill_rows(shown, resting, |state| tagged(&mut tagger, state));
        view.status = self.pumping().map(drop);
        view.live = self.live().map(drop);
        view.arrived_by = self.arrived_by;
        true
    }

    /// Moves the queued events to the game thread's channel, while it holds fewer than
    /// [`RALLY_EVENTS_MAX`] (the rest wait here, and drop past that bound as without it).
    pub(crate) fn hand_events(&mut self, to: &Sender<Happening>, in_flight: &AtomicUsize) {
        while in_flight.load(Ordering::Acquire) < RALLY_EVENTS_MAX {
            let Some(happening) = self.events.pop_front() else { return };
            in_flight.fetch_add(1, Ordering::AcqRel);
            // The game's side only goes away with the client, after this thread stops.
            let _ = to.send(happening);
        }
    }

    /// Does what the game thread handed over.
    pub(crate) fn apply(&mut self, command: Command) -> Result<(), FfiError> {
        match command {
            Command::Input(sampled_us, input) => {
                let now = self.driver.now();
                self.send_input_at(instant(sampled_us), Some(now), input).map(drop)
            }
            Command::Present(now_us, arrived_by, started) => {
                self.open()?;
                let now = instant(now_us);
                self.session.present_through(now, arrived_by);
                self.presented(now, started);
                Ok(())
            }
        }
    }

    /// A handle on the socket for the I/O thread to wait on while another thread holds the
    /// client.
    pub(crate) fn socket(&self) -> Result<std::net::UdpSocket, FfiError> {
        let socket = self.driver.socket().try_clone();
        socket.map_err(|e| FfiError::Io(format!("a handle on the socket for the I/O thread: {e}")))
    }

    /// Writes what the session queued (an input, a message) to the socket now, on the
    /// calling thread, without reading it.
    pub(crate) fn send_now(&mut self) -> Result<(), FfiError> {
        self.driver.transmit().map(drop).map_err(|e| FfiError::Io(format!("socket: {e}")))
    }

    /// Ends the connection on the I/O thread's failure: every later call says so, and the game
    /// learns it as a `Disconnected` event carrying `why`.
    pub(crate) fn fail(&mut self, why: String) {
        self.changed = true;
        self.failure = Some(why.clone());
        self.push(Happening::Failed(why));
    }

    /// The library's clock, for reading without the client (another thread may hold it).
    pub(crate) fn clock(&self) -> rally_driver::Clock {
        self.driver.clock()
    }

    fn push(&mut self, happening: Happening) {
        // The end always queues, so that a game polling late still learns it.
        let last = matches!(happening, Happening::Disconnected(_) | Happening::Failed(_));
        if self.events.len() >= RALLY_EVENTS_MAX && !last {
            self.events_dropped += 1;
            return;
        }
        self.events.push_back(happening);
    }

    /// The next event, without taking it.
    pub fn peek_event(&self) -> Result<Option<&Happening>, FfiError> {
        self.open()?;
        Ok(self.events.front())
    }

    /// Hands the next event to `body`, and takes it if `body` says so.
    pub(crate) fn poll_event(
        &mut self,
        body: impl FnOnce(Option<&Happening>) -> Result<bool, FfiError>,
    ) -> Result<(), FfiError> {
        if body(self.peek_event()?)? {
            self.take_event();
        }
        Ok(())
    }

    /// Drops the event `peek_event` gave.
    pub fn take_event(&mut self) {
        self.events.pop_front();
    }

    /// Sends an input sampled at `now_us`, at once.
    pub fn send_input(&mut self, now_us: u64, input: Input) -> Result<u32, FfiError> {
        self.send_input_at(instant(now_us), None, input)
    }

    /// Sends an input sampled at `sampled`, on this thread (`handed_at` `None`) or handed
    /// over by the game thread and sent at `handed_at`.
    fn send_input_at(
        &mut self,
        sampled: Instant,
        handed_at: Option<Instant>,
        input: Input,
    ) -> Result<u32, FfiError> {
        self.live()?;
        check_input(&input)?;
        let seq = match handed_at {
            None => self.session.send_input(sampled, input),
            Some(now) => self.session.send_input_handed(sampled, now, input),
        };
        self.session.transmit(self.driver.endpoint());
        Ok(seq)
    }

    /// Tells the latency meter a frame showing the newest state was presented at `now_us`.
    pub fn present(&mut self, now_us: u64) -> Result<(), FfiError> {
        self.open()?;
        self.session.present(instant(now_us));
        self.presented(instant(now_us), self.frame_start);
        Ok(())
    }

    /// Keeps a frame started at `started` and presented at `now`, and the samples it closed,
    /// to judge them on the frames the game really presented.
    fn presented(&mut self, now: Instant, started: Instant) {
        self.frames.presented_from(now, started);
        let samples = self.session.latency_mut().take_samples();
        self.latency.extend(samples.into_iter().map(|sample| (now, sample)));
        while self.latency.len() > RALLY_LATENCY_SAMPLES_KEPT {
            self.latency.pop_front();
        }
    }

    /// How many entities a read gives.
    pub fn entity_count(&self) -> Result<usize, FfiError> {
        self.open()?;
        Ok(self.session.entity_count())
    }

    /// The newest state of every entity, or interpolated at `at_us`, each handed to `write`
    /// with its index (`entity_count` of them), so that a read goes straight into the
    /// caller's array: no copy, no allocation.
    pub fn entities(
        &mut self,
        at_us: Option<u64>,
        mut write: impl FnMut(usize, RallyEntity),
    ) -> Result<(), FfiError> {
        self.open()?;
        let mut tagger = self.roster.tagger(&self.scene);
        let mut put = |(i, state)| write(i, tagged(&mut tagger, state));
        match at_us.map(instant) {
            Some(at) => self.session.interpolated_entities(at).enumerate().for_each(&mut put),
            None => self.session.entities().enumerate().for_each(&mut put),
        }
        Ok(())
    }

    /// The room's class names: `RallyEntity::class_index` indexes them.
    pub fn class_names(&mut self) -> Result<&[String], FfiError> {
        self.open()?;
        Ok(self.roster.names(&self.scene))
    }

    /// Sends a message to the scene room.
    fn send(&mut self, message: SceneMessage) -> Result<(), FfiError> {
        self.live()?;
        if !self.joined {
            return Err(FfiError::NotConnected);
        }
        self.session
            .send(Delivery::Reliable, &message)
            .map_err(|e| FfiError::Refused(format!("the session refused the message: {e}")))?;
        self.session.transmit(self.driver.endpoint());
        Ok(())
    }

    /// Sets (or removes) a key in the room's or this player's scope.
    pub fn write(&mut self, mine: bool, key: &str, value: Option<Vec<u8>>) -> Result<(), FfiError> {
        let scope = if mine { WriteScope::Mine } else { WriteScope::Room };
        self.send(SceneState::write(scope, key, value))
    }

    /// Relays bytes to everyone, the others, or one player.
    pub fn relay(
        &mut self,
        to: RelayTarget,
        reliable: bool,
        bytes: Vec<u8>,
    ) -> Result<(), FfiError> {
        self.send(SceneState::relay(to, reliable, bytes))
    }

    /// The latency meter's figures over the samples kept.
    pub fn latency(&mut self) -> Result<RallyLatency, FfiError> {
        self.open()?;
        let mut totals: Vec<Duration> = self.latency.iter().map(|(_, s)| s.total).collect();
        totals.sort_unstable();
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let mut out = RallyLatency { samples: self.session.latency().count, ..Default::default() };
        if !totals.is_empty() {
            let sum: Duration = totals.iter().sum();
            out.mean_us = us(sum / totals.len() as u32);
            out.p99_us = us(totals[(totals.len() * 99).div_ceil(100) - 1]);
        }
        let rtt = Duration::from_micros(self.stats().map(|s| s.rtt_us).unwrap_or(0));
        let tick_rate = self.session.tick_rate().unwrap_or(0);
        if tick_rate > 0 && !self.latency.is_empty() {
            let tick = Duration::from_secs(1) / tick_rate;
            // Each sample against the model of its own round trip (as measured by the session:
            // sent to the update that took the answer, less the room's hold), as the engine's
            // latency tests do; the connection's smoothed RTT stands in where it is missing.
            let round_trip = |s: &LatencySample| s.round_trip.unwrap_or(rtt);
            // Judged on the frames the game presented, not on a steady frame: a frame that
            // starts late (a busy machine) lengthens one sample and shortens the next, and
            // the pipeline lost nothing. A millisecond of slack, as the engine's tests allow.
            let slack = Duration::from_millis(1);
            let (mut judged, mut at_best, mut within, mut late) = (0usize, 0, 0, 0);
            for (presented, sample) in &self.latency {
                let found = self.frames.judge(*presented, sample, round_trip(sample), tick, slack);
                let verdict = found.map(|(verdict, _)| verdict);
                judged += usize::from(verdict.is_some());
                at_best += usize::from(verdict.is_some_and(Verdict::at_best));
                within += usize::from(verdict.is_some_and(Verdict::within_model));
                late += usize::from(verdict == Some(Verdict::Late));
            }
            let share = |n: usize| if judged == 0 { 0.0 } else { n as f64 / judged as f64 };
            out.within_model = share(within);
            (out.at_best, out.above_model) = (share(at_best), share(late));
            let newest = self
                .latency
                .back()
                .map(|(_, s)| LatencyModel::new(round_trip(s), self.frame, tick));
            out.best_us = newest.map_or(0, |m| us(m.best));
            out.worst_us = newest.map_or(0, |m| us(m.worst));
        }
        Ok(out)
    }

    /// The connection's figures and the session's counters.
    pub fn stats(&mut self) -> Result<RallyConnectionStats, FfiError> {
        self.open()?;
        let mut out = RallyConnectionStats {
            client_id: self.scene.client().map_or(u64::MAX, u64::from),
            joined: self.joined
                && self.failure.is_none()
                && matches!(self.phase, Phase::Connecting(..)),
            snapshots: self.session.stats().snapshots,
            events_dropped: self.events_dropped + self.scene.events_dropped(),
            ..Default::default()
        };
        if let Phase::Connecting(connection, _) = self.phase {
            let _ = connection;
            if let Some(stats) = self.session.connection_stats(self.driver.endpoint()) {
                out.rtt_us = u64::try_from(stats.rtt.as_micros()).unwrap_or(u64::MAX);
                out.jitter_us = u64::try_from(stats.rtt_variance.as_micros()).unwrap_or(u64::MAX);
                out.loss = stats.loss;
                out.packets_sent = stats.packets_sent;
                out.packets_received = stats.packets_received;
                out.packets_lost = stats.packets_lost;
            }
        }
        Ok(out)
    }

    /// Says goodbye (if connected) and refuses every later call.
    pub fn close(&mut self) -> Result<(), FfiError> {
        self.open()?;
        if let Phase::Connecting(connection, _) = self.phase {
            self.driver.endpoint().disconnect(connection, DisconnectReason::Closed);
            // One turn sends the goodbye now rather than never.
            let _ = self.driver.pump(|_, _, _| {});
        }
        self.phase = Phase::Closed;
        Ok(())
    }
}

/// Refuses an input too long to send.
pub(crate) fn check_input(input: &Input) -> Result<(), FfiError> {
    match input {
        Input::Raw(bytes) if bytes.len() > RALLY_INPUT_BYTES_MAX => Err(FfiError::Invalid(
            format!("{} input bytes: at most {RALLY_INPUT_BYTES_MAX}", bytes.len()),
        )),
        _ => Ok(()),
    }
}

/// The error for a call on a connection that ended.
fn ended(reason: DisconnectReason, address: SocketAddr, heard: bool) -> FfiError {
    let what = match (reason, heard) {
        (DisconnectReason::TimedOut, false) => format!(
            "the server at {address} never answered (timed out): is it running, and is the \
             token for it, unexpired and sealed with its key?"
        ),
        (reason, _) => format!("disconnected from {address}: {reason:?}"),
    };
    FfiError::Disconnected(what)
}

fn happening(event: SceneEvent) -> Option<Happening> {
    Some(match event {
        SceneEvent::Reset { .. } => return None,
        SceneEvent::PlayerJoined(player) => Happening::PlayerJoined(player),
        SceneEvent::PlayerLeft(player) => Happening::PlayerLeft(player),
        SceneEvent::Relayed { from, bytes } => Happening::Relayed { from, bytes },
        SceneEvent::Changed(change) => Happening::Changed {
            player: match change.scope {
                rally_scene::Scope::Room => None,
                rally_scene::Scope::Player(player) => Some(player),
            },
            key: change.key,
            value: change.value,
        },
    })
}

pub(crate) fn instant(us: u64) -> Instant {
    Instant::from_nanos(us.saturating_mul(1000))
}

fn tagged(tagger: &mut Tagger<'_>, state: EntityState) -> RallyEntity {
    let mut shown = entity(state);
    tagger.tag(&mut shown);
    shown
}

pub(crate) fn entity(e: EntityState) -> RallyEntity {
    RallyEntity {
        id: e.id,
        position: e.position.into(),
        rotation: e.rotation.into(),
        linear_velocity: e.linear_velocity.into(),
        angular_velocity: e.angular_velocity.into(),
        // The roster fills these.
        class_index: RALLY_NONE,
        holder: RALLY_NONE,
        hand: RALLY_HAND_NONE,
    }
}
