//! Quantizers: floats in, small integers out, with a documented worst-case error.
//!
//! - [`PositionQuantizer`]: by default 1 mm steps in a box of x, z in [-256, 256] m and y in
//!   [-64, 192] m, 19 + 18 + 19 bits; error at most half a step per axis (0.5 mm) inside the box.
//! - [`RotationQuantizer`]: smallest three, by default 12 bits per component, 2 + 3 x 12 bits;
//!   error at most `2 * sqrt(3) * sqrt(2) / (2^12 - 2)` rad = 0.069 degree.
//! - [`VelocityQuantizer`]: by default 0.01 m/s (linear) or rad/s (angular) steps within +-64
//!   per component, 3 x 14 bits; error at most half a step per component (0.005).
//!
//! Values outside a quantizer's range are clamped to it; the error bound holds inside the range.
//! The tests in tests/quantization.rs check each bound on random and adversarial inputs.

use crate::bits::bits_for;
use crate::error::ConfigError;
use glam::{Quat, Vec3};
use serde::{Deserialize, Serialize};

/// The widest position component the format carries (268 km at 1 mm).
pub const POSITION_BITS_MAX: u32 = 28;
/// The widest velocity component the format carries.
pub const VELOCITY_BITS_MAX: u32 = 18;
/// The range of rotation precisions the format carries, in bits per component.
pub const ROTATION_BITS: std::ops::RangeInclusive<u32> = 6..=16;

/// Positions as integer steps of `precision` from the box's minimum corner.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PositionSpec", into = "PositionSpec")]
pub struct PositionQuantizer {
    min: Vec3,
    max: Vec3,
    precision: f32,
    /// `1 / precision`: quantizing multiplies, as a division per axis per entity per tick costs
    /// more than everything else together.
    inverse: f32,
    /// Largest code per axis (the number of steps).
    steps: [u32; 3],
    bits: [u32; 3],
}

/// The user-facing description of a [`PositionQuantizer`], as in a config file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionSpec {
    /// The box's minimum corner, metres.
    pub min: Vec3,
    /// The box's maximum corner, metres.
    pub max: Vec3,
    /// The step, metres.
    pub precision: f32,
}

impl TryFrom<PositionSpec> for PositionQuantizer {
    type Error = ConfigError;
    fn try_from(spec: PositionSpec) -> Result<Self, ConfigError> {
        Self::new(spec.min, spec.max, spec.precision)
    }
}

impl From<PositionQuantizer> for PositionSpec {
    fn from(q: PositionQuantizer) -> Self {
        Self { min: q.min, max: q.max, precision: q.precision }
    }
}

impl Default for PositionQuantizer {
    fn default() -> Self {
        Self::new(Vec3::new(-256.0, -64.0, -256.0), Vec3::new(256.0, 192.0, 256.0), 0.001)
            .expect("the default box needs 19 bits per axis, within the format's 28")
    }
}

impl PositionQuantizer {
    /// A quantizer for positions inside the box `min..=max` in steps of `precision` metres.
    pub fn new(min: Vec3, max: Vec3, precision: f32) -> Result<Self, ConfigError> {
        check_positive("position.precision", precision)?;
        if !(min.is_finite() && max.is_finite() && min.cmplt(max).all()) {
            return Err(ConfigError::EmptyBox { field: "position" });
        }
        let mut steps = [0u32; 3];
        let mut bits = [0u32; 3];
        for axis in 0..3 {
            let span = f64::from(max[axis]) - f64::from(min[axis]);
            let count = steps_to_cover(span, precision);
            let needed = bits_for(count.min(u64::MAX as f64) as u64);
            if needed > POSITION_BITS_MAX {
                let max = POSITION_BITS_MAX;
                return Err(ConfigError::TooManyBits { field: "position", bits: needed, max });
            }
            steps[axis] = count as u32;
            bits[axis] = needed;
        }
        Ok(Self { min, max, precision, inverse: 1.0 / precision, steps, bits })
    }

    /// Bits per axis on the wire.
    pub fn bits(&self) -> [u32; 3] {
        self.bits
    }

    /// Largest code per axis.
    pub fn steps(&self) -> [u32; 3] {
        self.steps
    }

