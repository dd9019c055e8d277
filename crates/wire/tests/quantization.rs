//! Goal: every quantizer keeps its documented worst-case error, and hostile floats (NaN, infinity,
//! out of range) are clamped instead of wrapping or panicking. Method: property tests over random
//! inputs plus the known worst cases, comparing each value with its decoded form.

use glam::{Quat, Vec3};
use proptest::prelude::*;
use rally_wire::quant::{PositionQuantizer, RotationQuantizer, VelocityQuantizer};
use rally_wire::reference::SplitMix64;

/// Angle between two rotations, radians.
fn angle_between(a: Quat, b: Quat) -> f32 {
    let dot = a.dot(b).abs().min(1.0);
    2.0 * dot.acos()
}

/// f32 rounding of a coordinate near `magnitude` metres, on top of the quantization step.
fn float_slack(magnitude: f32) -> f32 {
    4.0 * f32::EPSILON * magnitude.max(1.0)
}

proptest! {
    #[test]
    fn positions_within_half_a_millimetre(
        x in -256f32..256.0,
        y in -64f32..192.0,
        z in -256f32..256.0,
    ) {
        let q = PositionQuantizer::default();
        let p = Vec3::new(x, y, z);
        let back = q.dequantize(q.quantize(p));
        let bound = q.precision() / 2.0 + float_slack(256.0);
        prop_assert!((back - p).abs().max_element() <= bound, "{p} -> {back}");
    }

    #[test]
    fn custom_boxes_keep_their_bound(
        lo in -1000f32..0.0, span in 0.5f32..100.0, precision in 0.0005f32..0.1, t in 0f32..=1.0
    ) {
        let q = PositionQuantizer::new(Vec3::splat(lo), Vec3::splat(lo + span), precision).unwrap();
        let p = Vec3::splat(lo + span * t);
        let back = q.dequantize(q.quantize(p));
        let bound = precision / 2.0 + float_slack(lo.abs() + span);
        prop_assert!((back - p).abs().max_element() <= bound, "{p} -> {back}");
    }

    #[test]
    fn rotations_within_the_bound(seed in any::<u64>()) {
        let q = RotationQuantizer::default();
        let r = SplitMix64::new(seed).rotation();
        let back = q.dequantize(q.quantize(r));
        // The bound, plus f32 rounding in acos near 1.
        let slack = 1e-3 * q.error_bound_radians() + 2e-4;
        prop_assert!(angle_between(r, back) <= q.error_bound_radians() + slack);
    }

    #[test]
    fn velocities_within_half_a_step(v in prop::array::uniform3(-64f32..64.0)) {
        for q in [VelocityQuantizer::default_linear(), VelocityQuantizer::default_angular()] {
            let v = Vec3::from_array(v);
            let back = q.dequantize(q.quantize(v));
            prop_assert!((back - v).abs().max_element() <= q.precision() / 2.0 + float_slack(64.0));
        }
    }
}

#[test]
fn default_rotation_bound_is_under_a_tenth_of_a_degree() {
    let q = RotationQuantizer::default();
    assert!(q.error_bound_radians().to_degrees() < 0.1, "{}", q.error_bound_radians().to_degrees());
    // The analytic worst case: all four components equal, rounded the same way.
    let worst = Quat::from_xyzw(0.5, 0.5, 0.5, 0.5);
    let mut measured = angle_between(worst, q.dequantize(q.quantize(worst)));
    let mut rng = SplitMix64::new(99);
    for _ in 0..200_000 {
        let r = rng.rotation();
        measured = measured.max(angle_between(r, q.dequantize(q.quantize(r))));
    }
    assert!(measured.to_degrees() < 0.1, "measured {} degrees", measured.to_degrees());
}

#[test]
fn q_and_minus_q_quantize_alike() {
    let q = RotationQuantizer::default();
    let r = SplitMix64::new(5).rotation();
    assert_eq!(q.quantize(r), q.quantize(-r));
}

#[test]
fn hostile_floats_are_clamped() {
    let p = PositionQuantizer::default();
    let steps = p.steps();
    assert_eq!(p.quantize(Vec3::splat(f32::NAN)), [0, 0, 0]);
    assert_eq!(p.quantize(Vec3::splat(f32::INFINITY)), steps);
    assert_eq!(p.quantize(Vec3::splat(-1e30)), [0, 0, 0]);
    let far = p.dequantize(p.quantize(Vec3::new(1e6, 1e6, 1e6)));
    assert_eq!(far, Vec3::new(256.0, 192.0, 256.0));
    let v = VelocityQuantizer::default_linear();
    assert_eq!(v.quantize(Vec3::new(f32::NAN, f32::INFINITY, -1e9)), [0, v.half(), -v.half()]);
    let r = RotationQuantizer::default();
    assert_eq!(r.dequantize(r.quantize(Quat::from_xyzw(0.0, 0.0, 0.0, 0.0))), Quat::IDENTITY);
    assert_eq!(r.dequantize(r.quantize(Quat::from_xyzw(f32::NAN, 0.0, 0.0, 1.0))), Quat::IDENTITY);
}

#[test]
fn configurations_that_cannot_work_are_refused() {
    assert!(PositionQuantizer::new(Vec3::ZERO, Vec3::ONE, 0.0).is_err());
    assert!(PositionQuantizer::new(Vec3::ONE, Vec3::ZERO, 0.001).is_err());
    // 100 km at 0.1 mm needs 30 bits, above the format's 28.
    assert!(PositionQuantizer::new(Vec3::ZERO, Vec3::splat(100_000.0), 0.0001).is_err());
    assert!(RotationQuantizer::new(17).is_err());
    assert!(VelocityQuantizer::new(f32::NAN, 0.01).is_err());
    assert!(VelocityQuantizer::new(1000.0, 0.001).is_err());
}
