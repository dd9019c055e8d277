//! What the engine sends over a connection: its channels and the framing of each message.
//!
//! - [`RELIABLE`] (reliable-ordered): the join handshake and reliable RPCs, as an envelope.
//! - [`STATE`] (unreliable-sequenced): snapshots down, input frames up; each supersedes the
//!   previous one, so a late one is worthless and never delivered after a newer one.
//! - [`UNRELIABLE`]: unreliable RPCs, as an envelope.
//! - [`FAST`] (unreliable): fast-path poses: the sender's id, its last input plus one and the
//!   microseconds since the tick the poses are labelled with (varints), and a full snapshot of
//!   the grab chain its input moved.
//!
//! A snapshot message starts with a `StatePrefix`: a varint (the last input sequence the
//! server applied for this client, plus one; zero if none), a count (at most four)
//! and that many varints, the server's hold of the newest inputs this snapshot is the first to
//! report, in microseconds, newest first. The wire layer's snapshot follows (docs/wire.md).
//! The holds let the client's latency meter split each input's latency into the network's
//! round trip and the server's wait without synchronized clocks, as QUIC's ack delay does.

use rally_proto::{ChannelConfig, ChannelKind, ConnectionConfig};
use rally_wire::hex;
use rally_wire::varint::{read_varint, write_varint};
use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::time::Duration;

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

/// What an input frame says besides its inputs, which [`decode_frame_into`] puts in the
/// caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHead {
    /// The tick of the newest snapshot the client decoded.
    pub snapshot_ack: Option<u32>,
    /// The sequence number of the first input.
    pub first_seq: u32,
}

/// Decodes an input frame of at most `bytes_max` bytes holding at most `inputs_max` inputs,
/// the same bytes as an [`InputFrame`], its inputs appended to `inputs` (emptied first) in
/// order: a room decodes a frame from every client every tick, and a reused buffer saves the
/// frame's allocation and its free. `None` (and `inputs` empty) if the frame is malformed,
/// larger or holds more inputs: decoding stops at the first input past `inputs_max`.
pub(crate) fn decode_frame_into<I: serde::de::DeserializeOwned>(
    payload: &[u8],
    bytes_max: usize,
    inputs_max: usize,
    inputs: &mut Vec<I>,
) -> Option<FrameHead> {
    inputs.clear();
    if payload.len() > bytes_max {
        return None;
    }
    let mut decoder = postcard::Deserializer::from_bytes(payload);
    let head = FrameSeed { inputs: &mut *inputs, inputs_max }.deserialize(&mut decoder).ok();
    if head.is_none() {
        inputs.clear();
    }
    debug_assert!(inputs.len() <= inputs_max, "a frame's inputs past inputs_max");
    head
}

/// Decodes an [`InputFrame`]'s three fields in order (postcard reads a struct as a tuple),
/// the inputs into a buffer of the caller's.
struct FrameSeed<'a, I> {
    inputs: &'a mut Vec<I>,
    inputs_max: usize,
}

impl<'de, I: Deserialize<'de>> DeserializeSeed<'de> for FrameSeed<'_, I> {
    type Value = FrameHead;

    fn deserialize<D: Deserializer<'de>>(self, decoder: D) -> Result<FrameHead, D::Error> {
        decoder.deserialize_tuple(3, self)
    }
}

impl<'de, I: Deserialize<'de>> Visitor<'de> for FrameSeed<'_, I> {
    type Value = FrameHead;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an input frame")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut fields: A) -> Result<FrameHead, A::Error> {
        let missing = |k| serde::de::Error::invalid_length(k, &"an input frame's three fields");
        let snapshot_ack = fields.next_element::<Option<u32>>()?.ok_or_else(|| missing(0))?;
        let first_seq = fields.next_element::<u32>()?.ok_or_else(|| missing(1))?;
        let inputs = InputsSeed { inputs: self.inputs, inputs_max: self.inputs_max };
        fields.next_element_seed(inputs)?.ok_or_else(|| missing(2))?;
        Ok(FrameHead { snapshot_ack, first_seq })
    }
}

/// An input frame's list of inputs, pushed onto a buffer of the caller's, `inputs_max` at most.
struct InputsSeed<'a, I> {
    inputs: &'a mut Vec<I>,
    inputs_max: usize,
}

