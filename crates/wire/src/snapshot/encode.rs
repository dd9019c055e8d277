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
    /// written. Entities whose codes did not change cost nothing. A server that keeps its
    /// snapshots in a [`SnapshotHistory`] should encode through it, which skips unchanged
    /// entities without comparing them.
    pub fn encode_delta(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        self.encode_delta_with(baseline, current, out, |old, new, _| old == new)
    }

    /// [`SnapshotConfig::encode_delta`] with `unchanged(old, new, j)` deciding whether entity `j`
    /// of `current` (`new`) can be skipped as equal to its baseline state (`old`); a history
    /// decides from change ticks without looking at the fields.
    pub(super) fn encode_delta_with(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
        unchanged: impl Fn(&QuantizedEntity, &QuantizedEntity, usize) -> bool,
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
        let (old, new) = (baseline.entities(), current.entities());
        let same_ids = old.len() == new.len() && old.iter().zip(new).all(|(o, n)| o.id == n.id);
        let records = if same_ids {
            self.write_updates(&mut w, old, new, unchanged)
        } else {
            self.write_merge(&mut w, old, new, unchanged)
        };
        let len = w.finish().map_err(|needed| too_small(needed, capacity))?;
        let out = &mut out[..len];
        // Both snapshots hold at most ENTITIES_MAX_FORMAT entities, so at most twice that many
        // records, which the 16-bit field holds.
        debug_assert!(records <= mask(COUNT_BITS));
        patch_bits(out, count_at, records, COUNT_BITS);
        Ok(len)
    }

    /// Update records for two snapshots with the same ids, the steady state. Which entities
    /// changed is gathered into bit masks first, so that the per-record work runs only for them
    /// and no branch depends on whether an entity moved.
    fn write_updates(
        &self,
        w: &mut BitWriter<'_>,
        old: &[QuantizedEntity],
        new: &[QuantizedEntity],
        unchanged: impl Fn(&QuantizedEntity, &QuantizedEntity, usize) -> bool,
    ) -> u64 {
        let (mut records, mut previous) = (0, None);
        for first in (0..new.len()).step_by(64) {
            let last = (first + 64).min(new.len());
            let mut moved = 0u64;
            for j in first..last {
                moved |= u64::from(!unchanged(&old[j], &new[j], j)) << (j - first);
            }
            while moved != 0 {
                let j = first + moved.trailing_zeros() as usize;
                moved &= moved - 1;
                let deltas = Deltas::between(&old[j], &new[j]);
                if deltas.changed != 0 {
                    self.write_update(w, &deltas, previous, &new[j]);
                    previous = Some(new[j].id);
                    records += 1;
                }
            }
        }
        records
    }

    /// Update, spawn and despawn records for snapshots whose ids differ, merged by id.
    fn write_merge(
        &self,
        w: &mut BitWriter<'_>,
        old: &[QuantizedEntity],
        new: &[QuantizedEntity],
        unchanged: impl Fn(&QuantizedEntity, &QuantizedEntity, usize) -> bool,
    ) -> u64 {
        let (mut records, mut previous) = (0, None);
        let (mut i, mut j) = (0, 0);
        while i < old.len() && j < new.len() {
            let (o, n) = (&old[i], &new[j]);
            if o.id == n.id {
                i += 1;
                j += 1;
                if unchanged(o, n, j - 1) {
                    continue;
                }
                let deltas = Deltas::between(o, n);
                if deltas.changed == 0 {
                    continue;
                }
                self.write_update(w, &deltas, previous, n);
                previous = Some(n.id);
            } else if o.id < n.id {
                i += 1;
                write_despawn(w, &mut previous, o.id);
            } else {
                j += 1;
                self.write_spawn(w, &mut previous, n);
            }
            records += 1;
        }
        for o in &old[i..] {
            write_despawn(w, &mut previous, o.id);
            records += 1;
        }
        for n in &new[j..] {
            self.write_spawn(w, &mut previous, n);
            records += 1;
        }
        records
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
        let [x, y, z] = crate::map3(code, u64::from);
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
        let [a, c, d] = crate::map3(code.components, u64::from);
        let largest = u64::from(code.largest & 3);
        w.write(largest | a << 2 | c << (2 + b) | d << (2 + 2 * b), 2 + 3 * b);
    }

    #[inline(always)]
    fn write_spawn(
        &self,
        w: &mut BitWriter<'_>,
        previous: &mut Option<u32>,
        entity: &QuantizedEntity,
    ) {
        ID_TIERS.write(w, id_gap(*previous, entity.id));
        w.write(KIND_SPAWN, 2);
        self.write_body(w, entity);
        *previous = Some(entity.id);
    }

    /// Writes an update record: the id gap, the kind and the field mask in one call, then one
    /// `DELTA` per changed field, in the narrowest tier that holds it, or the absolute value
    /// where no tier does.
    #[inline(always)]
    fn write_update(
        &self,
        w: &mut BitWriter<'_>,
        d: &Deltas,
        previous: Option<u32>,
        new: &QuantizedEntity,
    ) {
        let (gap, bits) = ID_TIERS.encode(id_gap(previous, new.id));
        // The gap code is at most 35 bits, so gap, kind and mask fit one call.
        w.write(gap | KIND_UPDATE << bits | d.changed << (bits + 1), bits + 5);
        if d.changed & MASK_POSITION != 0 && !write_delta(w, d.zigzags[0], POSITION_DELTA_WIDTHS) {
            self.write_position(w, new.position);
        }
        if d.changed & MASK_ROTATION != 0 {
            // A delta only makes sense between codes of the same smallest-three layout.
            if !d.same_largest {
                w.write(ABSOLUTE_TIER, 2);
                self.write_rotation(w, new.rotation);
            } else if !write_delta(w, d.zigzags[1], ROTATION_DELTA_WIDTHS) {
                self.write_rotation(w, new.rotation);
            }
        }
        if d.changed & MASK_LINEAR != 0 && !write_delta(w, d.zigzags[2], VELOCITY_DELTA_WIDTHS) {
            write_velocity(w, &self.linear_velocity, new.linear_velocity);
        }
        if d.changed & MASK_ANGULAR != 0 && !write_delta(w, d.zigzags[3], VELOCITY_DELTA_WIDTHS) {
            write_velocity(w, &self.angular_velocity, new.angular_velocity);
        }
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
    let [x, y, z] = crate::map3(code, |c| (c + half) as u64);
    w.write(x | y << b | z << (2 * b), 3 * b);
}

