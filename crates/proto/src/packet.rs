//! The datagram format: handshake packets, data packets with acks, and the frames inside them.
//! Byte-aligned and little-endian; docs/protocol.md specifies it (draft 2: the short data
//! header `0x17` and the last-frame forms `0x80 | channel` and `0xC0 | channel`; decoders
//! accept every draft-1 form too).
//!
//! Every decoder takes untrusted bytes and returns a [`PacketError`] naming what was wrong; none
//! panics or allocates.

use crate::token::SEALED_LEN;
use rally_wire::varint::{read_varint, write_varint};

/// Identifies Rally datagrams ("RLY1"); handshake packets carry it so that stray traffic is
/// dropped at the first check.
pub const PROTOCOL_ID: u32 = 0x3159_4C52;
/// The size every handshake packet from a client is padded to, so that a server never answers
/// an unverified address with more bytes than it received (amplification at most 1).
/// Room for a connect token's sealed part and the fields around it.
pub const CLIENT_HANDSHAKE_SIZE: usize = 640;
/// Bytes the AEAD tag adds to an encrypted packet.
pub const TAG_SIZE: usize = 16;
/// Bytes of the tag on a data packet of a connection whose ends both allow short tags
/// (`ConnectionConfig::short_tag`): AES-GCM's tag cut to 96 bits. Handshake packets and
/// sealed disconnects keep [`TAG_SIZE`].
pub const TAG_SIZE_SHORT: usize = 12;
/// Bit 0 of a challenge response's options byte: the client proposes short tags.
const OPTION_SHORT_TAG: u8 = 0x01;
/// Bytes of a data packet's header at most: type, sequence, ack, ack bits, ack delay.
pub const DATA_HEADER_SIZE: usize = 1 + 2 + 2 + 4 + 2;
/// Bytes of the short data header (`0x17`): type, sequence, ack, 16 ack bits, a one-byte ack
/// delay.
pub const DATA_HEADER_SHORT_SIZE: usize = 1 + 2 + 2 + 2 + 1;
/// Bytes of the narrow data header (`0x18`, sealed connections only): the short header with
/// the sequence's low 8 bits.
pub const DATA_HEADER_NARROW_SIZE: usize = 1 + 1 + 2 + 2 + 1;
/// Packets a sender may have sent past the newest one its peer acknowledged for its next to
/// go out with the narrow header: the peer restores the sequence from the largest it has
/// authenticated, which is at most this far behind.
pub const NARROW_SEQ_AHEAD_MAX: u16 = 128;
/// The longest ack delay the short header carries, in units of 8 microseconds (132.096 ms).
pub const SHORT_DELAY_MAX: u16 = 129 * 128;
/// Bytes a message frame adds to its payload at most (type, channel, sequence, 3-byte length).
pub const MESSAGE_FRAME_OVERHEAD_MAX: usize = 1 + 1 + 2 + 3;
/// Bytes a fragment frame adds to its payload at most.
pub const FRAGMENT_FRAME_OVERHEAD_MAX: usize = MESSAGE_FRAME_OVERHEAD_MAX + 2;
/// Bytes of the largest reply a server sends an unverified address: a challenge (type,
/// protocol id, nonce, cookie expiry and tag).
pub const CHALLENGE_SIZE: usize = 1 + 4 + 8 + 8 + 16;
// Anti-amplification: every reply to a padded handshake packet is smaller than it.
const _: () = assert!(CHALLENGE_SIZE <= CLIENT_HANDSHAKE_SIZE);
// A message frame's 3-byte length prefix carries any piece of a 65,000-byte MTU.
const _: () = assert!(MESSAGE_FRAME_OVERHEAD_MAX == 1 + 1 + 2 + 3);

const TYPE_CONNECT_REQUEST: u8 = 0x10;
const TYPE_CHALLENGE: u8 = 0x11;
const TYPE_CHALLENGE_RESPONSE: u8 = 0x12;
const TYPE_DATA: u8 = 0x13;
const TYPE_DISCONNECT: u8 = 0x14;
/// A data packet sent before anything was received from the peer, so with nothing to ack.
const TYPE_DATA_NO_ACKS: u8 = 0x15;
/// A disconnect authenticated with the connection's key: reason, sequence, tag.
const TYPE_DISCONNECT_SEALED: u8 = 0x16;
/// A data packet with the short header: 16 ack bits and a one-byte ack delay.
const TYPE_DATA_SHORT: u8 = 0x17;
/// The short header with only the sequence's low 8 bits: sealed connections only, where a
/// wrongly restored sequence fails authentication.
const TYPE_DATA_NARROW: u8 = 0x18;

const FRAME_MESSAGE: u8 = 0x01;
const FRAME_FRAGMENT: u8 = 0x02;
const FRAME_PING: u8 = 0x03;
const FRAME_REPAIR: u8 = 0x04;
const FRAME_REPAIR_ACK: u8 = 0x05;
/// `0x80 | channel`: a message frame without channel byte or length, running to the end of the
/// packet (channels below 64).
const FRAME_MESSAGE_LAST: u8 = 0x80;
/// `0xC0 | channel`: a repair frame without seed (the packet's sequence is the seed) or
/// length, running to the end of the packet (channels below 64).
const FRAME_REPAIR_LAST: u8 = 0xC0;
/// Channels the last-frame forms can name: six bits.
pub const LAST_FORM_CHANNELS: u8 = 64;
/// A repair frame's bytes before its data: type, channel, window start u16, count, seed u16,
/// and a length varint of up to three bytes (the draft-1 form; the last-frame form a
/// connection writes takes 4).
pub const REPAIR_FRAME_OVERHEAD_MAX: usize = 1 + 1 + 2 + 1 + 2 + 3;
/// A repair ack frame's bytes: type, channel, next u16, shortfall.
pub const REPAIR_ACK_FRAME_SIZE: usize = 1 + 1 + 2 + 1;

/// Why bytes are not a valid packet or frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// The datagram ended inside `what`.
    #[error("truncated {what}")]
    Truncated {
        /// The field that was cut short.
        what: &'static str,
    },
    /// The first byte is no packet type Rally knows.
    #[error("unknown packet type {0:#04x}")]
    UnknownType(u8),
    /// A handshake packet without Rally's protocol id.
    #[error("protocol id {0:#010x} is not Rally's")]
    WrongProtocol(u32),
    /// A client handshake packet shorter than the padding requires.
    #[error("handshake packet of {0} bytes is below the required {CLIENT_HANDSHAKE_SIZE}")]
    Unpadded(usize),
    /// A frame type Rally does not know.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrame(u8),
    /// A length or index field is out of range.
    #[error("{what} out of range")]
    OutOfRange {
        /// The field.
        what: &'static str,
    },
    /// The output buffer is too small for the packet.
    #[error("output buffer too small")]
    BufferTooSmall,
}

/// A stateless handshake cookie: when it expires and a tag binding it to the client's address
/// and nonce under the server's secret (see [`crate::endpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cookie {
    /// Expiry, milliseconds of the server's clock.
    pub expiry_ms: u64,
    /// The tag.
    pub tag: [u8; 16],
}