    /// The step in metres.
    pub fn precision(&self) -> f32 {
        self.precision
    }

    /// Whether `position` is inside the box, where the error bound holds.
    pub fn contains(&self, position: Vec3) -> bool {
        position.cmpge(self.min).all() && position.cmple(self.max).all()
    }

    /// The code of each axis, clamped to the box.
    #[inline]
    pub fn quantize(&self, position: Vec3) -> [u32; 3] {
        kernel::position(self, position)
    }

    /// The position a code stands for.
    #[inline]
    pub fn dequantize(&self, code: [u32; 3]) -> Vec3 {
        let steps = Vec3::new(code[0] as f32, code[1] as f32, code[2] as f32);
        (self.min + steps * self.precision).min(self.max)
    }
}

/// A rotation as its three smallest quaternion components plus the index of the largest.
///
/// `q` and `-q` are the same rotation, so the encoder flips the sign to make the largest component
/// positive and the decoder rebuilds it as `sqrt(1 - a^2 - b^2 - c^2)`. The other three lie in
/// `[-1/sqrt(2), 1/sqrt(2)]`, which is the range the codes span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct QuantizedRotation {
    /// Index (x=0, y=1, z=2, w=3) of the component left out.
    pub largest: u8,
    /// Codes of the other three components in x, y, z, w order.
    pub components: [u16; 3],
}

/// Smallest-three rotations with `bits` bits per component.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RotationSpec", into = "RotationSpec")]
pub struct RotationQuantizer {
    bits: u32,
    max_code: u32,
}

/// The user-facing description of a [`RotationQuantizer`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RotationSpec {
    /// Bits per component, 6 to 16.
    pub bits: u32,
}

impl TryFrom<RotationSpec> for RotationQuantizer {
    type Error = ConfigError;
    fn try_from(spec: RotationSpec) -> Result<Self, ConfigError> {
        Self::new(spec.bits)
    }
}

impl From<RotationQuantizer> for RotationSpec {
    fn from(q: RotationQuantizer) -> Self {
        Self { bits: q.bits }
    }
}

impl Default for RotationQuantizer {
    fn default() -> Self {
        Self::new(12).expect("12 bits is inside ROTATION_BITS")
    }
}

const COMPONENT_MAX: f32 = std::f32::consts::FRAC_1_SQRT_2;

impl RotationQuantizer {
    /// A quantizer with `bits` bits per component.
    pub fn new(bits: u32) -> Result<Self, ConfigError> {
        if !ROTATION_BITS.contains(&bits) {
            let max = *ROTATION_BITS.end();
            return Err(ConfigError::TooManyBits { field: "rotation.bits", bits, max });
        }
        // An even number of steps puts a code exactly on zero, so the identity rotation (and any
        // axis-aligned one) comes back exactly; the all-ones code is never produced.
        Ok(Self { bits, max_code: (1 << bits) - 2 })
    }

    /// Bits per component.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The guaranteed bound on the angle between a unit rotation and its decoded form, radians:
    /// `2 * sqrt(3) * step` with `step = sqrt(2) / (2^bits - 2)`. The worst case is the rotation
    /// (1/2, 1/2, 1/2, 1/2) with every component rounded the same way.
    pub fn error_bound_radians(&self) -> f32 {
        let step = std::f32::consts::SQRT_2 / self.max_code as f32;
        2.0 * 3f32.sqrt() * step
    }

    /// Quantizes a rotation. A non-normalized input is normalized first; a zero or non-finite one
    /// becomes the identity.
    #[inline]
    pub fn quantize(&self, rotation: Quat) -> QuantizedRotation {
        kernel::rotation(self, rotation)
    }

