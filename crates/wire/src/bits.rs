//! Bit packing on caller-owned buffers.
//!
//! Bits are laid out least significant first: bit `i` of the stream is bit `i % 8` of byte
//! `i / 8`, and a value written with `n` bits puts its bit 0 first. This is the order a little
//! endian machine gets for free with a 64-bit accumulator, and it is the whole of what a port in
//! another language needs to know (docs/wire.md).
//!
//! Both sides work on whole 64-bit words while at least eight bytes of buffer remain and fall back
//! to byte-at-a-time copies near the end, so the hot path has one branch per field and no
//! allocation.

use crate::error::{DecodeError, Field};

/// The widest value one call can write or read. The accumulator holds up to seven pending bits, so
/// 56 more always fit in its 64.
pub const BITS_PER_CALL_MAX: u32 = 56;

/// Writes bits into a caller-owned byte slice.
///
/// Running out of room is sticky rather than an error per call: the encoder writes every field
/// without checking, and [`BitWriter::finish`] reports the overflow once. This keeps the per-field
/// cost to a shift, an or and a store.
#[derive(Debug)]
pub struct BitWriter<'a> {
    buf: &'a mut [u8],
    /// Pending bits not yet counted in `byte_pos`; always fewer than 8 between calls.
    scratch: u64,
    scratch_bits: u32,
    /// Bytes of `buf` that hold final data.
    byte_pos: usize,
    overflowed: bool,
}

impl<'a> BitWriter<'a> {
    /// Starts writing at the beginning of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, scratch: 0, scratch_bits: 0, byte_pos: 0, overflowed: false }
    }

    /// Appends the low `bits` bits of `value`. `bits` is at most [`BITS_PER_CALL_MAX`] and `value`
    /// must fit in it; both are the caller's contract, checked in debug builds.
    #[inline(always)]
    pub fn write(&mut self, value: u64, bits: u32) {
        debug_assert!(bits <= BITS_PER_CALL_MAX);
        debug_assert!(bits == 64 || value >> bits == 0, "value {value} wider than {bits} bits");
        self.scratch |= value << self.scratch_bits;
        let total = self.scratch_bits + bits;
        let whole = total / 8;
        let word = self.buf.get_mut(self.byte_pos..).and_then(|rest| rest.first_chunk_mut::<8>());
        match word {
            // Store all eight bytes; the ones past `whole` are rewritten by later calls.
            Some(word) => *word = self.scratch.to_le_bytes(),
            None => self.overflowed |= write_tail(self.buf, self.byte_pos, self.scratch, whole),
        }
        self.byte_pos += whole as usize;
        // `whole` is at most 7 because `total` is at most 7 + 56 = 63.
        self.scratch >>= whole * 8;
        self.scratch_bits = total % 8;
    }

    /// Writes one bit.
    #[inline(always)]
    pub fn write_bit(&mut self, bit: bool) {
        self.write(u64::from(bit), 1);
    }

    /// Bits written so far.
    pub fn bit_len(&self) -> usize {
        self.byte_pos * 8 + self.scratch_bits as usize
    }

    /// Flushes the last partial byte (zero padded) and returns the number of bytes written, or
    /// the number of bytes the data needed if the buffer was too small.
    pub fn finish(self) -> Result<usize, usize> {
        let needed = self.bit_len().div_ceil(8);
        if self.overflowed || needed > self.buf.len() {
            return Err(needed);
        }
        if self.scratch_bits > 0 {
            self.buf[self.byte_pos] = self.scratch as u8;
        }
        Ok(needed)
    }
}

/// Within eight bytes of the end: stores the `whole` finished bytes of `scratch` at `byte_pos`
/// one by one, as many as fit; returns whether some did not. A free function rather than a
/// method, so that the writer's fields can stay in registers on the path that does not call it.
#[cold]
fn write_tail(buf: &mut [u8], byte_pos: usize, scratch: u64, whole: u32) -> bool {
    let room = buf.len().saturating_sub(byte_pos);
    for (i, byte) in buf.iter_mut().skip(byte_pos).take(whole as usize).enumerate() {
        *byte = (scratch >> (8 * i)) as u8;
    }
    // Dropped bytes are reported by `finish`.
    whole as usize > room
}

/// Overwrites `bits` bits at bit offset `bit_pos` of an already finished buffer. Used for counts
/// that are only known after the fields they count have been written.
pub fn patch_bits(buf: &mut [u8], bit_pos: usize, value: u64, bits: u32) {
    for i in 0..bits as usize {
        let (byte, shift) = ((bit_pos + i) / 8, (bit_pos + i) % 8);
        let bit = ((value >> i) & 1) as u8;
        buf[byte] = (buf[byte] & !(1 << shift)) | (bit << shift);
    }
}