/// Why a connection ended, as sent in a disconnect packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DisconnectReason {
    /// The application closed the connection.
    Closed,
    /// Nothing was heard from the peer for the timeout.
    TimedOut,
    /// The peer sent data that broke the protocol.
    PeerMisbehaved,
    /// The server has no room for another connection.
    ServerFull,
    /// The server is shutting down.
    ServerShutdown,
    /// The room the connection was in failed (its game code panicked) and was closed; the
    /// server and its other rooms run on.
    RoomFailed,
    /// A reason code this version does not know.
    Unknown(u8),
}

impl DisconnectReason {
    fn code(self) -> u8 {
        match self {
            DisconnectReason::Closed => 0,
            DisconnectReason::TimedOut => 1,
            DisconnectReason::PeerMisbehaved => 2,
            DisconnectReason::ServerFull => 3,
            DisconnectReason::ServerShutdown => 4,
            DisconnectReason::RoomFailed => 5,
            DisconnectReason::Unknown(code) => code,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            0 => DisconnectReason::Closed,
            1 => DisconnectReason::TimedOut,
            2 => DisconnectReason::PeerMisbehaved,
            3 => DisconnectReason::ServerFull,
            4 => DisconnectReason::ServerShutdown,
            5 => DisconnectReason::RoomFailed,
            other => DisconnectReason::Unknown(other),
        }
    }
}

/// The header of a data packet: its sequence and the acks it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataHeader {
    /// This packet's sequence number; of a narrow header as decoded, its low 8 bits, until the
    /// receiver restores the rest.
    pub seq: u16,
    /// Whether the header carries only the sequence's low 8 bits (`0x18`), when its acks fit
    /// the short form. Only sealed connections send and take it: the packet number the
    /// receiver restores is the AEAD nonce, so a wrong one fails authentication.
    pub narrow: bool,
    /// What the sender has received, unless it has received nothing yet. (An "ack 0" in a
    /// packet that acks nothing would falsely ack the peer's first packet.)
    pub acks: Option<Acks>,
}

/// The ack fields of a data packet. They go out in the short header (`0x17`) when `bits` has
/// nothing above bit 15 and `delay` is at most [`SHORT_DELAY_MAX`] (rounded down to the short
/// header's steps, [`short_delay`]), else in the long one (`0x13`). A connection clears the
/// bits above 15 when its peer knows them already (docs/protocol.md section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Acks {
    /// The newest sequence received from the peer.
    pub ack: u16,
    /// Bit `i` set: sequence `ack - 1 - i` was received too.
    pub bits: u32,
    /// Time between receiving `ack` and sending this packet, in units of 8 microseconds, so
    /// that the peer's RTT sample excludes it.
    pub delay: u16,
}

/// The short header's delay byte for `delay` (units of 8 us), rounded down: 16 us steps below
/// 2.048 ms (bytes 0 to 127), then 1.024 ms steps (byte `b` is `(b - 126) * 1.024` ms) up to
/// 132.096 ms. `None` past that.
pub fn short_delay(delay: u16) -> Option<u8> {
    if delay < 256 {
        Some((delay / 2) as u8)
    } else if delay <= SHORT_DELAY_MAX {
        Some((delay / 128 + 126) as u8)
    } else {
        None
    }
}

/// The delay (units of 8 us) a short header's delay byte stands for.
pub fn short_delay_units(byte: u8) -> u16 {
    if byte < 128 {
        u16::from(byte) * 2
    } else {
        (u16::from(byte) - 126) * 128
    }
}

/// A connect token's sealed part as a client's handshake packets carry it (see
/// [`crate::token`]): what the server needs to open it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedToken<'a> {
    /// The game's protocol id the token was issued for.
    pub protocol_id: u64,
    /// When the token expires, Unix seconds.
    pub expires_at: u64,
    /// The sealing nonce.
    pub nonce: &'a [u8; 24],
    /// The sealed private part.
    pub sealed: &'a [u8; SEALED_LEN],
}

/// A decoded datagram, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    /// A client asks to connect.
    ConnectRequest {
        /// The client's random nonce, echoed by the server.
        nonce: u64,
        /// Its connect token, if it has one.
        token: Option<SealedToken<'a>>,
    },
    /// The server's stateless challenge.
    Challenge {
        /// The client's nonce.
        nonce: u64,
        /// The cookie the client must return.
        cookie: Cookie,
    },
    /// The client returns the cookie.
    ChallengeResponse {
        /// The client's nonce.
        nonce: u64,
        /// The cookie from the challenge.
        cookie: Cookie,
        /// Its connect token again (the server kept nothing), if it has one.
        token: Option<SealedToken<'a>>,
        /// The client proposes 12-byte tags on data packets ([`TAG_SIZE_SHORT`]): the options
        /// byte after the token, where an older client sends padding (zero) and an older
        /// server reads nothing.
        short_tag: bool,
    },
    /// Acks and frames.
    Data {
        /// Sequence and acks.
        header: DataHeader,
        /// The frames, to be read with [`Frames`].
        frames: &'a [u8],
    },
    /// The sender has closed the connection.
    Disconnect {
        /// Why.
        reason: DisconnectReason,
    },
    /// The sender has closed an encrypted connection: the packet is authenticated with its
    /// key, so nobody else can close it.
    DisconnectSealed {
        /// Why.
        reason: DisconnectReason,
        /// The packet's sequence (the low bits of its number, the nonce).
        seq: u16,
        /// The tag over the type, reason and sequence.
        tag: [u8; TAG_SIZE],
    },
}

/// One frame of a data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A whole message.
    Message {
        /// The channel index.
        channel: u8,
        /// The message's sequence on its channel.
        seq: u16,
        /// The message.
        payload: &'a [u8],
    },
    /// Asks for an ack at once; carries nothing else (a tail-loss probe).
    Ping,
    /// A piece of a message too large for one packet.
    Fragment {
        /// The channel index.
        channel: u8,
        /// The message's sequence on its channel.
        seq: u16,
        /// This piece's index.
        index: u8,
        /// How many pieces the message has.
        count: u8,
        /// The piece.
        payload: &'a [u8],
    },
    /// A random linear combination of the messages `start .. start + count` of a
    /// reliable-ordered channel (see [`crate::repair`]). Not ack-eliciting, unless it
    /// delivers a message.
    Repair {
        /// The channel index.
        channel: u8,
        /// The window's first message.
        start: u16,
        /// Messages in the window.
        count: u8,
        /// Picks the coefficients ([`crate::repair::coefficient`]).
        seed: u16,
        /// The combined symbols.
        data: &'a [u8],
    },
    /// The receiver's state of a repaired channel: every message before `next` was delivered,
    /// and `shortfall` more repairs would fill the holes it knows of. Not ack-eliciting.
    RepairAck {
        /// The channel index.
        channel: u8,
        /// The next message the receiver must deliver.
        next: u16,
        /// Holes not covered by the repairs it holds.
        shortfall: u8,
    },
}