impl<'de, I: Deserialize<'de>> DeserializeSeed<'de> for InputsSeed<'_, I> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, decoder: D) -> Result<(), D::Error> {
        decoder.deserialize_seq(self)
    }
}

impl<'de, I: Deserialize<'de>> Visitor<'de> for InputsSeed<'_, I> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of inputs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while let Some(input) = items.next_element::<I>()? {
            // The count is the peer's: the limit stops the decode, not only the room.
            if self.inputs.len() == self.inputs_max {
                let expected = "at most inputs_per_frame_max inputs";
                return Err(serde::de::Error::invalid_length(self.inputs.len() + 1, &expected));
            }
            self.inputs.push(input);
        }
        Ok(())
    }
}

/// Inputs whose server hold one snapshot reports at most.
pub(crate) const HOLDS_MAX: usize = 4;
/// The longest [`StatePrefix`] in bytes: three varints' worth of u32 each, and the count.
pub(crate) const STATE_PREFIX_MAX: usize = 5 + 1 + HOLDS_MAX * 5;
// The count takes one byte as a varint only below 128.
const _: () = assert!(HOLDS_MAX < 128);

/// What a snapshot message says before its snapshot: the input it reflects and how long the
/// server held the newest inputs before sending it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StatePrefix {
    /// The last input applied for this client.
    pub reflected: Option<u32>,
    /// Holds of `reflected`, `reflected - 1`, ..., microseconds; `holds_len` of them.
    pub holds: [u32; HOLDS_MAX],
    pub holds_len: usize,
}

impl StatePrefix {
    /// The server's hold of input `seq`, if this prefix reports it.
    pub fn hold(&self, seq: u32) -> Option<Duration> {
        let back = self.reflected?.wrapping_sub(seq) as usize;
        let micros = self.holds[..self.holds_len].get(back)?;
        Some(Duration::from_micros(u64::from(*micros)))
    }

    /// Appends the prefix to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut buf = [0u8; STATE_PREFIX_MAX];
        let mut len = 0;
        let reflected = self.reflected.map_or(0, |s| u64::from(s) + 1);
        let holds = self.holds[..self.holds_len.min(HOLDS_MAX)].iter().map(|h| u64::from(*h));
        for value in [reflected, self.holds_len as u64].into_iter().chain(holds) {
            // The buffer holds the largest prefix, so no write runs out of room.
            len += write_varint(value, &mut buf[len..]).unwrap_or(0);
        }
        out.extend_from_slice(&buf[..len]);
    }

    /// Reads a prefix; returns it and its length, or `None` if it is malformed.
    pub fn read(payload: &[u8]) -> Option<(Self, usize)> {
        let (reflected, mut len) = read_varint(payload).ok()?;
        let (count, n) = read_varint(payload.get(len..)?).ok()?;
        len += n;
        let mut prefix = StatePrefix {
            reflected: reflected.checked_sub(1).map(u32::try_from).transpose().ok()?,
            holds_len: usize::try_from(count).ok().filter(|c| *c <= HOLDS_MAX)?,
            ..Self::default()
        };
        for hold in &mut prefix.holds[..prefix.holds_len] {
            let (value, n) = read_varint(payload.get(len..)?).ok()?;
            *hold = u32::try_from(value).ok()?;
            len += n;
        }
        Some((prefix, len))
    }
}

/// A hold in whole microseconds, saturating: a hold past an hour says enough.
pub(crate) fn hold_micros(hold: Duration) -> u32 {
    u32::try_from(hold.as_micros()).unwrap_or(u32::MAX)
}

/// Which way a message went: [`STATE`] carries snapshots one way and input frames the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

/// The debug (JSON) form of one engine message, as `rally inspect` prints each frame of a
/// datagram: envelopes by kind, snapshots with their prefix and entities (see
/// [`rally_wire::debug::inspect_snapshot`]), input frames and fast-path poses by their
/// fields. A game's own types (its inputs, its RPC payloads) show as bytes: the engine does
/// not know them. What does not decode shows as an error beside its bytes in hex.
pub fn inspect(
    channel: u8,
    direction: Direction,
    payload: &[u8],
    snapshot: &rally_wire::SnapshotConfig,
) -> serde_json::Value {
    let result = match (channel, direction) {
        (RELIABLE | UNRELIABLE, _) => rally_wire::MessageCodec::default()
            .decode::<Envelope>(payload)
            .map(|e| envelope_json(&e))
            .map_err(|e| e.to_string()),
        (STATE, Direction::ToClient) => state_json(payload, snapshot),
        (STATE, Direction::ToServer) => input_frame_json(payload),
        (FAST, _) => fast_json(payload, snapshot),
        _ => Err(format!("channel {channel} is not one of the engine's")),
    };
    result.unwrap_or_else(|error| {
        serde_json::json!({ "error": error, "bytes": payload.len(), "hex": hex::encode(payload) })
    })
}

