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
//! padding makes sure it never sends more bytes than it received.
//!
//! ## Connect tokens and encryption
//!
//! A server configured with [`Security::Tokens`] lets in only clients holding a connect token
//! its backend issued ([`crate::token`]): the request and the response each carry the token's
//! sealed part, which the server opens (expiry, authenticity, that it names this server)
//! before answering, so the handshake stays stateless; a token already used from another
//! address is refused. Every packet of the connection is then sealed with the token's two keys
//! (see `crypto.rs`), disconnects included, so that nobody else can read, forge, replay or
//! close it. [`Security::DangerPlaintext`] skips all of it, for debugging and for testing the
//! protocol's other parts only: anyone can connect, read and close.

use crate::config::{ConfigError, ConnectionConfig};
use crate::connection::{Connection, Event, SendError};
use crate::crypto::{OpenError, PacketKeys};
use crate::limit::{Rate, RateLimiter, Verdict};
use crate::observe::{Observer, Stage, StageObserver};
use crate::packet::{Cookie, DisconnectReason, Packet, SealedToken};
use crate::schedule::Schedule;
use crate::time::Instant;
use crate::token::{ConnectToken, Grant, TokenError, TokenKey};
use siphasher::sip128::{Hasher128, SipHasher24};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
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
    /// Who may connect, and whether packets are sealed.
    pub security: Security,
    /// Datagrams one address (IP and port) without a connection may send, checked before
    /// decoding.
    pub packet_rate: Rate,
    /// Handshake packets one IP may send (requests and responses), checked after the packet
    /// limit: a source of many connection attempts costs a server a hash lookup each.
    pub handshake_rate: Rate,
    /// Sources each rate limit tracks at most; past that, packets from new sources are dropped
    /// until old ones go quiet.
    pub rate_sources_max: usize,
}

impl EndpointConfig {
    /// Checks every limit: the connection's ([`ConnectionConfig::validate`]) and the
    /// endpoint's own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use crate::config::{check_count, check_duration, check_number};
        self.connection.validate()?;
        // Slots are indexed by `ConnectionHandle`; a million is past any one socket's load.
        check_count("connections_max", self.connections_max, 1, 1 << 20)?;
        check_count("replies_max", self.replies_max, 1, 1 << 20)?;
        check_count("rate_sources_max", self.rate_sources_max, 1, 1 << 24)?;
        let (ms, hour) = (Duration::from_millis(1), Duration::from_secs(3600));
        check_duration("cookie_lifetime", self.cookie_lifetime, ms, hour)?;
        check_duration("handshake_timeout", self.handshake_timeout, ms, hour)?;
        let timeout = self.handshake_timeout;
        check_duration("handshake_resend_interval", self.handshake_resend_interval, ms, timeout)?;
        // A bucket must hold at least one packet, and refill at a finite, positive pace.
        let (packet, handshake) = (self.packet_rate, self.handshake_rate);
        check_number("packet_rate.per_second", packet.per_second, f64::MIN_POSITIVE, 1e9)?;
        check_number("packet_rate.burst", packet.burst, 1.0, 1e9)?;
        check_number("handshake_rate.per_second", handshake.per_second, f64::MIN_POSITIVE, 1e9)?;
        check_number("handshake_rate.burst", handshake.burst, 1.0, 1e9)?;
        Ok(())
    }
}

/// Who may connect to an endpoint, and whether its packets are sealed. Encryption is on by
/// default: an endpoint serves only clients with connect tokens, and a server refuses
/// everyone until it is given its key with [`Security::Tokens`].
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Security {
    /// The default: connect tokens required, and no key yet. A server refuses every request
    /// (counted as `tokens_refused.missing`); a client connects with
    /// [`Endpoint::connect_with_token`] whatever its own setting.
    #[default]
    NoKey,
    /// **Danger**: no tokens and no encryption: anyone can connect, read every packet and close
    /// any connection. For debugging and for tests of the protocol's other parts only.
    DangerPlaintext,
    /// A server that lets in only holders of connect tokens sealed with `key` for
    /// `protocol_id` naming `address`, and seals every packet. Clients connect to it with
    /// [`Endpoint::connect_with_token`].
    Tokens {
        /// The key shared with the backend that issues tokens.
        key: TokenKey,
        /// The game's protocol id.
        protocol_id: u64,
        /// This server's address as tokens name it.
        address: SocketAddr,
        /// Unix seconds at [`Instant::ZERO`] of this endpoint's clock, to check expiry.
        unix_at_zero: u64,
    },
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
            security: Security::default(),
            // A game client sends a few hundred packets a second at most.
            packet_rate: Rate { per_second: 4_000.0, burst: 8_000.0 },
            // A client retries its handshake every 100 ms; twenty clients behind one NAT fit.
            handshake_rate: Rate { per_second: 200.0, burst: 400.0 },
            rate_sources_max: 65_536,
        }
    }
}

/// Datagrams an endpoint dropped, by reason, and the handshakes it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Connection requests from addresses with no connection or attempt (a server's
    /// handshakes begun, before their token is checked).
    pub handshakes_started: u64,
    /// Connections a server opened (handshakes completed).
    pub handshakes_completed: u64,
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
    /// Handshakes refused for their connect token, by reason.
    pub tokens_refused: TokenRefusals,
    /// Packets to an encrypted connection that did not authenticate.
    pub unauthenticated: u64,
    /// Authentic packets seen before (replays), dropped.
    pub replayed: u64,
    /// Datagrams over their source's rate (`packet_rate` or `handshake_rate`), dropped.
    pub rate_limited: u64,
    /// Datagrams from new sources while a rate table was full, dropped.
    pub rate_table_full: u64,
}

/// What an endpoint holds ([`Endpoint::footprint`]): each is bounded by its configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Connections and connection attempts (at most `connections_max` connections).
    pub slots: usize,
    /// Tokens in use (at most twice `connections_max`, or 64).
    pub tokens_used: usize,
    /// Sources the two rate limits track (at most `rate_sources_max` each).
    pub rate_sources: usize,
    /// Handshake replies waiting (at most `replies_max`).
    pub replies: usize,
    /// Bytes all connections hold for their peers in reassembly and behind gaps (at most
    /// `connections_max` times `connection.receive_bytes_max`).
    pub receive_bytes: usize,
    /// The most any one connection holds of those (at most `connection.receive_bytes_max`).
    pub receive_bytes_connection_max: usize,
}

/// Handshakes refused for their connect token, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenRefusals {
    /// No token where the server requires one (or one where it takes none).
    pub missing: u64,
    /// Expired.
    pub expired: u64,
    /// Carries another game's protocol id (refused before any decryption).
    pub wrong_protocol: u64,
    /// Did not authenticate: forged, altered (its protocol id included), or another key's.
    pub forged: u64,
    /// Names other servers.
    pub wrong_server: u64,
    /// Already used from another address.
    pub reused: u64,
    /// The table of tokens in use was full.
    pub table_full: u64,
}

/// A client's connection attempt.
#[derive(Debug)]
struct Attempt {
    server: SocketAddr,
    nonce: u64,
    cookie: Option<Cookie>,
    started: Instant,
    last_sent: Option<Instant>,
    /// The connect token it presents, if any: its connection is then sealed with its keys.
    token: Option<Box<ConnectToken>>,
}

/// A slot of the endpoint's table. An attempt is boxed: at 104 bytes it made every slot twice
/// an open connection's size, and the open slots of a room's clients, read by each of their
/// packets in and out, spread over twice the cache lines.
#[derive(Debug)]
enum Slot {
    Free,
    Connecting(Box<Attempt>),
    Open { peer: SocketAddr, connection: Box<Connection>, grant: Option<Box<Grant>> },
}

// An open slot's fields and no more (see `Slot`).
const _: () = assert!(std::mem::size_of::<Slot>() <= 56);

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
    by_peer: PeerTable,
    replies: VecDeque<(SocketAddr, Packet<'static>)>,
    events: VecDeque<(ConnectionHandle, Event)>,
    /// Which slots need a look, and when.
    schedule: Schedule,
    /// Slots whose events were told: freed once drained and everything was told.
    drain_check: Vec<usize>,
    /// The eventful slots `poll_event` is telling the events of, in turn, and the one it is
    /// at: each event goes from its connection's queue straight to the caller.
    pass: Vec<usize>,
    pass_at: usize,
    /// Reused by `handle_timeout`.
    scratch_slots: Vec<usize>,
    stats: EndpointStats,
    /// Tokens in use (by their nonce): the address each came from and when it expires, so
    /// that a token is used from one address only.
    tokens_used: HashMap<[u8; 24], (SocketAddr, u64)>,
    /// Reused to open sealed packets.
    scratch: Vec<u8>,
    packet_limiter: RateLimiter<SocketAddr>,
    handshake_limiter: RateLimiter<std::net::IpAddr>,
    observer: Observer,
    /// The size of the datagram being handled, which a handshake reply may not exceed.
    datagram_len: usize,
}

/// The secrets an endpoint starts from: a server in production fills both from the OS's
/// randomness (the driver does, and refuses to start without it); simulations and tests derive
/// them from a seed with [`EndpointRandomness::danger_from_seed`], by explicit choice.
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointRandomness {
    /// Seeds the client's handshake nonces (which are also keyed with `cookie_secret`).
    pub seed: u64,
    /// The key of the challenge cookies' SipHash tag: whoever knows it can forge cookies for
    /// any address, so it takes 128 bits of its own, never a 64-bit seed.
    pub cookie_secret: [u8; 16],
}

impl EndpointRandomness {
    /// **Danger**: every secret follows from a 64-bit `seed`, which an attacker can search.
    /// For deterministic simulations and tests only, where a seed must replay a run exactly.
    pub fn danger_from_seed(seed: u64) -> Self {
        let mut cookie_secret = [0u8; 16];
        cookie_secret[..8].copy_from_slice(&seed.to_le_bytes());
        cookie_secret[8..].copy_from_slice(&(!seed).rotate_left(17).to_le_bytes());
        Self { seed, cookie_secret }
    }
}