impl Frame<'_> {
    /// Encodes the frame into `buf` and returns its length. A connection writes its own
    /// frames; this is for tools and for tests that play a peer.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, PacketError> {
        let mut w = Writer::new(buf);
        match *self {
            Frame::Message { channel, seq, payload } => {
                write_message(&mut w, channel, seq, [payload, &[]])?;
                // Not the last frame: the draft-1 form.
                w.widen_last_message();
            }
            Frame::Ping => write_ping(&mut w)?,
            Frame::Fragment { channel, seq, index, count, payload } => {
                write_fragment(&mut w, (channel, seq, index, count), payload)?
            }
            Frame::Repair { channel, start, count, seed, data } => {
                write_repair(&mut w, (channel, start, count, seed), data)?
            }
            Frame::RepairAck { channel, next, shortfall } => {
                write_repair_ack(&mut w, channel, next, shortfall)?
            }
        }
        Ok(w.len())
    }

    /// Encodes the frame as the last of data packet `packet_seq`, in its last-frame form when
    /// it has one (a message or a repair on a channel below 64, the repair's seed being
    /// `packet_seq`), else as [`Frame::encode`] does; returns its length. Nothing may follow
    /// it in the packet.
    pub fn encode_last(&self, buf: &mut [u8], packet_seq: u16) -> Result<usize, PacketError> {
        let mut w = Writer::new(buf);
        match *self {
            Frame::Message { channel, seq, payload } => {
                write_message(&mut w, channel, seq, [payload, &[]])?;
                w.finish();
            }
            Frame::Repair { channel, start, count, seed, data } if seed == packet_seq => {
                write_repair_last(&mut w, (channel, start, count, seed), data)?
            }
            _ => return self.encode(buf),
        }
        Ok(w.len())
    }
}

/// A cursor over untrusted bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], PacketError> {
        if self.bytes.len() < n {
            return Err(PacketError::Truncated { what });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, PacketError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, PacketError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, PacketError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, PacketError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("take returned eight bytes")))
    }

    // Inline: a message frame's length is read for every message, and the call cost half as
    // much as the read.
    #[inline]
    fn len(&mut self, what: &'static str) -> Result<usize, PacketError> {
        // A length below 128 (every input's) is its one byte: read here, not through the
        // general decoder's loop and `Result`, which took about 50 instructions a frame.
        if let [byte @ 0..=0x7F, rest @ ..] = self.bytes {
            self.bytes = rest;
            return Ok(usize::from(*byte));
        }
        let (value, used) = read_varint(self.bytes).map_err(|_| PacketError::Truncated { what })?;
        self.bytes = &self.bytes[used..];
        usize::try_from(value).map_err(|_| PacketError::OutOfRange { what })
    }

    /// A presence byte, then the token's fields if present.
    fn token(&mut self) -> Result<Option<SealedToken<'a>>, PacketError> {
        if self.u8("token flag")? == 0 {
            return Ok(None);
        }
        let protocol_id = self.u64("token protocol id")?;
        let expires_at = self.u64("token expiry")?;
        let nonce = self.take(24, "token nonce")?.try_into().expect("take returned 24 bytes");
        let sealed =
            self.take(SEALED_LEN, "sealed token")?.try_into().expect("take returned the length");
        Ok(Some(SealedToken { protocol_id, expires_at, nonce, sealed }))
    }

    fn cookie(&mut self) -> Result<Cookie, PacketError> {
        let expiry_ms = self.u64("cookie expiry")?;
        let tag = self.take(16, "cookie tag")?.try_into().expect("take returned 16 bytes");
        Ok(Cookie { expiry_ms, tag })
    }
}

/// A cursor over a caller-owned output buffer.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// The latest message frame, if its channel has a last-frame form: where it starts and
    /// its payload's length. It is written in that form (`0x80 | channel`, no channel byte, no
    /// length), which it keeps if nothing follows it; the next write turns it into the
    /// draft-1 form first. Most packets end with their one message: its payload is written
    /// once, not moved back by 2 to 4 bytes at the end.
    last_message: Option<(usize, usize)>,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, len: 0, last_message: None }
    }

    /// Ends a data packet: a message frame written last keeps its last-frame form.
    pub(crate) fn finish(&mut self) {
        self.last_message = None;
    }

    /// Bytes written, the last message in its last-frame form.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// What another frame may take: the last message's draft-1 form is kept room for, as it
    /// takes that form if anything follows it.
    pub(crate) fn remaining(&self) -> usize {
        let widen = self.last_message.map_or(0, |(_, len)| 1 + varint_len(len));
        self.buf.len() - self.len - widen
    }

    /// Turns the last message's frame into its draft-1 form: something follows it.
    fn widen_last_message(&mut self) {
        let Some((start, len)) = self.last_message.take() else { return };
        let (channel, seq) =
            (self.buf[start] & !FRAME_MESSAGE_LAST, [self.buf[start + 1], self.buf[start + 2]]);
        let mut prefix = [0u8; 10];
        let used = write_varint(len as u64, &mut prefix).expect("ten bytes hold any varint");
        let payload = start + 3;
        // Room was kept for it (`write_message`, `remaining`).
        self.buf.copy_within(payload..payload + len, payload + 1 + used);
        self.buf[start] = FRAME_MESSAGE;
        self.buf[start + 1] = channel;
        self.buf[start + 2..start + 4].copy_from_slice(&seq);
        self.buf[start + 4..start + 4 + used].copy_from_slice(&prefix[..used]);
        self.len += 1 + used;
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) -> Result<(), PacketError> {
        if self.last_message.is_some() {
            self.widen_last_message();
        }
        let end = self.len + bytes.len();
        self.buf.get_mut(self.len..end).ok_or(PacketError::BufferTooSmall)?.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// Writes a frame of a 3-byte `tag` then `head` then `body`, as three [`Writer::put`]s
    /// would, with one check for room and one for a message to widen (every packet out writes
    /// its snapshot so). Returns where the frame starts.
    fn put_frame(&mut self, tag: [u8; 3], [head, body]: [&[u8]; 2]) -> Result<usize, PacketError> {
        if self.last_message.is_some() {
            self.widen_last_message();
        }
        let start = self.len;
        let end = start + tag.len() + head.len() + body.len();
        let frame = self.buf.get_mut(start..end).ok_or(PacketError::BufferTooSmall)?;
        let (frame_tag, payload) = frame.split_at_mut(tag.len());
        let (frame_head, frame_body) = payload.split_at_mut(head.len());
        frame_tag.copy_from_slice(&tag);
        frame_head.copy_from_slice(head);
        frame_body.copy_from_slice(body);
        self.len = end;
        Ok(start)
    }

    fn len_prefix(&mut self, len: usize) -> Result<(), PacketError> {
        let mut tmp = [0u8; 10];
        let used = write_varint(len as u64, &mut tmp).expect("ten bytes hold any varint");
        self.put(&tmp[..used])
    }

    fn pad_to(&mut self, size: usize) -> Result<(), PacketError> {
        while self.len < size {
            self.put(&[0])?;
        }
        Ok(())
    }

    fn token(&mut self, token: Option<&SealedToken<'_>>) -> Result<(), PacketError> {
        let Some(token) = token else { return self.put(&[0]) };
        self.put(&[1])?;
        self.put(&token.protocol_id.to_le_bytes())?;
        self.put(&token.expires_at.to_le_bytes())?;
        self.put(token.nonce)?;
        self.put(token.sealed)
    }

    fn cookie(&mut self, cookie: &Cookie) -> Result<(), PacketError> {
        self.put(&cookie.expiry_ms.to_le_bytes())?;
        self.put(&cookie.tag)
    }
}