/// Reads bits from a byte slice in the order [`BitWriter`] wrote them.
///
/// Errors are sticky, like the writer's overflow: a read past the end or a failed check records
/// the first error (naming its field) and later reads return zeros, so the decoder's hot path has
/// no `Result` per field. Decoders check [`BitReader::error`] once per entity, which bounds the
/// work spent on garbage, and [`BitReader::finish`] reports the error.
#[derive(Debug, Clone)]
pub struct BitReader<'a> {
    buf: &'a [u8],
    bit_pos: usize,
    bit_len: usize,
    error: Option<DecodeError>,
}

impl<'a> BitReader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, bit_pos: 0, bit_len: buf.len() * 8, error: None }
    }

    /// The next 56 or more bits of the stream without consuming them, zero past the end.
    #[inline(always)]
    pub fn peek(&self) -> u64 {
        self.peek_at(self.bit_pos)
    }

    /// 56 or more bits starting at bit `bit` of the buffer, zero past the end. For columns with
    /// a fixed stride, whose entries can be read in any order.
    #[inline(always)]
    pub fn peek_at(&self, bit: usize) -> u64 {
        let byte = bit / 8;
        let word = match self.buf.get(byte..byte + 8) {
            // The slice has exactly eight bytes, so the conversion cannot fail.
            Some(bytes) => u64::from_le_bytes(bytes.try_into().expect("eight bytes")),
            None => peek_tail(self.buf, byte),
        };
        word >> (bit % 8)
    }

    /// Moves to bit `bit` after reading up to it with [`BitReader::peek_at`]; past the end,
    /// records a truncation of `field`.
    pub fn seek(&mut self, bit: usize, field: Field) {
        self.bit_pos = bit;
        if bit > self.bit_len {
            self.truncated(field);
        }
    }

    /// Bits in the buffer.
    pub fn bit_len(&self) -> usize {
        self.bit_len
    }

    /// Consumes `bits` bits after a [`BitReader::peek`]; past the end, records a truncation of
    /// `field`.
    #[inline(always)]
    pub fn advance(&mut self, bits: u32, field: Field) {
        self.bit_pos += bits as usize;
        if self.bit_pos > self.bit_len {
            self.truncated(field);
        }
    }

    #[inline(always)]
    fn truncated(&mut self, field: Field) {
        // Park at the end so that every later read is past it too and returns zeros.
        self.bit_pos = self.bit_len;
        self.fail(DecodeError::Truncated { field });
    }

    /// Reads `bits` bits (at most [`BITS_PER_CALL_MAX`]) as an unsigned value; bits past the end
    /// read as zero.
    #[inline(always)]
    pub fn read(&mut self, bits: u32, field: Field) -> u64 {
        debug_assert!(bits <= BITS_PER_CALL_MAX);
        // After an error the value is meaningless but harmless: the caller checks the error
        // before storing anything.
        let value = self.peek() & mask(bits);
        self.advance(bits, field);
        value
    }

    /// Reads one bit.
    #[inline(always)]
    pub fn read_bit(&mut self, field: Field) -> bool {
        self.read(1, field) == 1
    }

    /// Records `value > max` as an out-of-bounds `field`.
    #[inline(always)]
    pub fn check(&mut self, field: Field, value: u64, max: u64) {
        if value > max {
            self.fail(DecodeError::OutOfBounds { field, value, max });
        }
    }

    /// Records an error unless one is already recorded; the first error is the one reported.
    ///
    /// Inlined, with a cold empty call marking the path: a call that took the reader's address
    /// would keep its position in memory rather than a register for the whole decode.
    #[inline(always)]
    pub fn fail(&mut self, error: DecodeError) {
        unlikely();
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    /// The first error recorded, if any.
    #[inline(always)]
    pub fn error(&self) -> Option<&DecodeError> {
        self.error.as_ref()
    }

    /// `Err` with the first recorded error, if any.
    #[inline(always)]
    pub fn status(&self) -> Result<(), DecodeError> {
        match &self.error {
            None => Ok(()),
            Some(error) => Err(error.clone()),
        }
    }

    /// Bits consumed so far.
    pub fn bit_pos(&self) -> usize {
        self.bit_pos
    }

    /// Succeeds if no error was recorded and only zero padding of the last byte remains. Anything
    /// more is a datagram longer than what it encodes, which a correct encoder never produces.
    pub fn finish(&self) -> Result<(), DecodeError> {
        self.status()?;
        let used_bytes = self.bit_pos.div_ceil(8);
        if used_bytes != self.buf.len() {
            return Err(DecodeError::TrailingBytes { count: self.buf.len() - used_bytes });
        }
        let pad = self.bit_len - self.bit_pos;
        if pad > 0 && self.buf[self.buf.len() - 1] >> (8 - pad) != 0 {
            return Err(DecodeError::NonZeroPadding);
        }
        Ok(())
    }
}

