//! Packet encryption for connections opened with a connect token.
//!
//! Every data packet after the handshake is sealed with AES-256-GCM: a key per direction, both
//! from the token; the header (type, sequence, acks) is authenticated as associated data and
//! the frames are encrypted; a 16-byte tag follows. The nonce is the packet's 64-bit number,
//! of which the header carries the low 16 bits (the sequence), or the low 8 in a narrow header;
//! the receiver restores the rest from the largest number it has authenticated, as QUIC does,
//! so encryption costs the tag and nothing more. A number restored wrongly (a packet delayed
//! past half the sequence's span) gives the wrong nonce: the packet fails authentication. A
//! replay window refuses a number seen before or too old to tell.
//!
//! Why AES-256-GCM: sealing and opening are a large share of a host's own CPU per room-tick
//! (a packet per client per tick each way), and with the AES and carry-less multiply
//! instructions every server and phone CPU has, ring's AES-GCM seals and opens a 400-byte
//! packet about 4x faster than the fastest pure-Rust build and 5-10x faster than
//! ChaCha20-Poly1305 (`rally-bench count`, docs/benchmarks.md). Natively the AEAD is ring's;
//! in wasm32, which has neither the instructions nor a C toolchain for ring, RustCrypto's
//! portable, constant-time AES-GCM, which seals the same packets (the tests check both ways).
//!
//! AES-GCM, unlike ChaCha20-Poly1305, has a usage limit per key that a long connection could
//! reach: [`PACKETS_PER_KEY_MAX`]. A connection closes itself before its key passes it.
//!
//! Short tags (`ConnectionConfig::short_tag`, off by default): when the client proposes them
//! and the server allows them, data packets carry GCM's tag cut to its first 12 bytes (the
//! 96-bit tag of NIST SP 800-38D, IPsec's ICV in RFC 4106): 4 bytes off every packet, for a
//! forgery chance of about 2^-91 per attempt on a 400-byte packet, and a failed opening is a
//! counted drop either way. The cut tag is the full one's prefix, so ring still seals; ring
//! verifies only full tags, so RustCrypto's GCM with a 12-byte tag opens. Sealed disconnects
//! keep 16 bytes (their format is fixed). docs/security.md gives the argument.

use crate::packet::{seq_bits, TAG_SIZE, TAG_SIZE_SHORT};
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, KeyInit};

/// Packets one key seals at most. For AES-GCM the advantage an attacker gains against
/// confidentiality grows with the square of the blocks encrypted under one key; 2^28 packets
/// of at most 1,500 bytes keep it below 2^-57 (the bound of the IRTF's AEAD usage limits, with
/// QUIC's target), and take 24 days at 128 packets a second.
pub const PACKETS_PER_KEY_MAX: u64 = 1 << 28;
/// Packets kept aside below [`PACKETS_PER_KEY_MAX`] for the disconnects a connection sends when
/// its key wears out.
const PACKETS_KEPT_FOR_CLOSING: u64 = 16;

/// Numbers below the largest authenticated one that are still accepted (once each).
const REPLAY_WINDOW: u64 = 128;
// One bit per number of the window, in a u128.
const _: () = assert!(REPLAY_WINDOW >= 1 && REPLAY_WINDOW <= u128::BITS as u64);

/// Why a packet did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// The tag did not verify: forged, altered, or sealed under another key.
    Unauthenticated,
    /// Authentic, but its number was accepted before or is too old to tell.
    Replayed,
}

/// One connection's keys and packet numbers.
///
/// `repr(C, align(64))`, each key on lines of its own, followed on its last line by the
/// numbers its path reads: ring keeps a key's algorithm after its schedule, and a seal or an
/// open reads it first, so that line is read by every packet. The replay window shares it
/// with the opening key's end, the packet number with the sealing key's, and each path reads
/// its key's lines and no other ([`Self::prefetch_open`] and [`Self::prefetch_seal`] ask for
/// them; a connection keeps its keys inline). Before, the load run's profile put the seal's
/// longest wait on the algorithm's line, apart from the number at the struct's start.
#[repr(C, align(64))]
pub(crate) struct PacketKeys {
    receive: Aead,
    /// The largest number authenticated, and which of the `REPLAY_WINDOW` numbers below it
    /// were (bit `i`: `largest - 1 - i`).
    largest: Option<u64>,
    seen: u128,
    send: Aead,
    /// The number of the next packet sealed.
    next: u64,
    /// With short tags: the opener of the peer's data packets (ring verifies full tags only).
    receive_short: Option<ShortAead>,
}

