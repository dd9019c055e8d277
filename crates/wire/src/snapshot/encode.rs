//! The snapshot encoder: full snapshots and deltas against a baseline (docs/wire.md sections 5
//! and 6). The writer's overflow is sticky, so the per-field path has no error handling; the
//! only checks are at the start (entity counts) and the end (buffer size).

use super::*;
use crate::bits::{mask, patch_bits, BitWriter, BITS_PER_CALL_MAX};
use crate::error::EncodeError;
use crate::varint::zigzag;

impl SnapshotConfig {
    /// Encodes every entity of `snapshot` into `out` and returns the bytes written.
    ///
    /// A full snapshot is laid out by column: the fixed-width columns first (moving flags,
    /// positions, rotations), then the id gaps, then the velocities of the bodies that move. A
    /// decoder finds every fixed-width entry from the entity count alone and reads them
    /// independently of each other, in one pass with the ids.
    pub fn encode_full(&self, snapshot: &Snapshot, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.check_count(snapshot)?;
        let capacity = out.len();
        let mut w = BitWriter::new(out);
        w.write(u64::from(FORMAT_FULL), 8);
        w.write(u64::from(snapshot.tick), 32);
        w.write(snapshot.len() as u64, COUNT_BITS);
        let entities = snapshot.entities();
        for entity in entities {
            w.write(moving_flags(entity), 2);
        }
        for entity in entities {
            self.write_position(&mut w, entity.position);
        }
        for entity in entities {
            self.write_rotation(&mut w, entity.rotation);
        }
        let mut previous: Option<u32> = None;
        for entity in entities {
            ID_TIERS.write(&mut w, id_gap(previous, entity.id));
            previous = Some(entity.id);
        }
        for entity in entities.iter().filter(|e| e.linear_velocity != [0; 3]) {
            write_velocity_components(&mut w, &self.linear_velocity, entity.linear_velocity);
        }
        for entity in entities.iter().filter(|e| e.angular_velocity != [0; 3]) {
            write_velocity_components(&mut w, &self.angular_velocity, entity.angular_velocity);
        }
        w.finish().map_err(|needed| too_small(needed, capacity))
    }

    /// Encodes the changes from `baseline` to `current` into `out` and returns the bytes
    /// written. Entities whose codes did not change cost nothing.
    pub fn encode_delta(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        self.check_count(baseline)?;
        self.check_count(current)?;
        let capacity = out.len();
        let mut w = BitWriter::new(out);
        w.write(u64::from(FORMAT_DELTA), 8);
        w.write(u64::from(current.tick), 32);
        w.write(u64::from(baseline.tick), 32);
        let count_at = w.bit_len();
        w.write(0, COUNT_BITS);
        let mut records = 0u64;
        let mut previous: Option<u32> = None;
        let (old, new) = (baseline.entities(), current.entities());
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let (o, n) = (old.get(i), new.get(j));
            match (o, n) {
                (Some(o), Some(n)) if o.id == n.id => {
                    i += 1;
                    j += 1;
                    if o == n {
                        continue;
                    }
                    ID_TIERS.write(&mut w, id_gap(previous, n.id));
                    w.write(KIND_UPDATE, 1);
                    self.write_update(&mut w, o, n);
                    previous = Some(n.id);
                }
                (Some(o), n) if n.is_none_or(|n| o.id < n.id) => {
                    i += 1;
                    ID_TIERS.write(&mut w, id_gap(previous, o.id));
                    w.write(KIND_DESPAWN, 2);
                    previous = Some(o.id);
                }
                (_, Some(n)) => {
                    j += 1;
                    ID_TIERS.write(&mut w, id_gap(previous, n.id));
                    w.write(KIND_SPAWN, 2);
                    self.write_body(&mut w, n);
                    previous = Some(n.id);
                }
                (_, None) => unreachable!("the loop runs while one side has entities"),
            }
            records += 1;
        }
        let len = w.finish().map_err(|needed| too_small(needed, capacity))?;
        let out = &mut out[..len];
        // Both snapshots hold at most ENTITIES_MAX_FORMAT entities, so at most twice that many
        // records, which the 16-bit field holds.
        debug_assert!(records <= mask(COUNT_BITS));
        patch_bits(out, count_at, records, COUNT_BITS);
        Ok(len)
    }

    fn check_count(&self, snapshot: &Snapshot) -> Result<(), EncodeError> {
        let max = self.entities_max();
        if snapshot.len() > max {
            return Err(EncodeError::TooManyEntities { count: snapshot.len(), max });
        }
        Ok(())
    }

    #[inline(always)]
    fn write_body(&self, w: &mut BitWriter<'_>, entity: &QuantizedEntity) {
        // The two moving flags come first so that a decoder knows the body's length at once.
        let flags = moving_flags(entity);
        w.write(flags, 2);
        self.write_position(w, entity.position);
        self.write_rotation(w, entity.rotation);
        if flags & 1 != 0 {
            write_velocity_components(w, &self.linear_velocity, entity.linear_velocity);
        }
        if flags & 2 != 0 {
            write_velocity_components(w, &self.angular_velocity, entity.angular_velocity);
        }
    }

    #[inline(always)]
    fn write_position(&self, w: &mut BitWriter<'_>, code: [u32; 3]) {
        let [bx, by, bz] = self.position.bits();
        let [x, y, z] = code.map(u64::from);
        if bx + by + bz <= BITS_PER_CALL_MAX {
            w.write(x | y << bx | z << (bx + by), bx + by + bz);
        } else {
            // Each axis has at most 28 bits, so y and z always fit one call.
            w.write(x, bx);
            w.write(y | z << by, by + bz);
        }
    }

    #[inline(always)]
    fn write_rotation(&self, w: &mut BitWriter<'_>, code: QuantizedRotation) {
        let b = self.rotation.bits();
        let [a, c, d] = code.components.map(u64::from);
        let largest = u64::from(code.largest & 3);
        w.write(largest | a << 2 | c << (2 + b) | d << (2 + 2 * b), 2 + 3 * b);
    }

    fn write_update(&self, w: &mut BitWriter<'_>, old: &QuantizedEntity, new: &QuantizedEntity) {
        let changed = [
            old.position != new.position,
            old.rotation != new.rotation,
            old.linear_velocity != new.linear_velocity,
            old.angular_velocity != new.angular_velocity,
        ];
        let field_mask = changed.iter().enumerate().fold(0, |m, (i, &c)| m | u64::from(c) << i);
        w.write(field_mask, 4);
        if changed[0]
            && !write_delta(
                w,
                old.position.map(|c| c as i32),
                new.position.map(|c| c as i32),
                POSITION_DELTA_WIDTHS,
            )
        {
            self.write_position(w, new.position);
        }
        if changed[1] {
            self.write_rotation_change(w, old.rotation, new.rotation);
        }
        let velocities = [
            (changed[2], &self.linear_velocity, old.linear_velocity, new.linear_velocity),
            (changed[3], &self.angular_velocity, old.angular_velocity, new.angular_velocity),
        ];
        for (changed, quantizer, old, new) in velocities {
            if changed && !write_delta(w, old, new, VELOCITY_DELTA_WIDTHS) {
                write_velocity(w, quantizer, new);
            }
        }
    }

    fn write_rotation_change(
        &self,
        w: &mut BitWriter<'_>,
        old: QuantizedRotation,
        new: QuantizedRotation,
    ) {
        let as_i32 = |r: QuantizedRotation| r.components.map(i32::from);
        if old.largest != new.largest {
            w.write(ABSOLUTE_TIER, 2);
        } else if write_delta(w, as_i32(old), as_i32(new), ROTATION_DELTA_WIDTHS) {
            return;
        }
        self.write_rotation(w, new);
    }
}