/// The bytes from `byte` to the end of `buf`, fewer than eight, as a little endian word padded with
/// zeros. A free function, so that no call takes the reader's address (see [`BitReader::fail`]).
#[cold]
fn peek_tail(buf: &[u8], byte: usize) -> u64 {
    let mut word = 0u64;
    for (i, b) in buf.iter().skip(byte).take(8).enumerate() {
        word |= u64::from(*b) << (8 * i);
    }
    word
}

/// Marks the path that calls it as rare, so the compiler lays it out of the way; it does nothing.
#[cold]
#[inline(never)]
fn unlikely() {}

/// A mask of the low `bits` bits, for `bits` up to 64.
#[inline(always)]
pub const fn mask(bits: u32) -> u64 {
    // Branch-free: the shift covers 0..=63, the second term turns 64 into all ones. This runs
    // several times per entity, so it should not cost a branch.
    (1u64 << (bits & 63)).wrapping_sub(1) | ((bits >> 6) as u64).wrapping_neg()
}

/// The number of bits needed to write every value in `0..=max`.
pub const fn bits_for(max: u64) -> u32 {
    64 - max.leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_in_order_across_word_boundaries() {
        let widths = [1u32, 7, 56, 3, 33, 13, 56, 2, 9];
        let mut buf = [0u8; 64];
        let mut w = BitWriter::new(&mut buf);
        for (i, &bits) in widths.iter().enumerate() {
            w.write((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask(bits), bits);
        }
        let total: u32 = widths.iter().sum();
        let len = w.finish().expect("buffer is large enough");
        assert_eq!(len, (total as usize).div_ceil(8));
        let mut r = BitReader::new(&buf[..len]);
        for (i, &bits) in widths.iter().enumerate() {
            let value = r.read(bits, Field::Header);
            assert_eq!(value, (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask(bits));
        }
        r.finish().expect("only padding remains");
    }

    #[test]
    fn lsb_first_layout_matches_the_spec() {
        let mut buf = [0u8; 2];
        let mut w = BitWriter::new(&mut buf);
        w.write(0b1, 1);
        w.write(0b101, 3);
        w.write(0xAB, 8);
        assert_eq!(w.finish(), Ok(2));
        // Bit 0 = 1, bits 1..4 = 101, bits 4..12 = 0xAB.
        assert_eq!(buf, [0b1011_1011, 0b0000_1010]);
    }

    #[test]
    fn overflow_is_reported_once_at_finish() {
        let mut buf = [0u8; 3];
        let mut w = BitWriter::new(&mut buf);
        w.write(u64::from(u32::MAX), 32);
        w.write(1, 1);
        assert_eq!(w.finish(), Err(5));
    }

    #[test]
    fn reading_past_the_end_names_the_field() {
        let mut r = BitReader::new(&[0xFF]);
        assert_eq!(r.read(8, Field::Tick), 0xFF);
        assert_eq!(r.status(), Ok(()));
        assert_eq!(r.read(1, Field::EntityCount), 0);
        assert_eq!(r.read(1, Field::Tick), 0);
        // The first failure is the one reported.
        assert_eq!(r.finish(), Err(DecodeError::Truncated { field: Field::EntityCount }));
    }

    #[test]
    fn trailing_data_is_rejected() {
        let r = BitReader::new(&[0x01, 0x00]);
        assert_eq!(r.finish(), Err(DecodeError::TrailingBytes { count: 2 }));
        let mut r = BitReader::new(&[0b0000_0011]);
        assert_eq!(r.read(1, Field::Header), 1);
        assert_eq!(r.finish(), Err(DecodeError::NonZeroPadding));
    }

    #[test]
    fn patch_overwrites_only_its_bits() {
        let mut buf = [0xFFu8; 3];
        patch_bits(&mut buf, 4, 0, 12);
        assert_eq!(buf, [0x0F, 0x00, 0xFF]);
    }
}