impl std::fmt::Debug for PacketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketKeys").field("next", &self.next).finish_non_exhaustive()
    }
}

impl PacketKeys {
    /// Asks the core for the lines an opening reads: the opening key's, the last of which
    /// holds the replay window (see [`crate::Endpoint::prefetch`]).
    pub(crate) fn prefetch_open(&self) {
        rally_prefetch::lines(&self.receive);
    }

    /// Asks the core for the lines a sealing reads: the sealing key's, the last of which holds
    /// the packet number (see `Connection::prefetch_queue`). Every line of the key, not only
    /// the first and last that safe code can name: the seal also reads its GHASH table in the
    /// middle, and with only the two asked for, the load run's profile found the seal waiting
    /// on that table's line instead (`count --cold`: 9% off a send from memory, round 23).
    pub(crate) fn prefetch_seal(&self) {
        rally_prefetch::lines(&self.send);
    }

    /// Keys for one end: what it seals with and what it opens with; full tags.
    pub(crate) fn new(send_key: &[u8; 32], receive_key: &[u8; 32]) -> Self {
        Self::with_tags(send_key, receive_key, false)
    }

    /// Keys whose data packets carry [`TAG_SIZE_SHORT`]-byte tags when `short`.
    pub(crate) fn with_tags(send_key: &[u8; 32], receive_key: &[u8; 32], short: bool) -> Self {
        Self {
            send: Aead::new(send_key),
            receive: Aead::new(receive_key),
            receive_short: short.then(|| ShortAead::new(receive_key)),
            next: 0,
            largest: None,
            seen: 0,
        }
    }

    /// A client's keys, from the server's first data packet: with short tags if the client
    /// proposed them (`short_proposed`) and the packet opens so, else with full tags (the
    /// server declined, or predates them). The tag's size is not on the wire: a packet opens
    /// under one size only (another's chance is 2^-96). Returns the keys and its number.
    pub(crate) fn open_first(
        (send_key, receive_key): (&[u8; 32], &[u8; 32]),
        short_proposed: bool,
        seq: u16,
        (header, sealed): (&[u8], &[u8]),
        out: &mut Vec<u8>,
    ) -> Result<(Self, u64), OpenError> {
        if short_proposed {
            let mut keys = Self::with_tags(send_key, receive_key, true);
            if let Ok(number) = keys.open(seq, header, sealed, out) {
                return Ok((keys, number));
            }
        }
        let mut keys = Self::new(send_key, receive_key);
        let number = keys.open(seq, header, sealed, out)?;
        Ok((keys, number))
    }

    /// Bytes of the tag on this connection's data packets.
    pub(crate) fn tag_len(&self) -> usize {
        if self.receive_short.is_some() {
            TAG_SIZE_SHORT
        } else {
            TAG_SIZE
        }
    }

    /// The sequence (low bits of the number) the next sealed packet must carry.
    pub(crate) fn next_seq(&self) -> u16 {
        self.next as u16
    }

    /// Numbers the next sealed packets from `number` (tests of the key's limit).
    #[cfg(test)]
    pub(crate) fn danger_number_from(&mut self, number: u64) {
        self.next = number;
    }

    /// Whether the send key is near [`PACKETS_PER_KEY_MAX`]: the connection must close, with
    /// the packets kept aside for that.
    pub(crate) fn worn_out(&self) -> bool {
        self.next >= PACKETS_PER_KEY_MAX - PACKETS_KEPT_FOR_CLOSING
    }

    /// Seals data packet `buf[..len]` in place: `buf[..header]` stays clear and authenticated,
    /// the rest is encrypted, and the tag ([`Self::tag_len`] bytes) is appended. Returns the
    /// sealed length, or `None` if `buf` has no room for the tag or the key has sealed
    /// [`PACKETS_PER_KEY_MAX`] packets.
    // Out of line: one call a datagram costs nothing beside the AEAD, and it keeps sealing a
    // function of its own in every build, `dist`'s whole-program LTO included, so that
    // `rally-bench count` and a profile can tell it from the encoding around it.
    #[inline(never)]
    pub(crate) fn seal(&mut self, buf: &mut [u8], header: usize, len: usize) -> Option<usize> {
        self.seal_tagged(buf, header, len, self.tag_len())
    }

