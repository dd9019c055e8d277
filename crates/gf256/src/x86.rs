//! The x86-64 kernels: split-nibble tables looked up by `pshufb`, 32 bytes a step with AVX2
//! and 16 with SSSE3. Each public function returns `false`, having done nothing, when the CPU
//! has neither or the slice is too short to pay for building the tables.

use std::arch::x86_64::*;

/// Below this many bytes the portable kernel is as fast (the tables cost about as much as 16
/// lookups).
const SHORT: usize = 32;

/// The products of `row`'s element with the high nibbles 0x00..0xF0 (those with the low
/// nibbles are the row's first 16 bytes, loaded from it as they are).
fn high_nibbles(row: &[u8; 256]) -> [u8; 16] {
    std::array::from_fn(|i| row[i << 4])
}

/// The best kernel this CPU runs, if any beats the portable one.
pub(crate) fn kernel() -> Option<&'static str> {
    if is_x86_feature_detected!("avx2") {
        Some("avx2")
    } else if is_x86_feature_detected!("ssse3") {
        Some("ssse3")
    } else {
        None
    }
}

pub(crate) fn mul_add(target: &mut [u8], row: &[u8; 256], source: &[u8]) -> bool {
    run::<true>(target, row, source)
}

pub(crate) fn scale(target: &mut [u8], row: &[u8; 256]) -> bool {
    // The source is the target itself: each step reads its bytes before writing them.
    run::<false>(target, row, &[])
}

/// `ADD`: `target ^= row[source]` (slices of equal length); otherwise `target = row[target]`
/// (`source` unused).
fn run<const ADD: bool>(target: &mut [u8], row: &[u8; 256], source: &[u8]) -> bool {
    if target.len() < SHORT {
        return false;
    }
    let high = high_nibbles(row);
    match kernel() {
        // SAFETY: the CPU has the instructions the function is compiled for.
        Some("avx2") => unsafe { avx2::<ADD>(target, row, source, &high) },
        // SAFETY: as above.
        Some(_) => unsafe { ssse3::<ADD>(target, row, source, &high) },
        None => return false,
    }
    true
}

/// The source bytes at `i`: `source`'s when adding, else `target`'s own.
///
/// # Safety
/// `i + 16` must be within both slices (`source` only when `ADD`).
#[inline(always)]
unsafe fn load16<const ADD: bool>(target: &[u8], source: &[u8], i: usize) -> __m128i {
    let from = if ADD { source } else { target };
    debug_assert!(i + 16 <= from.len());
    // SAFETY: in bounds by the caller's contract; unaligned loads are allowed.
    unsafe { _mm_loadu_si128(from.as_ptr().add(i).cast()) }
}

/// # Safety
/// The CPU must have SSSE3; `source.len() == target.len()` when `ADD`.
#[target_feature(enable = "ssse3")]
unsafe fn ssse3<const ADD: bool>(
    target: &mut [u8],
    row: &[u8; 256],
    source: &[u8],
    high: &[u8; 16],
) {
    let n = target.len();
    // SAFETY: the row's first 16 bytes and a 16-byte array; unaligned loads.
    let (low, high) =
        unsafe { (_mm_loadu_si128(row.as_ptr().cast()), _mm_loadu_si128(high.as_ptr().cast())) };
    let mask = _mm_set1_epi8(0x0F);
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n, the length of both slices.
        unsafe {
            let s = load16::<ADD>(target, source, i);
            let product = _mm_xor_si128(
                _mm_shuffle_epi8(low, _mm_and_si128(s, mask)),
                _mm_shuffle_epi8(high, _mm_and_si128(_mm_srli_epi64(s, 4), mask)),
            );
            let out = target.as_mut_ptr().add(i).cast::<__m128i>();
            let value = if ADD { _mm_xor_si128(_mm_loadu_si128(out), product) } else { product };
            _mm_storeu_si128(out, value);
        }
        i += 16;
    }
    tail::<ADD>(&mut target[i..], row, if ADD { &source[i..] } else { &[] });
}

