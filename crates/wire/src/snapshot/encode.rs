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

    /// Encodes the changes from `baseline` to `current` into `out` as a record delta (format
    /// `0x02`, the one before the column delta of [`SnapshotConfig::encode_delta`]) and returns
    /// the bytes written. Decoders still read it; servers send column deltas, which are
    /// smaller and faster to encode and decode.
    pub fn encode_delta_records(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let (old, new) = (baseline.entities(), current.entities());
        let same_ids = same_ids(old, new);
        let compare = |chunk: usize| {
            let pairs = old.iter().zip(new).skip(64 * chunk).take(64);
            pairs.enumerate().fold(0, |moved, (k, (o, n))| moved | u64::from(o != n) << k)
        };
        self.encode_records_with(baseline, current, out, same_ids.then_some(compare), |o, n, _| {
            o == n
        })
    }

    /// [`SnapshotConfig::encode_delta_records`] told what changed. `moved`, given only when both
    /// snapshots hold the same ids, returns for each run of 64 entities (`chunk`) a bit set of
    /// those that may differ from the baseline (bit `k` for entity `64 * chunk + k`); a set bit
    /// costs a comparison, a clear one skips the entity. Otherwise `unchanged(old, new, j)`
    /// decides whether entity `j` of `current` (`new`) can be skipped as equal to its baseline
    /// state (`old`). A history answers both from what it recorded at each push.
    pub(super) fn encode_records_with(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
        moved: Option<impl Fn(usize) -> u64>,
        unchanged: impl Fn(&QuantizedEntity, &QuantizedEntity, usize) -> bool,
    ) -> Result<usize, EncodeError> {
        self.check_count(baseline)?;
        self.check_count(current)?;
        let capacity = out.len();
        let mut w = BitWriter::new(out);
        w.write(u64::from(FORMAT_DELTA_RECORDS), 8);
        w.write(u64::from(current.tick), 32);
        w.write(u64::from(baseline.tick), 32);
        let count_at = w.bit_len();
        w.write(0, COUNT_BITS);
        let (old, new) = (baseline.entities(), current.entities());
        let records = match moved {
            Some(moved) => self.write_updates(&mut w, old, new, moved),
            None => self.write_merge(&mut w, old, new, unchanged),
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
    /// may have changed comes as bit sets, so that the per-record work runs only for them and
    /// no branch depends on whether an entity moved.
    fn write_updates(
        &self,
        w: &mut BitWriter<'_>,
        old: &[QuantizedEntity],
        new: &[QuantizedEntity],
        moved: impl Fn(usize) -> u64,
    ) -> u64 {
        let (mut records, mut previous) = (0, None);
        for (chunk, first) in (0..new.len()).step_by(64).enumerate() {
            let mut moved = moved(chunk);
            while moved != 0 {
                let j = first + moved.trailing_zeros() as usize;
                moved &= moved - 1;
                let (Some(o), Some(n)) = (old.get(j), new.get(j)) else { break };
                let deltas = Deltas::between(o, n);
                if deltas.changed() {
                    self.write_update(w, &deltas, previous, n);
                    previous = Some(n.id);
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
                if !deltas.changed() {
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

    pub(super) fn check_count(&self, snapshot: &Snapshot) -> Result<(), EncodeError> {
        let max = self.entities_max();
        if snapshot.len() > max {
            return Err(EncodeError::TooManyEntities { count: snapshot.len(), max });
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn write_body(&self, w: &mut BitWriter<'_>, entity: &QuantizedEntity) {
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

    /// Writes an update record: the id gap, the kind and the four field widths, then each
    /// field's three deltas in its width (nothing for an unchanged field), or its absolute value.
    /// A typical record of deltas goes out in two calls (head and position, then the rest),
    /// since every call waits on the one before.
    #[inline(always)]
    fn write_update(
        &self,
        w: &mut BitWriter<'_>,
        d: &Deltas,
        previous: Option<u32>,
        new: &QuantizedEntity,
    ) {
        let (gap, bits) = ID_TIERS.encode(id_gap(previous, new.id));
        let [p, r, l, a] = crate::map4(d.widths, u64::from);
        let widths = p | r << 4 | l << 8 | a << 12;
        // The gap code is at most 35 bits, so gap, kind and widths fit one call.
        let (head, head_bits) = (gap | KIND_UPDATE << bits | widths << (bits + 1), bits + 17);
        // Field by field rather than a loop over the arrays, which would keep them in memory.
        let ([pw, rw, lw, aw], [p, r, l, a]) = (d.widths, d.packed);
        let absolute = (pw == WIDTH_ABSOLUTE) | (rw == WIDTH_ABSOLUTE);
        let absolute = absolute | (lw == WIDTH_ABSOLUTE) | (aw == WIDTH_ABSOLUTE);
        let (pb, rb, lb, ab) = (3 * pw, 3 * rw, 3 * lw, 3 * aw);
        let max = BITS_PER_CALL_MAX;
        if !absolute && head_bits + pb <= max && rb + lb + ab <= max {
            w.write(head | p << head_bits, head_bits + pb);
            w.write(r | l << rb | a << (rb + lb), rb + lb + ab);
            return;
        }
        w.write(head, head_bits);
        self.write_field(w, 0, pw, p, new);
        self.write_field(w, 1, rw, r, new);
        self.write_field(w, 2, lw, l, new);
        self.write_field(w, 3, aw, a, new);
    }

    /// One field of an update record: its three deltas packed in `width` bits each, or the new
    /// value in absolute form.
    #[inline(always)]
    fn write_field(
        &self,
        w: &mut BitWriter<'_>,
        field: usize,
        width: u32,
        packed: u64,
        new: &QuantizedEntity,
    ) {
        if width == WIDTH_ABSOLUTE {
            let (value, bits) = self.absolute(field, new);
            let low = bits.min(BITS_PER_CALL_MAX);
            w.write(value as u64 & mask(low), low);
            w.write((value >> low) as u64, bits - low);
        } else {
            w.write(packed, 3 * width);
        }
    }

    /// A field of `entity` in the form it has in a body (0 position, 1 rotation, 2 linear
    /// velocity with its nonzero flag, 3 angular velocity likewise): its bits, at most 84, and
    /// how many. Returned rather than written: a call that took the writer would keep the
    /// writer's fields in memory instead of registers on every record's path.
    #[cold]
    pub(super) fn absolute(&self, field: usize, entity: &QuantizedEntity) -> (u128, u32) {
        let velocity = match field {
            0 => {
                let [bx, by, bz] = self.position.bits();
                let [x, y, z] = entity.position.map(u128::from);
                return (x | y << bx | z << (bx + by), bx + by + bz);
            }
            1 => {
                let b = self.rotation.bits();
                let [a, c, d] = entity.rotation.components.map(u128::from);
                let largest = u128::from(entity.rotation.largest & 3);
                return (largest | a << 2 | c << (2 + b) | d << (2 + 2 * b), 2 + 3 * b);
            }
            2 => (&self.linear_velocity, entity.linear_velocity),
            _ => (&self.angular_velocity, entity.angular_velocity),
        };
        match velocity {
            (_, [0, 0, 0]) => (0, 1),
            (quantizer, code) => {
                let (b, half) = (quantizer.bits(), quantizer.half());
                let [x, y, z] = code.map(|c| (c + half) as u128);
                (1 | x << 1 | y << (1 + b) | z << (1 + 2 * b), 1 + 3 * b)
            }
        }
    }
}

/// Whether two snapshots hold the same ids, entity for entity.
pub(super) fn same_ids(old: &[QuantizedEntity], new: &[QuantizedEntity]) -> bool {
    old.len() == new.len() && old.iter().zip(new).all(|(o, n)| o.id == n.id)
}

pub(super) fn too_small(needed: usize, capacity: usize) -> EncodeError {
    EncodeError::BufferTooSmall { needed, capacity }
}

/// The gap from the previous id; the first id's gap is the id itself.
#[inline(always)]
pub(super) fn id_gap(previous: Option<u32>, id: u32) -> u64 {
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

/// Three components, each as `code + half` in the quantizer's width.
#[inline(always)]
fn write_velocity_components(w: &mut BitWriter<'_>, quantizer: &VelocityQuantizer, code: [i32; 3]) {
    let b = quantizer.bits();
    let half = quantizer.half();
    let [x, y, z] = crate::map3(code, |c| (c + half) as u64);
    w.write(x | y << b | z << (2 * b), 3 * b);
}

#[inline(always)]
fn write_despawn(w: &mut BitWriter<'_>, previous: &mut Option<u32>, id: u32) {
    ID_TIERS.write(w, id_gap(*previous, id));
    w.write(KIND_DESPAWN, 2);
    *previous = Some(id);
}

/// What changed between two states of one entity: each field's three zigzagged differences,
/// packed in the width the field needs, computed once and used both to decide what to send and
/// to send it. Fields in order: position, rotation, linear velocity, angular velocity.
struct Deltas {
    /// The three deltas of each field, `width` bits each, the first lowest.
    packed: [u64; 4],
    /// Bits per delta component, 0 when unchanged, [`WIDTH_ABSOLUTE`] when a delta cannot say it.
    widths: [u32; 4],
}

impl Deltas {
    #[inline(always)]
    fn between(old: &QuantizedEntity, new: &QuantizedEntity) -> Self {
        let position = |e: &QuantizedEntity| crate::map3(e.position, |c| c as i32);
        let rotation = |e: &QuantizedEntity| crate::map3(e.rotation.components, i32::from);
        let fields = [
            field_delta(position(old), position(new)),
            field_delta(rotation(old), rotation(new)),
            field_delta(old.linear_velocity, new.linear_velocity),
            field_delta(old.angular_velocity, new.angular_velocity),
        ];
        let mut d =
            Self { packed: crate::map4(fields, |f| f.0), widths: crate::map4(fields, |f| f.1) };
        // Deltas are between codes of the same smallest-three layout only.
        if old.rotation.largest != new.rotation.largest {
            d.widths[1] = WIDTH_ABSOLUTE;
        }
        d
    }

    /// Whether any field changed.
    #[inline(always)]
    fn changed(&self) -> bool {
        // Not `widths != [0; 4]`: that compiles to wide loads of the four narrow stores that
        // just wrote the widths, which the processor cannot forward (a stall per record).
        let [p, r, l, a] = self.widths;
        p | r | l | a != 0
    }
}

/// One field's three zigzagged deltas packed in the width the largest needs, and that width
/// ([`WIDTH_ABSOLUTE`] when it exceeds [`DELTA_WIDTH_MAX`]; the packing is then unused).
#[inline(always)]
fn field_delta(old: [i32; 3], new: [i32; 3]) -> (u64, u32) {
    let [a, b, c] = crate::map3([0, 1, 2], |k| u64::from(zigzag(new[k].wrapping_sub(old[k]))));
    // The bit length of the OR is the bit length of the largest.
    let width = 64 - (a | b | c).leading_zeros();
    if width > DELTA_WIDTH_MAX {
        return (0, WIDTH_ABSOLUTE);
    }
    (a | b << width | c << (2 * width), width)
}
