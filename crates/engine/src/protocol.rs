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
use rally_wire::varint::read_varint;
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
/// frame's allocation and its free. Each input is read by `decode_input`
/// ([`Simulation::decode_input`](crate::Simulation::decode_input): the game's, which may read
/// a fixed layout rather than through serde). `None` (and `inputs` empty) if the frame is
/// malformed, larger or holds more inputs: the count is checked before any input is decoded.
///
/// Out of line, as it has been in every build profiled: whether the compiler inlined it into
/// `Room::receive` moved with unrelated code, and each form's count with it.
#[inline(never)]
pub(crate) fn decode_frame_into<I>(
    payload: &[u8],
    bytes_max: usize,
    inputs_max: usize,
    inputs: &mut Vec<I>,
    decode_input: impl Fn(&[u8]) -> Option<(I, &[u8])>,
) -> Option<FrameHead> {
    inputs.clear();
    let head = decode_frame(payload, bytes_max, inputs_max, inputs, decode_input);
    if head.is_none() {
        inputs.clear();
    }
    debug_assert!(inputs.len() <= inputs_max, "a frame's inputs past inputs_max");
    head
}

/// [`decode_frame_into`]'s work, leaving what it decoded of a bad frame in `inputs`.
fn decode_frame<I>(
    payload: &[u8],
    bytes_max: usize,
    inputs_max: usize,
    inputs: &mut Vec<I>,
    decode_input: impl Fn(&[u8]) -> Option<(I, &[u8])>,
) -> Option<FrameHead> {
    if payload.len() > bytes_max {
        return None;
    }
    let (head, count, mut rest) = decode_head(payload)?;
    // The count is the peer's: the limit stops the decode, not only the room.
    if count > inputs_max as u64 {
        return None;
    }
    for _ in 0..count {
        let (input, after) = decode_input(rest)?;
        inputs.push(input);
        rest = after;
    }
    Some(head)
}

/// An input frame's head as postcard reads the [`InputFrame`] struct's fields in order: the
/// acknowledged snapshot (an option: a byte 0 or 1, then the value), the first input's
/// sequence, the inputs' count (postcard's varint of a `usize`, a u64 on 64-bit targets);
/// then the bytes after it. Read by hand, by postcard's rules (the same bytes accepted and
/// refused: a test holds it to postcard), because serde's generic reader cost about 100
/// instructions a frame and moved with unrelated code around it.
#[inline(always)]
fn decode_head(payload: &[u8]) -> Option<(FrameHead, u64, &[u8])> {
    let (&tag, rest) = payload.split_first()?;
    let (snapshot_ack, rest) = match tag {
        0 => (None, rest),
        1 => {
            let (ack, rest) = take_varint::<32>(rest)?;
            (Some(ack as u32), rest)
        }
        _ => return None,
    };
    let (first_seq, rest) = take_varint::<32>(rest)?;
    let (count, rest) = take_varint::<64>(rest)?;
    Some((FrameHead { snapshot_ack, first_seq: first_seq as u32 }, count, rest))
}

/// A varint as postcard reads one of a `BITS`-bit type: at most `BITS / 7` bytes rounded up,
/// the last of which may carry no bits past the type (postcard's rule, overlong forms
/// accepted as postcard accepts them); the value and the bytes after it.
#[inline(always)]
fn take_varint<const BITS: u32>(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let max_bytes = BITS.div_ceil(7) as usize;
    let last_max = (1u8 << (BITS % 7)) - 1;
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().take(max_bytes).enumerate() {
        value |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            if i == max_bytes - 1 && byte > last_max {
                return None;
            }
            return Some((value, bytes.get(i + 1..)?));
        }
    }
    None
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