    /// The unit quaternion a code stands for. Codes from the wire are not trusted: components are
    /// clamped and an impossible combination still yields a unit quaternion.
    #[inline]
    pub fn dequantize(&self, code: QuantizedRotation) -> Quat {
        let step = 2.0 * COMPONENT_MAX / self.max_code as f32;
        let [a, b, c] = code
            .components
            .map(|raw| u32::from(raw).min(self.max_code) as f32 * step - COMPONENT_MAX);
        // Summed in component order from zero, as a loop over the components would.
        let sum = 0.0 + a * a + b * b + c * c;
        let largest = (1.0 - sum).max(0.0).sqrt();
        // The largest put in its place by one choice, where a loop over the four components
        // chose at each (about 30 instructions a rotation more, in every client's snapshot).
        let q = match code.largest & 3 {
            0 => [largest, a, b, c],
            1 => [a, largest, b, c],
            2 => [a, b, largest, c],
            _ => [a, b, c, largest],
        };
        Quat::from_array(q).normalize()
    }
}

/// Velocities as signed integer steps of `precision`, each component within `-max..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "VelocitySpec", into = "VelocitySpec")]
pub struct VelocityQuantizer {
    max: f32,
    precision: f32,
    /// `1 / precision`, so that quantizing multiplies.
    inverse: f32,
    /// Largest code magnitude.
    half: i32,
    bits: u32,
}

/// The user-facing description of a [`VelocityQuantizer`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VelocitySpec {
    /// The largest magnitude per component (m/s or rad/s).
    pub max: f32,
    /// The step (m/s or rad/s).
    pub precision: f32,
}

impl TryFrom<VelocitySpec> for VelocityQuantizer {
    type Error = ConfigError;
    fn try_from(spec: VelocitySpec) -> Result<Self, ConfigError> {
        Self::new(spec.max, spec.precision)
    }
}

impl From<VelocityQuantizer> for VelocitySpec {
    fn from(q: VelocityQuantizer) -> Self {
        Self { max: q.max, precision: q.precision }
    }
}

impl VelocityQuantizer {
    /// A quantizer for components within `-max..=max` in steps of `precision`.
    pub fn new(max: f32, precision: f32) -> Result<Self, ConfigError> {
        check_positive("velocity.max", max)?;
        check_positive("velocity.precision", precision)?;
        let half = steps_to_cover(f64::from(max), precision);
        let bits = bits_for((2.0 * half).min(u64::MAX as f64) as u64);
        if bits > VELOCITY_BITS_MAX {
            return Err(ConfigError::TooManyBits {
                field: "velocity",
                bits,
                max: VELOCITY_BITS_MAX,
            });
        }
        Ok(Self { max, precision, inverse: 1.0 / precision, half: half as i32, bits })
    }

    /// The default for linear velocities: 0.01 m/s within +-64 m/s.
    pub fn default_linear() -> Self {
        Self::new(64.0, 0.01).expect("64 / 0.01 needs 14 bits, within the format's 18")
    }

    /// The default for angular velocities: 0.01 rad/s within +-64 rad/s.
    pub fn default_angular() -> Self {
        Self::new(64.0, 0.01).expect("64 / 0.01 needs 14 bits, within the format's 18")
    }

    /// Bits per component on the wire.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Largest code magnitude; the wire carries `code + half`.
    pub fn half(&self) -> i32 {
        self.half
    }

    /// The step.
    pub fn precision(&self) -> f32 {
        self.precision
    }

    /// Signed codes, clamped to the range.
    #[inline]
    pub fn quantize(&self, velocity: Vec3) -> [i32; 3] {
        kernel::velocity(self, velocity)
    }

    /// The velocity a code stands for.
    #[inline]
    pub fn dequantize(&self, code: [i32; 3]) -> Vec3 {
        let clamp = |c: i32| c.clamp(-self.half, self.half) as f32 * self.precision;
        Vec3::new(clamp(code[0]), clamp(code[1]), clamp(code[2]))
    }
}

#[cfg(not(target_arch = "x86_64"))]
use scalar as kernel;
/// The quantizers' kernels: SSE2 on x86_64 (where it is always on), scalar elsewhere. Both give
/// the same code for every input; the tests in `sse2` compare them.
#[cfg(target_arch = "x86_64")]
use sse2 as kernel;

#[cfg(target_arch = "x86_64")]
mod sse2;

/// `rotation` normalized, or the identity if it is zero or not finite: the one step both kernels
/// share (glam's own, so that both round alike).
#[inline(always)]
fn normalized_or_identity(rotation: Quat) -> Quat {
    if rotation.is_finite() && rotation.length_squared() > 1e-12 {
        rotation.normalize()
    } else {
        Quat::IDENTITY
    }
}

