//! The quantizers' kernels in SSE2, which x86_64 always has (no run-time check is needed).
//! Each does the scalar kernel's IEEE operations in the same order, one lane per component, so
//! every code is the same for every input: the room's codes are the state clients rebuild bit
//! for bit. Where the scalar kernel leans on a saturating `as` cast (NaN to 0, out of range to
//! the bound), the lanes are clamped first, in an order that gives the same result. Every
//! configuration the quantizers accept fits these kernels: a position's largest code is below
//! 2^28 (compared as an integer), a velocity's below 2^17 and a rotation's below 2^16 (both
//! exact as `f32`), so no configuration falls back to the scalar kernels.

use super::{
    normalized_or_identity, PositionQuantizer, QuantizedRotation, RotationQuantizer,
    VelocityQuantizer, COMPONENT_MAX,
};
use glam::{Quat, Vec3};
// The intrinsics through safe_arch: `core::arch`'s are safe to call only inside a function that
// lists SSE2 in `#[target_feature]`, and calling that one from any other is `unsafe` even where
// SSE2 is always on, which this crate forbids. safe_arch's wrappers are `cfg`'d on the
// target feature being on at build time, as it always is on x86_64.
use safe_arch::{
    add_m128, bitand_m128, bitand_m128i, bitandnot_m128, bitandnot_m128i, bitor_m128, bitor_m128i,
    cmp_eq_mask_m128, cmp_gt_mask_i32_m128i, cmp_ordered_mask_m128, get_i32_from_m128i_s,
    get_i64_from_m128i_s, m128, m128i, max_m128, min_m128, move_mask_m128, mul_m128, set_i32_m128i,
    set_m128, set_splat_m128, shuffle_abi_f32_all_m128, shuffle_ai_f32_all_m128i,
    shuffle_ai_i16_h64all_m128i, shuffle_ai_i16_l64all_m128i, sub_m128, truncate_m128_to_m128i,
    unpack_high_i64_m128i, zeroed_m128,
};

/// The largest `f32` below 2^31: a clamp that keeps `cvttps2dq` in range.
const BELOW_2_POW_31: f32 = 2_147_483_520.0;

/// `[x, y, z, z]`, built without loads through pointers. The last lane is never read back
/// (`first_three`), and any value there quantizes without a trap (the exceptions are masked):
/// with a copy of `z` there the compiler builds a velocity's vector from its two loads in two
/// shuffles, where a zero took a zeroing and a move more.
#[inline(always)]
fn lanes(v: Vec3) -> m128 {
    set_m128(v.z, v.z, v.y, v.x)
}

/// Lanes 0 to 2.
#[inline(always)]
fn first_three(v: m128i) -> [i32; 3] {
    let low = get_i64_from_m128i_s(v);
    let high = get_i32_from_m128i_s(unpack_high_i64_m128i(v, v));
    [low as i32, (low >> 32) as i32, high]
}

/// The scalar kernel: `round_unsigned((position - min) * inverse).min(steps)`.
#[inline(always)]
pub(super) fn position(q: &PositionQuantizer, position: Vec3) -> [u32; 3] {
    let scaled = mul_m128(sub_m128(lanes(position), lanes(q.min)), set_splat_m128(q.inverse));
    let rounded = add_m128(scaled, set_splat_m128(0.5));
    // `as u32` makes NaN and negatives 0 (`max_m128` (`maxps`) returns its second operand, 0, for a
    // NaN); anything past 2^31 is past every box's steps, which the integer minimum then gives.
    let clamped = min_m128(max_m128(rounded, zeroed_m128()), set_splat_m128(BELOW_2_POW_31));
    let codes = truncate_m128_to_m128i(clamped);
    // Steps go up to 2^28, not all exact as `f32`: the minimum is taken on integers (SSE2 has
    // no `pminsd`; both are non-negative, so a signed compare is right).
    let [x, y, z] = q.steps.map(|s| s as i32);
    let steps = set_i32_m128i(0, z, y, x);
    let over = cmp_gt_mask_i32_m128i(codes, steps);
    let codes = bitor_m128i(bitand_m128i(over, steps), bitandnot_m128i(over, codes));
    first_three(codes).map(|c| c as u32)
}