fn too_small(needed: usize, capacity: usize) -> EncodeError {
    EncodeError::BufferTooSmall { needed, capacity }
}

/// The gap from the previous id; the first id's gap is the id itself.
#[inline(always)]
fn id_gap(previous: Option<u32>, id: u32) -> u64 {
    match previous {
        Some(p) => u64::from(id - p - 1),
        None => u64::from(id),
    }
}

/// Bit 0: the linear velocity is not zero; bit 1: the angular velocity is not zero.
#[inline(always)]
fn moving_flags(entity: &QuantizedEntity) -> u64 {
    u64::from(entity.linear_velocity != [0; 3]) | u64::from(entity.angular_velocity != [0; 3]) << 1
}

#[inline(always)]
fn write_velocity(w: &mut BitWriter<'_>, quantizer: &VelocityQuantizer, code: [i32; 3]) {
    let nonzero = code != [0; 3];
    w.write(u64::from(nonzero), 1);
    if nonzero {
        write_velocity_components(w, quantizer, code);
    }
}

/// Three components, each as `code + half` in the quantizer's width.
#[inline(always)]
fn write_velocity_components(w: &mut BitWriter<'_>, quantizer: &VelocityQuantizer, code: [i32; 3]) {
    let b = quantizer.bits();
    let half = quantizer.half();
    let [x, y, z] = code.map(|c| (c + half) as u64);
    w.write(x | y << b | z << (2 * b), 3 * b);
}

/// Writes `new - old` in the narrowest tier that holds it and returns true, or writes the
/// absolute-tier marker and returns false so the caller writes the value itself.
#[inline(always)]
fn write_delta(w: &mut BitWriter<'_>, old: [i32; 3], new: [i32; 3], widths: [u32; 3]) -> bool {
    let z = [0, 1, 2].map(|k| u64::from(zigzag(new[k].wrapping_sub(old[k]))));
    let largest = z[0].max(z[1]).max(z[2]);
    for (tier, &width) in widths.iter().enumerate() {
        if largest <= mask(width) {
            w.write(
                tier as u64 | z[0] << 2 | z[1] << (2 + width) | z[2] << (2 + 2 * width),
                2 + 3 * width,
            );
            return true;
        }
    }
    w.write(ABSOLUTE_TIER, 2);
    false
}