/// Writes three zigzagged deltas in the narrowest tier whose width holds them all and returns
/// true, or writes the absolute-tier marker and returns false so the caller writes the value.
#[inline(always)]
fn write_delta(w: &mut BitWriter<'_>, z: [u32; 3], widths: [u32; 3]) -> bool {
    // The bit length of the OR is the bit length of the largest. The tier is counted without
    // branches; only the rare absolute case branches.
    let needed = 32 - (z[0] | z[1] | z[2]).leading_zeros();
    let tier = widths.iter().map(|&width| u64::from(needed > width)).sum::<u64>();
    if tier == ABSOLUTE_TIER {
        w.write(ABSOLUTE_TIER, 2);
        return false;
    }
    let width = widths[tier as usize];
    let [a, b, c] = crate::map3(z, u64::from);
    w.write(tier | a << 2 | b << (2 + width) | c << (2 + 2 * width), 2 + 3 * width);
    true
}

#[inline(always)]
fn write_despawn(w: &mut BitWriter<'_>, previous: &mut Option<u32>, id: u32) {
    ID_TIERS.write(w, id_gap(*previous, id));
    w.write(KIND_DESPAWN, 2);
    *previous = Some(id);
}

/// What changed between two states of one entity: the zigzagged differences of each field's
/// codes, computed once and used both to decide what to send and to send it.
struct Deltas {
    /// Position, rotation, linear and angular velocity.
    zigzags: [[u32; 3]; 4],
    same_largest: bool,
    /// The update's field mask; 0 when nothing changed.
    changed: u64,
}

impl Deltas {
    #[inline(always)]
    fn between(old: &QuantizedEntity, new: &QuantizedEntity) -> Self {
        let diff =
            |a: [i32; 3], b: [i32; 3]| crate::map3([0, 1, 2], |k| zigzag(b[k].wrapping_sub(a[k])));
        let as_i32 = |code: [u32; 3]| crate::map3(code, |c| c as i32);
        let rotation = |r: QuantizedRotation| crate::map3(r.components, i32::from);
        let zigzags = [
            diff(as_i32(old.position), as_i32(new.position)),
            diff(rotation(old.rotation), rotation(new.rotation)),
            diff(old.linear_velocity, new.linear_velocity),
            diff(old.angular_velocity, new.angular_velocity),
        ];
        let same_largest = old.rotation.largest == new.rotation.largest;
        let any = |z: [u32; 3]| u64::from(z[0] | z[1] | z[2] != 0);
        let changed = any(zigzags[0])
            | (any(zigzags[1]) | u64::from(!same_largest)) << 1
            | any(zigzags[2]) << 2
            | any(zigzags[3]) << 3;
        Self { zigzags, same_largest, changed }
    }
}