/// The scalar kernel: `round_signed(velocity * inverse).clamp(-half, half)`.
#[inline(always)]
pub(super) fn velocity(q: &VelocityQuantizer, velocity: Vec3) -> [i32; 3] {
    let scaled = mul_m128(lanes(velocity), set_splat_m128(q.inverse));
    // `0.5f32.copysign(value)`: a half with the value's sign bit.
    let sign = bitand_m128(scaled, set_splat_m128(-0.0));
    let rounded = add_m128(scaled, bitor_m128(set_splat_m128(0.5), sign));
    // `as i32` makes NaN 0, where the clamp below would make it a bound: NaN lanes zeroed.
    let rounded = bitand_m128(rounded, cmp_ordered_mask_m128(rounded, rounded));
    // Exact: `half` is below 2^17. Truncating a value clamped to +-half gives the clamped
    // truncation, as `half` is an integer.
    let half = q.half as f32;
    let clamped = min_m128(max_m128(rounded, set_splat_m128(-half)), set_splat_m128(half));
    first_three(truncate_m128_to_m128i(clamped))
}

/// The scalar kernel: smallest three, the first of the largest magnitudes left out.
#[inline(always)]
pub(super) fn rotation(q: &RotationQuantizer, rotation: Quat) -> QuantizedRotation {
    let [x, y, z, w] = normalized_or_identity(rotation).to_array();
    let c = set_m128(w, z, y, x);
    // No NaN from here on: a normalized or the identity quaternion is finite.
    let magnitude = bitandnot_m128(set_splat_m128(-0.0), c);
    let most = max_m128(magnitude, shuffle_abi_f32_all_m128::<0b1011_0001>(magnitude, magnitude));
    let most = max_m128(most, shuffle_abi_f32_all_m128::<0b0100_1110>(most, most));
    // The lowest lane holding the largest magnitude, which is what the scalar tournament picks
    // on a tie (a scan from x to w). `& 3` only keeps the shifts below in range.
    let ties = move_mask_m128(cmp_eq_mask_m128(magnitude, most)) as u32;
    let largest = ties.trailing_zeros() & 3;
    // The largest's sign bit, where the scalar kernel asks `value < 0.0`: the two differ only
    // for -0.0, which the largest is only in a quaternion of zeros (one whose length
    // overflowed, normalized to zeros), and there the sign multiplies only zeros, each code
    // `COMPONENT_MAX`'s either way. One compare fewer.
    let negative = move_mask_m128(c) as u32 >> largest & 1;
    let sign = if negative == 1 { -1.0 } else { 1.0 };
    let scale = q.max_code as f32 / (2.0 * COMPONENT_MAX);
    let shifted = add_m128(mul_m128(c, set_splat_m128(sign)), set_splat_m128(COMPONENT_MAX));
    let rounded = add_m128(mul_m128(shifted, set_splat_m128(scale)), set_splat_m128(0.5));
    // The largest code (at most 2^16 - 2) is exact as `f32`, so clamping before truncating
    // gives the truncation's minimum.
    let top = set_splat_m128(q.max_code as f32);
    let codes = truncate_m128_to_m128i(min_m128(max_m128(rounded, zeroed_m128()), top));
    // Each lane's low 16 bits, x to w, as one word.
    let words = shuffle_ai_i16_h64all_m128i::<0b10_00_10_00>(shuffle_ai_i16_l64all_m128i::<
        0b10_00_10_00,
    >(codes));
    let all = get_i64_from_m128i_s(shuffle_ai_f32_all_m128i::<0b10_00_10_00>(words)) as u64;
    // The codes below the largest stay, those above move down one place.
    let below = (1u64 << (16 * largest)) - 1;
    let three = (all & below) | ((all >> 16) & !below);
    let components = [three as u16, (three >> 16) as u16, (three >> 32) as u16];
    QuantizedRotation { largest: largest as u8, components }
}

#[cfg(test)]
mod tests {
    use super::super::scalar;
    use super::*;
    use crate::reference::SplitMix64;

    /// Values every quantizer must treat as the scalar kernel does: zeros of both signs,
    /// non-finite values, the extremes of `f32`, subnormals, halves (rounding ties) and
    /// `1/sqrt(2)` (a smallest-three component's bound).
    const SPECIAL: [f32; 20] = [
        0.0,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        0.5,
        -0.5,
        1.5,
        -1.5,
        COMPONENT_MAX,
        -COMPONENT_MAX,
        4_294_967_296.0,
        2_147_483_648.0,
    ];

    fn positions() -> Vec<PositionQuantizer> {
        let new = |min: [f32; 3], max: [f32; 3], precision| {
            PositionQuantizer::new(Vec3::from(min), Vec3::from(max), precision).unwrap()
        };
        vec![
            PositionQuantizer::default(),
            // 268,000,000 steps: near the format's 2^28, most of them not exact as `f32`.
            new([-134_000.0; 3], [134_000.0; 3], 0.001),
            new([-3.3, 0.7, -1000.0], [5.1, 9.9, 1000.0], 0.0037),
            // No steps at all: every code is 0.
            new([0.0; 3], [1e-9; 3], 1.0),
        ]
    }