impl<'a> Packet<'a> {
    /// Decodes a datagram. Client handshake packets shorter than [`CLIENT_HANDSHAKE_SIZE`] are
    /// refused, so that the server's answer is never larger than the request.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, PacketError> {
        Self::decode_inline(bytes)
    }

    /// [`Packet::decode`], inline where the endpoint takes a datagram, with the other packets'
    /// decode out of line: a data packet, nearly every one, is then decoded into the
    /// endpoint's registers instead of written out as a `Packet` (the handshake's variants
    /// make it about 100 bytes) and read back. Not inline in the public `decode`, so that
    /// other crates' code is generated as before.
    // Always: with a plain `#[inline]` the compiler kept it a call inside the endpoint's stage
    // scope, and the `Packet` went through memory.
    #[inline(always)]
    pub(crate) fn decode_inline(bytes: &'a [u8]) -> Result<Self, PacketError> {
        let mut r = Reader { bytes };
        let kind = r.u8("packet type")?;
        if !matches!(kind, TYPE_DATA | TYPE_DATA_NO_ACKS | TYPE_DATA_SHORT | TYPE_DATA_NARROW) {
            return Self::decode_other(kind, r, bytes.len());
        }
        let narrow = kind == TYPE_DATA_NARROW;
        let seq = if narrow { u16::from(r.u8("sequence")?) } else { r.u16("sequence")? };
        let acks = match kind {
            TYPE_DATA => Some(Acks {
                ack: r.u16("ack")?,
                bits: r.u32("ack bits")?,
                delay: r.u16("ack delay")?,
            }),
            TYPE_DATA_SHORT | TYPE_DATA_NARROW => Some(Acks {
                ack: r.u16("ack")?,
                bits: u32::from(r.u16("ack bits")?),
                delay: short_delay_units(r.u8("ack delay")?),
            }),
            _ => None,
        };
        let header = DataHeader { seq, narrow, acks };
        Ok(Packet::Data { header, frames: r.bytes })
    }

    /// [`Packet::decode`] of a packet of type `kind` other than data, `r` after the type and
    /// `len` the datagram's length.
    #[inline(never)]
    fn decode_other(kind: u8, mut r: Reader<'a>, len: usize) -> Result<Self, PacketError> {
        if kind == TYPE_DISCONNECT {
            return Ok(Packet::Disconnect { reason: DisconnectReason::from_code(r.u8("reason")?) });
        }
        if kind == TYPE_DISCONNECT_SEALED {
            let reason = DisconnectReason::from_code(r.u8("reason")?);
            let seq = r.u16("sequence")?;
            let tag = r.take(TAG_SIZE, "tag")?.try_into().expect("take returned the tag's size");
            return Ok(Packet::DisconnectSealed { reason, seq, tag });
        }
        if !(TYPE_CONNECT_REQUEST..=TYPE_CHALLENGE_RESPONSE).contains(&kind) {
            return Err(PacketError::UnknownType(kind));
        }
        let protocol = r.u32("protocol id")?;
        if protocol != PROTOCOL_ID {
            return Err(PacketError::WrongProtocol(protocol));
        }
        let from_client = kind != TYPE_CHALLENGE;
        if from_client && len < CLIENT_HANDSHAKE_SIZE {
            return Err(PacketError::Unpadded(len));
        }
        let nonce = r.u64("nonce")?;
        Ok(match kind {
            TYPE_CONNECT_REQUEST => Packet::ConnectRequest { nonce, token: r.token()? },
            TYPE_CHALLENGE => Packet::Challenge { nonce, cookie: r.cookie()? },
            _ => {
                let cookie = r.cookie()?;
                let token = r.token()?;
                // The first byte of the padding; bits other than bit 0 are reserved.
                let short_tag = r.u8("options")? & OPTION_SHORT_TAG != 0;
                Packet::ChallengeResponse { nonce, cookie, token, short_tag }
            }
        })
    }

    /// Encodes a handshake or disconnect packet into `buf` and returns its length. Data packets
    /// are assembled by the connection with `write_data_header` and the frame writers.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, PacketError> {
        let mut w = Writer::new(buf);
        match self {
            Packet::ConnectRequest { nonce, token } => {
                handshake_prefix(&mut w, TYPE_CONNECT_REQUEST, *nonce)?;
                w.token(token.as_ref())?;
                w.pad_to(CLIENT_HANDSHAKE_SIZE)?;
            }
            Packet::Challenge { nonce, cookie } => {
                handshake_prefix(&mut w, TYPE_CHALLENGE, *nonce)?;
                w.cookie(cookie)?;
            }
            Packet::ChallengeResponse { nonce, cookie, token, short_tag } => {
                handshake_prefix(&mut w, TYPE_CHALLENGE_RESPONSE, *nonce)?;
                w.cookie(cookie)?;
                w.token(token.as_ref())?;
                w.put(&[if *short_tag { OPTION_SHORT_TAG } else { 0 }])?;
                w.pad_to(CLIENT_HANDSHAKE_SIZE)?;
            }
            Packet::Data { header, frames } => {
                write_data_header(&mut w, header)?;
                w.put(frames)?;
            }
            Packet::Disconnect { reason } => w.put(&[TYPE_DISCONNECT, reason.code()])?,
            Packet::DisconnectSealed { reason, seq, tag } => {
                w.put(&sealed_disconnect_header(*reason, *seq))?;
                w.put(tag)?;
            }
        }
        Ok(w.len())
    }
}

/// How many low bits of the packet number the sequence of a packet whose clear header is
/// `header` carries: 8 in a narrow data header, else 16.
pub(crate) fn seq_bits(header: &[u8]) -> u32 {
    if header.first() == Some(&TYPE_DATA_NARROW) {
        8
    } else {
        16
    }
}

/// The authenticated bytes of a sealed disconnect: type, reason, sequence.
pub(crate) fn sealed_disconnect_header(reason: DisconnectReason, seq: u16) -> [u8; 4] {
    let seq = seq.to_le_bytes();
    [TYPE_DISCONNECT_SEALED, reason.code(), seq[0], seq[1]]
}

fn handshake_prefix(w: &mut Writer<'_>, kind: u8, nonce: u64) -> Result<(), PacketError> {
    w.put(&[kind])?;
    w.put(&PROTOCOL_ID.to_le_bytes())?;
    w.put(&nonce.to_le_bytes())
}