fn envelope_json(envelope: &Envelope) -> serde_json::Value {
    use serde_json::json;
    match envelope {
        Envelope::Hello { resume } => json!({ "hello": { "resume": resume } }),
        Envelope::Welcome { ticket, tick_rate, resumed } => json!({
            "welcome": { "client": ticket.client, "tick_rate": tick_rate, "resumed": resumed }
        }),
        Envelope::Message(payload) => json!({ "message": { "payload_hex": hex::encode(payload) } }),
        Envelope::Request { id, payload } => {
            json!({ "request": { "id": id, "payload_hex": hex::encode(payload) } })
        }
        Envelope::Response { id, payload } => {
            json!({ "response": { "id": id, "payload_hex": hex::encode(payload) } })
        }
    }
}

fn state_json(
    payload: &[u8],
    config: &rally_wire::SnapshotConfig,
) -> Result<serde_json::Value, String> {
    let (prefix, len) =
        StatePrefix::read(payload).ok_or("a snapshot prefix that does not parse")?;
    let snapshot = rally_wire::debug::inspect_snapshot(config, &payload[len..])
        .map_err(|e| format!("snapshot: {e}"))?;
    Ok(serde_json::json!({
        "snapshot": {
            "reflects_input": prefix.reflected,
            "holds_us": &prefix.holds[..prefix.holds_len],
            "state": snapshot,
        }
    }))
}

fn input_frame_json(payload: &[u8]) -> Result<serde_json::Value, String> {
    let ((snapshot_ack, first_seq), rest) =
        postcard::take_from_bytes::<(Option<u32>, u32)>(payload).map_err(|e| e.to_string())?;
    let (inputs, used) = read_varint(rest).map_err(|e| format!("input count: {e}"))?;
    Ok(serde_json::json!({
        "input_frame": {
            "snapshot_ack": snapshot_ack,
            "first_seq": first_seq,
            "inputs": inputs,
            "inputs_hex": hex::encode(&rest[used..]),
        }
    }))
}