    fn velocities() -> Vec<VelocityQuantizer> {
        vec![
            VelocityQuantizer::default_linear(),
            // 125,000 steps a side, 18 bits: the format's widest.
            VelocityQuantizer::new(1000.0, 0.008).unwrap(),
            VelocityQuantizer::new(3.7, 0.013).unwrap(),
            // No steps: every code is 0.
            VelocityQuantizer::new(1e-9, 1.0).unwrap(),
        ]
    }

    /// One component: a special value, random bits (any float at all), a value near a code's
    /// rounding boundary (`offset + (k + 1/2) / inverse`, moved a few ulps), or one in range.
    fn component(rng: &mut SplitMix64, offset: f32, inverse: f32, steps: u32) -> f32 {
        match rng.next_u64() % 4 {
            0 => SPECIAL[(rng.next_u64() % SPECIAL.len() as u64) as usize],
            1 => f32::from_bits(rng.next_u64() as u32),
            2 => {
                let k = (rng.next_u64() % (u64::from(steps) + 3)) as f32 - 1.0;
                let boundary = offset + (k + 0.5) / inverse;
                let ulps = (rng.next_u64() % 5) as i32 - 2;
                f32::from_bits(boundary.to_bits().wrapping_add_signed(ulps))
            }
            _ => offset + rng.range(-0.1, 1.1) * steps as f32 / inverse,
        }
    }

    fn vector(rng: &mut SplitMix64, offset: Vec3, inverse: f32, steps: [u32; 3]) -> Vec3 {
        Vec3::from(std::array::from_fn(|axis| component(rng, offset[axis], inverse, steps[axis])))
    }

    /// A quaternion: unit, scaled, with two components of equal magnitude (a smallest-three
    /// tie, either sign), with special or random-bit components.
    fn quaternion(rng: &mut SplitMix64) -> Quat {
        let mut c = rng.rotation().to_array();
        match rng.next_u64() % 4 {
            0 => return Quat::from_array(c) * rng.range(-3.0, 3.0),
            1 => {
                let (from, to) = ((rng.next_u64() % 4) as usize, (rng.next_u64() % 4) as usize);
                let sign = if rng.next_u64() % 2 == 0 { 1.0 } else { -1.0 };
                c[to] = c[from] * sign;
            }
            2 => {
                let values = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, COMPONENT_MAX, -COMPONENT_MAX];
                for value in &mut c {
                    *value = values[(rng.next_u64() % values.len() as u64) as usize];
                }
            }
            _ => c[(rng.next_u64() % 4) as usize] = component(rng, 0.0, 1.0, 2),
        }
        Quat::from_array(c)
    }

    /// Asserts both kernels' codes are the same for every quantizer given.
    fn check(
        positions: &[PositionQuantizer],
        rotations: &[RotationQuantizer],
        velocities: &[VelocityQuantizer],
        (p, r, v): (Vec3, Quat, Vec3),
    ) {
        for q in positions {
            assert_eq!(position(q, p), scalar::position(q, p), "{q:?} {p:?}");
        }
        for q in rotations {
            assert_eq!(rotation(q, r), scalar::rotation(q, r), "{q:?} {r:?}");
        }
        for q in velocities {
            assert_eq!(velocity(q, v), scalar::velocity(q, v), "{q:?} {v:?}");
        }
    }

    #[test]
    fn the_vector_kernels_give_the_scalar_codes_for_every_input() {
        let (positions, velocities) = (positions(), velocities());
        let rotations: Vec<_> =
            crate::quant::ROTATION_BITS.map(|bits| RotationQuantizer::new(bits).unwrap()).collect();
        // Edge rows: every pair of special values in every lane, under every quantizer.
        for a in SPECIAL {
            for b in SPECIAL {
                let (v, q) = (Vec3::new(a, b, a), Quat::from_xyzw(a, b, b, a));
                check(&positions, &rotations, &velocities, (v, q, v));
                let (v, q) = (Vec3::new(b, 0.25, a), Quat::from_xyzw(0.5, a, -0.5, b));
                check(&positions, &rotations, &velocities, (v, q, v));
            }
        }
        // Random rows, each under one quantizer of each kind in turn.
        let mut rng = SplitMix64::new(28);
        for row in 0..200_000 {
            let p = &positions[row % positions.len()];
            let v = &velocities[row % velocities.len()];
            let r = &rotations[row % rotations.len()];
            let position = vector(&mut rng, p.min, p.inverse, p.steps);
            let velocity = vector(&mut rng, Vec3::splat(-v.max), v.inverse, [2 * v.half as u32; 3]);
            let input = (position, quaternion(&mut rng), velocity);
            check(&[*p], &[*r], &[*v], input);
        }
    }
}
