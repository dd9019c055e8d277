//! Arithmetic in GF(2^8), the field of the streaming repair code ([`crate::repair`]).
//!
//! Bytes are polynomials over GF(2) modulo x^8 + x^4 + x^3 + x^2 + 1 (0x11D, the polynomial of
//! Reed-Solomon codes and RFC 8681), whose generator 2 has order 255. Addition is XOR; a
//! product is one lookup in a 64 KiB table built at compile time. The kernels that repairs
//! spend their time in ([`mul_add`], [`scale`]) are rally-gf256's, given this table's row:
//! SSSE3 or AVX2 where the CPU has them (which needs `unsafe`, kept out of this crate), a
//! lookup per byte otherwise.
//!
//! Why a table of our own rather than a crate: `reed-solomon-erasure` exports slice kernels
//! of the same kind but carries a block code and its matrix machinery around them, and
//! `cu-fec` (a complete RFC 8681 codec) fixes the symbol size per configuration in const
//! generics and holds its whole window inline; Rally's repairs are as long as the window's
//! largest message, not a fixed symbol, and their window follows the channel's sequences.

/// The reduction polynomial, without its x^8 term.
const POLY: u16 = 0x11D;

/// Products of every pair of bytes: `MUL[a][b] = a * b`.
static MUL: [[u8; 256]; 256] = mul_table();

/// Multiplies two field elements by shifts and XORs (the slow way, for the table).
const fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLY & 0xFF) as u8;
        }
        b >>= 1;
    }
    product
}

const fn mul_table() -> [[u8; 256]; 256] {
    let mut table = [[0u8; 256]; 256];
    let mut a = 0;
    while a < 256 {
        let mut b = 0;
        while b < 256 {
            table[a][b] = mul_slow(a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    table
}

/// `a * b`.
pub(crate) fn mul(a: u8, b: u8) -> u8 {
    MUL[usize::from(a)][usize::from(b)]
}

/// The multiplicative inverse of `a`, or `None` for zero (a^254 = a^-1, since a^255 = 1).
pub(crate) fn inverse(a: u8) -> Option<u8> {
    if a == 0 {
        return None;
    }
    let mut result = 1u8;
    let mut base = a;
    let mut exponent = 254u8;
    while exponent != 0 {
        if exponent & 1 != 0 {
            result = mul(result, base);
        }
        base = mul(base, base);
        exponent >>= 1;
    }
    Some(result)
}

/// `target += c * source`, byte by byte over the shorter of the two.
pub(crate) fn mul_add(target: &mut [u8], c: u8, source: &[u8]) {
    match c {
        0 => {}
        1 => target.iter_mut().zip(source).for_each(|(t, s)| *t ^= s),
        // SSSE3 or AVX2 split-nibble lookups where the CPU has them, this table's row
        // otherwise: the kernel repairs spend their time in (`rally-bench transport`'s repair
        // cost, docs/benchmarks.md).
        _ => rally_gf256::mul_add(target, &MUL[usize::from(c)], source),
    }
}

/// `target *= c`.
pub(crate) fn scale(target: &mut [u8], c: u8) {
    rally_gf256::scale(target, &MUL[usize::from(c)]);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_generator_has_order_255_and_every_nonzero_byte_an_inverse() {
        let mut power = 1u8;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..255 {
            assert!(seen.insert(power), "2 repeats before 255 steps: not primitive");
            power = mul(power, 2);
        }
        assert_eq!(power, 1);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inverse(a).unwrap()), 1, "{a}");
        }
        assert_eq!(inverse(0), None);
    }

    /// The rank of a matrix over GF(256), by plain Gaussian elimination on a copy, with the
    /// shift-and-XOR product (independent of the table).
    pub(crate) fn rank(rows: &[Vec<u8>]) -> usize {
        let mut m: Vec<Vec<u8>> = rows.to_vec();
        let columns = m.first().map_or(0, Vec::len);
        let mut rank = 0;
        for column in 0..columns {
            let Some(pivot) = (rank..m.len()).find(|&r| m[r][column] != 0) else { continue };
            m.swap(rank, pivot);
            let lead = m[rank][column];
            for r in 0..m.len() {
                if r == rank || m[r][column] == 0 {
                    continue;
                }
                // Row r -= (m[r][c] / lead) * pivot row, with the slow product.
                let factor = mul_slow(m[r][column], inverse_slow(lead));
                let pivot_row = m[rank].clone();
                for (x, p) in m[r].iter_mut().zip(&pivot_row) {
                    *x ^= mul_slow(factor, *p);
                }
            }
            rank += 1;
        }
        rank
    }

    fn inverse_slow(a: u8) -> u8 {
        (1..=255u8).find(|b| mul_slow(a, *b) == 1).expect("a nonzero element")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn field_laws_hold(a: u8, b: u8, c: u8) {
            prop_assert_eq!(mul(a, b), mul(b, a));
            prop_assert_eq!(mul(a, mul(b, c)), mul(mul(a, b), c));
            prop_assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c));
            prop_assert_eq!(mul(a, 1), a);
        }

        #[test]
        fn mul_add_and_scale_match_the_product(c: u8, t: Vec<u8>, s: Vec<u8>) {
            let mut target = t.clone();
            mul_add(&mut target, c, &s);
            for (i, x) in target.iter().enumerate() {
                let want = t[i] ^ s.get(i).map_or(0, |s| mul_slow(c, *s));
                prop_assert_eq!(*x, want);
            }
            let mut scaled = t.clone();
            scale(&mut scaled, c);
            prop_assert!(scaled.iter().zip(&t).all(|(x, t)| *x == mul_slow(c, *t)));
        }

        /// The brute-force rank the repair tests trust agrees with the determinant on 2x2
        /// matrices: full rank exactly when `ad - bc` is not zero.
        #[test]
        fn brute_force_rank_agrees_with_the_determinant(a: u8, b: u8, c: u8, d: u8) {
            let det = mul(a, d) ^ mul(b, c);
            prop_assert_eq!(rank(&[vec![a, b], vec![c, d]]) == 2, det != 0);
        }
    }
}