    /// [`Self::seal`] with the full tag, whatever the data packets carry: sealed disconnects.
    pub(crate) fn seal_full(&mut self, buf: &mut [u8], header: usize, len: usize) -> Option<usize> {
        self.seal_tagged(buf, header, len, TAG_SIZE)
    }

    fn seal_tagged(
        &mut self,
        buf: &mut [u8],
        header: usize,
        len: usize,
        tag_len: usize,
    ) -> Option<usize> {
        let sealed_len = len + tag_len;
        if buf.len() < sealed_len || header > len || self.next >= PACKETS_PER_KEY_MAX {
            return None;
        }
        let (aad, body) = buf[..len].split_at_mut(header);
        let tag = self.send.seal(nonce(self.next), aad, body);
        // A short tag is the full tag's first bytes (SP 800-38D's MSB_t).
        buf[len..sealed_len].copy_from_slice(&tag[..tag_len]);
        self.next += 1;
        Some(sealed_len)
    }

    /// Opens a data packet whose clear header is `header` and whose encrypted body and tag are
    /// `sealed`, writing the body to `out`; the header carried sequence `seq` (the low 8 or
    /// 16 bits of the number, as its type says). Returns the packet's number.
    pub(crate) fn open(
        &mut self,
        seq: u16,
        header: &[u8],
        sealed: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<u64, OpenError> {
        self.open_tagged(seq, header, sealed, out, self.receive_short.is_some())
    }

    /// [`Self::open`] with the full tag, whatever the data packets carry: sealed disconnects.
    pub(crate) fn open_full(
        &mut self,
        seq: u16,
        header: &[u8],
        sealed: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<u64, OpenError> {
        self.open_tagged(seq, header, sealed, out, false)
    }

    fn open_tagged(
        &mut self,
        seq: u16,
        header: &[u8],
        sealed: &[u8],
        out: &mut Vec<u8>,
        short: bool,
    ) -> Result<u64, OpenError> {
        // Keys without short tags open every packet with the full tag.
        let short_aead = self.receive_short.as_ref().filter(|_| short);
        let tag_len = if short_aead.is_some() { TAG_SIZE_SHORT } else { TAG_SIZE };
        let body_len = sealed.len().checked_sub(tag_len).ok_or(OpenError::Unauthenticated)?;
        let number = expand(self.largest, seq, seq_bits(header));
        if self.was_seen(number) {
            return Err(OpenError::Replayed);
        }
        out.clear();
        out.extend_from_slice(&sealed[..body_len]);
        let (nonce, tag) = (nonce(number), &sealed[body_len..]);
        let opened = match short_aead {
            Some(short_aead) => short_aead.open(nonce, header, out, tag),
            None => {
                let tag = tag.try_into().expect("the tag's size: body_len is len - 16");
                self.receive.open(nonce, header, out, tag)
            }
        };
        if !opened {
            return Err(OpenError::Unauthenticated);
        }
        self.mark_seen(number);
        Ok(number)
    }

    fn was_seen(&self, number: u64) -> bool {
        let Some(largest) = self.largest else { return false };
        if number > largest {
            return false;
        }
        let back = largest - number;
        back == 0 || back > REPLAY_WINDOW || self.seen & (1 << (back - 1)) != 0
    }

    /// Records `number` as accepted. Precondition: `was_seen(number)` is false, which rules
    /// out the largest number itself and numbers past the window (whose bit would not exist).
    fn mark_seen(&mut self, number: u64) {
        debug_assert!(!self.was_seen(number), "mark_seen({number}) after was_seen said no");
        match self.largest {
            Some(largest) if number <= largest => self.seen |= 1 << (largest - number - 1),
            Some(largest) => {
                let shift = number - largest;
                // The old largest becomes bit `shift - 1`; what slides past the window goes.
                let kept = u32::try_from(shift).ok().and_then(|s| self.seen.checked_shl(s));
                let old = if shift <= REPLAY_WINDOW { 1 << (shift - 1) } else { 0 };
                self.seen = kept.unwrap_or(0) | old;
                self.largest = Some(number);
            }
            None => self.largest = Some(number),
        }
    }
}

/// Opens one sealed data packet of a capture, as a tool reading traffic does (`rally inspect`
/// with the servers' token key): `key` is its direction's key (from the connect token),
/// `header` the packet's clear header, which carried sequence `seq` (its low 8 bits in a narrow
/// header, `0x18`), and `sealed` the rest.
/// `largest` is the largest number opened before in the same direction: the full number is
/// restored from it as a receiver does. Returns the frames and the packet's number, or `None`
/// if the packet does not authenticate under `key` with a 16-byte tag or a 12-byte one (short
/// tags: whether the connection took them is in a handshake a capture may not hold, and a
/// packet opens under one size only). No replay window: a tool sees copies too.
pub fn open_captured(
    key: &[u8; 32],
    largest: Option<u64>,
    header: &[u8],
    seq: u16,
    sealed: &[u8],
) -> Option<(Vec<u8>, u64)> {
    let number = expand(largest, seq, seq_bits(header));
    [TAG_SIZE, TAG_SIZE_SHORT].into_iter().find_map(|tag_len| {
        let body_len = sealed.len().checked_sub(tag_len)?;
        let (mut body, tag) = (sealed[..body_len].to_vec(), &sealed[body_len..]);
        let opened = match <&[u8; TAG_SIZE]>::try_from(tag) {
            Ok(tag) => Aead::new(key).open(nonce(number), header, &mut body, tag),
            Err(_) => ShortAead::new(key).open(nonce(number), header, &mut body, tag),
        };
        opened.then_some((body, number))
    })
}

/// **Danger**: seals `buf[..len]` in place as packet `number` under `key`, as
/// [`open_captured`]'s counterpart: `buf[..header]` is the clear header (which must carry
/// `number`'s low 16 bits as its sequence), the tag is appended; returns the sealed length,
/// or `None` if `buf` has no room for the tag. Sealing two packets with one number under one
/// key breaks the encryption: an endpoint numbers its own packets, and this is only for tests
/// and tools that play a peer (a misbehaving one, in the simulation's attack tests).
pub fn danger_seal(
    key: &[u8; 32],
    number: u64,
    buf: &mut [u8],
    header: usize,
    len: usize,
) -> Option<usize> {
    let mut keys = PacketKeys::new(key, key);
    keys.next = number;
    keys.seal(buf, header, len)
}

/// The nonce of packet `number`: 4 zero bytes, then the number (little-endian).
fn nonce(number: u64) -> [u8; 12] {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&number.to_le_bytes());
    bytes
}

/// AES-256-GCM with a 12-byte tag, RustCrypto's (AES-NI and CLMUL picked at run time): it
/// opens the data packets of a connection with short tags, whose cut tags ring cannot verify.
struct ShortAead(Box<AesGcm<Aes256, U12, U12>>);

impl ShortAead {
    fn new(key: &[u8; 32]) -> Self {
        Self(Box::new(AesGcm::new(key.into())))
    }