/// Writes a data packet's header: the short form when the acks fit it, else the long one.
pub(crate) fn write_data_header(w: &mut Writer<'_>, h: &DataHeader) -> Result<(), PacketError> {
    // Each form laid out in a local array and put at once: one bounds check and one copy a
    // packet instead of one a field.
    let [seq_lo, seq_hi] = h.seq.to_le_bytes();
    let Some(acks) = h.acks else {
        return w.put(&[TYPE_DATA_NO_ACKS, seq_lo, seq_hi]);
    };
    let [ack_lo, ack_hi] = acks.ack.to_le_bytes();
    if let (Ok(bits), Some(delay)) = (u16::try_from(acks.bits), short_delay(acks.delay)) {
        let [bits_lo, bits_hi] = bits.to_le_bytes();
        return if h.narrow {
            w.put(&[TYPE_DATA_NARROW, seq_lo, ack_lo, ack_hi, bits_lo, bits_hi, delay])
        } else {
            w.put(&[TYPE_DATA_SHORT, seq_lo, seq_hi, ack_lo, ack_hi, bits_lo, bits_hi, delay])
        };
    }
    let [b0, b1, b2, b3] = acks.bits.to_le_bytes();
    let [delay_lo, delay_hi] = acks.delay.to_le_bytes();
    let head = [TYPE_DATA, seq_lo, seq_hi, ack_lo, ack_hi, b0, b1, b2, b3, delay_lo, delay_hi];
    w.put(&head)
}

/// Writes a message frame whose payload is `head` then `body` (the same bytes as one payload):
/// in its last-frame form, widened to the draft-1 form if another frame follows it (see
/// [`Writer`]).
pub(crate) fn write_message(
    w: &mut Writer<'_>,
    channel: u8,
    seq: u16,
    [head, body]: [&[u8]; 2],
) -> Result<(), PacketError> {
    let len = head.len() + body.len();
    if channel >= LAST_FORM_CHANNELS {
        w.put(&[FRAME_MESSAGE, channel])?;
        w.put(&seq.to_le_bytes())?;
        w.len_prefix(len)?;
        w.put(head)?;
        return w.put(body);
    }
    // The last-frame form, with room kept for the draft-1 form it takes if a frame follows.
    if message_frame_size(len) > w.remaining() {
        return Err(PacketError::BufferTooSmall);
    }
    let [seq_lo, seq_hi] = seq.to_le_bytes();
    let start = w.put_frame([FRAME_MESSAGE_LAST | channel, seq_lo, seq_hi], [head, body])?;
    w.last_message = Some((start, len));
    Ok(())
}

/// Writes a repair frame in its last-frame form: nothing may follow it in the packet, whose
/// sequence is its seed. A channel without that form (64 and above) gets the draft-1 form
/// with `seed`.
pub(crate) fn write_repair_last(
    w: &mut Writer<'_>,
    window: (u8, u16, u8, u16),
    data: &[u8],
) -> Result<(), PacketError> {
    let (channel, start, count, _) = window;
    if channel >= LAST_FORM_CHANNELS {
        return write_repair(w, window, data);
    }
    w.put(&[FRAME_REPAIR_LAST | channel])?;
    w.put(&start.to_le_bytes())?;
    w.put(&[count])?;
    w.put(data)
}

/// Writes a fragment frame.
pub(crate) fn write_fragment(
    w: &mut Writer<'_>,
    frame: (u8, u16, u8, u8),
    payload: &[u8],
) -> Result<(), PacketError> {
    let (channel, seq, index, count) = frame;
    w.put(&[FRAME_FRAGMENT, channel])?;
    w.put(&seq.to_le_bytes())?;
    w.put(&[index, count])?;
    w.len_prefix(payload.len())?;
    w.put(payload)
}

/// Writes a ping frame, which makes the packet ack-eliciting without carrying data.
pub(crate) fn write_ping(w: &mut Writer<'_>) -> Result<(), PacketError> {
    w.put(&[FRAME_PING])
}

/// Writes a repair frame: `window` is the channel, the window's start and count, and the seed.
pub(crate) fn write_repair(
    w: &mut Writer<'_>,
    window: (u8, u16, u8, u16),
    data: &[u8],
) -> Result<(), PacketError> {
    let (channel, start, count, seed) = window;
    w.put(&[FRAME_REPAIR, channel])?;
    w.put(&start.to_le_bytes())?;
    w.put(&[count])?;
    w.put(&seed.to_le_bytes())?;
    w.len_prefix(data.len())?;
    w.put(data)
}

/// Writes a repair ack frame.
pub(crate) fn write_repair_ack(
    w: &mut Writer<'_>,
    channel: u8,
    next: u16,
    shortfall: u8,
) -> Result<(), PacketError> {
    w.put(&[FRAME_REPAIR_ACK, channel])?;
    w.put(&next.to_le_bytes())?;
    w.put(&[shortfall])
}

/// The bytes a message frame with `len` bytes of payload takes at most (its last-frame form
/// takes [`message_frame_size_last`]).
pub fn message_frame_size(len: usize) -> usize {
    4 + varint_len(len) + len
}

/// The bytes a message frame with `len` bytes of payload takes in its last-frame form.
pub fn message_frame_size_last(len: usize) -> usize {
    3 + len
}

/// The bytes a repair frame with `len` bytes of data takes in its last-frame form.
pub fn repair_frame_size_last(len: usize) -> usize {
    4 + len
}

/// The bytes a fragment frame with `len` bytes of payload takes.
pub fn fragment_frame_size(len: usize) -> usize {
    6 + varint_len(len) + len
}

/// The bytes `write_varint` takes for `value`: one for each seven bits up to its highest set
/// bit, and one for zero. Worked out, not written out: every frame a packet sends asks its
/// size twice (the fill's fit and the writer's), and writing the varint into a scratch buffer
/// was a call of about 30 instructions each time.
#[inline]
fn varint_len(value: usize) -> usize {
    let bits = usize::BITS - (value | 1).leading_zeros();
    (bits as usize).div_ceil(7)
}

/// Iterates over the frames of a data packet; yields an error and stops at the first bad one.
pub struct Frames<'a> {
    reader: Reader<'a>,
    failed: bool,
    /// The packet's sequence: the seed of a repair in its last-frame form.
    seq: u16,
}

impl<'a> Frames<'a> {
    /// The frames of the payload of data packet `seq` (the header's sequence, which a repair
    /// frame in its last-frame form takes as its seed).
    pub fn new(frames: &'a [u8], seq: u16) -> Self {
        Self { reader: Reader { bytes: frames }, failed: false, seq }
    }