impl std::fmt::Debug for EndpointRandomness {
    // Never print a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndpointRandomness { .. }")
    }
}

/// A peer's address as the key of the endpoint's peer table, looked up for every datagram.
/// Hashed from one word for IPv4, where the derived hash feeds the variant, the address's bytes
/// and the port as three writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeerAddr(SocketAddr);

impl std::hash::Hash for PeerAddr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // Every field that `SocketAddr`'s equality compares, so equal addresses hash equal.
        match self.0 {
            SocketAddr::V4(a) => {
                state.write_u64(u64::from(a.ip().to_bits()) << 16 | u64::from(a.port()))
            }
            SocketAddr::V6(a) => {
                state.write_u128(a.ip().to_bits());
                state.write_u64(u64::from(a.flowinfo()) << 16 | u64::from(a.port()));
                state.write_u32(a.scope_id());
            }
        }
    }
}
/// The peer table's hash: a keyed folded multiply (the 128-bit product's halves XORed), a
/// few instructions a word where SipHash-1-3 costs about 160 a datagram. Keyed from the
/// endpoint's secret, so that a sender cannot aim addresses at one bucket without knowing it;
/// and only a handshake that passed its cookie and token check adds an entry (at most
/// `connections_max`), so a stranger's datagrams only ever look up.
#[derive(Clone, Copy)]
struct PeerHash([u64; 2]);

impl PeerHash {
    /// The key, derived from the endpoint's secret (no randomness of its own: a seeded
    /// endpoint repeats exactly).
    fn from_secret(secret: &[u8; 16]) -> Self {
        let mut h = SipHasher24::new_with_key(secret);
        h.write(b"rally peer table");
        let key = h.finish128();
        // An odd multiplier loses no bit of the word it multiplies.
        Self([key.h1, key.h2 | 1])
    }
}

impl std::fmt::Debug for PeerHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerHash(..)") // The key stays secret.
    }
}

impl std::hash::BuildHasher for PeerHash {
    type Hasher = PeerHasher;

    fn build_hasher(&self) -> PeerHasher {
        PeerHasher { state: self.0[0], multiplier: self.0[1] }
    }
}

/// One hash of [`PeerHash`].
struct PeerHasher {
    state: u64,
    multiplier: u64,
}