fn fast_json(
    payload: &[u8],
    config: &rally_wire::SnapshotConfig,
) -> Result<serde_json::Value, String> {
    let (client, seq, offset, chain) =
        crate::client::parse_fast(payload).ok_or("a fast-path header that does not parse")?;
    let chain =
        rally_wire::debug::inspect_snapshot(config, chain).map_err(|e| format!("chain: {e}"))?;
    Ok(serde_json::json!({
        "fast_path": {
            "client": client,
            "input": seq,
            "after_tick_us": offset.as_micros() as u64,
            "chain": chain,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/protocol.md section 16 gives these bytes to clients in other languages (the
    /// conformance client sends them): a change of the envelope's encoding must change the page.
    #[test]
    fn a_hello_without_a_session_is_the_bytes_the_protocol_page_gives() {
        let hello = rally_wire::MessageCodec::default()
            .encode(&Envelope::Hello { resume: None })
            .expect("a hello encodes");
        assert_eq!(hex::encode(&hello), "0000");
    }

    #[test]
    fn state_prefix_round_trips_and_refuses_bad_bytes() {
        let prefix = StatePrefix { reflected: Some(41), holds: [3, 8_000, 0, 0], holds_len: 2 };
        let mut bytes = Vec::new();
        prefix.write(&mut bytes);
        bytes.extend_from_slice(b"snapshot");
        let (read, len) = StatePrefix::read(&bytes).unwrap();
        assert_eq!(read, prefix);
        assert_eq!(&bytes[len..], b"snapshot");
        assert_eq!(read.hold(41), Some(Duration::from_micros(3)));
        assert_eq!(read.hold(40), Some(Duration::from_millis(8)));
        assert_eq!(read.hold(39), None, "older than the holds reported");
        assert_eq!(read.hold(42), None, "newer than the input reflected");
        // More holds than any server sends, and a prefix cut short.
        assert_eq!(StatePrefix::read(&[42, HOLDS_MAX as u8 + 1, 1, 1, 1, 1, 1]), None);
        assert_eq!(StatePrefix::read(&bytes[..3]), None);
        let none = StatePrefix::read(&[0, 0]).unwrap().0;
        assert_eq!((none.reflected, none.hold(0)), (None, None));
    }

    #[test]
    fn every_message_kind_inspects_and_garbage_says_so() {
        let config = rally_wire::SnapshotConfig::default();
        let codec = rally_wire::MessageCodec::default();
        let welcome = Envelope::Welcome {
            ticket: SessionTicket { client: 3, secret: 9 },
            tick_rate: 120,
            resumed: false,
        };
        let bytes = codec.encode(&welcome).unwrap();
        let value = inspect(RELIABLE, Direction::ToClient, &bytes, &config);
        assert_eq!(value["welcome"]["client"], 3);
        assert_eq!(value["welcome"]["tick_rate"], 120);
        let input = [1u8, 2];
        let frame = InputFrame { snapshot_ack: Some(7), first_seq: 40, inputs: vec![&input] };
        let bytes = encode_frame(&frame).unwrap();
        let value = inspect(STATE, Direction::ToServer, &bytes, &config);
        assert_eq!(value["input_frame"]["snapshot_ack"], 7);
        assert_eq!(value["input_frame"]["first_seq"], 40);
        assert_eq!(value["input_frame"]["inputs"], 1);
        let mut bytes = Vec::new();
        StatePrefix { reflected: Some(5), holds: [250, 0, 0, 0], holds_len: 1 }.write(&mut bytes);
        let mut snapshot = rally_wire::Snapshot::new(12);
        let state = rally_wire::EntityState {
            id: 4,
            position: glam::Vec3::new(1.0, 2.0, 3.0),
            rotation: glam::Quat::IDENTITY,
            linear_velocity: glam::Vec3::ZERO,
            angular_velocity: glam::Vec3::ZERO,
        };
        snapshot.push(config.quantize(&state)).unwrap();
        let mut buf = [0u8; 256];
        let len = config.encode_full(&snapshot, &mut buf).unwrap();
        bytes.extend_from_slice(&buf[..len]);
        let value = inspect(STATE, Direction::ToClient, &bytes, &config);
        assert_eq!(value["snapshot"]["reflects_input"], 5);
        assert_eq!(value["snapshot"]["holds_us"][0], 250);
        assert_eq!(value["snapshot"]["state"]["entities"][0]["id"], 4);
        for channel in [RELIABLE, STATE, FAST, 9] {
            let value = inspect(channel, Direction::ToClient, &[0xff, 0xfe, 0x01], &config);
            assert!(value["error"].is_string(), "channel {channel}: {value}");
            assert_eq!(value["hex"], "fffe01");
        }
    }

    /// The reused-buffer decode reads exactly what `encode_frame` writes, stops at the limit,
    /// and leaves nothing behind from a frame it refuses.
    #[test]
    fn a_frame_decodes_into_a_buffer_and_a_bad_one_leaves_it_empty() {
        let inputs = [[1u8, 2], [3, 4], [5, 6]];
        let frame = InputFrame {
            snapshot_ack: Some(300),
            first_seq: 70_000,
            inputs: inputs.iter().collect(),
        };
        let bytes = encode_frame(&frame).unwrap();
        let mut buffer = vec![[9u8, 9]];
        let head = decode_frame_into::<[u8; 2]>(&bytes, 64, 3, &mut buffer);
        assert_eq!(head, Some(FrameHead { snapshot_ack: Some(300), first_seq: 70_000 }));
        assert_eq!(buffer, inputs);
        for (payload, bytes_max, inputs_max) in [
            (&bytes[..], 64, 2),                // one input past the limit
            (&bytes[..], bytes.len() - 1, 3),   // one byte past the size limit
            (&bytes[..bytes.len() - 1], 64, 3), // cut in the last input
        ] {
            buffer = vec![[9, 9]];
            let head = decode_frame_into::<[u8; 2]>(payload, bytes_max, inputs_max, &mut buffer);
            assert_eq!((head, buffer.len()), (None, 0), "{payload:?} {bytes_max} {inputs_max}");
        }
    }
}