/// The scalar kernels, the definition of every code.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
mod scalar {
    use super::*;

    #[inline(always)]
    pub(super) fn position(q: &PositionQuantizer, position: Vec3) -> [u32; 3] {
        let scaled = (position - q.min) * q.inverse;
        let mut code = [0u32; 3];
        for axis in 0..3 {
            code[axis] = round_unsigned(scaled[axis]).min(q.steps[axis]);
        }
        code
    }

    #[inline(always)]
    pub(super) fn rotation(q: &RotationQuantizer, rotation: Quat) -> QuantizedRotation {
        let c = normalized_or_identity(rotation).to_array();
        // Without branches (which component is largest is as good as random for a moving
        // body, and the loops' branches were mispredicted): the first of the largest
        // magnitudes by a tournament of selects, where each pair keeps its first on a tie and
        // the second pair wins only if strictly larger, as a scan from x to w finds it.
        let (i01, m01) = if c[1].abs() > c[0].abs() { (1, c[1]) } else { (0, c[0]) };
        let (i23, m23) = if c[3].abs() > c[2].abs() { (3, c[3]) } else { (2, c[2]) };
        let (largest, value) = if m23.abs() > m01.abs() { (i23, m23) } else { (i01, m01) };
        let sign = if value < 0.0 { -1.0 } else { 1.0 };
        let scale = q.max_code as f32 / (2.0 * COMPONENT_MAX);
        // Every component's code, then the three that are not the largest, in order.
        let codes = c.map(|value| {
            round_unsigned((value * sign + COMPONENT_MAX) * scale).min(q.max_code) as u16
        });
        let components = [0, 1, 2].map(|slot| codes[slot + usize::from(slot >= largest)]);
        QuantizedRotation { largest: largest as u8, components }
    }

    #[inline(always)]
    pub(super) fn velocity(q: &VelocityQuantizer, velocity: Vec3) -> [i32; 3] {
        let scaled = velocity * q.inverse;
        let mut code = [0i32; 3];
        for axis in 0..3 {
            code[axis] = round_signed(scaled[axis]).clamp(-q.half, q.half);
        }
        code
    }
}

/// How many steps of `precision` cover `span`: the quotient rounded up, except that a quotient
/// within one part in a million of an integer is that integer. Decimal precisions are not exact
/// in binary (0.01 as f32 is 0.0099999998), and without the exception 64 / 0.01 would need 6401
/// steps where docs/wire.md, and any port computing in decimal, says 6400.
fn steps_to_cover(span: f64, precision: f32) -> f64 {
    let quotient = span / f64::from(precision);
    let nearest = quotient.round();
    if (quotient - nearest).abs() <= 1e-6 * nearest.max(1.0) {
        return nearest;
    }
    quotient.ceil()
}

/// Rounds half up for non-negative values; negative values and NaN become 0, and values past
/// `u32::MAX` saturate. `f32::round` is a libm call on baseline x86-64, and quantization runs
/// for every entity every tick.
#[inline(always)]
fn round_unsigned(value: f32) -> u32 {
    (value + 0.5) as u32
}

/// Rounds half away from zero, like `f32::round`, saturating at the `i32` range; NaN becomes 0.
/// Branch-free (adding a signed half, then truncating), since velocity signs are as good as
/// random.
#[inline(always)]
fn round_signed(value: f32) -> i32 {
    (value + 0.5f32.copysign(value)) as i32
}

