//! An endpoint: one UDP socket's protocol state, serving any number of connections.
//!
//! ## The handshake
//!
//! ```text
//! client                                   server
//!   ConnectRequest(nonce), padded  ----->   keeps nothing; answers with
//!                                  <-----   Challenge(nonce, cookie)   (smaller than the request)
//!   ChallengeResponse(nonce, cookie) --->   checks the cookie's tag and expiry, creates the
//!                                  <-----   connection and sends its first data packet
//!   connected on that first data packet
//! ```
//!
//! The cookie is `expiry || SipHash-2-4-128(secret, address || nonce || expiry)`: the server
//! can check it without remembering the request, so strangers cost it no memory, and the
//! padding makes sure it never sends more bytes than it received. Connect tokens and
//! encryption (the security work) replace the nonce with a sealed token and add a key
//! exchange in the same three messages.

use crate::config::ConnectionConfig;
use crate::connection::{Connection, Event, SendError};
use crate::packet::{Cookie, DisconnectReason, Packet};
use crate::time::Instant;
use siphasher::sip128::{Hasher128, SipHasher24};
use std::collections::{HashMap, VecDeque};
use std::hash::Hasher;
use std::net::SocketAddr;
use std::time::Duration;

/// Identifies one connection (or connection attempt) of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub usize);

/// A datagram [`Endpoint::poll_transmit`] wrote: send `len` bytes of the buffer to
/// `destination`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub destination: SocketAddr,
    /// Bytes written at the start of the buffer.
    pub len: usize,
}

/// An endpoint's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// Settings of every connection.
    pub connection: ConnectionConfig,
    /// Connections at most; further requests are answered `ServerFull`.
    pub connections_max: usize,
    /// How long a challenge cookie stays valid.
    pub cookie_lifetime: Duration,
    /// A client resends its handshake packet this often until answered.
    pub handshake_resend_interval: Duration,
    /// A client gives up connecting after this long.
    pub handshake_timeout: Duration,
    /// Handshake replies waiting to be sent at most; more are dropped and counted.
    pub replies_max: usize,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            connection: ConnectionConfig::default(),
            connections_max: 4096,
            cookie_lifetime: Duration::from_secs(10),
            handshake_resend_interval: Duration::from_millis(100),
            handshake_timeout: Duration::from_secs(5),
            replies_max: 1024,
        }
    }
}

/// Datagrams an endpoint dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams that did not decode.
    pub malformed: u64,
    /// Data or disconnect packets from addresses with no connection.
    pub unknown_peer: u64,
    /// Challenge responses with a bad or expired cookie.
    pub bad_cookie: u64,
    /// Handshake packets that arrived where they make no sense (a challenge at a server...).
    pub unexpected: u64,
    /// Replies dropped because `replies_max` were already waiting.
    pub replies_dropped: u64,
    /// Connection requests refused because `connections_max` connections exist.
    pub refused_full: u64,
}

/// A client's connection attempt.
#[derive(Debug)]
struct Attempt {
    server: SocketAddr,
    nonce: u64,
    cookie: Option<Cookie>,
    started: Instant,
    last_sent: Option<Instant>,
}

#[derive(Debug)]
enum Slot {
    Free,
    Connecting(Attempt),
    Open { peer: SocketAddr, connection: Box<Connection> },
}

/// The protocol state of one socket. Sans-IO: feed it datagrams and time, drain what it wants
/// sent and what it has to tell.
///
/// **After every input (`handle_datagram`, `handle_timeout`, `connect`, `send`,
/// `disconnect`), drain `poll_transmit` and `poll_event` until both return `None`, then wait
/// for a datagram or until `poll_timeout`.**
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    key: [u8; 16],
    nonces: u64,
    slots: Vec<Slot>,
    by_peer: HashMap<SocketAddr, usize>,
    replies: VecDeque<(SocketAddr, Packet<'static>)>,
    events: VecDeque<(ConnectionHandle, Event)>,
    /// Where `poll_transmit` resumes, so no connection starves the others.
    cursor: usize,
    stats: EndpointStats,
}