    /// Decrypts `body` in place if `tag` (12 bytes) authenticates it and `aad` under `nonce`.
    fn open(&self, nonce: [u8; 12], aad: &[u8], body: &mut [u8], tag: &[u8]) -> bool {
        let Ok(tag) = <&[u8; TAG_SIZE_SHORT]>::try_from(tag) else { return false };
        self.0.decrypt_in_place_detached((&nonce).into(), aad, body, tag.into()).is_ok()
    }

    /// Encrypts `body` in place; the 12-byte tag (tests: the same as ring's tag cut).
    #[cfg(test)]
    fn seal(&self, nonce: [u8; 12], aad: &[u8], body: &mut [u8]) -> [u8; TAG_SIZE_SHORT] {
        let tag = self.0.encrypt_in_place_detached((&nonce).into(), aad, body);
        tag.expect("a datagram seals").into()
    }
}

/// ring's AES-256-GCM (native targets).
#[cfg(not(target_arch = "wasm32"))]
struct Aead(ring::aead::LessSafeKey);

#[cfg(not(target_arch = "wasm32"))]
impl Aead {
    fn new(key: &[u8; 32]) -> Self {
        let key = ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key);
        // AES-256 takes exactly the 32 bytes the type guarantees.
        Self(ring::aead::LessSafeKey::new(key.expect("a 32-byte key")))
    }