impl PeerHasher {
    fn mix(&mut self, word: u64) {
        let product = u128::from(self.state ^ word) * u128::from(self.multiplier);
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for PeerHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn write_u128(&mut self, n: u128) {
        self.mix(n as u64);
        self.mix((n >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

/// The endpoint's peer table: a peer's address to its slot, looked up for every datagram.
/// An IPv4 peer, every game's, is one word in a flat table probed linearly with its slot
/// beside it, so that a look-up reads one line where a `HashMap` read its control bytes and
/// then its bucket, two lines that a worker serving many rooms finds out of cache; IPv6
/// peers go to a `HashMap`. Only a handshake that passed its checks adds an entry, so the
/// table holds at most one per slot, and it is never more than half full.
#[derive(Debug)]
struct PeerTable {
    hash: PeerHash,
    /// A power of two long (or empty), at most half full, so that every probe meets an empty
    /// entry.
    v4: Vec<V4Entry>,
    v4_len: usize,
    v6: HashMap<PeerAddr, usize, PeerHash>,
}

/// An IPv4 peer's address as one word ([`v4_word`]) and its slot ([`V4Entry::EMPTY`] if
/// the entry is free).
#[derive(Debug, Clone, Copy)]
struct V4Entry {
    word: u64,
    slot: usize,
}

impl V4Entry {
    const EMPTY: Self = Self { word: 0, slot: usize::MAX };

    fn is_free(self) -> bool {
        self.slot == Self::EMPTY.slot
    }
}

/// An IPv4 address and port in one word: equal words, equal `SocketAddrV4`s.
fn v4_word(address: std::net::SocketAddrV4) -> u64 {
    u64::from(address.ip().to_bits()) << 16 | u64::from(address.port())
}

impl PeerTable {
    /// The table's first length: a room's clients fit without growing.
    const V4_LEN_MIN: usize = 32;

    fn new(hash: PeerHash) -> Self {
        Self { hash, v4: Vec::new(), v4_len: 0, v6: HashMap::with_hasher(hash) }
    }

    #[inline]
    fn get(&self, peer: SocketAddr) -> Option<usize> {
        match peer {
            SocketAddr::V4(a) => self.find_v4(v4_word(a)).map(|i| self.v4[i].slot),
            SocketAddr::V6(_) => self.v6.get(&PeerAddr(peer)).copied(),
        }
    }

    /// Maps `peer` to `slot`, in place of any slot it had.
    fn insert(&mut self, peer: SocketAddr, slot: usize) {
        let SocketAddr::V4(a) = peer else {
            self.v6.insert(PeerAddr(peer), slot);
            return;
        };
        let word = v4_word(a);
        if let Some(i) = self.find_v4(word) {
            self.v4[i].slot = slot;
            return;
        }
        if (self.v4_len + 1) * 2 > self.v4.len() {
            self.grow_v4();
        }
        self.place_v4(V4Entry { word, slot });
        self.v4_len += 1;
    }

    fn remove(&mut self, peer: SocketAddr) {
        match peer {
            SocketAddr::V4(a) => self.remove_v4(v4_word(a)),
            SocketAddr::V6(_) => {
                self.v6.remove(&PeerAddr(peer));
            }
        }
    }

    /// Where a probe for `word` starts.
    #[inline]
    fn home(&self, word: u64) -> usize {
        let mut hasher = self.hash.build_hasher();
        hasher.write_u64(word);
        hasher.finish() as usize & (self.v4.len() - 1)
    }

    /// The index of `word`'s entry.
    #[inline]
    fn find_v4(&self, word: u64) -> Option<usize> {
        if self.v4.is_empty() {
            return None;
        }
        let mask = self.v4.len() - 1;
        let mut i = self.home(word);
        // Ends: the table is at most half full, so an empty entry lies ahead.
        loop {
            let entry = self.v4[i];
            if entry.is_free() {
                return None;
            }
            if entry.word == word {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts `entry` (not in the table) in the first empty entry from its home.
    fn place_v4(&mut self, entry: V4Entry) {
        let mask = self.v4.len() - 1;
        let mut i = self.home(entry.word);
        while !self.v4[i].is_free() {
            i = (i + 1) & mask;
        }
        self.v4[i] = entry;
    }

    fn grow_v4(&mut self) {
        let len = (self.v4.len() * 2).max(Self::V4_LEN_MIN);
        let old = std::mem::replace(&mut self.v4, vec![V4Entry::EMPTY; len]);
        for entry in old.into_iter().filter(|e| !e.is_free()) {
            self.place_v4(entry);
        }
    }

    /// Takes `word`'s entry out and moves each later entry of its run back into the hole
    /// when its home allows it, so that no probe meets an empty entry before its own (no
    /// tombstones: a table of peers that come and go never fills with them).
    fn remove_v4(&mut self, word: u64) {
        let Some(mut hole) = self.find_v4(word) else { return };
        let mask = self.v4.len() - 1;
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let entry = self.v4[i];
            if entry.is_free() {
                break;
            }
            // The entry may fill the hole if the hole lies between its home and it.
            let home = self.home(entry.word);
            if i.wrapping_sub(home) & mask >= i.wrapping_sub(hole) & mask {
                self.v4[hole] = entry;
                hole = i;
            }
        }
        self.v4[hole] = V4Entry::EMPTY;
        self.v4_len -= 1;
    }
}

impl Endpoint {
    /// An endpoint with `config`, its secrets from `randomness`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `config` fails [`EndpointConfig::validate`]: an endpoint is never
    /// built from limits it cannot keep.
    pub fn new(
        config: EndpointConfig,
        randomness: EndpointRandomness,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let packet_limiter = RateLimiter::new(config.packet_rate, config.rate_sources_max);
        let handshake_limiter = RateLimiter::new(config.handshake_rate, config.rate_sources_max);
        let EndpointRandomness { seed, cookie_secret: key } = randomness;
        Ok(Self {
            config,
            key,
            nonces: seed,
            slots: Vec::new(),
            by_peer: PeerTable::new(PeerHash::from_secret(&key)),
            replies: VecDeque::new(),
            events: VecDeque::new(),
            schedule: Schedule::default(),
            drain_check: Vec::new(),
            pass: Vec::new(),
            pass_at: 0,
            scratch_slots: Vec::new(),
            stats: EndpointStats::default(),
            tokens_used: HashMap::new(),
            scratch: Vec::new(),
            packet_limiter,
            handshake_limiter,
            observer: Observer::default(),
            datagram_len: 0,
        })
    }

    /// Lets `observer` watch the stages of every packet (decrypt, decode, encode, encrypt), so
    /// that a host can time them on its clock.
    pub fn set_observer(&mut self, observer: Box<dyn StageObserver>) {
        self.observer = Observer::new(observer);
    }

    /// Datagrams dropped so far, by reason, and handshakes started and completed.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// What the endpoint holds, to check that it stays within its limits.
    pub fn footprint(&self) -> Footprint {
        Footprint {
            slots: self.slots.iter().filter(|s| !matches!(s, Slot::Free)).count(),
            tokens_used: self.tokens_used.len(),
            rate_sources: self.packet_limiter.len() + self.handshake_limiter.len(),
            replies: self.replies.len(),
            receive_bytes: self.connections().map(Connection::receive_bytes).sum(),
            receive_bytes_connection_max: self
                .connections()
                .map(Connection::receive_bytes)
                .max()
                .unwrap_or(0),
        }
    }

    /// The established connections.
    fn connections(&self) -> impl Iterator<Item = &Connection> {
        self.slots.iter().filter_map(|s| match s {
            Slot::Open { connection, .. } => Some(&**connection),
            _ => None,
        })
    }

    /// The connection behind `handle`, once established.
    pub fn connection(&self, handle: ConnectionHandle) -> Option<&Connection> {
        match self.slots.get(handle.0) {
            Some(Slot::Open { connection, .. }) => Some(connection),
            _ => None,
        }
    }

    /// What the backend granted the client of a connection it opened with a connect token
    /// (its client id, the room it may join, its user data); `None` for plaintext connections,
    /// attempts and a client's own side.
    pub fn grant(&self, handle: ConnectionHandle) -> Option<&Grant> {
        match self.slots.get(handle.0) {
            Some(Slot::Open { grant, .. }) => grant.as_deref(),
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

    /// Starts connecting to `server` without a token, in plaintext (a server with
    /// [`Security::DangerPlaintext`]); `Event::Connected` follows on success.
    pub fn connect(&mut self, now: Instant, server: SocketAddr) -> ConnectionHandle {
        self.start(now, server, None)
    }

    /// Starts connecting with a connect token to the first server it names; the connection
    /// is sealed with the token's keys. `Event::Connected` follows on success.
    pub fn connect_with_token(
        &mut self,
        now: Instant,
        token: ConnectToken,
    ) -> Result<ConnectionHandle, TokenError> {
        let server = *token.server_addresses.first().ok_or(TokenError::BadAddresses)?;
        Ok(self.start(now, server, Some(Box::new(token))))
    }

    fn start(
        &mut self,
        now: Instant,
        server: SocketAddr,
        token: Option<Box<ConnectToken>>,
    ) -> ConnectionHandle {
        let nonce = self.next_nonce();
        let attempt = Attempt { server, nonce, cookie: None, started: now, last_sent: None, token };
        let index = self.allocate(Slot::Connecting(Box::new(attempt)));
        self.by_peer.insert(server, index);
        self.touch(index);
        ConnectionHandle(index)
    }

    /// Queues a message on an established connection.
    pub fn send(
        &mut self,
        handle: ConnectionHandle,
        channel: u8,
        payload: &[u8],
    ) -> Result<(), SendError> {
        self.queue_with(handle, |connection| connection.send(channel, payload))
    }

    /// [`Endpoint::send`] of the message in `buffer`, handing the buffer itself to the
    /// connection's send queue when the message fits one piece (a snapshot, an input frame),
    /// instead of copying it: `buffer` is left empty, a buffer to write the next message into.
    /// On an error, `buffer` is left as it was.
    pub fn send_buffer(
        &mut self,
        handle: ConnectionHandle,
        channel: u8,
        buffer: &mut Vec<u8>,
    ) -> Result<(), SendError> {
        self.queue_with(handle, |connection| connection.send_buffer(channel, buffer))
    }

    /// [`Endpoint::send_buffer`] of the message `head` followed by `body`, if any, where `body`
    /// is shared by many messages (a room's snapshot encoding, sent to each client behind a
    /// head of its own): the queue keeps a reference to it and the packet copies it from
    /// there, so that it is not first copied into each message (see
    /// [`Connection::send_parts`]). The peer receives one message, `head` then `body`. `head`
    /// is left empty once queued, and as it was on an error.
    pub fn send_parts(
        &mut self,
        handle: ConnectionHandle,
        channel: u8,
        head: &mut Vec<u8>,
        body: Option<std::sync::Arc<Vec<u8>>>,
    ) -> Result<(), SendError> {
        self.queue_with(handle, |connection| connection.send_parts(channel, head, body))
    }

    /// Queues a message on `handle`'s connection with `send`, and makes it due.
    fn queue_with(
        &mut self,
        handle: ConnectionHandle,
        send: impl FnOnce(&mut Connection) -> Result<(), SendError>,
    ) -> Result<(), SendError> {
        let sent = match self.slots.get_mut(handle.0) {
            Some(Slot::Open { connection, .. }) => send(connection),
            _ => Err(SendError::Closed),
        };
        if sent.is_ok() {
            // A queued message is due at once (or, behind a closed window, found not to be
            // when its turn comes): no deadline to work out. Nor any event: queueing tells
            // the application nothing and never ends a connection.
            self.schedule.make_due(handle.0);
        } else {
            self.touch(handle.0);
        }
        sent
    }

    /// Closes a connection (or abandons an attempt), telling the peer why.
    pub fn disconnect(&mut self, handle: ConnectionHandle, reason: DisconnectReason) {
        match self.slots.get_mut(handle.0) {
            Some(Slot::Open { connection, .. }) => connection.disconnect(reason),
            Some(Slot::Connecting(_)) => self.close_attempt(handle.0, reason),
            _ => return,
        }
        self.touch(handle.0);
    }

    /// Something happened to `slot`: its deadline is recomputed at the next `poll_transmit`
    /// or `handle_timeout` (once for any number of sends; until then `poll_timeout` says
    /// "now"), its events gathered at the next `poll_event`.
    fn touch(&mut self, slot: usize) {
        if slot < self.slots.len() {
            self.schedule.touch(slot);
        }
    }

    /// Recomputes the deadlines of touched slots at `now` (a slot due already joins the due
    /// queue).
    fn settle(&mut self, now: Instant) {
        // Most calls (one per packet sent) find none: no lists to swap then.
        if !self.schedule.has_touched() {
            return;
        }
        let touched = self.schedule.take_touched();
        for &slot in &touched {
            let deadline = self.slot_deadline(slot);
            self.schedule.set_at(slot, deadline, now);
        }
        self.schedule.return_touched(touched);
    }

    /// When `slot` next needs `handle_timeout` or `poll_transmit`.
    fn slot_deadline(&self, slot: usize) -> Option<Instant> {
        match self.slots.get(slot)? {
            Slot::Connecting(a) => {
                let timeout = a.started + self.config.handshake_timeout;
                let resend =
                    a.last_sent.map_or(a.started, |t| t + self.config.handshake_resend_interval);
                Some(timeout.min(resend))
            }
            Slot::Open { connection, .. } => connection.poll_timeout(),
            Slot::Free => None,
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

    /// A hint before [`Endpoint::handle_datagram`]: asks the core to start fetching what a
    /// datagram from `from` reads first (its connection's hot lines and opening key). A host
    /// that reads datagrams in batches calls it for every datagram of a batch before it hands
    /// any over. At many rooms a worker each connection is out of the core's caches by the
    /// time its next datagram comes, and handled one by one, each datagram waits on its
    /// connection's lines in turn; asked for together, their misses overlap. It changes
    /// nothing (a stranger, or a peer still connecting, is left alone) and costs a look-up.
    pub fn prefetch(&self, from: SocketAddr) {
        let Some(slot) = self.by_peer.get(from) else { return };
        if let Some(Slot::Open { connection, .. }) = self.slots.get(slot) {
            connection.prefetch_receive();
        }
    }

    /// A hint well before messages are queued to `handle` ([`Endpoint::send_parts`] and the
    /// like): asks the core to start fetching the connection's lines that queueing and
    /// sending read first, reading none of them. A room calls it for every client before it
    /// builds their snapshots: at many rooms a worker each connection is out of the core's
    /// caches by its room's next tick, and the building gives the lines time to arrive. It
    /// changes nothing.
    pub fn prefetch_connection(&self, handle: ConnectionHandle) {
        if let Some(Slot::Open { connection, .. }) = self.slots.get(handle.0) {
            connection.prefetch_lines();
        }
    }

    /// A hint just before messages are queued on `handle`'s `channel`, once
    /// [`Endpoint::prefetch_connection`]'s lines have arrived: asks for the lines reached
    /// through them (the channel's send queue, the sealing key, the next record of a packet
    /// sent). A room's transmit calls it for every queued message before it queues the
    /// first, so that their misses overlap instead of coming one message after another. It
    /// changes nothing.
    pub fn prefetch_queue(&self, handle: ConnectionHandle, channel: u8) {
        if let Some(Slot::Open { connection, .. }) = self.slots.get(handle.0) {
            connection.prefetch_queue(channel);
        }
    }

    /// Takes one datagram from `from`. Anything malformed or unexpected is counted and
    /// dropped; a connection whose peer breaks the protocol is closed with `PeerMisbehaved`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        // The slot the datagram concerned (new, if it opened one) needs a look.
        if let Some(slot) = self.receive(now, from, bytes) {
            self.touch(slot);
        }
        self.debug_assert_within_limits();
    }

    /// What the endpoint holds stays within its configuration (the checks that cost O(1);
    /// each connection checks its own receive limit as it takes a frame).
    fn debug_assert_within_limits(&self) {
        let config = &self.config;
        let tokens_max = config.connections_max.saturating_mul(2).max(64);
        debug_assert!(self.replies.len() <= config.replies_max, "replies past replies_max");
        debug_assert!(self.packet_limiter.len() <= config.rate_sources_max, "rate table");
        debug_assert!(self.handshake_limiter.len() <= config.rate_sources_max, "rate table");
        debug_assert!(self.tokens_used.len() <= tokens_max, "tokens past their table");
    }

    /// Takes one datagram; returns the slot of its peer after it (one the datagram opened, or
    /// none if it closed it).
    fn receive(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) -> Option<usize> {
        self.datagram_len = bytes.len();
        let slot = self.by_peer.get(from);
        // Strangers are rate limited before anything else; a peer's packets are not, since a
        // spoofer could then starve it: they must authenticate instead (sealed connections).
        if slot.is_none() {
            let verdict = self.packet_limiter.check(from, now);
            if !self.admit(verdict) {
                return None;
            }
        }
        let packet = match self.observer.scope(Stage::Decode, || Packet::decode_inline(bytes)) {
            Ok(packet) => packet,
            Err(_) => {
                self.stats.malformed += 1;
                return slot;
            }
        };
        match packet {
            // A data packet keeps its peer's slot (an attempt it opens stays where it was):
            // the common case needs no second look-up.
            Packet::Data { header, frames } => {
                let header_len = bytes.len() - frames.len();
                match slot {
                    Some(index) => self.handle_data(now, index, bytes, header, header_len),
                    None => self.stats.unknown_peer += 1,
                }
                return slot;
            }
            Packet::Disconnect { reason } => match slot.map(|i| (i, &mut self.slots[i])) {
                // Only the handshake takes a plaintext disconnect from a sealed peer (its
                // refusal comes before any key is agreed).
                Some((_, Slot::Open { connection, .. })) if connection.is_encrypted() => {
                    self.stats.unauthenticated += 1;
                }
                Some((_, Slot::Open { connection, .. })) => connection.handle_disconnect(reason),
                Some((index, _)) => self.close_attempt(index, reason),
                None => self.stats.unknown_peer += 1,
            },
            Packet::DisconnectSealed { reason, seq, .. } => {
                match slot.map(|i| &mut self.slots[i]) {
                    Some(Slot::Open { connection, .. }) => {
                        if let Err(e) = connection.handle_sealed_disconnect(reason, seq, bytes) {
                            self.count_open_error(e);
                        }
                    }
                    _ => self.stats.unknown_peer += 1,
                }
            }
            Packet::ConnectRequest { nonce, token } => {
                let verdict = self.handshake_limiter.check(from.ip(), now);
                if self.admit(verdict) {
                    self.handle_request(now, from, nonce, token, slot)
                }
            }
            Packet::Challenge { nonce, cookie } => match slot.map(|i| &mut self.slots[i]) {
                Some(Slot::Connecting(attempt)) if attempt.nonce == nonce => {
                    attempt.cookie = Some(cookie);
                    attempt.last_sent = None;
                }
                _ => self.stats.unexpected += 1,
            },
            Packet::ChallengeResponse { nonce, cookie, token, short_tag } => {
                let verdict = self.handshake_limiter.check(from.ip(), now);
                if self.admit(verdict) {
                    self.handle_response(now, from, (nonce, cookie), (token, short_tag), slot)
                }
            }
        }
        // A handshake packet may have opened or closed the peer's slot.
        self.by_peer.get(from)
    }

    /// A data packet from the peer of slot `index`: opened if the connection is sealed; on a
    /// client's attempt that has its cookie, the server's first packet, which opens it.
    fn handle_data(
        &mut self,
        now: Instant,
        index: usize,
        bytes: &[u8],
        mut header: crate::packet::DataHeader,
        header_len: usize,
    ) {
        let scratch = &mut self.scratch;
        let observer = &mut self.observer;
        match &mut self.slots[index] {
            Slot::Open { connection, .. } if connection.is_encrypted() => {
                let opened = observer.scope(Stage::Decrypt, || {
                    connection.open_packet(bytes, header_len, header.seq, scratch)
                });
                match opened {
                    // A protocol violation closes the connection inside; nothing more to do.
                    Ok(seq) => {
                        header.seq = seq;
                        let len = bytes.len();
                        observer.scope(Stage::Decode, || {
                            let _ = connection.handle_data(now, header, scratch, len);
                        });
                    }
                    Err(e) => self.count_open_error(e),
                }
            }
            // A narrow sequence is restored only where authentication checks it.
            Slot::Open { .. } | Slot::Connecting(_) if header.narrow => self.stats.malformed += 1,
            Slot::Open { connection, .. } => {
                let frames = &bytes[header_len..];
                observer.scope(Stage::Decode, || {
                    let _ = connection.handle_data(now, header, frames, bytes.len());
                });
            }
            Slot::Connecting(attempt) if attempt.cookie.is_some() => {
                let server = attempt.server;
                // A sealed attempt opens only on a packet that authenticates; its tag's size
                // says whether the server took short tags, if this end proposed them.
                let keys = match &attempt.token {
                    Some(token) => {
                        let keys = (&token.client_to_server_key, &token.server_to_client_key);
                        let proposed = self.config.connection.short_tag;
                        let packet = bytes.split_at(header_len);
                        match PacketKeys::open_first(keys, proposed, header.seq, packet, scratch) {
                            // The sequence is the number's low 16 bits.
                            Ok((keys, number)) => {
                                header.seq = number as u16;
                                Some(keys)
                            }
                            Err(e) => {
                                self.count_open_error(e);
                                return;
                            }
                        }
                    }
                    None => {
                        scratch.clear();
                        scratch.extend_from_slice(&bytes[header_len..]);
                        None
                    }
                };
                self.open(index, server, now, keys);
                if let Slot::Open { connection, .. } = &mut self.slots[index] {
                    let _ = connection.handle_data(now, header, &self.scratch, bytes.len());
                }
            }
            _ => self.stats.unknown_peer += 1,
        }
    }

    /// Counts a rate limit's refusal; whether the datagram may go on.
    fn admit(&mut self, verdict: Verdict) -> bool {
        match verdict {
            Verdict::Pass => return true,
            Verdict::Limited => self.stats.rate_limited += 1,
            Verdict::TableFull => self.stats.rate_table_full += 1,
        }
        false
    }

    fn count_open_error(&mut self, error: OpenError) {
        match error {
            OpenError::Unauthenticated => self.stats.unauthenticated += 1,
            OpenError::Replayed => self.stats.replayed += 1,
        }
    }

    fn handle_request(
        &mut self,
        now: Instant,
        from: SocketAddr,
        nonce: u64,
        token: Option<SealedToken<'_>>,
        slot: Option<usize>,
    ) {
        if slot.is_some() {
            // Already connected or connecting from there: a late duplicate.
            self.stats.unexpected += 1;
            return;
        }
        self.stats.handshakes_started += 1;
        // Nothing is kept for a request: a valid token gets a challenge, the rest silence.
        if self.check_token(now, from, token, false, false).is_err() {
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
        (nonce, cookie): (u64, Cookie),
        (token, short_tag): (Option<SealedToken<'_>>, bool),
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
        // Short tags only if the client proposed them and this end allows them too.
        let short_tag = short_tag && self.config.connection.short_tag;
        let Ok(sealed) = self.check_token(now, from, token, true, short_tag) else { return };
        let index = self.allocate(Slot::Free);
        self.by_peer.insert(from, index);
        let (keys, grant) = sealed.unzip();
        self.open(index, from, now, keys);
        self.stats.handshakes_completed += 1;
        if let Slot::Open { grant: slot_grant, .. } = &mut self.slots[index] {
            *slot_grant = grant;
        }
        if let Slot::Open { connection, .. } = &mut self.slots[index] {
            connection.prompt();
        }
    }

    /// Checks a handshake's token against this endpoint's [`Security`]; with `claim`, the
    /// token becomes `from`'s (refused if another address has it). Returns the server's keys
    /// of a sealed connection (with short tags on data packets if `short_tag`); a refusal is
    /// counted.
    fn check_token(
        &mut self,
        now: Instant,
        from: SocketAddr,
        token: Option<SealedToken<'_>>,
        claim: bool,
        short_tag: bool,
    ) -> Result<Option<(PacketKeys, Box<Grant>)>, ()> {
        let refusals = &mut self.stats.tokens_refused;
        let (key, protocol_id, address, unix_at_zero, token) = match (&self.config.security, token)
        {
            (Security::DangerPlaintext, None) => return Ok(None),
            (Security::Tokens { key, protocol_id, address, unix_at_zero }, Some(token)) => {
                (key, *protocol_id, *address, *unix_at_zero, token)
            }
            _ => {
                refusals.missing += 1;
                return Err(());
            }
        };
        // Another game's token would fail to open anyway (its id is associated data); saying
        // so first costs no AEAD and tells an operator which of their games is misconfigured.
        if token.protocol_id != protocol_id {
            refusals.wrong_protocol += 1;
            return Err(());
        }
        let unix = unix_at_zero + now.as_nanos() / 1_000_000_000;
        let opened = crate::token::open(
            key,
            protocol_id,
            token.expires_at,
            token.nonce,
            token.sealed,
            unix,
            address,
        );
        let private = match opened {
            Ok(private) => private,
            Err(error) => {
                *match error {
                    TokenError::Expired => &mut refusals.expired,
                    TokenError::WrongServer => &mut refusals.wrong_server,
                    _ => &mut refusals.forged,
                } += 1;
                return Err(());
            }
        };
        if claim {
            self.claim_token(*token.nonce, from, token.expires_at, unix)?;
        }
        let (send, receive) = (&private.server_to_client_key, &private.client_to_server_key);
        let keys = PacketKeys::with_tags(send, receive, short_tag);
        Ok(Some((keys, Box::new(private.grant))))
    }

    /// Records that the token with `nonce` is `from`'s until `expires_at`; refused if another
    /// address holds it, or if the table is full of unexpired tokens.
    fn claim_token(
        &mut self,
        nonce: [u8; 24],
        from: SocketAddr,
        expires_at: u64,
        unix: u64,
    ) -> Result<(), ()> {
        let refusals = &mut self.stats.tokens_refused;
        match self.tokens_used.get(&nonce) {
            Some((holder, _)) if *holder != from => {
                refusals.reused += 1;
                return Err(());
            }
            Some(_) => return Ok(()),
            None => {}
        }
        let max = self.config.connections_max.saturating_mul(2).max(64);
        if self.tokens_used.len() >= max {
            self.tokens_used.retain(|_, (_, expiry)| *expiry > unix);
        }
        if self.tokens_used.len() >= max {
            self.stats.tokens_refused.table_full += 1;
            return Err(());
        }
        self.tokens_used.insert(nonce, (from, expires_at));
        Ok(())
    }

    fn reply(&mut self, to: SocketAddr, packet: Packet<'static>) {
        // Anti-amplification: an unverified source never gets more bytes than it sent.
        debug_assert!(
            packet.encode(&mut [0u8; 64]).is_ok_and(|len| len <= self.datagram_len),
            "a reply larger than the {} bytes received",
            self.datagram_len
        );
        if self.replies.len() >= self.config.replies_max {
            self.stats.replies_dropped += 1;
            return;
        }
        self.replies.push_back((to, packet));
    }

    fn open(&mut self, index: usize, peer: SocketAddr, now: Instant, keys: Option<PacketKeys>) {
        let mut connection = Box::new(Connection::new(self.config.connection.clone(), now));
        if let Some(keys) = keys {
            connection.set_keys(keys);
        }
        self.slots[index] = Slot::Open { peer, connection, grant: None };
    }

    fn close_attempt(&mut self, index: usize, reason: DisconnectReason) {
        if let Slot::Connecting(attempt) = std::mem::replace(&mut self.slots[index], Slot::Free) {
            self.schedule.forget(index);
            self.by_peer.remove(attempt.server);
            self.events.push_back((ConnectionHandle(index), Event::Disconnected { reason }));
        }
    }

    /// Advances timers: handshake timeouts and each connection's idle timeout. Only slots whose
    /// deadline has come are visited.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.settle(now);
        self.schedule.collect_due(now);
        let mut due = std::mem::take(&mut self.scratch_slots);
        due.clear();
        due.extend(self.schedule.due_slots());
        for &index in &due {
            match &mut self.slots[index] {
                Slot::Connecting(a) if now - a.started >= self.config.handshake_timeout => {
                    self.close_attempt(index, DisconnectReason::TimedOut);
                }
                Slot::Open { connection, .. } => {
                    connection.handle_timeout(now);
                    self.schedule.mark_eventful(index);
                }
                _ => {}
            }
        }
        self.scratch_slots = due;
    }

    /// Gives back the payload of an [`Event::Message`] of `handle`'s `channel` once read: the
    /// channel's next message is copied into it rather than into a new allocation (a host
    /// reading a message or two per connection, channel and tick allocates nothing for them).
    /// Optional: a payload that is kept is simply never given back. A channel keeps two such
    /// buffers at most, each no larger than a packet's piece; the rest are dropped.
    pub fn recycle(&mut self, handle: ConnectionHandle, channel: u8, payload: Vec<u8>) {
        if let Some(Slot::Open { connection, .. }) = self.slots.get_mut(handle.0) {
            connection.recycle(channel, payload);
        }
    }

    /// The next event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        if let Some(event) = self.events.pop_front() {
            return Some(event);
        }
        // A pass tells the events of every connection something happened to, connection by
        // connection, each taken from its connection's queue as it is asked for: not moved
        // through the endpoint's queue first (two moves of every message fewer).
        loop {
            if let Some(event) = self.next_of_pass() {
                return Some(event);
            }
            if !self.start_pass() {
                break;
            }
        }
        // Everything has been told: closed connections can go.
        self.forget_drained();
        None
    }

    /// The next event of the pass's connections, moving past those with none left.
    fn next_of_pass(&mut self) -> Option<(ConnectionHandle, Event)> {
        while let Some(&index) = self.pass.get(self.pass_at) {
            if let Some(Slot::Open { connection, .. }) = self.slots.get_mut(index) {
                if let Some(event) = connection.poll_event() {
                    return Some((ConnectionHandle(index), event));
                }
                self.drain_check.push(index);
            }
            self.pass_at += 1;
        }
        None
    }

    /// Starts a pass over the slots marked eventful since the last; false if there are none.
    fn start_pass(&mut self) -> bool {
        // Copied, the schedule's list given back at once: a slot marked eventful while the
        // pass is told (between two calls) finds the list's allocation there.
        let eventful = self.schedule.take_eventful();
        self.pass.clear();
        self.pass.extend_from_slice(&eventful);
        self.schedule.return_eventful(eventful);
        self.pass_at = 0;
        !self.pass.is_empty()
    }

    fn forget_drained(&mut self) {
        // Drained, not taken: the list keeps its allocation for the next turn.
        let mut check = std::mem::take(&mut self.drain_check);
        for index in check.drain(..) {
            if let Slot::Open { peer, connection, .. } = &self.slots[index] {
                if connection.is_drained() {
                    self.by_peer.remove(*peer);
                    self.slots[index] = Slot::Free;
                    self.schedule.forget(index);
                }
            }
        }
        self.drain_check = check;
    }

    /// The earliest time a timer needs [`Endpoint::handle_timeout`] or [`Endpoint::poll_transmit`].
    /// It may be early: a connection whose deadline moved later (a keepalive pushed back by
    /// each packet sent) keeps its timer where it was until then (see `schedule`), and a host
    /// that sleeps until it wakes for nothing. A host that wakes by some time anyway (its next
    /// tick) asks [`Endpoint::next_wake`] instead.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.schedule.earliest()
    }

    /// When the host must wake, at `by` (its own next deadline) at the latest: the earliest
    /// time some connection really has work at. Timers armed before `by` whose connection's
    /// deadline moved later since are armed again at it first, each as `handle_timeout` would
    /// have when it came (so nothing is due later than before, and a wake-up that would have
    /// found nothing to do is not asked for); those at or after `by` are left for later.
    pub fn next_wake(&mut self, by: Instant) -> Instant {
        self.schedule.rearm_before(by);
        self.poll_timeout().map_or(by, |at| at.min(by))
    }

    /// Writes the next datagram into `buf` and says where it goes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some((destination, packet)) = self.replies.pop_front() {
            let len = packet.encode(buf).ok()?;
            return Some(Transmit { destination, len });
        }
        self.settle(now);
        self.schedule.collect_due(now);
        while let Some(index) = self.schedule.next_due() {
            if let Some(transmit) = self.transmit_slot(index, now, buf) {
                // Most slots send one packet a turn: asking their timers whether more is due
                // now spares the second `transmit_slot` that would only learn nothing is.
                match self.slot_deadline(index) {
                    Some(at) if at <= now => self.schedule.rotate(),
                    deadline => self.leave_due(index, deadline, now),
                }
                return Some(transmit);
            }
            let deadline = self.slot_deadline(index);
            self.leave_due(index, deadline, now);
        }
        None
    }

    /// The slot at the front of the due queue has nothing more to send now: it waits for
    /// `deadline`, later than now whatever its timers say, so that a slot never comes due
    /// twice at one instant.
    fn leave_due(&mut self, index: usize, deadline: Option<Instant>, now: Instant) {
        self.schedule.leave();
        // Sending ends a connection only when it is closing (its last disconnect copy, or a
        // worn-out key that closed it just now): then it may have drained, and `poll_event`
        // must look. Any other has nothing new to tell after sending: not looked at again.
        if matches!(&self.slots[index], Slot::Open { connection, .. } if connection.is_closed()) {
            self.schedule.mark_eventful(index);
        }
        let deadline = deadline.map(|t| t.max(now + Duration::from_nanos(1)));
        self.schedule.set(index, deadline);
    }

    fn transmit_slot(&mut self, index: usize, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let resend = self.config.handshake_resend_interval;
        let short_tag = self.config.connection.short_tag;
        let observer = &mut self.observer;
        match &mut self.slots[index] {
            Slot::Connecting(a) if a.last_sent.is_none_or(|t| now >= t + resend) => {
                a.last_sent = Some(now);
                let token = a.token.as_ref().map(|t| SealedToken {
                    protocol_id: t.protocol_id,
                    expires_at: t.expires_at,
                    nonce: &t.nonce,
                    sealed: &t.sealed,
                });
                // Short tags are proposed on sealed connections only.
                let short_tag = short_tag && token.is_some();
                let packet = match a.cookie {
                    None => Packet::ConnectRequest { nonce: a.nonce, token },
                    Some(cookie) => {
                        Packet::ChallengeResponse { nonce: a.nonce, cookie, token, short_tag }
                    }
                };
                let len = packet.encode(buf).ok()?;
                Some(Transmit { destination: a.server, len })
            }
            Slot::Open { peer, connection, .. } => {
                let len = connection.poll_transmit(now, buf, observer)?;
                Some(Transmit { destination: *peer, len })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::field_of;
    use crate::token::{self, TokenRandomness, USER_DATA_LEN};

    const CLIENT: &str = "10.0.0.1:4000";
    const SERVER: &str = "10.0.0.2:7777";

    fn seeded(seed: u64) -> EndpointRandomness {
        EndpointRandomness::danger_from_seed(seed)
    }

    /// A token server and a client connected to it (sealed), on a perfect network.
    fn sealed_pair() -> (Endpoint, Endpoint, ConnectionHandle, Instant) {
        sealed_pair_with(false, false)
    }

    /// [`sealed_pair`] with short tags allowed on the client (which then proposes them) and on
    /// the server as given.
    fn sealed_pair_with(
        client_short: bool,
        server_short: bool,
    ) -> (Endpoint, Endpoint, ConnectionHandle, Instant) {
        let (server_at, key) = (SERVER.parse().unwrap(), TokenKey([7; 32]));
        let grant = Grant {
            client_id: 1,
            room_id: 0,
            user_data: [0; USER_DATA_LEN],
            server_addresses: vec![server_at],
            timeout_s: 5,
        };
        let random = TokenRandomness {
            nonce: [1; 24],
            client_to_server_key: [2; 32],
            server_to_client_key: [3; 32],
        };
        let token = token::issue(&key, 42, &grant, 1_000, 30, &random).unwrap();
        let security =
            Security::Tokens { key, protocol_id: 42, address: server_at, unix_at_zero: 1_000 };
        let short = |short_tag| EndpointConfig {
            connection: ConnectionConfig { short_tag, ..ConnectionConfig::default() },
            ..EndpointConfig::default()
        };
        let config = EndpointConfig { security, ..short(server_short) };
        let mut server = Endpoint::new(config, seeded(2)).unwrap();
        let mut client = Endpoint::new(short(client_short), seeded(1)).unwrap();
        let handle = client.connect_with_token(Instant::ZERO, token).unwrap();
        let mut now = Instant::ZERO;
        for _ in 0..10 {
            exchange(&mut client, &mut server, now);
            now += Duration::from_millis(1);
        }
        assert!(client.connection(handle).is_some_and(Connection::is_encrypted));
        (client, server, handle, now)
    }

    /// Delivers every datagram either way at `now`, until both are quiet; panics on a
    /// livelock (an endpoint that never stops sending at one instant).
    fn exchange(client: &mut Endpoint, server: &mut Endpoint, now: Instant) {
        let (client_at, server_at) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        let mut buf = [0u8; 1500];
        client.handle_timeout(now);
        server.handle_timeout(now);
        // Far more datagrams than any test exchanges at one instant.
        for _ in 0..10_000 {
            if let Some(t) = client.poll_transmit(now, &mut buf) {
                server.handle_datagram(now, client_at, &buf[..t.len]);
            } else if let Some(t) = server.poll_transmit(now, &mut buf) {
                client.handle_datagram(now, server_at, &buf[..t.len]);
            } else {
                return;
            }
        }
        panic!("livelock at {now}");
    }

    /// Goal: `prefetch` is a hint and nothing more: a batch handed over after every datagram
    /// of it was prefetched (the peer's, a stranger's, garbage) delivers the same events and
    /// counts the same drops as the batch handed over alone. Method: two identical sealed
    /// pairs; the same datagrams to both servers, prefetched for one.
    #[test]
    fn a_prefetched_batch_is_handled_as_one_that_was_not() {
        let (mut client, mut plain, handle, now) = sealed_pair();
        let (_, mut hinted, ..) = sealed_pair();
        let (client_at, stranger) = (CLIENT.parse().unwrap(), "10.9.9.9:1".parse().unwrap());
        let mut batch = Vec::new();
        let mut buf = [0u8; 1500];
        for k in 0..4u8 {
            client.send(handle, 0, &[k; 40]).unwrap();
            while let Some(t) = client.poll_transmit(now, &mut buf) {
                batch.push((client_at, buf[..t.len].to_vec()));
            }
        }
        batch.push((stranger, vec![0xff; 60]));
        batch.push((client_at, vec![0; 3]));
        assert!(batch.len() >= 6, "the client sent its messages");
        for (from, _) in &batch {
            hinted.prefetch(*from);
        }
        for (from, bytes) in &batch {
            plain.handle_datagram(now, *from, bytes);
            hinted.handle_datagram(now, *from, bytes);
        }
        let events = |server: &mut Endpoint| std::iter::from_fn(|| server.poll_event()).collect();
        let (plain_events, hinted_events): (Vec<_>, Vec<_>) =
            (events(&mut plain), events(&mut hinted));
        let delivered = plain_events.iter().filter(|(_, e)| matches!(e, Event::Message { .. }));
        assert_eq!(delivered.count(), 4, "{plain_events:?}");
        assert_eq!(plain_events, hinted_events);
        assert_eq!(plain.stats(), hinted.stats());
        assert!(plain.stats().malformed + plain.stats().unknown_peer > 0, "{:?}", plain.stats());
    }

    /// Goal: the send-side hints are hints and nothing more: messages queued after
    /// `prefetch_connection` and `prefetch_queue` (on the connection, on a channel it lacks,
    /// on a handle of no connection) go out as the same datagrams, byte for byte, as without
    /// them, and arrive as the same messages. Method: two identical sealed pairs; the same
    /// messages queued on both clients, one hinted first.
    #[test]
    fn messages_queued_after_the_send_hints_go_out_as_without_them() {
        let (mut plain, mut plain_server, handle, now) = sealed_pair();
        let (mut hinted, mut hinted_server, ..) = sealed_pair();
        let nobody = ConnectionHandle(handle.0 + 100);
        for h in [handle, nobody] {
            hinted.prefetch_connection(h);
            for channel in [0, 1, 200] {
                hinted.prefetch_queue(h, channel);
            }
        }
        let mut sent = [Vec::new(), Vec::new()];
        let mut buf = [0u8; 1500];
        for (client, sent) in [&mut plain, &mut hinted].into_iter().zip(&mut sent) {
            for k in 0..4u8 {
                client.send(handle, k % 2, &[k; 300]).unwrap();
            }
            assert_eq!(client.send(nobody, 0, &[1; 10]), Err(SendError::Closed));
            while let Some(t) = client.poll_transmit(now, &mut buf) {
                sent.push(buf[..t.len].to_vec());
            }
        }
        assert!(!sent[0].is_empty(), "the client sent its messages");
        assert_eq!(sent[0], sent[1], "the hints changed what went out");
        let client_at = CLIENT.parse().unwrap();
        let mut events = Vec::new();
        for (server, sent) in [&mut plain_server, &mut hinted_server].into_iter().zip(&sent) {
            for bytes in sent {
                server.handle_datagram(now, client_at, bytes);
            }
            events.push(std::iter::from_fn(|| server.poll_event()).collect::<Vec<_>>());
        }
        let delivered = events[0].iter().filter(|(_, e)| matches!(e, Event::Message { .. }));
        assert_eq!(delivered.count(), 4, "{:?}", events[0]);
        assert_eq!(events[0], events[1]);
    }

    /// Goal: the peer table finds each peer by its whole address (IPv4 or IPv6, ports that
    /// differ by one, an IPv6 scope) and its hash depends on the endpoint's secret, so that
    /// a sender who does not know it cannot aim addresses at one bucket. Method: 4,000
    /// addresses in a table keyed from one secret, each looked up; their hashes under two
    /// secrets.
    #[test]
    fn the_peer_table_finds_every_address_and_its_hash_is_keyed_by_the_secret() {
        use std::hash::BuildHasher;
        use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6};
        let addresses: Vec<SocketAddr> = (0..1_000u16)
            .flat_map(|k| {
                let v4 = Ipv4Addr::new(10, 0, (k >> 8) as u8, k as u8);
                let v6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, k);
                [
                    SocketAddr::from((v4, 4000)),
                    SocketAddr::from((v4, 4001)),
                    SocketAddr::from((v6, 4000)),
                    SocketAddr::V6(SocketAddrV6::new(v6, 4000, 0, 1)),
                ]
            })
            .collect();
        let (one, other) = (PeerHash::from_secret(&[1; 16]), PeerHash::from_secret(&[2; 16]));
        let mut table = HashMap::with_hasher(one);
        for (slot, &address) in addresses.iter().enumerate() {
            table.insert(PeerAddr(address), slot);
        }
        for (slot, &address) in addresses.iter().enumerate() {
            assert_eq!(table.get(&PeerAddr(address)), Some(&slot), "{address}");
            let (a, b) = (one.hash_one(PeerAddr(address)), other.hash_one(PeerAddr(address)));
            assert_eq!(a, one.hash_one(PeerAddr(address)), "one address, one hash");
            assert_ne!(a, b, "{address}: the same hash under another secret");
        }
        let hashes: std::collections::HashSet<u64> =
            addresses.iter().map(|&a| one.hash_one(PeerAddr(a))).collect();
        assert_eq!(hashes.len(), addresses.len(), "two addresses with one 64-bit hash");
    }

    /// An address of a small pool: IPv4 ones sharing addresses and ports (runs of probes,
    /// words that differ in one bit) and a few IPv6 ones.
    fn pooled_peer(k: u8) -> SocketAddr {
        use std::net::{Ipv4Addr, Ipv6Addr};
        match k % 8 {
            7 => SocketAddr::from((Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(k)), 4000)),
            _ => SocketAddr::from((Ipv4Addr::new(10, 0, 0, k % 16), 4000 + u16::from(k / 16))),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        #[test]
        fn the_peer_table_answers_as_a_hash_map(
            secret in proptest::prelude::any::<[u8; 16]>(),
            steps in proptest::collection::vec((0u8..3, 0u8..96, 0usize..1_000), 1..400),
        ) {
            // Goal: the flat IPv4 table and its removal without tombstones find what a
            // `HashMap` of whole addresses finds, through growth and peers that come and go.
            // Method: the same inserts and removals on both (96 addresses, mostly IPv4, up
            // to 84 of them at once), then every address of the pool looked up in each.
            let mut table = PeerTable::new(PeerHash::from_secret(&secret));
            let mut model = HashMap::new();
            for (op, k, slot) in steps {
                let peer = pooled_peer(k);
                match op {
                    0 => {
                        table.insert(peer, slot);
                        model.insert(peer, slot);
                    }
                    1 => {
                        table.remove(peer);
                        model.remove(&peer);
                    }
                    _ => {}
                }
                for k in 0..96 {
                    let peer = pooled_peer(k);
                    proptest::prop_assert_eq!(table.get(peer), model.get(&peer).copied());
                }
                let v4 = model.keys().filter(|p| p.is_ipv4()).count();
                proptest::prop_assert_eq!(table.v4_len, v4);
                proptest::prop_assert!(table.v4_len * 2 <= table.v4.len(), "over half full");
            }
        }
    }

    /// One message each way on a sealed pair (short tags allowed as given): the sizes of the
    /// datagrams that carried them, client's then server's, once each was delivered.
    fn message_sizes(client_short: bool, server_short: bool) -> [usize; 2] {
        let (mut client, mut server, handle, now) = sealed_pair_with(client_short, server_short);
        let (client_at, server_at) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        let served = std::iter::from_fn(|| server.poll_event())
            .find_map(|(handle, event)| (event == Event::Connected).then_some(handle))
            .expect("the server saw the client connect");
        let mut buf = [0u8; 1500];
        client.send(handle, 0, b"a message up").unwrap();
        let up = client.poll_transmit(now, &mut buf).expect("the message goes out").len;
        server.handle_datagram(now, client_at, &buf[..up]);
        let delivered = std::iter::from_fn(|| server.poll_event()).any(|(_, event)| {
            matches!(event, Event::Message { payload, .. } if payload == b"a message up")
        });
        assert!(delivered, "the server got the client's message");
        server.send(served, 0, b"a message down").unwrap();
        let down = server.poll_transmit(now, &mut buf).expect("the message goes out").len;
        client.handle_datagram(now, server_at, &buf[..down]);
        let delivered = std::iter::from_fn(|| client.poll_event()).any(|(_, event)| {
            matches!(event, Event::Message { payload, .. } if payload == b"a message down")
        });
        assert!(delivered, "the client got the server's message");
        [up, down]
    }

    /// Goal: short tags are used only when both ends allow them: then every data packet is 4
    /// bytes shorter both ways and still delivers; a server that does not allow them keeps 16
    /// bytes when the client asks, and a client that does not ask gets 16 from a server that
    /// allows them. Method: one message each way on sealed pairs (the same seeds, so the same
    /// headers), the datagrams' sizes compared.
    #[test]
    fn short_tags_take_four_bytes_off_data_packets_only_when_both_ends_allow_them() {
        let full = message_sizes(false, false);
        assert_eq!(message_sizes(true, true), full.map(|len| len - 4), "both allow");
        assert_eq!(message_sizes(true, false), full, "the server declines");
        assert_eq!(message_sizes(false, true), full, "the client does not ask");
    }

    /// Goal: a data packet with a short tag that was altered anywhere (header, ciphertext,
    /// tag) is a counted drop, never a delivery; the unaltered packet still delivers after.
    /// Method: a pair with short tags; the client's message packet with one bit flipped at
    /// each position in turn, each handed to the server, then the original.
    #[test]
    fn an_altered_short_tag_packet_is_a_counted_drop() {
        let (mut client, mut server, handle, now) = sealed_pair_with(true, true);
        while server.poll_event().is_some() {}
        let client_at = CLIENT.parse().unwrap();
        let mut buf = [0u8; 1500];
        client.send(handle, 0, b"do not alter").unwrap();
        let len = client.poll_transmit(now, &mut buf).expect("the message goes out").len;
        let packet = buf[..len].to_vec();
        let before = server.stats().unauthenticated;
        for i in 0..len {
            let mut altered = packet.clone();
            altered[i] ^= 1 << (i % 8);
            server.handle_datagram(now, client_at, &altered);
            let events: Vec<_> = std::iter::from_fn(|| server.poll_event()).collect();
            assert!(events.is_empty(), "byte {i} altered: {events:?}");
        }
        // A flipped type byte makes another header form (or none): dropped either way, but not
        // every such drop is an authentication failure.
        assert!(server.stats().unauthenticated - before >= len as u64 - 1);
        server.handle_datagram(now, client_at, &packet);
        let delivered = std::iter::from_fn(|| server.poll_event())
            .any(|(_, event)| matches!(event, Event::Message { .. }));
        assert!(delivered, "the unaltered packet delivers");
    }

    /// Goal: a connection the server closes is forgotten once its disconnect copies are out,
    /// though its peer is gone and never sends again: its slot must not wait for a datagram
    /// that never comes. Method: a sealed pair; the server disconnects the client and is told,
    /// then runs alone for a second (its datagrams go nowhere), draining its events each turn.
    #[test]
    fn a_connection_closed_here_is_forgotten_after_its_disconnect_copies_with_the_peer_gone() {
        let (_client, mut server, _, mut now) = sealed_pair();
        let handle = std::iter::from_fn(|| server.poll_event())
            .find_map(|(handle, event)| (event == Event::Connected).then_some(handle))
            .expect("the server saw the client connect");
        server.disconnect(handle, DisconnectReason::Closed);
        // Told at once, as a host that closes it while handling its events is, before the
        // copies go.
        let mut told = std::iter::from_fn(|| server.poll_event()).count();
        let (mut buf, mut sent) = ([0u8; 1500], 0);
        // A host's turn: what is due goes out, the events are handled, then the timers.
        for _ in 0..100 {
            while server.poll_transmit(now, &mut buf).is_some() {
                sent += 1;
            }
            while let Some((_, event)) = server.poll_event() {
                told += usize::from(matches!(event, Event::Disconnected { .. }));
            }
            now += Duration::from_millis(10);
            server.handle_timeout(now);
        }
        assert!(sent > 0, "the disconnect was sent");
        assert_eq!(told, 1, "the application is told once");
        assert!(server.connection(handle).is_none(), "the closed connection is still held");
    }

    /// Goal: the quality a host samples from each connection (`Connection::quality`) is the
    /// round-trip time, its deviation and the loss that the whole statistics give, on a path
    /// with delay and loss. Method: a sealed pair; the server's datagrams reach the client
    /// 10 ms late and one of the client's in 5 is lost, while the client sends every
    /// millisecond for 400 ms; then the client's quality against its statistics.
    #[test]
    fn a_connection_s_quality_is_its_statistics_rtt_deviation_and_loss() {
        let (mut client, mut server, handle, mut now) = sealed_pair();
        let (client_at, server_at) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        let mut buf = [0u8; 1500];
        let mut late: std::collections::VecDeque<(Instant, Vec<u8>)> = Default::default();
        let mut sent = 0;
        for _ in 0..400 {
            client.send(handle, 0, b"input").unwrap();
            client.handle_timeout(now);
            server.handle_timeout(now);
            while let Some(t) = client.poll_transmit(now, &mut buf) {
                sent += 1;
                if sent % 5 != 0 {
                    server.handle_datagram(now, client_at, &buf[..t.len]);
                }
            }
            while let Some(t) = server.poll_transmit(now, &mut buf) {
                late.push_back((now + Duration::from_millis(10), buf[..t.len].to_vec()));
            }
            while late.front().is_some_and(|(at, _)| *at <= now) {
                let (_, bytes) = late.pop_front().unwrap();
                client.handle_datagram(now, server_at, &bytes);
            }
            while server.poll_event().is_some() || client.poll_event().is_some() {}
            now += Duration::from_millis(1);
        }
        let connection = client.connection(handle).unwrap();
        let (quality, stats) = (connection.quality(), connection.stats());
        assert!(stats.rtt >= Duration::from_millis(10) && stats.loss > 0.0, "{stats:?}");
        let (rtt, rtt_variance, loss) = (stats.rtt, stats.rtt_variance, stats.loss);
        assert_eq!(quality, crate::Quality { rtt, rtt_variance, loss });
    }

    /// Goal: every endpoint field is checked, and `Endpoint::new` refuses what fails.
    /// Method: the default with one field out of range at a time.
    #[test]
    fn an_endpoint_is_never_built_from_an_invalid_config() {
        let d = EndpointConfig::default;
        let none = Rate { per_second: 0.0, burst: 5.0 };
        let cases = [
            ("connections_max", EndpointConfig { connections_max: 0, ..d() }),
            ("replies_max", EndpointConfig { replies_max: 0, ..d() }),
            ("rate_sources_max", EndpointConfig { rate_sources_max: 0, ..d() }),
            ("cookie_lifetime", EndpointConfig { cookie_lifetime: Duration::ZERO, ..d() }),
            ("handshake_timeout", EndpointConfig { handshake_timeout: Duration::ZERO, ..d() }),
            (
                "handshake_resend_interval",
                EndpointConfig { handshake_resend_interval: Duration::from_secs(9), ..d() },
            ),
            ("packet_rate.per_second", EndpointConfig { packet_rate: none, ..d() }),
            ("handshake_rate.per_second", EndpointConfig { handshake_rate: none, ..d() }),
            (
                "packet_rate.burst",
                EndpointConfig { packet_rate: Rate { per_second: 1.0, burst: 0.5 }, ..d() },
            ),
            (
                "mtu",
                EndpointConfig {
                    connection: ConnectionConfig { mtu: 10, ..Default::default() },
                    ..d()
                },
            ),
        ];
        for (field, config) in cases {
            assert_eq!(field_of(config.validate()), Some(field));
            assert!(Endpoint::new(config, seeded(1)).is_err(), "{field}");
        }
        assert!(Endpoint::new(d(), seeded(1)).is_ok());
    }

    /// Goal: a sealed connection carries a message of many fragments (each full piece leaves
    /// room for the tag) both ways. Method: a token handshake, then a 20,000-byte message from
    /// the client and its echo, on a perfect network.
    #[test]
    fn a_sealed_connection_carries_fragmented_messages() {
        let (mut client, mut server, handle, mut now) = sealed_pair();
        let message: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
        client.send(handle, 0, &message).unwrap();
        let mut echoed = None;
        for _ in 0..20 {
            exchange(&mut client, &mut server, now);
            while let Some((from, event)) = server.poll_event() {
                if let Event::Message { payload, .. } = event {
                    server.send(from, 0, &payload).unwrap();
                }
            }
            while let Some((_, event)) = client.poll_event() {
                if let Event::Message { payload, .. } = event {
                    echoed = Some(payload);
                }
            }
            now += Duration::from_millis(1);
        }
        assert_eq!(echoed.as_deref(), Some(message.as_slice()));
        assert_eq!(server.footprint().receive_bytes, 0, "nothing left in reassembly");
    }

    /// Goal: a payload given back with `recycle` carries the connection's next message, exactly
    /// that message's bytes however long the one before, and a message in many pieces still
    /// arrives whole. Method: messages of 300, 20 and 300 bytes, then 20,000, each payload
    /// recycled after it is read; the next one's buffer is the one given back.
    #[test]
    fn a_recycled_payload_carries_the_next_message_and_only_it() {
        let (mut client, mut server, handle, mut now) = sealed_pair();
        let lengths = [300usize, 20, 300, 20_000];
        let mut given_back = None;
        for (n, len) in lengths.into_iter().enumerate() {
            let message: Vec<u8> = (0..len).map(|i| (i * 5 + n) as u8).collect();
            client.send(handle, 0, &message).unwrap();
            let mut received = None;
            for _ in 0..20 {
                exchange(&mut client, &mut server, now);
                now += Duration::from_millis(1);
                while let Some((from, event)) = server.poll_event() {
                    if let Event::Message { channel, payload } = event {
                        assert_eq!(payload, message, "message {n}");
                        if len < 1000 && n > 0 {
                            assert_eq!(Some(payload.as_ptr()), given_back, "message {n} reused");
                        }
                        given_back = Some(payload.as_ptr());
                        received = Some(n);
                        server.recycle(from, channel, payload);
                    }
                }
            }
            assert_eq!(received, Some(n), "message {n} arrived");
        }
    }

    /// Goal: events are told straight from their connection's queue, so messages that arrive
    /// while a caller is part way through telling them (between two `poll_event` calls) are
    /// told too, after the earlier ones and in order, none twice. Method: three messages in,
    /// one told, two more in, then everything told.
    #[test]
    fn messages_arriving_while_events_are_told_follow_in_order() {
        let (mut client, mut server, handle, mut now) = sealed_pair();
        let mut told = Vec::new();
        let mut tell = |server: &mut Endpoint, most: usize| {
            for _ in 0..most {
                let Some((_, event)) = server.poll_event() else { break };
                if let Event::Message { payload, .. } = event {
                    told.push(payload[0]);
                }
            }
        };
        for n in 0..3u8 {
            client.send(handle, 0, &[n]).unwrap();
        }
        exchange(&mut client, &mut server, now);
        tell(&mut server, 1);
        now += Duration::from_millis(1);
        for n in 3..5u8 {
            client.send(handle, 0, &[n]).unwrap();
        }
        exchange(&mut client, &mut server, now);
        tell(&mut server, usize::MAX);
        assert_eq!(told, [0, 1, 2, 3, 4]);
        assert!(server.poll_event().is_none());
    }

    /// Goal: a connection with more than a packet to send sends all of it in the same instant
    /// (the check that spares a second look at a slot never holds a packet back). Method: a
    /// 20,000-byte message, about 17 packets, delivered by one exchange at one instant.
    #[test]
    fn a_message_of_many_packets_goes_out_at_one_instant() {
        let (mut client, mut server, handle, now) = sealed_pair();
        let message: Vec<u8> = (0..20_000u32).map(|i| (i * 3) as u8).collect();
        client.send(handle, 0, &message).unwrap();
        exchange(&mut client, &mut server, now);
        let mut received = None;
        while let Some((_, event)) = server.poll_event() {
            if let Event::Message { payload, .. } = event {
                received = Some(payload);
            }
        }
        assert_eq!(received.as_deref(), Some(message.as_slice()));
    }

    /// Goal: every packet a host owes an ack for is acked by `ack_delay_max` after it came,
    /// whether the ack rides on the host's own sends or goes alone, with the host asleep until
    /// `next_wake` between its ticks (the owed-ack timer is armed, pushed later by each send,
    /// and armed again when its old entry surfaces). Method: a client's input every 5 ms; the
    /// server's snapshot every 7 ms, silent one stretch of 21 ms in three; each input's
    /// arrival against the server's first datagram at or after it.
    #[test]
    fn every_owed_ack_leaves_by_its_deadline_with_the_host_asleep_until_next_wake() {
        let (mut client, mut server, handle, start) = sealed_pair();
        let server_handle = std::iter::from_fn(|| server.poll_event())
            .find_map(|(handle, event)| (event == Event::Connected).then_some(handle))
            .unwrap();
        let (client_at, server_at) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        let (input, tick) = (Duration::from_millis(5), Duration::from_millis(7));
        let (mut next_input, mut next_tick, mut ticks) = (start, start, 0u32);
        let (mut arrivals, mut acked_at) = (Vec::new(), Vec::new());
        let mut buf = [0u8; 1500];
        let (mut now, end) = (start, start + Duration::from_secs(2));
        for _ in 0..100_000 {
            if now >= end {
                break;
            }
            client.handle_timeout(now);
            let sent_input = now == next_input;
            if sent_input {
                client.send(handle, 1, b"input").unwrap();
                next_input += input;
            }
            while let Some(t) = client.poll_transmit(now, &mut buf) {
                server.handle_datagram(now, client_at, &buf[..t.len]);
            }
            if sent_input {
                arrivals.push(now);
            }
            server.handle_timeout(now);
            if now == next_tick {
                if ticks % 9 < 6 {
                    server.send(server_handle, 1, b"snapshot").unwrap();
                }
                ticks += 1;
                next_tick += tick;
            }
            while let Some(t) = server.poll_transmit(now, &mut buf) {
                client.handle_datagram(now, server_at, &buf[..t.len]);
                acked_at.push(now);
            }
            let client_wake = client.poll_timeout().unwrap_or(next_input);
            now = server.next_wake(next_tick).min(next_input).min(client_wake.max(now));
            while server.poll_event().is_some() || client.poll_event().is_some() {}
        }
        assert!(now >= end, "stuck at {now}");
        let ack_delay_max = ConnectionConfig::default().ack_delay_max;
        assert!(arrivals.len() > 300, "{} inputs", arrivals.len());
        for at in arrivals.into_iter().filter(|&at| at + ack_delay_max < end) {
            let ack = acked_at.iter().find(|&&sent| sent >= at);
            assert!(ack.is_some_and(|&ack| ack <= at + ack_delay_max), "input at {at}: {ack:?}");
        }
    }

    /// Goal: a server answers an unverified source with no more bytes than it sent, and keeps
    /// nothing for it. Method: padded connect requests without a token, with one, and a
    /// full server; each reply's size against the request's.
    #[test]
    fn replies_to_strangers_are_never_larger_than_their_requests() {
        let config = EndpointConfig { security: Security::DangerPlaintext, ..Default::default() };
        let mut server = Endpoint::new(config, seeded(3)).unwrap();
        let mut buf = [0u8; 1500];
        for i in 0..20u16 {
            let request = Packet::ConnectRequest { nonce: u64::from(i), token: None };
            let len = request.encode(&mut buf).unwrap();
            let from = SocketAddr::from(([10, 0, 9, 1], 5000 + i));
            let datagram = buf[..len].to_vec();
            server.handle_datagram(Instant::ZERO, from, &datagram);
            while let Some(t) = server.poll_transmit(Instant::ZERO, &mut buf) {
                assert!(t.len <= datagram.len(), "{} bytes for {}", t.len, datagram.len());
            }
        }
        assert_eq!(server.footprint().slots, 0, "a challenge keeps nothing");
    }

    /// Goal: `connections_max` refuses the connection past it, with a reason the client sees.
    /// Method: a plaintext server allowing one connection; two clients connect in turn.
    #[test]
    fn connections_past_connections_max_are_refused_as_server_full() {
        let security = || Security::DangerPlaintext;
        let config =
            EndpointConfig { security: security(), connections_max: 1, ..Default::default() };
        let mut server = Endpoint::new(config, seeded(5)).unwrap();
        let server_at: SocketAddr = SERVER.parse().unwrap();
        let mut clients: Vec<(Endpoint, SocketAddr)> = (0..2u16)
            .map(|i| {
                let config = EndpointConfig { security: security(), ..Default::default() };
                let client = Endpoint::new(config, seeded(10 + u64::from(i))).unwrap();
                (client, SocketAddr::from(([10, 0, 0, 1], 4000 + i)))
            })
            .collect();
        let mut buf = [0u8; 1500];
        let mut now = Instant::ZERO;
        let mut refused = false;
        for (i, (client, _)) in clients.iter_mut().enumerate() {
            client.connect(now + Duration::from_millis(50 * i as u64), server_at);
        }
        for _ in 0..200 {
            for (client, at) in &mut clients {
                client.handle_timeout(now);
                while let Some(t) = client.poll_transmit(now, &mut buf) {
                    server.handle_datagram(now, *at, &buf[..t.len]);
                }
            }
            server.handle_timeout(now);
            while let Some(t) = server.poll_transmit(now, &mut buf) {
                let (client, _) = clients.iter_mut().find(|(_, at)| *at == t.destination).unwrap();
                client.handle_datagram(now, server_at, &buf[..t.len]);
            }
            while server.poll_event().is_some() {}
            while let Some((_, event)) = clients[1].0.poll_event() {
                refused |= event == Event::Disconnected { reason: DisconnectReason::ServerFull };
            }
            now += Duration::from_millis(1);
        }
        assert!(refused, "the second client was not told the server is full");
        assert!(server.stats().refused_full >= 1);
        assert_eq!(server.footprint().slots, 1);
    }

    /// Goal: `replies_max` bounds the handshake replies waiting; the rest are dropped and
    /// counted. Method: five connect requests from five addresses before anything is sent.
    #[test]
    fn replies_past_replies_max_are_dropped_and_counted() {
        let security = Security::DangerPlaintext;
        let config = EndpointConfig { security, replies_max: 2, ..Default::default() };
        let mut server = Endpoint::new(config, seeded(6)).unwrap();
        let mut buf = [0u8; 1500];
        let len = Packet::ConnectRequest { nonce: 1, token: None }.encode(&mut buf).unwrap();
        for i in 0..5u16 {
            server.handle_datagram(
                Instant::ZERO,
                SocketAddr::from(([10, 1, 0, 1], i + 1)),
                &buf[..len],
            );
        }
        assert_eq!(server.footprint().replies, 2);
        assert_eq!(server.stats().replies_dropped, 3);
    }
}