impl Endpoint {
    /// An endpoint whose secret and nonces derive from `seed`. Servers in production pass a
    /// seed from the OS's randomness (the driver does); tests pass a constant.
    ///
    /// # Panics
    ///
    /// If `config.connection` fails [`ConnectionConfig::validate`]: check a configuration that
    /// comes from a file or a user before building an endpoint from it.
    pub fn new(config: EndpointConfig, seed: u64) -> Self {
        if let Err(e) = config.connection.validate() {
            panic!("invalid connection configuration: {e}");
        }
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..].copy_from_slice(&(!seed).rotate_left(17).to_le_bytes());
        Self {
            config,
            key,
            nonces: seed,
            slots: Vec::new(),
            by_peer: HashMap::new(),
            replies: VecDeque::new(),
            events: VecDeque::new(),
            cursor: 0,
            stats: EndpointStats::default(),
        }
    }

    /// Datagrams dropped so far, by reason.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// The connection behind `handle`, once established.
    pub fn connection(&self, handle: ConnectionHandle) -> Option<&Connection> {
        match self.slots.get(handle.0) {
            Some(Slot::Open { connection, .. }) => Some(connection),
            _ => None,
        }
    }

    /// The peer address of a connection or connection attempt.
    pub fn peer(&self, handle: ConnectionHandle) -> Option<SocketAddr> {
        match self.slots.get(handle.0)? {
            Slot::Open { peer, .. } => Some(*peer),
            Slot::Connecting(attempt) => Some(attempt.server),
            Slot::Free => None,
        }
    }

    /// Starts connecting to `server`; `Event::Connected` follows on success.
    pub fn connect(&mut self, now: Instant, server: SocketAddr) -> ConnectionHandle {
        let nonce = self.next_nonce();
        let attempt = Attempt { server, nonce, cookie: None, started: now, last_sent: None };
        let index = self.allocate(Slot::Connecting(attempt));
        self.by_peer.insert(server, index);
        ConnectionHandle(index)
    }

    /// Queues a message on an established connection.
    pub fn send(
        &mut self,
        handle: ConnectionHandle,
        channel: u8,
        payload: &[u8],
    ) -> Result<(), SendError> {
        match self.slots.get_mut(handle.0) {
            Some(Slot::Open { connection, .. }) => connection.send(channel, payload),
            _ => Err(SendError::Closed),
        }
    }

    /// Closes a connection (or abandons an attempt), telling the peer why.
    pub fn disconnect(&mut self, handle: ConnectionHandle, reason: DisconnectReason) {
        match self.slots.get_mut(handle.0) {
            Some(Slot::Open { connection, .. }) => connection.disconnect(reason),
            Some(Slot::Connecting(_)) => self.close_attempt(handle.0, reason),
            _ => {}
        }
    }

    fn next_nonce(&mut self) -> u64 {
        self.nonces = self.nonces.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write_u64(self.nonces);
        h.finish()
    }

    fn allocate(&mut self, slot: Slot) -> usize {
        match self.slots.iter().position(|s| matches!(s, Slot::Free)) {
            Some(index) => {
                self.slots[index] = slot;
                index
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    fn cookie_tag(&self, peer: SocketAddr, nonce: u64, expiry_ms: u64) -> [u8; 16] {
        let mut h = SipHasher24::new_with_key(&self.key);
        match peer {
            SocketAddr::V4(a) => h.write(&a.ip().octets()),
            SocketAddr::V6(a) => h.write(&a.ip().octets()),
        }
        h.write_u16(peer.port());
        h.write_u64(nonce);
        h.write_u64(expiry_ms);
        h.finish128().as_bytes()
    }

    /// Takes one datagram from `from`. Anything malformed or unexpected is counted and
    /// dropped; a connection whose peer breaks the protocol is closed with `PeerMisbehaved`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        let packet = match Packet::decode(bytes) {
            Ok(packet) => packet,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let slot = self.by_peer.get(&from).copied();
        match packet {
            Packet::Data { header, frames } => match slot.map(|i| &mut self.slots[i]) {
                Some(Slot::Open { connection, .. }) => {
                    // A protocol violation closes the connection inside; nothing more to do.
                    let _ = connection.handle_data(now, header, frames, bytes.len());
                }
                Some(Slot::Connecting(attempt)) if attempt.cookie.is_some() => {
                    let index = slot.expect("matched a slot");
                    self.open(index, from, now);
                    self.handle_datagram(now, from, bytes);
                }
                _ => self.stats.unknown_peer += 1,
            },
            Packet::Disconnect { reason } => match slot {
                Some(index) => match &mut self.slots[index] {
                    Slot::Open { connection, .. } => connection.handle_disconnect(reason),
                    _ => self.close_attempt(index, reason),
                },
                None => self.stats.unknown_peer += 1,
            },
            Packet::ConnectRequest { nonce } => self.handle_request(now, from, nonce, slot),
            Packet::Challenge { nonce, cookie } => match slot.map(|i| &mut self.slots[i]) {
                Some(Slot::Connecting(attempt)) if attempt.nonce == nonce => {
                    attempt.cookie = Some(cookie);
                    attempt.last_sent = None;
                }
                _ => self.stats.unexpected += 1,
            },
            Packet::ChallengeResponse { nonce, cookie } => {
                self.handle_response(now, from, nonce, cookie, slot)
            }
        }
    }

    fn handle_request(&mut self, now: Instant, from: SocketAddr, nonce: u64, slot: Option<usize>) {
        if slot.is_some() {
            // Already connected or connecting from there: a late duplicate.
            self.stats.unexpected += 1;
            return;
        }
        let expiry_ms = (now + self.config.cookie_lifetime).as_nanos() / 1_000_000;
        let tag = self.cookie_tag(from, nonce, expiry_ms);
        self.reply(from, Packet::Challenge { nonce, cookie: Cookie { expiry_ms, tag } });
    }

    fn handle_response(
        &mut self,
        now: Instant,
        from: SocketAddr,
        nonce: u64,
        cookie: Cookie,
        slot: Option<usize>,
    ) {
        if let Some(index) = slot {
            // Already open: the client has not seen our first data packet yet; send another.
            if let Slot::Open { connection, .. } = &mut self.slots[index] {
                connection.prompt();
            }
            return;
        }
        let now_ms = now.as_nanos() / 1_000_000;
        let valid = cookie.expiry_ms >= now_ms
            && cookie.tag == self.cookie_tag(from, nonce, cookie.expiry_ms);
        if !valid {
            self.stats.bad_cookie += 1;
            return;
        }
        let open = self.slots.iter().filter(|s| matches!(s, Slot::Open { .. })).count();
        if open >= self.config.connections_max {
            self.stats.refused_full += 1;
            self.reply(from, Packet::Disconnect { reason: DisconnectReason::ServerFull });
            return;
        }
        let index = self.allocate(Slot::Free);
        self.by_peer.insert(from, index);
        self.open(index, from, now);
        if let Slot::Open { connection, .. } = &mut self.slots[index] {
            connection.prompt();
        }
    }

    fn reply(&mut self, to: SocketAddr, packet: Packet<'static>) {
        if self.replies.len() >= self.config.replies_max {
            self.stats.replies_dropped += 1;
            return;
        }
        self.replies.push_back((to, packet));
    }

    fn open(&mut self, index: usize, peer: SocketAddr, now: Instant) {
        let connection = Box::new(Connection::new(self.config.connection.clone(), now));
        self.slots[index] = Slot::Open { peer, connection };
    }

    fn close_attempt(&mut self, index: usize, reason: DisconnectReason) {
        if let Slot::Connecting(attempt) = std::mem::replace(&mut self.slots[index], Slot::Free) {
            self.by_peer.remove(&attempt.server);
            self.events.push_back((ConnectionHandle(index), Event::Disconnected { reason }));
        }
    }

    /// Advances timers: handshake timeouts and each connection's idle timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        for index in 0..self.slots.len() {
            match &mut self.slots[index] {
                Slot::Connecting(a) if now - a.started >= self.config.handshake_timeout => {
                    self.close_attempt(index, DisconnectReason::TimedOut);
                }
                Slot::Open { connection, .. } => connection.handle_timeout(now),
                _ => {}
            }
        }
    }

    /// The next event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        if let Some(event) = self.events.pop_front() {
            return Some(event);
        }
        // One pass gathers every connection's events, so that draining n events costs one pass
        // over the connections, not n.
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Slot::Open { connection, .. } = slot {
                while let Some(event) = connection.poll_event() {
                    self.events.push_back((ConnectionHandle(index), event));
                }
            }
        }
        let event = self.events.pop_front();
        if event.is_none() {
            // Everything has been told: closed connections can go.
            self.forget_drained();
        }
        event
    }

    fn forget_drained(&mut self) {
        for slot in &mut self.slots {
            if let Slot::Open { peer, connection } = slot {
                if connection.is_drained() {
                    self.by_peer.remove(peer);
                    *slot = Slot::Free;
                }
            }
        }
    }

    /// The earliest time a timer needs [`Endpoint::handle_timeout`] or [`Endpoint::poll_transmit`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for slot in &self.slots {
            match slot {
                Slot::Connecting(a) => {
                    consider(a.started + self.config.handshake_timeout);
                    consider(
                        a.last_sent
                            .map_or(a.started, |t| t + self.config.handshake_resend_interval),
                    );
                }
                Slot::Open { connection, .. } => {
                    if let Some(t) = connection.poll_timeout() {
                        consider(t);
                    }
                }
                Slot::Free => {}
            }
        }
        next
    }

    /// Writes the next datagram into `buf` and says where it goes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some((destination, packet)) = self.replies.pop_front() {
            let len = packet.encode(buf).ok()?;
            return Some(Transmit { destination, len });
        }
        let count = self.slots.len();
        for step in 0..count {
            let index = (self.cursor + step) % count;
            if let Some(transmit) = self.transmit_slot(index, now, buf) {
                self.cursor = (index + 1) % count;
                return Some(transmit);
            }
        }
        None
    }

    fn transmit_slot(&mut self, index: usize, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let resend = self.config.handshake_resend_interval;
        match &mut self.slots[index] {
            Slot::Connecting(a) if a.last_sent.is_none_or(|t| now >= t + resend) => {
                a.last_sent = Some(now);
                let packet = match a.cookie {
                    None => Packet::ConnectRequest { nonce: a.nonce },
                    Some(cookie) => Packet::ChallengeResponse { nonce: a.nonce, cookie },
                };
                let len = packet.encode(buf).ok()?;
                Some(Transmit { destination: a.server, len })
            }
            Slot::Open { peer, connection } => {
                let len = connection.poll_transmit(now, buf)?;
                Some(Transmit { destination: *peer, len })
            }
            _ => None,
        }
    }
}
