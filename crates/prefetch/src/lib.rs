//! Asks the core for every cache line of a value, not only its first: for a value whose
//! interior safe code cannot name, such as a ring AEAD key (544 bytes: its AES schedule, its
//! GHASH table and its algorithm), of which a seal or an open reads lines all through.
//!
//! A server worker with many rooms finds each connection's keys out of the core's caches by
//! its next packet; asked for with the rest of the connection's lines before the packet is
//! built (see `rally_proto::Endpoint::prefetch_queue`), they arrive while it is, instead of
//! each line waiting on memory in turn inside the seal.
//!
//! Why a crate of its own: the hint for an address inside a value is `_mm_prefetch` on a raw
//! pointer, an `unsafe` call (a `#[target_feature]` function), which the sans-IO crates forbid.
//! It is confined here to one line whose soundness needs no argument about the caller: a
//! prefetch never faults, whatever the address, and changes nothing a program can observe;
//! the addresses are inside `value` in any case.

/// Asks for every cache line `value` spans (into every level of the cache), the first and
/// last included when it is not aligned to one. Nothing is read and nothing changes: hints
/// the core may drop. A no-op off x86-64.
#[inline(always)]
pub fn lines<T: ?Sized>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let size = std::mem::size_of_val(value);
        if size == 0 {
            return;
        }
        let start = std::ptr::from_ref(value).cast::<i8>();
        let (first, last) = (start.addr() / 64, (start.addr() + size - 1) / 64);
        hint(start);
        for line in first + 1..=last {
            hint(start.wrapping_add(line * 64 - start.addr()));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
fn hint(address: *const i8) {
    // SAFETY: `_mm_prefetch` is unsafe only as a `#[target_feature(enable = "sse")]`
    // function; SSE is part of x86-64's baseline. A prefetch reads nothing into the program
    // and does not fault on any address.
    unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(address) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the hints change nothing and take any value: empty, smaller than a line, larger
    /// than many, and not aligned to a line. Method: values of each kind hinted, then
    /// compared with their copies.
    #[test]
    fn hinting_every_line_changes_no_value_of_any_size() {
        let big: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let before = big.clone();
        let boxed: Box<[u8; 1000]> = Box::new([3; 1000]);
        for value in [&big[..64], &big[1..], &big[63..130], &big[5..5], &big[4095..]] {
            lines(value);
        }
        lines(&*boxed);
        lines(&());
        lines(&[0u64; 3]);
        assert_eq!(big, before);
        assert!(boxed.iter().all(|b| *b == 3));
    }
}