/// [`rally_wire::varint::write_varint`] into `buf` at `at`, inlined (every client's snapshot
/// starts with a prefix, every tick: the calls cost more than the writes). Returns the length
/// written up to; a varint that does not fit is not counted, as that function refuses it.
#[inline(always)]
fn put_varint(buf: &mut [u8; STATE_PREFIX_MAX], at: usize, value: u64) -> usize {
    let (mut rest, mut i) = (value, at);
    while let Some(byte) = buf.get_mut(i) {
        let low = (rest & 0x7F) as u8;
        rest >>= 7;
        if rest == 0 {
            *byte = low;
            return i + 1;
        }
        *byte = low | 0x80;
        i += 1;
    }
    at
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
        let reflected = self.reflected.map_or(0, |s| u64::from(s) + 1);
        // The buffer holds the largest prefix, so no write runs out of room.
        let mut len = put_varint(&mut buf, 0, reflected);
        len = put_varint(&mut buf, len, self.holds_len as u64);
        for hold in &self.holds[..self.holds_len.min(HOLDS_MAX)] {
            len = put_varint(&mut buf, len, u64::from(*hold));
        }
        // The whole buffer, then cut to the prefix: a copy of a constant size is two vector
        // moves, where a copy of `len` bytes was a call to `memcpy` (every client, every tick).
        let start = out.len();
        out.extend_from_slice(&buf);
        out.truncate(start + len);
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
    use proptest::prelude::*;

    /// The head as postcard itself reads it, for [`decode_head`] to be held to.
    fn postcard_head(payload: &[u8]) -> Option<(FrameHead, u64, &[u8])> {
        let mut decoder = postcard::Deserializer::from_bytes(payload);
        let snapshot_ack = Option::<u32>::deserialize(&mut decoder).ok()?;
        let first_seq = u32::deserialize(&mut decoder).ok()?;
        let count = u64::deserialize(&mut decoder).ok()?;
        Some((FrameHead { snapshot_ack, first_seq }, count, decoder.finalize().ok()?))
    }

    /// A varint's bytes as postcard writes them, then a byte or two that may be long forms.
    fn varint_like() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<u64>().prop_map(|v| postcard::to_allocvec(&v).expect("a u64 encodes")),
            any::<u32>().prop_map(|v| postcard::to_allocvec(&v).expect("a u32 encodes")),
            proptest::collection::vec(any::<u8>(), 0..12),
            proptest::collection::vec(prop_oneof![Just(0x80u8), Just(0xFF), Just(0x0F)], 0..12),
            // Continuation bytes, then a last byte: at a type's last place (the fifth of a
            // u32, the tenth of a u64) most last bytes carry bits past the type.
            (prop_oneof![Just(4usize), Just(9), 0usize..11], any::<u8>(), 0u8..0x80).prop_map(
                |(n, low, last)| {
                    let mut bytes = vec![0x80 | low; n];
                    bytes.push(last);
                    bytes
                }
            ),
        ]
    }

    #[test]
    fn a_head_varint_at_its_types_last_place_is_read_as_postcard_reads_it() {
        // Goal: the edges the property below rarely draws. The fifth byte of a u32 carries 4
        // bits (0x0F), the tenth of a u64 one (0x01): one more is refused; fewer bytes or an
        // overlong form are accepted, as postcard accepts them.
        let wide = |n: usize, last: u8| [vec![0x80; n], vec![last]].concat();
        let heads = [
            [vec![0], wide(4, 0x0F), vec![0]].concat(),
            [vec![0], wide(4, 0x10), vec![0]].concat(),
            [vec![1], wide(4, 0x0F), vec![1, 0]].concat(),
            [vec![1], wide(4, 0x10), vec![1, 0]].concat(),
            [vec![0, 1], wide(9, 0x01)].concat(),
            [vec![0, 1], wide(9, 0x02)].concat(),
            [vec![0, 1], wide(10, 0x00)].concat(),
            vec![0, 0x80, 0x00, 0x00, 0xAB],
            vec![2, 0, 0],
            vec![1],
            vec![],
        ];
        for head in &heads {
            assert_eq!(decode_head(head), postcard_head(head), "{head:02x?}");
        }
        assert!(decode_head(&heads[0]).is_some() && decode_head(&heads[1]).is_none());
        assert!(decode_head(&heads[4]).is_some() && decode_head(&heads[5]).is_none());
    }

    proptest! {
        // Goal: the hand-written head read accepts exactly what postcard accepts, with the same
        // values and the same rest, on well-formed heads, truncated ones, overlong and
        // over-wide varints (the fifth byte of a u32, the tenth of a u64) and plain noise.
        #[test]
        fn the_head_is_read_as_postcard_reads_it(
            tag in prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
            parts in proptest::collection::vec(varint_like(), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut payload = vec![tag];
            for part in &parts {
                payload.extend_from_slice(part);
            }
            let payload = &payload[..cut.index(payload.len() + 1)];
            prop_assert_eq!(decode_head(payload), postcard_head(payload));
        }
    }

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

    /// The prefix is its varints one after another (docs/protocol.md): the reflected input plus
    /// one (0 for none), the count, then each hold; the largest values take five bytes each.
    #[test]
    fn state_prefix_bytes_are_its_varints_in_order() {
        let edges = [0, 1, 127, 128, 16_383, 16_384, u32::MAX - 1, u32::MAX];
        for (k, &value) in edges.iter().enumerate() {
            for holds_len in 0..=HOLDS_MAX {
                // Past the count, zeros: what a read gives back.
                let holds = std::array::from_fn(|h| match h < holds_len {
                    true => edges[(k + h) % edges.len()],
                    false => 0,
                });
                let reflected = (k % 3 != 0).then_some(value);
                let prefix = StatePrefix { reflected, holds, holds_len };
                let mut expected = Vec::new();
                let values = [reflected.map_or(0, |s| u64::from(s) + 1), holds_len as u64];
                let holds = holds[..holds_len].iter().map(|h| u64::from(*h));
                for value in values.into_iter().chain(holds) {
                    let mut varint = [0u8; 10];
                    let n = rally_wire::varint::write_varint(value, &mut varint).unwrap();
                    expected.extend_from_slice(&varint[..n]);
                }
                let mut bytes = vec![7];
                prefix.write(&mut bytes);
                assert_eq!(bytes[1..], expected[..], "{prefix:?}");
                assert_eq!(StatePrefix::read(&bytes[1..]), Some((prefix, expected.len())));
            }
        }
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
        fn serde(bytes: &[u8]) -> Option<([u8; 2], &[u8])> {
            postcard::take_from_bytes(bytes).ok()
        }
        let head = decode_frame_into(&bytes, 64, 3, &mut buffer, serde);
        assert_eq!(head, Some(FrameHead { snapshot_ack: Some(300), first_seq: 70_000 }));
        assert_eq!(buffer, inputs);
        for (payload, bytes_max, inputs_max) in [
            (&bytes[..], 64, 2),                // one input past the limit
            (&bytes[..], bytes.len() - 1, 3),   // one byte past the size limit
            (&bytes[..bytes.len() - 1], 64, 3), // cut in the last input
        ] {
            buffer = vec![[9, 9]];
            let head = decode_frame_into(payload, bytes_max, inputs_max, &mut buffer, serde);
            assert_eq!((head, buffer.len()), (None, 0), "{payload:?} {bytes_max} {inputs_max}");
        }
    }
}
