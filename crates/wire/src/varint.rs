//! Variable-length integers: zigzag for signed values, LEB128 varints on byte buffers, and the
//! tiered bit codes the snapshot format uses for ids and deltas.

use crate::bits::{mask, BitReader, BitWriter};
use crate::error::{DecodeError, Field};

/// Maps signed to unsigned so that small magnitudes of either sign stay small:
/// 0, -1, 1, -2, 2 become 0, 1, 2, 3, 4.
#[inline(always)]
pub const fn zigzag(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

/// The inverse of [`zigzag`].
#[inline(always)]
pub const fn unzigzag(value: u32) -> i32 {
    ((value >> 1) as i32) ^ -((value & 1) as i32)
}

/// The most bytes a LEB128 varint of a `u64` takes.
pub const VARINT_BYTES_MAX: usize = 10;

/// Appends `value` as a LEB128 varint (seven bits per byte, low group first, high bit set on
/// every byte but the last) and returns the bytes written, or `None` if `out` is too short.
pub fn write_varint(value: u64, out: &mut [u8]) -> Option<usize> {
    let mut rest = value;
    for (i, byte) in out.iter_mut().enumerate().take(VARINT_BYTES_MAX) {
        let low = (rest & 0x7F) as u8;
        rest >>= 7;
        if rest == 0 {
            *byte = low;
            return Some(i + 1);
        }
        *byte = low | 0x80;
    }
    None
}

/// Reads a LEB128 varint from the start of `bytes`, returning the value and its length. Rejects
/// encodings longer than ten bytes and tenth bytes that would overflow 64 bits.
pub fn read_varint(bytes: &[u8]) -> Result<(u64, usize), DecodeError> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(VARINT_BYTES_MAX) {
        let low = u64::from(byte & 0x7F);
        if i == VARINT_BYTES_MAX - 1 && low > 1 {
            return Err(DecodeError::OutOfBounds { field: Field::Varint, value: low, max: 1 });
        }
        value |= low << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if bytes.len() >= VARINT_BYTES_MAX {
        // Ten bytes with the continuation bit still set on the last.
        return Err(DecodeError::OutOfBounds { field: Field::Varint, value: 1, max: 0 });
    }
    Err(DecodeError::Truncated { field: Field::Varint })
}

/// A prefix code over unsigned integers: tier `i` is announced by `i` one bits and a zero bit
/// (the last tier by ones alone) and carries `widths[i]` bits of value. Small values, the common
/// case, cost the first tier only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiers<const N: usize> {
    /// Value bits of each tier, ascending. The last tier must hold every value the field allows.
    pub widths: [u32; N],
}

impl<const N: usize> Tiers<N> {
    /// The tier of `value`: the first whose width holds it. Branch-free, because which tier a
    /// value needs is as good as random from one call to the next.
    #[inline(always)]
    fn tier_of(&self, value: u64) -> usize {
        let needed = 64 - value.leading_zeros();
        let tier = self.widths[..N - 1].iter().map(|width| usize::from(needed > *width)).sum();
        debug_assert!(needed <= self.widths[tier], "value {value} exceeds the last tier");
        tier
    }

    /// The code of `value` (at most [`crate::bits::BITS_PER_CALL_MAX`] bits for these tiers) and
    /// its length in bits, for callers that merge it with other fields into one write.
    #[inline(always)]
    pub fn encode(&self, value: u64) -> (u64, u32) {
        let tier = self.tier_of(value);
        // `tier` ones followed (except in the last tier) by a zero, LSB first.
        let prefix_bits = tier as u32 + u32::from(tier != N - 1);
        (mask(tier as u32) | value << prefix_bits, prefix_bits + self.widths[tier])
    }

    /// Writes `value` with the first tier wide enough to hold it.
    #[inline(always)]
    pub fn write(&self, w: &mut BitWriter<'_>, value: u64) {
        let tier = self.tier_of(value);
        let prefix_bits = tier as u32 + u32::from(tier != N - 1);
        let width = self.widths[tier];
        if prefix_bits + width <= crate::bits::BITS_PER_CALL_MAX {
            w.write(mask(tier as u32) | value << prefix_bits, prefix_bits + width);
        } else {
            w.write(mask(tier as u32), prefix_bits);
            w.write(value, width);
        }
    }

