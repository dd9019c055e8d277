//! The multiply-add kernels of Rally's streaming repair code (rally-proto's `repair`): `target
//! += c * source` over GF(256), byte by byte, the work that encoding and decoding repairs spend
//! their time in.
//!
//! The field's products come from the caller as the row of its product table for `c`
//! (`row[b] = c * b`), so this crate knows nothing of the reduction polynomial. On x86-64 the
//! kernels use the split-nibble method (ISA-L's and most erasure coders'): since the product is
//! linear over XOR, `c * b = c * (b & 15) ^ c * (b & 0xF0)`, two 16-entry tables that `pshufb`
//! looks up 16 (SSSE3) or 32 (AVX2) bytes at a time. Which of them the CPU has is asked at run
//! time (`is_x86_feature_detected!`, which std answers once and caches); elsewhere, and on
//! slices under 32 bytes, one table lookup per byte.
//!
//! Why a crate of its own: `std::arch` intrinsics and calling a `#[target_feature]` function
//! after a runtime check need `unsafe`, which rally-proto forbids; here it is confined to one
//! module whose functions are tested against the portable kernel.

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86;

/// `target[i] ^= row[source[i]]` over the shorter of the two slices: `target += c * source`
/// when `row` is the product table's row for `c`.
pub fn mul_add(target: &mut [u8], row: &[u8; 256], source: &[u8]) {
    let n = target.len().min(source.len());
    let (target, source) = (&mut target[..n], &source[..n]);
    #[cfg(target_arch = "x86_64")]
    if x86::mul_add(target, row, source) {
        return;
    }
    portable::mul_add(target, row, source);
}

/// `target[i] = row[target[i]]`: `target *= c` when `row` is the product table's row for `c`.
pub fn scale(target: &mut [u8], row: &[u8; 256]) {
    #[cfg(target_arch = "x86_64")]
    if x86::scale(target, row) {
        return;
    }
    portable::scale(target, row);
}

/// The kernels every target has: one table lookup per byte.
pub mod portable {
    /// [`crate::mul_add`] without SIMD, over slices of equal length.
    pub fn mul_add(target: &mut [u8], row: &[u8; 256], source: &[u8]) {
        // Eight lookups per step, with no bounds checks.
        let mut targets = target.chunks_exact_mut(8);
        let mut sources = source.chunks_exact(8);
        for (t, s) in (&mut targets).zip(&mut sources) {
            for i in 0..8 {
                t[i] ^= row[usize::from(s[i])];
            }
        }
        let rest = targets.into_remainder().iter_mut().zip(sources.remainder());
        rest.for_each(|(t, s)| *t ^= row[usize::from(*s)]);
    }

    /// [`crate::scale`] without SIMD.
    pub fn scale(target: &mut [u8], row: &[u8; 256]) {
        target.iter_mut().for_each(|t| *t = row[usize::from(*t)]);
    }
}

/// Which kernel [`mul_add`] and [`scale`] use on this CPU, for reports: `"avx2"`, `"ssse3"` or
/// `"portable"`.
pub fn kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if let Some(name) = x86::kernel() {
        return name;
    }
    "portable"
}

#[cfg(test)]
mod tests;