    /// The next frame, as [`Iterator::next`] gives it, but inline: in the connection's
    /// receive loop the frame is then decoded into registers, not written out as a `Result`
    /// and read back by a second match on its kind (about 70 instructions a frame). Not
    /// inline in `next`, so that other crates' code is generated as before.
    #[inline]
    pub(crate) fn next_inline(&mut self) -> Option<Result<Frame<'a>, PacketError>> {
        if self.failed || self.reader.bytes.is_empty() {
            return None;
        }
        let frame = self.next_frame();
        self.failed = frame.is_err();
        Some(frame)
    }

    #[inline]
    fn next_frame(&mut self) -> Result<Frame<'a>, PacketError> {
        let r = &mut self.reader;
        let kind = r.u8("frame type")?;
        if kind == FRAME_PING {
            return Ok(Frame::Ping);
        }
        if kind >= FRAME_MESSAGE_LAST {
            // A last-frame form: everything after its fields is its payload.
            let channel = kind & (LAST_FORM_CHANNELS - 1);
            if kind >= FRAME_REPAIR_LAST {
                let start = r.u16("repair window start")?;
                let count = r.u8("repair count")?;
                let data = std::mem::take(&mut r.bytes);
                return Ok(Frame::Repair { channel, start, count, seed: self.seq, data });
            }
            let seq = r.u16("message sequence")?;
            let payload = std::mem::take(&mut r.bytes);
            return Ok(Frame::Message { channel, seq, payload });
        }
        let channel = r.u8("channel")?;
        let seq = r.u16("message sequence")?;
        match kind {
            FRAME_MESSAGE => {
                let len = r.len("message length")?;
                Ok(Frame::Message { channel, seq, payload: r.take(len, "message")? })
            }
            FRAME_FRAGMENT => {
                let (index, count) = (r.u8("fragment index")?, r.u8("fragment count")?);
                if count == 0 || index >= count {
                    return Err(PacketError::OutOfRange { what: "fragment index" });
                }
                let len = r.len("fragment length")?;
                let payload = r.take(len, "fragment")?;
                Ok(Frame::Fragment { channel, seq, index, count, payload })
            }
            FRAME_REPAIR => {
                let (count, seed) = (r.u8("repair count")?, r.u16("repair seed")?);
                let len = r.len("repair length")?;
                let data = r.take(len, "repair")?;
                Ok(Frame::Repair { channel, start: seq, count, seed, data })
            }
            FRAME_REPAIR_ACK => {
                let shortfall = r.u8("repair shortfall")?;
                Ok(Frame::RepairAck { channel, next: seq, shortfall })
            }
            other => Err(PacketError::UnknownFrame(other)),
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, PacketError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_inline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_packets_round_trip_and_are_padded() {
        let cookie = Cookie { expiry_ms: 77, tag: [9; 16] };
        let (token_nonce, sealed) = ([3u8; 24], [4u8; SEALED_LEN]);
        let token =
            SealedToken { protocol_id: 9, expires_at: 99, nonce: &token_nonce, sealed: &sealed };
        let packets = [
            Packet::ConnectRequest { nonce: 5, token: None },
            Packet::ConnectRequest { nonce: 5, token: Some(token) },
            Packet::Challenge { nonce: 5, cookie },
            Packet::ChallengeResponse { nonce: 5, cookie, token: None, short_tag: false },
            Packet::ChallengeResponse { nonce: 5, cookie, token: Some(token), short_tag: false },
            Packet::ChallengeResponse { nonce: 5, cookie, token: Some(token), short_tag: true },
            Packet::Disconnect { reason: DisconnectReason::TimedOut },
            Packet::DisconnectSealed { reason: DisconnectReason::Closed, seq: 7, tag: [1; 16] },
        ];
        for packet in packets {
            let mut buf = [0u8; 1200];
            let len = packet.encode(&mut buf).unwrap();
            assert_eq!(Packet::decode(&buf[..len]).unwrap(), packet);
        }
        let mut buf = [0u8; 1200];
        let request =
            Packet::ConnectRequest { nonce: 1, token: Some(token) }.encode(&mut buf).unwrap();
        let challenge = Packet::Challenge { nonce: 1, cookie }.encode(&mut buf).unwrap();
        assert_eq!(request, CLIENT_HANDSHAKE_SIZE);
        assert!(challenge <= request, "the server must not amplify");
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = [0u8; 1200];
        let mut w = Writer::new(&mut buf);
        let acks = Some(Acks { ack: 6, bits: 1, delay: 3 });
        write_data_header(&mut w, &DataHeader { seq: 7, narrow: false, acks }).unwrap();
        write_message(&mut w, 2, 300, [b"hel", b"lo"]).unwrap();
        write_fragment(&mut w, (1, 9, 1, 3), &[7; 500]).unwrap();
        let len = w.len();
        let frames_len = message_frame_size(5) + fragment_frame_size(500);
        assert_eq!(len, DATA_HEADER_SHORT_SIZE + frames_len, "16 ack bits: the short header");
        let Packet::Data { header, frames } = Packet::decode(&buf[..len]).unwrap() else {
            panic!("a data packet");
        };
        assert_eq!(header.seq, 7);
        assert_eq!(header.acks.map(|a| a.ack), Some(6));
        // A packet that acks nothing says so, rather than acking sequence 0.
        let mut buf = [0u8; 16];
        let mut w = Writer::new(&mut buf);
        write_data_header(&mut w, &DataHeader { seq: 3, narrow: false, acks: None }).unwrap();
        let len = w.len();
        let Packet::Data { header, .. } = Packet::decode(&buf[..len]).unwrap() else {
            panic!("a data packet");
        };
        assert_eq!(header, DataHeader { seq: 3, narrow: false, acks: None });
        let frames: Vec<_> = Frames::new(frames, 7).collect::<Result<_, _>>().unwrap();
        assert_eq!(frames[0], Frame::Message { channel: 2, seq: 300, payload: b"hello" });
        assert!(matches!(frames[1], Frame::Fragment { index: 1, count: 3, .. }));
    }

    #[test]
    fn bad_bytes_are_typed_errors() {
        assert_eq!(Packet::decode(&[]), Err(PacketError::Truncated { what: "packet type" }));
        assert_eq!(Packet::decode(&[0x99]), Err(PacketError::UnknownType(0x99)));
        let mut stray = [0u8; CLIENT_HANDSHAKE_SIZE];
        stray[0] = TYPE_CONNECT_REQUEST;
        assert!(matches!(Packet::decode(&stray), Err(PacketError::WrongProtocol(0))));
        let mut buf = [0u8; 1200];
        let len = Packet::ConnectRequest { nonce: 1, token: None }.encode(&mut buf).unwrap();
        assert_eq!(Packet::decode(&buf[..len - 1]), Err(PacketError::Unpadded(len - 1)));
        let bad_fragment = [FRAME_FRAGMENT, 0, 0, 0, 3, 3, 0];
        let first = Frames::new(&bad_fragment, 0).next().unwrap();
        assert_eq!(first, Err(PacketError::OutOfRange { what: "fragment index" }));
        let short = [FRAME_MESSAGE, 0, 0, 0, 10, 1, 2];
        assert_eq!(
            Frames::new(&short, 0).next().unwrap(),
            Err(PacketError::Truncated { what: "message" })
        );
    }

    /// Goal: the ack delay byte of the short header keeps its promise: 16 us steps below
    /// 2.048 ms, 1.024 ms steps up to 132.096 ms, always rounding down and by less than a
    /// step, never past the long form's value. Method: every delay the long form carries.
    #[test]
    fn the_short_delay_rounds_down_by_less_than_a_step() {
        for delay in 0..=u16::MAX {
            let Some(byte) = short_delay(delay) else {
                assert!(delay > SHORT_DELAY_MAX);
                continue;
            };
            let back = short_delay_units(byte);
            let step = if delay < 256 { 2 } else { 128 };
            assert!(back <= delay && delay - back < step, "{delay} -> {byte} -> {back}");
        }
        assert_eq!(short_delay_units(255), SHORT_DELAY_MAX);
        assert_eq!(short_delay(SHORT_DELAY_MAX + 1), None);
    }

    /// Goal: the draft-2 forms save what they promise, and draft-1 packets still decode.
    /// Method: one header and one message written both ways, decoded, and measured.
    #[test]
    fn draft_two_forms_are_shorter_and_draft_one_still_decodes() {
        let acks = Acks { ack: 40, bits: 0xFFFF, delay: 100 };
        let header = DataHeader { seq: 41, narrow: false, acks: Some(acks) };
        let message = Frame::Message { channel: 0, seq: 9, payload: &[5; 400] };
        let mut buf = [0u8; 1200];
        let mut w = Writer::new(&mut buf);
        write_data_header(&mut w, &header).unwrap();
        let header_len = w.len();
        let frame_len = message.encode_last(&mut buf[header_len..], 41).unwrap();
        assert_eq!((header_len, frame_len), (8, 403));
        let Ok(Packet::Data { header: decoded, frames }) =
            Packet::decode(&buf[..header_len + frame_len])
        else {
            panic!("a data packet");
        };
        assert_eq!(decoded, header);
        assert_eq!(Frames::new(frames, 41).collect::<Vec<_>>(), vec![Ok(message)]);
        // The draft-1 forms of the same: 11 bytes of header, 406 of frame.
        let mut old = vec![TYPE_DATA, 41, 0, 40, 0, 0xFF, 0xFF, 0, 0, 100, 0];
        let frame_len = message.encode(&mut buf).unwrap();
        assert_eq!(frame_len, 406);
        old.extend_from_slice(&buf[..frame_len]);
        let Ok(Packet::Data { header: decoded, frames }) = Packet::decode(&old) else {
            panic!("a draft-1 data packet");
        };
        assert_eq!(decoded, header);
        assert_eq!(Frames::new(frames, 41).collect::<Vec<_>>(), vec![Ok(message)]);
        // A repair's last-frame form drops its seed (the packet's sequence) and its length.
        let repair = Frame::Repair { channel: 3, start: 7, count: 2, seed: 41, data: &[1; 406] };
        assert_eq!(repair.encode(&mut buf).unwrap(), 415);
        let len = repair.encode_last(&mut buf, 41).unwrap();
        assert_eq!(len, 410);
        assert_eq!(Frames::new(&buf[..len], 41).collect::<Vec<_>>(), vec![Ok(repair)]);
        // Ack bits above 15 need the long header.
        let wide = DataHeader { seq: 1, narrow: false, acks: Some(Acks { bits: 1 << 16, ..acks }) };
        let mut w = Writer::new(&mut buf);
        write_data_header(&mut w, &wide).unwrap();
        assert_eq!(w.len(), DATA_HEADER_SIZE);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn frame() -> impl Strategy<Value = (u8, u8, u16, u8, u8, Vec<u8>)> {
        let kind = 0u8..3;
        let count = 1u8..=255;
        (
            kind,
            any::<u8>(),
            any::<u16>(),
            any::<u8>(),
            count,
            prop::collection::vec(any::<u8>(), 0..300),
        )
    }

    /// Builds a frame from generated fields (the index kept below the count).
    fn build(fields: &(u8, u8, u16, u8, u8, Vec<u8>)) -> Frame<'_> {
        let (kind, channel, seq, index, count, payload) = fields;
        match kind {
            0 => Frame::Message { channel: *channel, seq: *seq, payload },
            1 => Frame::Ping,
            _ => Frame::Fragment {
                channel: *channel,
                seq: *seq,
                index: index % count,
                count: *count,
                payload,
            },
        }
    }

    proptest! {
        /// Goal: a varint's size worked out is the size `write_varint` writes, so that a frame
        /// is sized as it is written. Method: any value, and values around each 7-bit edge.
        #[test]
        fn a_varint_s_size_is_the_bytes_written(value in any::<usize>(), edge in 0u32..64) {
            for v in [value, 1usize.checked_shl(edge).unwrap_or(0), (1 << edge) - 1] {
                let mut out = [0u8; 10];
                prop_assert_eq!(Some(varint_len(v)), write_varint(v as u64, &mut out));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Goal: frames a connection writes one after another into one packet come out as
        /// each frame's own encoding, a message written last in its last-frame form and every
        /// other in its draft-1 form (a message is written in the last form, then widened
        /// when another frame follows it). Method: random messages, fragments and pings on
        /// any channel, written through one `Writer`, against each frame's `encode` (the last
        /// one's `encode_last`).
        #[test]
        fn frames_written_in_turn_are_each_frame_s_own_encoding(
            fields in prop::collection::vec(frame(), 1..6),
        ) {
            let frames: Vec<Frame<'_>> = fields.iter().map(build).collect();
            let mut buf = [0u8; 2048];
            let mut w = Writer::new(&mut buf);
            for frame in &frames {
                match *frame {
                    Frame::Message { channel, seq, payload } => {
                        write_message(&mut w, channel, seq, [payload, &[]]).unwrap()
                    }
                    Frame::Fragment { channel, seq, index, count, payload } => {
                        write_fragment(&mut w, (channel, seq, index, count), payload).unwrap()
                    }
                    _ => write_ping(&mut w).unwrap(),
                }
            }
            w.finish();
            let len = w.len();
            let mut expected = Vec::new();
            for (k, frame) in frames.iter().enumerate() {
                let mut one = [0u8; 400];
                let n = if k + 1 == frames.len() {
                    frame.encode_last(&mut one, 0).unwrap()
                } else {
                    frame.encode(&mut one).unwrap()
                };
                expected.extend_from_slice(&one[..n]);
            }
            prop_assert_eq!(&buf[..len], &expected[..]);
        }

        /// Goal: a frame written by `put_frame` (one check for room) is the bytes, length and
        /// widened last message that its three `put`s wrote, and refused where they were.
        /// Method: random frames written first, then a tag, head and body into the rest of a
        /// buffer of random size, both ways.
        #[test]
        fn a_frame_put_at_once_is_its_three_puts(
            fields in prop::collection::vec(frame(), 0..4),
            (head, body) in (
                prop::collection::vec(any::<u8>(), 0..40),
                prop::collection::vec(any::<u8>(), 0..600),
            ),
            (tag, size) in (any::<[u8; 3]>(), 0usize..1200),
        ) {
            let frames: Vec<Frame<'_>> = fields.iter().map(build).collect();
            let (mut once, mut three) = (vec![0u8; 2048], vec![0u8; 2048]);
            let (mut a, mut b) = (Writer::new(&mut once), Writer::new(&mut three));
            for w in [&mut a, &mut b] {
                for frame in &frames {
                    if let Frame::Message { channel, seq, payload } = *frame {
                        write_message(w, channel, seq, [payload, &[]]).unwrap();
                    } else {
                        write_ping(w).unwrap();
                    }
                }
                let end = (w.len + size).min(w.buf.len());
                w.buf = &mut std::mem::take(&mut w.buf)[..end];
            }
            let put = a.put_frame(tag, [&head, &body]);
            let puts = b.put(&tag).and_then(|()| b.put(&head)).and_then(|()| b.put(&body));
            prop_assert_eq!(put.is_ok(), puts.is_ok());
            if let Ok(at) = put {
                // Where the frame starts once a message before it is widened.
                prop_assert_eq!(at, b.len() - tag.len() - head.len() - body.len());
                prop_assert_eq!((a.len(), a.last_message), (b.len(), b.last_message));
                let len = a.len();
                prop_assert_eq!(&a.buf[..len], &b.buf[..len]);
            }
        }

        /// Goal: any sequence of frames in a data packet, the last one perhaps in its
        /// last-frame form, decodes to what was encoded, behind the short or the long header
        /// (the short one rounding the ack delay down). Method: random frames, encoded one
        /// after another behind a random header.
        #[test]
        fn data_packets_and_their_frames_round_trip(
            fields in prop::collection::vec(frame(), 0..8),
            last in prop::option::of((any::<bool>(), 0u8..70, any::<u16>(), any::<u8>())),
            (seq, narrow) in (any::<u16>(), any::<bool>()),
            acks in prop::option::of((any::<u16>(), any::<u32>(), any::<u16>(), any::<bool>())),
        ) {
            let mut frames: Vec<Frame<'_>> = fields.iter().map(build).collect();
            let mut body = Vec::new();
            for frame in &frames {
                let mut buf = [0u8; 400];
                let len = frame.encode(&mut buf).unwrap();
                body.extend_from_slice(&buf[..len]);
            }
            let data = [7u8; 300];
            if let Some((repair, channel, start, count)) = last {
                let frame = if repair {
                    Frame::Repair { channel, start, count, seed: seq, data: &data }
                } else {
                    Frame::Message { channel, seq: start, payload: &data }
                };
                let mut buf = [0u8; 400];
                let len = frame.encode_last(&mut buf, seq).unwrap();
                body.extend_from_slice(&buf[..len]);
                frames.push(frame);
            }
            let acks = acks.map(|(ack, bits, delay, low16)| {
                let bits = if low16 { bits & 0xFFFF } else { bits };
                Acks { ack, bits, delay }
            });
            let header = DataHeader { seq, narrow, acks };
            let mut buf = vec![0u8; body.len() + DATA_HEADER_SIZE];
            let len = Packet::Data { header, frames: &body }.encode(&mut buf).unwrap();
            prop_assert!(len <= body.len() + DATA_HEADER_SIZE);
            let Ok(Packet::Data { header: decoded, frames: payload }) = Packet::decode(&buf[..len])
            else {
                panic!("a data packet did not decode");
            };
            let short = acks.and_then(|a| short_delay(a.delay).filter(|_| a.bits <= 0xFFFF));
            let mut expected = header;
            // A narrow header needs the short form's acks; it carries the low 8 bits.
            expected.narrow = narrow && short.is_some();
            if expected.narrow {
                expected.seq &= 0xFF;
            }
            if let (Some(acks), Some(byte)) = (expected.acks.as_mut(), short) {
                acks.delay = short_delay_units(byte);
                let size = if narrow { DATA_HEADER_NARROW_SIZE } else { DATA_HEADER_SHORT_SIZE };
                prop_assert_eq!(len, body.len() + size);
            }
            prop_assert_eq!(decoded, expected);
            let decoded: Vec<Frame<'_>> =
                Frames::new(payload, seq).map(Result::unwrap).collect();
            prop_assert_eq!(decoded, frames);
        }

        /// Goal: handshake packets round trip, and a client's are always padded.
        /// Method: random nonces, cookies and token presence.
        #[test]
        fn handshake_packets_round_trip(
            nonce in any::<u64>(),
            expiry_ms in any::<u64>(),
            tag in any::<[u8; 16]>(),
            with_token in any::<bool>(),
            kind in 0u8..3,
        ) {
            let (token_nonce, sealed) = ([5u8; 24], [6u8; SEALED_LEN]);
            let token = with_token.then_some(SealedToken {
                protocol_id: nonce ^ 1,
                expires_at: expiry_ms ^ 2,
                nonce: &token_nonce,
                sealed: &sealed,
            });
            let cookie = Cookie { expiry_ms, tag };
            let packet = match kind {
                0 => Packet::ConnectRequest { nonce, token },
                1 => Packet::Challenge { nonce, cookie },
                _ => Packet::ChallengeResponse { nonce, cookie, token, short_tag: nonce % 2 == 0 },
            };
            let mut buf = [0u8; 1500];
            let len = packet.encode(&mut buf).unwrap();
            prop_assert_eq!(Packet::decode(&buf[..len]).unwrap(), packet);
            if kind == 1 {
                prop_assert!(len <= CHALLENGE_SIZE);
            } else {
                prop_assert!(len >= CLIENT_HANDSHAKE_SIZE);
            }
        }

        /// Goal: no byte string panics the decoders. Method: random bytes through both.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
            let _ = Packet::decode(&bytes);
            for frame in Frames::new(&bytes, 0) {
                if frame.is_err() {
                    break;
                }
            }
        }

        /// Goal: a frame's length reads alike through the one-byte shortcut and through the
        /// varint decoder it skips: the same value, the same bytes left, the same error.
        /// Method: lengths of none to eleven bytes (valid, overlong, truncated), bytes drawn
        /// mostly around 0x80 where the shortcut ends, read both ways.
        #[test]
        fn a_frame_length_reads_as_the_varint_decoder_reads_it(
            bytes in prop::collection::vec(
                prop_oneof![0x70u8..=0x90, any::<u8>(), Just(0x7F), Just(0x80)], 0..12),
        ) {
            let mut shortcut = Reader { bytes: &bytes };
            let read = shortcut.len("length");
            let expected = read_varint(&bytes)
                .map_err(|_| PacketError::Truncated { what: "length" })
                .and_then(|(value, used)| {
                    let value = usize::try_from(value)
                        .map_err(|_| PacketError::OutOfRange { what: "length" })?;
                    Ok((value, &bytes[used..]))
                });
            match expected {
                Ok((value, rest)) => {
                    prop_assert_eq!(read, Ok(value));
                    prop_assert_eq!(shortcut.bytes, rest);
                }
                Err(e) => prop_assert_eq!(read, Err(e)),
            }
        }
    }
}