    /// Encrypts `body` in place under `nonce`, authenticating `aad`; the tag.
    fn seal(&self, nonce: [u8; 12], aad: &[u8], body: &mut [u8]) -> [u8; TAG_SIZE] {
        // Packet numbers never repeat under a key, so each nonce is unique.
        let nonce = ring::aead::Nonce::assume_unique_for_key(nonce);
        let aad = ring::aead::Aad::from(aad);
        // ring refuses only inputs past GCM's 64 GiB per message; a datagram is far below.
        let tag = self.0.seal_in_place_separate_tag(nonce, aad, body).expect("a datagram seals");
        tag.as_ref().try_into().expect("a 16-byte tag")
    }

    /// Decrypts `body` in place if `tag` authenticates it and `aad` under `nonce`.
    fn open(&self, nonce: [u8; 12], aad: &[u8], body: &mut [u8], tag: &[u8; TAG_SIZE]) -> bool {
        let nonce = ring::aead::Nonce::assume_unique_for_key(nonce);
        let tag = ring::aead::Tag::from(*tag);
        let aad = ring::aead::Aad::from(aad);
        self.0.open_in_place_separate_tag(nonce, aad, tag, body, 0..).is_ok()
    }
}

#[cfg(target_arch = "wasm32")]
use portable::Aead;

/// RustCrypto's portable AES-256-GCM (wasm32; natively only to test it against ring's).
#[cfg(any(target_arch = "wasm32", test))]
mod portable {
    use super::TAG_SIZE;
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::{Aes256Gcm, KeyInit};

    pub(super) struct Aead(Box<Aes256Gcm>);

    impl Aead {
        pub(super) fn new(key: &[u8; 32]) -> Self {
            Self(Box::new(Aes256Gcm::new(key.into())))
        }

        pub(super) fn seal(&self, nonce: [u8; 12], aad: &[u8], body: &mut [u8]) -> [u8; 16] {
            let tag = self.0.encrypt_in_place_detached((&nonce).into(), aad, body);
            // AES-GCM refuses only messages past 64 GiB; a datagram is far below.
            tag.expect("a datagram seals").into()
        }

        pub(super) fn open(
            &self,
            nonce: [u8; 12],
            aad: &[u8],
            body: &mut [u8],
            tag: &[u8; TAG_SIZE],
        ) -> bool {
            self.0.decrypt_in_place_detached((&nonce).into(), aad, body, tag.into()).is_ok()
        }
    }
}

