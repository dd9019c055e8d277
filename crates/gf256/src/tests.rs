use super::*;
use proptest::prelude::*;

/// A product by shifts and XORs modulo 0x11D (Rally's polynomial), independent of any table.
fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= 0x1D;
        }
        b >>= 1;
    }
    product
}

fn row(c: u8) -> [u8; 256] {
    std::array::from_fn(|b| mul_slow(c, b as u8))
}

/// Lengths around every step size (8, 16, 32) and the short-slice cut, and a 400-byte payload.
fn lengths() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..100, 390usize..410, 1000usize..1100]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Goal: whichever kernel the CPU picks computes `target += c * source` exactly as the
    /// product does, over the shorter slice, leaving the rest of the target alone.
    #[test]
    fn mul_add_matches_the_product(c: u8, n in lengths(), extra in 0usize..40, seed: u64) {
        let bytes = |k: u64| -> Vec<u8> {
            (0..n as u64 + k).map(|i| (i.wrapping_mul(seed | 1) >> 7) as u8 ^ seed as u8).collect()
        };
        let (t, s) = (bytes(extra as u64), bytes(0).iter().map(|b| b ^ 0x5A).collect::<Vec<_>>());
        let mut target = t.clone();
        mul_add(&mut target, &row(c), &s);
        for (i, x) in target.iter().enumerate() {
            let want = t[i] ^ s.get(i).map_or(0, |s| mul_slow(c, *s));
            prop_assert_eq!(*x, want, "byte {} of {}", i, n);
        }
        let mut scaled = t.clone();
        scale(&mut scaled, &row(c));
        prop_assert!(scaled.iter().zip(&t).all(|(x, t)| *x == mul_slow(c, *t)));
    }

    /// Goal: each SIMD kernel this CPU has (not only the one picked) agrees with the portable
    /// kernel, for adding and for scaling.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_simd_kernel_matches_the_portable_one(c: u8, n in lengths(), seed: u64) {
        let t: Vec<u8> = (0..n as u64).map(|i| (i ^ seed).wrapping_mul(0x9E37) as u8).collect();
        let s: Vec<u8> = (0..n as u64).map(|i| (i.wrapping_add(seed) >> 3) as u8).collect();
        let row = row(c);
        for add in [true, false] {
            let mut want = t.clone();
            if add {
                portable::mul_add(&mut want, &row, &s);
            } else {
                portable::scale(&mut want, &row);
            }
            for (name, got) in x86::each_kernel(&mut t.clone(), &row, &s, add) {
                prop_assert_eq!(&got, &want, "{} add={}", name, add);
            }
        }
    }
}