/// # Safety
/// The CPU must have AVX2; `source.len() == target.len()` when `ADD`.
#[target_feature(enable = "avx2")]
unsafe fn avx2<const ADD: bool>(
    target: &mut [u8],
    row: &[u8; 256],
    source: &[u8],
    high: &[u8; 16],
) {
    let n = target.len();
    // SAFETY: the row's first 16 bytes and a 16-byte array; unaligned loads.
    let (low, high) =
        unsafe { (_mm_loadu_si128(row.as_ptr().cast()), _mm_loadu_si128(high.as_ptr().cast())) };
    let (low2, high2) = (_mm256_broadcastsi128_si256(low), _mm256_broadcastsi128_si256(high));
    let mask = _mm256_set1_epi8(0x0F);
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: i + 32 <= n, the length of both slices.
        unsafe {
            let from = if ADD { source } else { &*target };
            let s = _mm256_loadu_si256(from.as_ptr().add(i).cast());
            let product = _mm256_xor_si256(
                _mm256_shuffle_epi8(low2, _mm256_and_si256(s, mask)),
                _mm256_shuffle_epi8(high2, _mm256_and_si256(_mm256_srli_epi64(s, 4), mask)),
            );
            let out = target.as_mut_ptr().add(i).cast::<__m256i>();
            let value =
                if ADD { _mm256_xor_si256(_mm256_loadu_si256(out), product) } else { product };
            _mm256_storeu_si256(out, value);
        }
        i += 32;
    }
    if i + 16 <= n {
        // SAFETY: i + 16 <= n.
        unsafe {
            let s = load16::<ADD>(target, source, i);
            let product = _mm_xor_si128(
                _mm_shuffle_epi8(low, _mm_and_si128(s, _mm256_castsi256_si128(mask))),
                _mm_shuffle_epi8(
                    high,
                    _mm_and_si128(_mm_srli_epi64(s, 4), _mm256_castsi256_si128(mask)),
                ),
            );
            let out = target.as_mut_ptr().add(i).cast::<__m128i>();
            let value = if ADD { _mm_xor_si128(_mm_loadu_si128(out), product) } else { product };
            _mm_storeu_si128(out, value);
        }
        i += 16;
    }
    tail::<ADD>(&mut target[i..], row, if ADD { &source[i..] } else { &[] });
}

/// The last bytes, fewer than one step, by table.
fn tail<const ADD: bool>(target: &mut [u8], row: &[u8; 256], source: &[u8]) {
    if ADD {
        crate::portable::mul_add(target, row, source);
    } else {
        crate::portable::scale(target, row);
    }
}

/// Each kernel this CPU has, by name, for the tests to hold against the portable one.
#[cfg(test)]
pub(crate) fn each_kernel(
    target: &mut [u8],
    row: &[u8; 256],
    source: &[u8],
    add: bool,
) -> Vec<(&'static str, Vec<u8>)> {
    let high = high_nibbles(row);
    let mut out = Vec::new();
    for name in ["avx2", "ssse3"] {
        let has = if name == "avx2" {
            is_x86_feature_detected!("avx2")
        } else {
            is_x86_feature_detected!("ssse3")
        };
        if !has {
            continue;
        }
        let mut t = target.to_vec();
        let s = &source[..if add { t.len() } else { 0 }];
        // SAFETY: the CPU has the instructions, checked just above; equal lengths when adding.
        unsafe {
            match (name, add) {
                ("avx2", true) => avx2::<true>(&mut t, row, s, &high),
                ("avx2", false) => avx2::<false>(&mut t, row, s, &high),
                (_, true) => ssse3::<true>(&mut t, row, s, &high),
                (_, false) => ssse3::<false>(&mut t, row, s, &high),
            }
        }
        out.push((name, t));
    }
    out
}