/// The full number whose low `bits` bits (8 or 16) are `seq`, nearest the one after `largest`.
fn expand(largest: Option<u64>, seq: u16, bits: u32) -> u64 {
    let span = 1u64 << bits;
    let half = span / 2;
    let low = u64::from(seq) & (span - 1);
    let Some(largest) = largest else { return low };
    let expected = largest + 1;
    let candidate = (expected & !(span - 1)) | low;
    if candidate + half <= expected && candidate + span <= u64::MAX - half {
        candidate + span
    } else if candidate > expected + half && candidate >= span {
        candidate - span
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (PacketKeys, PacketKeys) {
        (PacketKeys::new(&[1; 32], &[2; 32]), PacketKeys::new(&[2; 32], &[1; 32]))
    }

    fn seal(keys: &mut PacketKeys, body: &[u8]) -> Vec<u8> {
        let seq = keys.next_seq().to_le_bytes();
        let mut buf = vec![0u8; 3 + body.len() + TAG_SIZE];
        buf[0] = 0x13;
        buf[1..3].copy_from_slice(&seq);
        buf[3..3 + body.len()].copy_from_slice(body);
        let len = keys.seal(&mut buf, 3, 3 + body.len()).unwrap();
        buf.truncate(len);
        buf
    }

    /// Goal: each key starts a line, and the numbers its path reads share the line of its
    /// last bytes (where ring keeps the algorithm each seal and open read first), so that
    /// each path reads its key's lines and no other, the lines `prefetch_open` and
    /// `prefetch_seal` ask for.
    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn each_key_ends_on_the_line_of_the_numbers_its_path_reads() {
        use std::mem::{align_of, offset_of, size_of};
        let line = |at: usize| at / 64;
        let last = |key: usize| line(key + size_of::<Aead>() - 1);
        let (receive, send) = (offset_of!(PacketKeys, receive), offset_of!(PacketKeys, send));
        assert_eq!(align_of::<PacketKeys>(), 64);
        assert_eq!((receive % 64, send % 64), (0, 0), "keys at {receive} and {send}");
        assert_eq!(line(offset_of!(PacketKeys, largest)), last(receive));
        assert_eq!(line(offset_of!(PacketKeys, seen) + 15), last(receive));
        assert_eq!(line(offset_of!(PacketKeys, next)), last(send));
    }

    fn open(keys: &mut PacketKeys, packet: &[u8]) -> Result<Vec<u8>, OpenError> {
        let seq = u16::from_le_bytes([packet[1], packet[2]]);
        let mut out = Vec::new();
        keys.open(seq, &packet[..3], &packet[3..], &mut out).map(|_| out)
    }

    /// A packet sealed with a narrow header: type `0x18` and the number's low 8 bits.
    fn seal_narrow(keys: &mut PacketKeys, body: &[u8]) -> Vec<u8> {
        let mut buf = vec![0x18, keys.next as u8];
        buf.extend_from_slice(body);
        buf.resize(2 + body.len() + TAG_SIZE, 0);
        let len = keys.seal(&mut buf, 2, 2 + body.len()).unwrap();
        buf.truncate(len);
        buf
    }

    fn open_narrow(keys: &mut PacketKeys, packet: &[u8]) -> Result<(Vec<u8>, u64), OpenError> {
        let mut out = Vec::new();
        let number = keys.open(u16::from(packet[1]), &packet[..2], &packet[2..], &mut out)?;
        Ok((out, number))
    }

    /// Goal: a narrow header's 8-bit sequence restores the full number across the 8-bit and
    /// 16-bit wraps, and through reordering within the replay window; a packet delayed past
    /// half the 8-bit span restores to another number and fails authentication (a counted
    /// drop, never a wrong delivery); nothing panics. Method: 70,000 packets, each opened on
    /// arrival except every fifth, which arrives 100 packets late; then one 300 packets late.
    #[test]
    fn narrow_sequences_restore_across_wraps_and_reordering() {
        let (mut client, mut server) = pair();
        let mut late = std::collections::VecDeque::new();
        for i in 0..70_000u32 {
            let packet = seal_narrow(&mut client, &i.to_le_bytes());
            if i % 5 == 0 {
                late.push_back((i, packet));
            } else {
                let opened = open_narrow(&mut server, &packet);
                assert_eq!(opened, Ok((i.to_le_bytes().to_vec(), u64::from(i))), "packet {i}");
            }
            if late.front().is_some_and(|(j, _)| i - j >= 100) {
                let (j, packet) = late.pop_front().expect("a late packet");
                let opened = open_narrow(&mut server, &packet);
                assert_eq!(opened, Ok((j.to_le_bytes().to_vec(), u64::from(j))), "late {j}");
            }
        }
        // Packet `n` arriving after `n + 300`: it restores to `n + 256`, which was lost, and
        // the nonce of that number does not open it. (Had `n + 256` arrived, the restored
        // number would be refused as a replay: a counted drop too.)
        let stale = seal_narrow(&mut client, b"stale");
        for i in 1..=300 {
            let packet = seal_narrow(&mut client, b"x");
            if i != 256 {
                assert!(open_narrow(&mut server, &packet).is_ok());
            }
        }
        assert_eq!(open_narrow(&mut server, &stale), Err(OpenError::Unauthenticated));
        assert_eq!(expand(Some(0xff), 0, 8), 0x100);
        assert_eq!(expand(Some(0x105), 0xfe, 8), 0xfe);
        assert_eq!(expand(Some(0x1_0000), 0x81, 8), 0x1_0081, "128 ahead of the next");
        assert_eq!(expand(Some(0x1_0000), 0x82, 8), 0x0_ff82, "129 ahead: taken as behind");
    }

    #[test]
    fn sealed_packets_open_on_the_other_end_only() {
        let (mut client, mut server) = pair();
        let packet = seal(&mut client, b"hello");
        assert!(!packet.windows(5).any(|w| w == b"hello"), "the body is encrypted");
        assert_eq!(open(&mut server, &packet), Ok(b"hello".to_vec()));
        // Its own key cannot open it, and an altered header or body fails.
        let (mut other, _) = pair();
        assert_eq!(open(&mut other, &packet), Err(OpenError::Unauthenticated));
        for i in [0, 3, packet.len() - 1] {
            let mut altered = seal(&mut client, b"hello");
            altered[i] ^= 0x40;
            assert_eq!(open(&mut server, &altered), Err(OpenError::Unauthenticated), "byte {i}");
        }
    }

    #[test]
    fn replays_are_refused_and_reordering_within_the_window_is_not() {
        let (mut client, mut server) = pair();
        let packets: Vec<Vec<u8>> = (0..200).map(|i| seal(&mut client, &[i as u8])).collect();
        assert!(open(&mut server, &packets[10]).is_ok());
        assert_eq!(open(&mut server, &packets[10]), Err(OpenError::Replayed));
        assert!(open(&mut server, &packets[5]).is_ok(), "late but new");
        assert_eq!(open(&mut server, &packets[5]), Err(OpenError::Replayed));
        assert!(open(&mut server, &packets[199]).is_ok());
        assert_eq!(open(&mut server, &packets[20]), Err(OpenError::Replayed), "too old to tell");
        assert!(open(&mut server, &packets[150]).is_ok());
    }

    /// Goal: the replay window is exactly `REPLAY_WINDOW` (128) numbers wide, at both edges.
    /// Method: open the newest packet, then ones exactly 128 and 129 below it, each twice.
    #[test]
    fn the_replay_window_is_128_numbers_wide() {
        assert_eq!(REPLAY_WINDOW, 128);
        let (mut client, mut server) = pair();
        let packets: Vec<Vec<u8>> = (0..300).map(|i| seal(&mut client, &[i as u8])).collect();
        assert!(open(&mut server, &packets[299]).is_ok());
        assert_eq!(open(&mut server, &packets[299]), Err(OpenError::Replayed), "the newest");
        assert_eq!(open(&mut server, &packets[170]), Err(OpenError::Replayed), "129 below");
        assert!(open(&mut server, &packets[171]).is_ok(), "128 below: the window's last");
        assert_eq!(open(&mut server, &packets[171]), Err(OpenError::Replayed));
        assert!(open(&mut server, &packets[298]).is_ok(), "1 below: the window's first");
        // A jump past the whole window forgets every bit; the old newest is then too old.
        let mut keys = PacketKeys::new(&[1; 32], &[2; 32]);
        keys.mark_seen(10);
        keys.mark_seen(10 + REPLAY_WINDOW + 1);
        assert!(keys.was_seen(10) && !keys.was_seen(11 + REPLAY_WINDOW - 1));
        assert!(keys.was_seen(10 + REPLAY_WINDOW + 1));
    }

    /// Goal: the browser's AES-GCM (RustCrypto, wasm32) and the native one (ring) are the
    /// same AEAD: each opens what the other sealed and refuses it altered. Method: both ways,
    /// a 400-byte packet, then one bit flipped in the body and in the associated data.
    #[test]
    fn the_portable_and_native_aes_gcm_open_each_others_packets() {
        let key = [9u8; 32];
        let (native, browser) = (Aead::new(&key), portable::Aead::new(&key));
        let header = [0x13, 1, 0];
        let body: Vec<u8> = (0..400).map(|i| i as u8).collect();
        let sealed_by_native = {
            let mut b = body.clone();
            let tag = native.seal(nonce(5), &header, &mut b);
            (b, tag)
        };
        let sealed_by_browser = {
            let mut b = body.clone();
            let tag = browser.seal(nonce(5), &header, &mut b);
            (b, tag)
        };
        assert_eq!(sealed_by_native, sealed_by_browser, "one construction, one output");
        let (sealed, tag) = sealed_by_native;
        let mut opened = sealed.clone();
        assert!(browser.open(nonce(5), &header, &mut opened, &tag));
        assert_eq!(opened, body);
        let mut altered = sealed.clone();
        altered[200] ^= 1;
        assert!(!browser.open(nonce(5), &header, &mut altered, &tag));
        assert!(!native.open(nonce(5), &[0x13, 1, 1], &mut sealed.clone(), &tag));
        assert!(!native.open(nonce(6), &header, &mut sealed.clone(), &tag), "another number");
    }

    /// Goal: a short tag is GCM's 96-bit tag as SP 800-38D defines it (the full tag's first
    /// 12 bytes): ring's tag cut to 12 is what RustCrypto's 12-byte-tag GCM computes and
    /// verifies; a packet opens under its own tag size only; a sealed disconnect keeps 16.
    /// Method: one 400-byte body sealed each way; short-tag keys against full-tag keys.
    #[test]
    fn a_short_tag_is_the_full_tag_cut_to_twelve_bytes() {
        let key = [9u8; 32];
        let (native, short) = (Aead::new(&key), ShortAead::new(&key));
        let header = [0x18, 5, 0, 0, 0, 0, 0];
        let body: Vec<u8> = (0..400).map(|i| i as u8).collect();
        let (mut by_native, mut by_short) = (body.clone(), body.clone());
        let full_tag = native.seal(nonce(5), &header, &mut by_native);
        let short_tag = short.seal(nonce(5), &header, &mut by_short);
        assert_eq!((&by_native, &full_tag[..12]), (&by_short, &short_tag[..]));
        assert!(short.open(nonce(5), &header, &mut by_native.clone(), &full_tag[..12]));
        assert!(!short.open(nonce(5), &header, &mut by_native.clone(), &full_tag[..11]));
        // Keys with short tags seal 4 bytes fewer; each kind opens only its own.
        let sealed = |short| {
            let mut keys = PacketKeys::with_tags(&[1; 32], &[2; 32], short);
            let mut buf = vec![0u8; 3 + 5 + TAG_SIZE];
            buf[0] = 0x13;
            buf[3..8].copy_from_slice(b"hello");
            let len = keys.seal(&mut buf, 3, 8).unwrap();
            buf.truncate(len);
            buf
        };
        let (long, cut) = (sealed(false), sealed(true));
        assert_eq!((long.len(), cut.len()), (8 + TAG_SIZE, 8 + TAG_SIZE_SHORT));
        let receiver = |short| PacketKeys::with_tags(&[2; 32], &[1; 32], short);
        assert_eq!(open(&mut receiver(true), &cut), Ok(b"hello".to_vec()));
        assert_eq!(open(&mut receiver(false), &cut), Err(OpenError::Unauthenticated));
        assert_eq!(open(&mut receiver(true), &long), Err(OpenError::Unauthenticated));
        // A client that proposed short tags learns the server's answer from its first packet.
        let first = |packet: &[u8]| {
            let keys = (&[2u8; 32], &[1u8; 32]);
            PacketKeys::open_first(keys, true, 0, packet.split_at(3), &mut Vec::new())
        };
        assert!(first(&cut).is_ok_and(|(keys, _)| keys.tag_len() == TAG_SIZE_SHORT));
        assert!(first(&long).is_ok_and(|(keys, _)| keys.tag_len() == TAG_SIZE));
        let mut keys = receiver(true);
        let mut buf = [0x16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(keys.seal_full(&mut buf, 4, 4), Some(4 + TAG_SIZE), "a sealed disconnect");
        // Captures open with either size.
        let hello = Some((b"hello".to_vec(), 0));
        assert_eq!(open_captured(&[1; 32], None, &cut[..3], 0, &cut[3..]), hello);
        assert_eq!(open_captured(&[1; 32], None, &long[..3], 0, &long[3..]), hello);
    }

    /// Goal: a key seals no more than `PACKETS_PER_KEY_MAX` packets, and says it is worn out
    /// early enough to seal the disconnects. Method: start the numbering just below the limit.
    #[test]
    fn a_key_seals_no_more_than_its_limit() {
        let (mut client, mut server) = pair();
        client.next = PACKETS_PER_KEY_MAX - PACKETS_KEPT_FOR_CLOSING - 1;
        assert!(!client.worn_out());
        let packet = seal(&mut client, b"x");
        assert!(client.worn_out());
        server.largest = Some(client.next - 2);
        assert_eq!(open(&mut server, &packet), Ok(b"x".to_vec()));
        client.next = PACKETS_PER_KEY_MAX - 1;
        seal(&mut client, b"the last one");
        let mut buf = [0u8; 64];
        assert_eq!(client.seal(&mut buf, 3, 4), None, "past the limit");
    }

    #[test]
    fn numbers_survive_the_sequence_wrapping() {
        let (mut client, mut server) = pair();
        for i in 0..70_000u32 {
            let packet = seal(&mut client, &i.to_le_bytes());
            // Every third packet is lost; the rest open across the 16-bit wrap.
            if i % 3 != 0 {
                assert_eq!(open(&mut server, &packet), Ok(i.to_le_bytes().to_vec()), "packet {i}");
            }
        }
        assert_eq!(expand(Some(0xffff), 0, 16), 0x1_0000);
        assert_eq!(expand(Some(0x1_0005), 0xfffe, 16), 0xfffe);
        assert_eq!(expand(None, 9, 16), 9);
    }
}
