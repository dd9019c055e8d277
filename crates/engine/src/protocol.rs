//! What the engine sends over a connection: its channels and the framing of each message.
//!
//! - [`RELIABLE`] (reliable-ordered): the join handshake and reliable RPCs, as an envelope.
//! - [`STATE`] (unreliable-sequenced): snapshots down, input frames up; each supersedes the
//!   previous one, so a late one is worthless and never delivered after a newer one.
//! - [`UNRELIABLE`]: unreliable RPCs, as an envelope.
//! - [`FAST`] (unreliable): fast-path poses: the sender's id and last input (varints, the input
//!   plus one) and a full snapshot of the grab chain its input moved.
//!
//! A snapshot message is a varint (the last input sequence the server applied for this
//! client, plus one; zero if none) followed by the wire layer's snapshot (docs/wire.md).

use rally_proto::{ChannelConfig, ChannelKind, ConnectionConfig};
use serde::{Deserialize, Serialize};

/// Channel of the join handshake and reliable RPCs.
pub const RELIABLE: u8 = 0;
/// Channel of snapshots (server to client) and input frames (client to server).
pub const STATE: u8 = 1;
/// Channel of unreliable RPCs.
pub const UNRELIABLE: u8 = 2;
/// Channel of fast-path poses (server to client, [`crate::Pipeline::Fast`]).
pub const FAST: u8 = 3;

/// The connection settings both ends of an engine connection use: the default transport
/// settings with the engine's three channels. Snapshots and inputs outrank RPCs when a packet
/// has room for only some of what waits, since they are what latency is measured on.
pub fn connection_config() -> ConnectionConfig {
    ConnectionConfig {
        channels: vec![
            ChannelConfig { kind: ChannelKind::ReliableOrdered, priority: 1 },
            ChannelConfig { kind: ChannelKind::UnreliableSequenced, priority: 2 },
            ChannelConfig { kind: ChannelKind::Unreliable, priority: 0 },
            ChannelConfig { kind: ChannelKind::Unreliable, priority: 3 },
        ],
        ..ConnectionConfig::default()
    }
}

/// A session a client may resume after its connection dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTicket {
    /// The client's id in its room.
    pub client: u32,
    /// The secret the room gave it, so that nobody else resumes its session.
    pub secret: u64,
}

/// A message on the reliable or the unreliable RPC channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Envelope {
    /// Client to server, first message of a connection.
    Hello { resume: Option<SessionTicket> },
    /// Server to client: the session, and the room's tick rate.
    Welcome { ticket: SessionTicket, tick_rate: u32, resumed: bool },
    /// A one-way message (an event).
    Message(Vec<u8>),
    /// A request that expects a response with the same id.
    Request { id: u32, payload: Vec<u8> },
    /// The response to request `id`.
    Response { id: u32, payload: Vec<u8> },
}

/// Client to server on [`STATE`]: the newest inputs, sent again until the server reports them
/// applied, so that a lost packet costs nothing; and the newest snapshot the client holds,
/// which the server deltas against.
///
/// Encoded with postcard rather than the user-message codec (bitcode through serde): a frame
/// arrives from every client every tick, and on a two-input frame postcard decodes in about
/// 40 ns where bitcode's serde path takes about 600 (measured on this project's machine), at
/// the same size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct InputFrame<I> {
    /// The tick of the newest snapshot the client decoded.
    pub snapshot_ack: Option<u32>,
    /// The sequence number of `inputs[0]`; the rest follow in order.
    pub first_seq: u32,
    pub inputs: Vec<I>,
}

/// Encodes an input frame.
pub(crate) fn encode_frame<I: Serialize>(frame: &InputFrame<&I>) -> Option<Vec<u8>> {
    postcard::to_allocvec(frame).ok()
}

/// Decodes an input frame of at most `bytes_max` bytes; `None` if it is malformed or larger.
pub(crate) fn decode_frame<I: serde::de::DeserializeOwned>(
    payload: &[u8],
    bytes_max: usize,
) -> Option<InputFrame<I>> {
    if payload.len() > bytes_max {
        return None;
    }
    postcard::from_bytes(payload).ok()
}
