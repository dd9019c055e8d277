//! # rally-proto
//!
//! Rally's transport, sans-IO: it never opens a socket, never reads a clock and never spawns a
//! thread. Time comes in as an argument ([`Instant`], nanoseconds from an arbitrary origin),
//! randomness from a seed, datagrams as byte slices. That is what lets `rally-sim` run it in
//! virtual time and replay any run from its seed; `rally-driver` puts it on a UDP socket.
//!
//! ## The contract
//!
//! An [`Endpoint`] is one socket's protocol state and serves any number of connections. Its
//! methods come in four kinds:
//!
//! - inputs: [`Endpoint::handle_datagram`], [`Endpoint::handle_timeout`], and the application's
//!   [`Endpoint::connect`], [`Endpoint::send`] (or [`Endpoint::send_buffer`], which hands the
//!   message's buffer itself to the send queue instead of copying it, and gives back an empty
//!   one for the next message; or [`Endpoint::send_parts`], a head of the message's own and a
//!   body shared with other messages, copied from there into the packet),
//!   [`Endpoint::disconnect`];
//! - outputs: [`Endpoint::poll_transmit`] (a datagram to send), [`Endpoint::poll_event`]
//!   (connected, message, disconnected); a message's payload, once read, may go back through
//!   [`Endpoint::recycle`], so that the next message on its channel needs no allocation;
//! - the next deadline: [`Endpoint::poll_timeout`];
//! - inspection: [`Endpoint::connection`] (statistics), [`Endpoint::stats`] (dropped input);
//! - hints, which change nothing: [`Endpoint::prefetch`], for a host that reads datagrams in
//!   batches (`recvmmsg`): called for each datagram of a batch before the first is handed over,
//!   it asks the core for their connections' lines at once. On the send side,
//!   [`Endpoint::prefetch_connection`] well before messages are built for a connection (a
//!   room calls it for each client before it builds the snapshots), then
//!   [`Endpoint::prefetch_queue`] for each message just before the first is queued. Without
//!   them, queueing a message still asks for the first lines its packet will read.
//!
//! **After every input, drain `poll_transmit` and `poll_event` until both return `None`, then
//! ask `poll_timeout` and wait for a datagram or that deadline, whichever comes first.**
//!
//! ```
//! use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
//! use rally_proto::{Endpoint, EndpointConfig, EndpointRandomness, Event, Instant};
//! use rally_proto::{Security, TokenKey};
//! use std::time::Duration;
//!
//! let (client_addr, server_addr) = ("10.0.0.1:4000".parse()?, "10.0.0.2:7777".parse()?);
//! // The game's backend and its server share a key; the backend issues the client a token.
//! // (In production the key and the token's randomness come from the OS.)
//! let (key, protocol_id, unix_now) = (TokenKey([7; 32]), 42, 1_800_000_000);
//! let grant = Grant {
//!     client_id: 1,
//!     room_id: 0,
//!     user_data: [0; USER_DATA_LEN],
//!     server_addresses: vec![server_addr],
//!     timeout_s: 5,
//! };
//! let random = TokenRandomness {
//!     nonce: [1; 24],
//!     client_to_server_key: [2; 32],
//!     server_to_client_key: [3; 32],
//! };
//! let token = token::issue(&key, protocol_id, &grant, unix_now, 30, &random)?;
//! let security =
//!     Security::Tokens { key, protocol_id, address: server_addr, unix_at_zero: unix_now };
//! // A simulation seeds its secrets; a server in production takes them from the OS.
//! let seeded = EndpointRandomness::danger_from_seed;
//! let server_config = EndpointConfig { security, ..EndpointConfig::default() };
//! let mut server = Endpoint::new(server_config, seeded(2))?;
//! let mut client = Endpoint::new(EndpointConfig::default(), seeded(1))?;
//! let handle = client.connect_with_token(Instant::ZERO, token)?;
//!
//! let mut now = Instant::ZERO;
//! let mut buf = [0u8; 1500];
//! let mut echoed = None;
//! for _ in 0..100 {
//!     // A perfect network: every datagram arrives at once.
//!     while let Some(t) = client.poll_transmit(now, &mut buf) {
//!         server.handle_datagram(now, client_addr, &buf[..t.len]);
//!     }
//!     while let Some(t) = server.poll_transmit(now, &mut buf) {
//!         client.handle_datagram(now, server_addr, &buf[..t.len]);
//!     }
//!     while let Some((from, event)) = server.poll_event() {
//!         if let Event::Message { channel, payload } = event {
//!             server.send(from, channel, &payload)?; // echo
//!         }
//!     }
//!     while let Some((_, event)) = client.poll_event() {
//!         match event {
//!             Event::Connected => client.send(handle, 0, b"hello")?,
//!             Event::Message { payload, .. } => echoed = Some(payload),
//!             Event::Disconnected { reason } => panic!("{reason:?}"),
//!         }
//!     }
//!     // Nothing left to do now: jump to the next deadline.
//!     let next = [client.poll_timeout(), server.poll_timeout()].into_iter().flatten().min();
//!     now = next.unwrap_or(now).max(now + Duration::from_micros(1));
//!     client.handle_timeout(now);
//!     server.handle_timeout(now);
//! }
//! assert_eq!(echoed.as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Streaming repair
//!
//! With [`ConnectionConfig::repair`] set to [`Repair::adaptive`] (both ends alike; off by
//! default, so that peers without it are unaffected), a reliable-ordered channel on a lossy
//! path sends, 2 ms after each message, a repair in a packet of its own: a random linear
//! combination over GF(2^8) of every message not yet acknowledged. One repair fills any one
//! hole, so a message lost with its repair is recovered by the next message's repair, one send
//! interval later, instead of a round trip later. The receiver delivers a decoded message only
//! after checking it, acknowledges what it decoded (a repair that fills no hole asks for no
//! ack: one more packet on the path may hold back the data behind it), and reports the holes
//! its repairs do not cover, which the sender answers at once. Repairs stop when the measured
//! loss falls to zero, and stay within a byte budget. [`repair`] has the code and its limits,
//! docs/protocol.md section 6a the wire.
//!
//! ## Errors
//!
//! Bad input from the network never panics: a datagram that does not decode, or arrives where
//! it makes no sense, is counted in [`EndpointStats`] and dropped; a peer that breaks the
//! protocol inside a connection is disconnected with [`DisconnectReason::PeerMisbehaved`]. The
//! application's mistakes and full queues are [`SendError`]s. Every queue and buffer has a named
//! limit in [`ConnectionConfig`] or [`EndpointConfig`], checked by their `validate()`.
//! docs/protocol.md specifies the wire format.
//!
//! ## Connect tokens
//!
//! [`token`] issues and opens netcode.io-style connect tokens: a backend and its servers share
//! a key, and a server lets in only clients the backend issued a token to, without asking it.
//! A server with [`Security::Tokens`] requires them (the default, [`Security::NoKey`], refuses
//! everyone until given its key), and every packet of such a connection is sealed with
//! AES-256-GCM under the token's keys, a key sealing [`PACKETS_PER_KEY_MAX`] packets at most
//! (the connection closes before). docs/security.md lists what is defended.
//!
//! ## Secrets
//!
//! [`Endpoint::new`] takes its secrets as input ([`EndpointRandomness`]): the driver fills them
//! from the OS's randomness, 16 bytes of cookie secret of their own, and refuses to start
//! without; simulations choose [`EndpointRandomness::danger_from_seed`] so that a seed replays
//! a run. An invalid configuration is a [`ConfigError`] naming the field, never a panic.
//!
//! ## What a peer can make an endpoint hold
//!
//! Every limit guards the receiving side too. Strangers cost nothing until their handshake
//! completes (a stateless cookie), and each table is bounded ([`Footprint`]). Inside a
//! connection, a fragment announcing a message larger than `message_bytes_max` closes it as
//! [`DisconnectReason::PeerMisbehaved`]; what it holds in reassembly and behind gaps is bounded
//! by [`ConnectionConfig::receive_bytes_max`], and a reliable piece refused for want of room is
//! left unacked, so that the sender resends it and nothing is lost.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod acks;
mod channel;
pub mod config;
pub mod connection;
mod crypto;
pub mod endpoint;
mod gf256;
pub mod limit;
pub mod observe;
pub mod packet;
pub mod repair;
mod schedule;
pub mod time;
pub mod token;

pub use config::{ChannelConfig, ChannelKind, ConfigError, ConnectionConfig, Redundancy, Repair};
pub use connection::{Connection, ConnectionStats, Event, Quality, SendError};
pub use crypto::{danger_seal, open_captured, PACKETS_PER_KEY_MAX};
pub use endpoint::{
    ConnectionHandle, Endpoint, EndpointConfig, EndpointRandomness, EndpointStats, Footprint,
    Security, Transmit,
};
pub use observe::{Stage, StageObserver};
pub use packet::DisconnectReason;
pub use time::Instant;
pub use token::{ConnectToken, Grant, PrivateToken, TokenError, TokenKey, TokenRandomness};