fn check_positive(field: &'static str, value: f32) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::NotPositive { field, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::SplitMix64;

    /// The smallest-three quantizer as it was written first (a scan for the largest, a loop
    /// over the others): the branch-free one must give the same codes for every input.
    fn quantize_by_scan(max_code: u32, rotation: Quat) -> QuantizedRotation {
        let q = if rotation.is_finite() && rotation.length_squared() > 1e-12 {
            rotation.normalize()
        } else {
            Quat::IDENTITY
        };
        let c = q.to_array();
        let mut largest = 0;
        for i in 1..4 {
            if c[i].abs() > c[largest].abs() {
                largest = i;
            }
        }
        let sign = if c[largest] < 0.0 { -1.0 } else { 1.0 };
        let scale = max_code as f32 / (2.0 * COMPONENT_MAX);
        let mut components = [0u16; 3];
        let mut slot = 0;
        for (i, value) in c.iter().enumerate() {
            if i != largest {
                let code = round_unsigned((value * sign + COMPONENT_MAX) * scale);
                components[slot] = code.min(max_code) as u16;
                slot += 1;
            }
        }
        QuantizedRotation { largest: largest as u8, components }
    }

    /// The smallest-three dequantizer as it was written first (a loop over the components,
    /// skipping the largest): the one choosing its place at once must give the same bits.
    fn dequantize_by_loop(max_code: u32, code: QuantizedRotation) -> Quat {
        let step = 2.0 * COMPONENT_MAX / max_code as f32;
        let mut c = [0f32; 4];
        let mut sum = 0.0;
        let mut slot = 0;
        let largest = usize::from(code.largest & 3);
        for (i, value) in c.iter_mut().enumerate() {
            if i != largest {
                let raw = u32::from(code.components[slot]).min(max_code);
                *value = raw as f32 * step - COMPONENT_MAX;
                sum += *value * *value;
                slot += 1;
            }
        }
        c[largest] = (1.0 - sum).max(0.0).sqrt();
        Quat::from_array(c).normalize()
    }

    #[test]
    fn rotations_dequantize_as_the_loop_did_for_every_code() {
        // Goal: bit for bit the loop's rotation for any code from the wire, in range or not.
        // Method: every `largest` byte's two low bits and a high one, codes at and past the
        // ends, and random codes, for every width.
        let mut rng = SplitMix64::new(29);
        for bits in ROTATION_BITS {
            let q = RotationQuantizer::new(bits).unwrap();
            let m = q.max_code as u16;
            let ends = [0, 1, m / 2, m - 1, m, m.saturating_add(1), u16::MAX];
            let mut codes: Vec<[u16; 3]> = Vec::new();
            for a in ends {
                for b in ends {
                    codes.extend(ends.map(|c| [a, b, c]));
                }
            }
            codes.extend(
                (0..20_000).map(|_| [0; 3].map(|_| (rng.next_u64() % (u64::from(m) + 2)) as u16)),
            );
            for components in codes {
                for largest in [0, 1, 2, 3, 6, 255] {
                    let code = QuantizedRotation { largest, components };
                    let (new, old) = (q.dequantize(code), dequantize_by_loop(q.max_code, code));
                    assert_eq!(new.to_array().map(f32::to_bits), old.to_array().map(f32::to_bits));
                }
            }
        }
    }

    #[test]
    fn rotations_quantize_as_the_scan_did_for_every_input() {
        let mut rng = SplitMix64::new(23);
        let mut inputs = Vec::new();
        // Ties between every pair of components, signs and zeros of both signs, the identity
        // either way, unnormalized, tiny, huge and non-finite quaternions.
        let values = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, COMPONENT_MAX, -COMPONENT_MAX, 0.3, -2.0];
        for x in values {
            for y in values {
                for z in values {
                    for w in values {
                        inputs.push(Quat::from_xyzw(x, y, z, w));
                    }
                }
            }
        }
        for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, 1e-7, f32::MIN_POSITIVE] {
            inputs.push(Quat::from_xyzw(special, 0.5, 0.5, 0.5));
            inputs.push(Quat::from_xyzw(0.1, 0.2, special, -0.3));
        }
        for _ in 0..30_000 {
            let r = rng.rotation();
            // Unit, scaled, and nudged off unit length.
            inputs.extend([r, r * 3.5, r * 1e-3, -r]);
            let mut a = r.to_array();
            a[(rng.next_u64() % 4) as usize] = a[(rng.next_u64() % 4) as usize];
            inputs.push(Quat::from_array(a));
        }
        for bits in ROTATION_BITS {
            let q = RotationQuantizer::new(bits).unwrap();
            for r in &inputs {
                assert_eq!(q.quantize(*r), quantize_by_scan(q.max_code, *r), "{bits} bits: {r}");
            }
        }
    }
}
