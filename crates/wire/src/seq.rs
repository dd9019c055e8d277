//! Wrap-safe sequence numbers.
//!
//! Ticks and packet sequences count up forever and wrap at their width. Two values compare by
//! their wrapping difference: `a` is newer than `b` when `a - b`, taken modulo 2^width, is in the
//! lower half of the range. This is the one comparison every layer uses (RFC 1982 serial number
//! arithmetic); it is correct as long as the values compared are less than half the range apart.

/// Whether `a` is newer than `b`, for 16-bit sequences.
#[inline]
pub const fn seq16_newer(a: u16, b: u16) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000
}

/// Whether `a` is newer than `b`, for 32-bit ticks.
#[inline]
pub const fn seq32_newer(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000_0000
}

/// How many steps `a` is ahead of `b` (negative when behind), for 32-bit ticks.
#[inline]
pub const fn seq32_distance(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_across_the_wrap() {
        assert!(seq16_newer(0, u16::MAX));
        assert!(seq16_newer(5, 65_530));
        assert!(!seq16_newer(65_530, 5));
        assert!(!seq16_newer(7, 7));
        assert!(seq32_newer(1, u32::MAX));
        assert_eq!(seq32_distance(2, u32::MAX), 3);
        assert_eq!(seq32_distance(u32::MAX, 2), -3);
    }
}
