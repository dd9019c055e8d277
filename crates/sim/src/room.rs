//! A room and its clients' sessions over a [`Net`]: the engine end to end in virtual time.

use crate::{Net, VirtualClock};
use rally_engine::{
    connection_config, ClientConfig, ClientEvent, ClientSession, Room, RoomEvent, Simulation,
};
use rally_netem::LinkConfig;
use rally_proto::{DisconnectReason, EndpointConfig, Event, Instant};
use std::time::Duration;

/// Why a default client config with the room's snapshot settings is valid: the room validated
/// them.
const VALID: &str = "the room's snapshot settings passed its validation";

/// A client's session type for simulation `S`.
pub type Session<S> = ClientSession<<S as Simulation>::Input, <S as Simulation>::Message>;

/// A room on the server of a [`Net`], one [`ClientSession`] per client, and the glue a host and
/// a game client would have: events routed on arrival, the room ticked on its tick rate.
pub struct RoomNet<S: Simulation> {
    /// The endpoints and links.
    pub net: Net,
    /// The room.
    pub room: Room<S>,
    /// Client `i`'s session.
    pub sessions: Vec<Session<S>>,
    /// Everything the room reported, in order.
    pub room_events: Vec<RoomEvent<S::Message>>,
    /// Everything each session reported, in order.
    pub client_events: Vec<Vec<ClientEvent<S::Message>>>,
    /// Connection ends each client's endpoint reported.
    pub client_disconnects: Vec<Vec<DisconnectReason>>,
    seen_server: usize,
    seen_clients: Vec<usize>,
    next_tick: Instant,
    /// Time between ticks: the room's dt, or a drifting clock's version of it.
    tick_period: Duration,
}

impl<S: Simulation> std::fmt::Debug for RoomNet<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomNet").field("room", &self.room).field("now", &self.net.now).finish()
    }
}

impl<S: Simulation> RoomNet<S> {
    /// `clients` clients (not yet connected) with `link` both ways, all randomness from `seed`.
    pub fn new(room: Room<S>, clients: usize, link: LinkConfig, seed: u64) -> Self {
        let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
        let tick_period = room.config().dt();
        let client_config =
            ClientConfig { snapshot: room.config().snapshot, ..ClientConfig::default() };
        Self {
            // Rooms run as deployed: connect tokens and sealed packets.
            net: Net::secure(endpoint, link, clients, seed),
            room,
            sessions: (0..clients)
                .map(|_| ClientSession::new(client_config.clone()).expect(VALID))
                .collect(),
            room_events: Vec::new(),
            client_events: (0..clients).map(|_| Vec::new()).collect(),
            client_disconnects: vec![Vec::new(); clients],
            seen_server: 0,
            seen_clients: vec![0; clients],
            next_tick: Instant::ZERO,
            tick_period,
        }
    }

    /// Client `i` opens a connection; its session says hello when it completes. After a
    /// disconnect, it does so from a new socket ([`Net::rebind`]).
    pub fn connect(&mut self, i: usize) {
        if self.net.clients[i].handle.is_some() {
            self.net.rebind(i);
            self.sessions[i].disconnected();
        }
        self.net.connect_client(i);
        self.net.drive();
    }

    /// Client `i` closes its connection.
    pub fn disconnect(&mut self, i: usize) {
        let client = &mut self.net.clients[i];
        if let Some(handle) = client.handle {
            client.endpoint.disconnect(handle, DisconnectReason::Closed);
        }
        self.net.drive();
    }

    /// Client `i` samples `input`: it goes out at once.
    pub fn input(&mut self, i: usize, input: S::Input) -> u32 {
        let seq = self.sessions[i].send_input(self.net.now, input);
        self.sessions[i].transmit(&mut self.net.clients[i].endpoint);
        self.net.drive();
        seq
    }

    /// Hands whatever the room and the sessions queued (RPCs sent between ticks) to the
    /// endpoints.
    pub fn flush(&mut self) {
        self.room.transmit(&mut self.net.server);
        for (session, client) in self.sessions.iter_mut().zip(&mut self.net.clients) {
            session.transmit(&mut client.endpoint);
        }
        self.net.drive();
    }

    /// Runs until `deadline`: every datagram is routed the moment it arrives and the room
    /// ticks on its tick rate.
    pub fn run_until(&mut self, deadline: Instant) {
        while self.net.now < deadline {
            let target = self.next_tick.min(deadline);
            while self.net.step_until(target) {
                self.route();
            }
            if self.net.now < target {
                // Nothing was scheduled: time passes anyway.
                self.net.set_now(target);
                self.net.drive();
            }
            self.route();
            if self.net.now >= self.next_tick {
                let now = self.net.now;
                self.room.tick(now, &mut self.net.server);
                self.next_tick += self.tick_period;
                self.net.drive();
                self.route();
            }
        }
    }

    /// Ticks the room at `first`, then every `period` (a server clock with its own phase and
    /// drift, as a real host's would be against a client's).
    pub fn set_tick_schedule(&mut self, first: Instant, period: Duration) {
        self.next_tick = first;
        self.tick_period = period;
    }

    /// Runs for `duration` more.
    pub fn run_for(&mut self, duration: Duration) {
        let deadline = self.net.now + duration;
        self.run_until(deadline);
    }

    /// Routes every endpoint event to the room or a session, collects their events, and
    /// transmits what they queued in answer.
    fn route(&mut self) {
        let now = self.net.now;
        while self.seen_server < self.net.server_events.len() {
            let (handle, event) = self.net.server_events[self.seen_server].clone();
            self.seen_server += 1;
            match event {
                Event::Connected => self.room.accept(handle),
                Event::Message { channel, payload } => {
                    self.room.receive(now, handle, channel, &payload)
                }
                Event::Disconnected { reason } => self.room.disconnected(now, handle, reason),
            }
        }
        while let Some(event) = self.room.poll_event() {
            self.room_events.push(event);
        }
        for i in 0..self.sessions.len() {
            self.route_client(i, now);
        }
        self.flush();
    }

    fn route_client(&mut self, i: usize, now: Instant) {
        let session = &mut self.sessions[i];
        let client = &mut self.net.clients[i];
        while self.seen_clients[i] < client.events.len() {
            let (handle, event) = client.events[self.seen_clients[i]].clone();
            self.seen_clients[i] += 1;
            match event {
                Event::Connected => session.connected(handle),
                Event::Message { channel, payload } => session.receive(now, channel, &payload),
                Event::Disconnected { reason } => {
                    session.disconnected();
                    self.client_disconnects[i].push(reason);
                }
            }
        }
        session.handle_timeout(now);
        while let Some(event) = session.poll_event() {
            self.client_events[i].push(event);
        }
    }
}