    /// Decodes a value from the start of `word` (the next bits of a stream, as
    /// [`BitReader::peek`] returns them) and returns it with the number of bits it took. Only
    /// for tier sets whose widest code fits one peek.
    #[inline(always)]
    pub fn decode(&self, word: u64) -> (u64, u32) {
        let ones = (!word).trailing_zeros().min(N as u32 - 1);
        let tier = ones as usize;
        let prefix_bits = if tier == N - 1 { ones } else { ones + 1 };
        let width = self.width_of(tier);
        debug_assert!(prefix_bits + width <= crate::bits::BITS_PER_CALL_MAX);
        ((word >> prefix_bits) & mask(width), prefix_bits + width)
    }

    /// `widths[tier]`, from the widths packed a byte each in one word when they fit (they are
    /// constants, so the packing folds away): a shift instead of a load on a decoder's critical
    /// path, where each code's length decides where the next one starts.
    #[inline(always)]
    fn width_of(&self, tier: usize) -> u32 {
        if N > 8 || self.widths.iter().any(|width| *width > 255) {
            return self.widths[tier];
        }
        let packed = self.widths.iter().rev().fold(0u64, |all, width| all << 8 | u64::from(*width));
        ((packed >> (8 * tier)) & 0xff) as u32
    }

    /// Reads a value written by [`Tiers::write`]; errors are recorded in the reader.
    #[inline(always)]
    pub fn read(&self, r: &mut BitReader<'_>, field: Field) -> u64 {
        let widest = N as u32 - 1 + self.widths[N - 1];
        if widest > crate::bits::BITS_PER_CALL_MAX {
            // Codes wider than one peek: the prefix first, then the value.
            let ones = (!r.peek()).trailing_zeros().min(N as u32 - 1);
            r.advance(if ones as usize == N - 1 { ones } else { ones + 1 }, field);
            return r.read(self.widths[ones as usize], field);
        }
        let (value, bits) = self.decode(r.peek());
        r.advance(bits, field);
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_keeps_small_magnitudes_small() {
        assert_eq!([0, -1, 1, -2, 2].map(zigzag), [0, 1, 2, 3, 4]);
        assert_eq!(zigzag(i32::MIN), u32::MAX);
        assert_eq!(unzigzag(u32::MAX), i32::MIN);
    }

    #[test]
    fn varint_lengths_follow_seven_bit_groups() {
        let mut buf = [0u8; VARINT_BYTES_MAX];
        assert_eq!(write_varint(0, &mut buf), Some(1));
        assert_eq!(write_varint(127, &mut buf), Some(1));
        assert_eq!(write_varint(128, &mut buf), Some(2));
        assert_eq!(buf[..2], [0x80, 0x01]);
        assert_eq!(write_varint(u64::MAX, &mut buf), Some(10));
        assert_eq!(read_varint(&buf), Ok((u64::MAX, 10)));
        assert_eq!(write_varint(300, &mut buf[..1]), None);
    }

    #[test]
    fn overlong_varints_are_rejected() {
        let eleven = [0xFFu8; 11];
        assert!(matches!(read_varint(&eleven), Err(DecodeError::OutOfBounds { .. })));
        assert_eq!(
            read_varint(&[0x80, 0x80]),
            Err(DecodeError::Truncated { field: Field::Varint })
        );
    }

    #[test]
    fn tiers_pick_the_narrowest_fit() {
        let tiers = Tiers { widths: [0, 3, 8, 32] };
        let cases = [(0u64, 1usize), (7, 5), (8, 11), (255, 11), (256, 35)];
        for (value, bits) in cases {
            let mut buf = [0u8; 16];
            let mut w = BitWriter::new(&mut buf);
            tiers.write(&mut w, value);
            assert_eq!(w.bit_len(), bits, "value {value}");
            let len = w.finish().expect("fits");
            let mut r = BitReader::new(&buf[..len]);
            assert_eq!(tiers.read(&mut r, Field::EntityId), value);
            assert_eq!(r.finish(), Ok(()));
        }
    }
}
