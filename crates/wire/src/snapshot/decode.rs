//! The snapshot decoder (docs/wire.md sections 5 and 6).
//!
//! Field reads cannot fail on their own: the reader records the first error (truncation or a
//! broken bound) and the decoder checks it once per entity, before the entity is stored. That
//! keeps `Result` plumbing out of the per-field path while bounding the work done on garbage:
//! the loops run at most `count` times, and `count` is checked against `entities_max` first.

use super::*;
use crate::bits::{mask, BitReader, BITS_PER_CALL_MAX};
use crate::error::{DecodeError, Field};
use crate::varint::unzigzag;

impl QuantizedEntity {
    /// Sets the linear (`which == 0`) or angular (`which == 1`) velocity.
    #[inline(always)]
    fn set_velocity(&mut self, which: u32, velocity: [i32; 3]) {
        if which == 0 {
            self.linear_velocity = velocity;
        } else {
            self.angular_velocity = velocity;
        }
    }
}

/// Where the fixed-width columns of a full snapshot start, in bits from the datagram's start.
struct Columns {
    flags: usize,
    position: usize,
    rotation: usize,
    /// The id gaps, the first column of varying width, follow the rotations.
    ids: usize,
    /// Bits per entry of the position and rotation columns.
    strides: [usize; 2],
}

impl SnapshotConfig {
    /// Reads the header of a snapshot datagram without decoding the rest.
    pub fn peek_header(bytes: &[u8]) -> Result<SnapshotHeader, DecodeError> {
        read_header(&mut BitReader::new(bytes))
    }

    /// Decodes a full or delta snapshot into `out`, reusing its allocation. A delta needs the
    /// `baseline` of the tick its header names (see [`SnapshotConfig::peek_header`]). On error
    /// `out` is left empty.
    pub fn decode(
        &self,
        bytes: &[u8],
        baseline: Option<&Snapshot>,
        out: &mut Snapshot,
    ) -> Result<SnapshotKind, DecodeError> {
        let result = self.decode_into(bytes, baseline, out);
        if result.is_err() {
            out.clear(0);
        }
        result
    }

    fn decode_into(
        &self,
        bytes: &[u8],
        baseline: Option<&Snapshot>,
        out: &mut Snapshot,
    ) -> Result<SnapshotKind, DecodeError> {
        let mut r = BitReader::new(bytes);
        let header = read_header(&mut r)?;
        out.clear(header.tick);
        match header.kind {
            SnapshotKind::Full => self.read_full(&mut r, header.count, out)?,
            SnapshotKind::Delta { baseline_tick } => {
                let baseline = baseline.filter(|b| b.tick == baseline_tick).ok_or(
                    DecodeError::BaselineMismatch {
                        wanted: baseline_tick,
                        given: baseline.map(|b| b.tick),
                    },
                )?;
                self.read_delta(&mut r, header.count, baseline, out)?;
            }
        }
        r.finish()?;
        Ok(header.kind)
    }

    fn read_full(
        &self,
        r: &mut BitReader<'_>,
        count: u16,
        out: &mut Snapshot,
    ) -> Result<(), DecodeError> {
        let count = usize::from(count);
        check_count(count, self.entities_max())?;
        let c = self.fixed_columns(r.bit_pos(), count);
        if c.ids > r.bit_len() {
            return Err(DecodeError::Truncated { field: self.cut_field(&c, r.bit_len()) });
        }
        out.entities.reserve(count);
        // One pass: ids from the variable-width column, the rest at fixed strides.
        r.seek(c.ids, Field::EntityId);
        let mut previous = None;
        for i in 0..count {
            let id = read_id(r, previous);
            previous = Some(id);
            let position = self.position_at(r, c.position + c.strides[0] * i);
            let rotation = self.rotation_from(r.peek_at(c.rotation + c.strides[1] * i));
            let (linear_velocity, angular_velocity) = ([0; 3], [0; 3]);
            let entity =
                QuantizedEntity { id, position, rotation, linear_velocity, angular_velocity };
            out.entities.push(entity);
        }
        r.status()?;
        self.read_velocities(r, &c, &mut out.entities);
        r.status()
    }

    /// Where the fixed-width columns of a full snapshot of `count` entities start.
    fn fixed_columns(&self, flags: usize, count: usize) -> Columns {
        let strides = [
            self.position.bits().iter().sum::<u32>() as usize,
            2 + 3 * self.rotation.bits() as usize,
        ];
        let position = flags + 2 * count;
        let rotation = position + strides[0] * count;
        let ids = rotation + strides[1] * count;
        Columns { flags, position, rotation, ids, strides }
    }

    /// The column a datagram ending at bit `end` cuts short.
    #[cold]
    fn cut_field(&self, c: &Columns, end: usize) -> Field {
        match end {
            e if e < c.position => Field::MovingFlags,
            e if e < c.rotation => Field::Position,
            _ => Field::Rotation,
        }
    }

    /// Reads the velocity columns, which follow the ids, for the entities whose moving flag is
    /// set, finding those from the flag words without a branch per entity.
    fn read_velocities(
        &self,
        r: &mut BitReader<'_>,
        c: &Columns,
        entities: &mut [QuantizedEntity],
    ) {
        let velocities = [
            (0, &self.linear_velocity, Field::LinearVelocity),
            (1, &self.angular_velocity, Field::AngularVelocity),
        ];
        for (flag, quantizer, field) in velocities {
            let stride = 3 * quantizer.bits();
            for first in (0..entities.len()).step_by(28) {
                let pairs = (entities.len() - first).min(28) as u32;
                let word = r.peek_at(c.flags + 2 * first) & mask(2 * pairs);
                let mut set = (word >> flag) & 0x5555_5555_5555_5555;
                while set != 0 {
                    let i = first + set.trailing_zeros() as usize / 2;
                    set &= set - 1;
                    let velocity = velocity_from(r, r.peek(), quantizer, true, field);
                    r.advance(stride, field);
                    entities[i].set_velocity(flag, velocity);
                }
            }
        }
    }

    #[inline(always)]
    fn position_at(&self, r: &mut BitReader<'_>, at: usize) -> [u32; 3] {
        let [bx, by, bz] = self.position.bits();
        let (x, yz) = if bx + by + bz <= BITS_PER_CALL_MAX {
            let all = r.peek_at(at);
            (all & mask(bx), all >> bx)
        } else {
            (r.peek_at(at) & mask(bx), r.peek_at(at + bx as usize))
        };
        let code = [x, yz & mask(by), (yz >> by) & mask(bz)];
        self.check_position(r, code);
        crate::map3(code, |c| c as u32)
    }

    /// Checks all three axes with one branch; the slow path names the axis' value and bound.
    #[inline(always)]
    fn check_position(&self, r: &mut BitReader<'_>, code: [u64; 3]) {
        let steps = crate::map3(self.position.steps(), u64::from);
        if (code[0] > steps[0]) | (code[1] > steps[1]) | (code[2] > steps[2]) {
            for axis in 0..3 {
                r.check(Field::Position, code[axis], steps[axis]);
            }
        }
    }

    /// Reads a body after its two "moving" flags (bit 0 linear, bit 1 angular).
    #[inline(always)]
    fn read_body(&self, r: &mut BitReader<'_>, id: u32, flags: u64) -> QuantizedEntity {
        let position = self.read_position(r);
        let rotation = self.read_rotation(r);
        // Which bodies move is as good as random, so the velocities are read without branches.
        let (linear, angular) = (&self.linear_velocity, &self.angular_velocity);
        let linear_velocity = read_velocity_if(r, linear, flags & 1 != 0, Field::LinearVelocity);
        let angular_velocity = read_velocity_if(r, angular, flags & 2 != 0, Field::AngularVelocity);
        QuantizedEntity { id, position, rotation, linear_velocity, angular_velocity }
    }

    #[inline(always)]
    fn read_position(&self, r: &mut BitReader<'_>) -> [u32; 3] {
        let [bx, by, bz] = self.position.bits();
        let (x, yz) = if bx + by + bz <= BITS_PER_CALL_MAX {
            let all = r.read(bx + by + bz, Field::Position);
            (all & mask(bx), all >> bx)
        } else {
            (r.read(bx, Field::Position), r.read(by + bz, Field::Position))
        };
        let code = [x, yz & mask(by), yz >> by];
        self.check_position(r, code);
        crate::map3(code, |c| c as u32)
    }

    #[inline(always)]
    fn read_rotation(&self, r: &mut BitReader<'_>) -> QuantizedRotation {
        let b = self.rotation.bits();
        self.rotation_from(r.read(2 + 3 * b, Field::Rotation))
    }

    #[inline(always)]
    fn rotation_from(&self, all: u64) -> QuantizedRotation {
        let b = self.rotation.bits();
        let component = |i: u32| ((all >> (2 + i * b)) & mask(b)) as u16;
        QuantizedRotation {
            largest: (all & 3) as u8,
            components: [component(0), component(1), component(2)],
        }
    }

    /// Rebuilds the snapshot from the baseline and the records. In the steady state every
    /// record is an update, so the baseline is copied whole and patched in place; a spawn or
    /// despawn sends the decoder back to the start of the records for a merge.
    fn read_delta(
        &self,
        r: &mut BitReader<'_>,
        count: u16,
        baseline: &Snapshot,
        out: &mut Snapshot,
    ) -> Result<(), DecodeError> {
        let records = r.clone();
        if self.patch(r, count, baseline, out)? {
            return Ok(());
        }
        *r = records;
        out.entities.clear();
        self.merge(r, count, baseline, out)
    }

    /// Applies update records to a copy of the baseline; returns false at the first record that
    /// is not an update of a baseline entity.
    fn patch(
        &self,
        r: &mut BitReader<'_>,
        count: u16,
        baseline: &Snapshot,
        out: &mut Snapshot,
    ) -> Result<bool, DecodeError> {
        check_count(baseline.len(), self.entities_max())?;
        out.entities.extend_from_slice(baseline.entities());
        let entities = &mut out.entities[..];
        let (mut i, mut previous) = (0, None);
        for _ in 0..count {
            let id = read_id(r, previous);
            r.status()?;
            previous = Some(id);
            // Records are a few entities apart, so a forward scan beats a binary search.
            while entities.get(i).is_some_and(|e| e.id < id) {
                i += 1;
            }
            let Some(entity) = entities.get_mut(i).filter(|e| e.id == id) else {
                return Ok(false);
            };
            if read_kind(r) != KIND_UPDATE {
                return Ok(false);
            }
            self.update_in_place(r, entity);
            r.status()?;
            i += 1;
        }
        Ok(true)
    }

    /// Merges the records with the baseline: unchanged runs are copied whole, records replace,
    /// add or drop one entity each.
    fn merge(
        &self,
        r: &mut BitReader<'_>,
        count: u16,
        baseline: &Snapshot,
        out: &mut Snapshot,
    ) -> Result<(), DecodeError> {
        let old = baseline.entities();
        let max = self.entities_max();
        out.entities.reserve((old.len() + usize::from(count)).min(max));
        let (mut i, mut previous) = (0, None);
        for _ in 0..count {
            let id = read_id(r, previous);
            r.status()?;
            previous = Some(id);
            let run = old[i..].partition_point(|e| e.id < id);
            extend_bounded(out, &old[i..i + run], max)?;
            i += run;
            let base = old.get(i).filter(|e| e.id == id);
            match (read_kind(r), base) {
                (KIND_UPDATE, Some(base)) => {
                    let mut entity = *base;
                    self.update_in_place(r, &mut entity);
                    r.status()?;
                    extend_bounded(out, &[entity], max)?;
                    i += 1;
                }
                (KIND_DESPAWN, Some(_)) => i += 1,
                (KIND_SPAWN, None) => {
                    let flags = r.read(2, Field::MovingFlags);
                    let entity = self.read_body(r, id, flags);
                    r.status()?;
                    extend_bounded(out, &[entity], max)?;
                }
                _ => {
                    // A truncated kind reads as zero; report the truncation, not a conflict.
                    r.status()?;
                    return Err(DecodeError::BaselineConflict { id });
                }
            }
        }
        extend_bounded(out, &old[i..], max)
    }

    /// Reads an update's field mask and changes and applies them to `entity`; a result outside
    /// its field's range is recorded as an error in the reader.
    #[inline(always)]
    fn update_in_place(&self, r: &mut BitReader<'_>, entity: &mut QuantizedEntity) {
        let field_mask = r.read(4, Field::FieldMask);
        // An update that changes nothing is never encoded.
        r.check(Field::FieldMask, u64::from(field_mask == 0), 0);
        if field_mask & MASK_POSITION != 0 {
            match read_delta(r, POSITION_DELTA_WIDTHS, Field::Position) {
                Some(d) => {
                    let steps = self.position.steps();
                    for axis in 0..3 {
                        let (value, max) = (entity.position[axis], steps[axis]);
                        entity.position[axis] =
                            offset(r, value.into(), d[axis], max.into(), Field::Position) as u32;
                    }
                }
                None => entity.position = self.read_position(r),
            }
        }
        if field_mask & MASK_ROTATION != 0 {
            match read_delta(r, ROTATION_DELTA_WIDTHS, Field::Rotation) {
                Some(d) => {
                    let max = mask(self.rotation.bits()) as i64;
                    for (code, delta) in entity.rotation.components.iter_mut().zip(d) {
                        *code = offset(r, (*code).into(), delta, max, Field::Rotation) as u16;
                    }
                }
                None => entity.rotation = self.read_rotation(r),
            }
        }
        if field_mask & MASK_LINEAR != 0 {
            let value = &mut entity.linear_velocity;
            update_velocity(r, value, &self.linear_velocity, Field::LinearVelocity);
        }
        if field_mask & MASK_ANGULAR != 0 {
            let value = &mut entity.angular_velocity;
            update_velocity(r, value, &self.angular_velocity, Field::AngularVelocity);
        }
    }

    /// Reads one delta record, with the id of the record before it. Public so that tools can
    /// show a delta without its baseline; check [`BitReader::status`] after each call.
    pub fn read_record(&self, r: &mut BitReader<'_>, previous: Option<u32>) -> DeltaRecord {
        let id = read_id(r, previous);
        match read_kind(r) {
            KIND_UPDATE => DeltaRecord::Update(self.read_update(r, id)),
            KIND_SPAWN => {
                let flags = r.read(2, Field::MovingFlags);
                DeltaRecord::Spawn(self.read_body(r, id, flags))
            }
            _ => DeltaRecord::Despawn { id },
        }
    }

    #[inline(always)]
    fn read_update(&self, r: &mut BitReader<'_>, id: u32) -> EntityUpdate {
        let field_mask = r.read(4, Field::FieldMask);
        // An update that changes nothing is never encoded.
        r.check(Field::FieldMask, u64::from(field_mask == 0), 0);
        let has = |bit: u64| field_mask & bit != 0;
        let position = has(MASK_POSITION).then(|| {
            match read_delta(r, POSITION_DELTA_WIDTHS, Field::Position) {
                Some(delta) => Change::Delta(delta),
                None => Change::Absolute(self.read_position(r)),
            }
        });
        let rotation = has(MASK_ROTATION).then(|| {
            match read_delta(r, ROTATION_DELTA_WIDTHS, Field::Rotation) {
                Some(delta) => Change::Delta(delta),
                None => Change::Absolute(self.read_rotation(r)),
            }
        });
        let linear = &self.linear_velocity;
        let angular = &self.angular_velocity;
        EntityUpdate {
            id,
            position,
            rotation,
            linear_velocity: has(MASK_LINEAR)
                .then(|| read_velocity_change(r, linear, Field::LinearVelocity)),
            angular_velocity: has(MASK_ANGULAR)
                .then(|| read_velocity_change(r, angular, Field::AngularVelocity)),
        }
    }
}

/// Reads the header fields shared by both kinds.
pub fn read_header(r: &mut BitReader<'_>) -> Result<SnapshotHeader, DecodeError> {
    let format = r.read(8, Field::Header) as u8;
    let tick = r.read(32, Field::Tick) as u32;
    r.status()?;
    let kind = match format {
        FORMAT_FULL => SnapshotKind::Full,
        FORMAT_DELTA => {
            SnapshotKind::Delta { baseline_tick: r.read(32, Field::BaselineTick) as u32 }
        }
        other => return Err(DecodeError::UnknownFormat(other)),
    };
    let count = r.read(COUNT_BITS, Field::EntityCount) as u16;
    r.status()?;
    Ok(SnapshotHeader { kind, tick, count })
}

fn check_count(count: usize, max: usize) -> Result<(), DecodeError> {
    if count > max {
        let (value, max) = (count as u64, max as u64);
        return Err(DecodeError::OutOfBounds { field: Field::EntityCount, value, max });
    }
    Ok(())
}

/// Appends `entities` unless that would exceed `max`.
#[inline(always)]
fn extend_bounded(
    out: &mut Snapshot,
    entities: &[QuantizedEntity],
    max: usize,
) -> Result<(), DecodeError> {
    check_count(out.entities.len() + entities.len(), max)?;
    // Records arrive in ascending id order (read_id enforces it) and the baseline is sorted, so
    // the merge keeps `out` sorted.
    out.entities.extend_from_slice(entities);
    Ok(())
}

#[inline(always)]
fn read_id(r: &mut BitReader<'_>, previous: Option<u32>) -> u32 {
    let gap = ID_TIERS.read(r, Field::EntityId);
    checked_id(r, previous, gap)
}

#[inline(always)]
fn checked_id(r: &mut BitReader<'_>, previous: Option<u32>, gap: u64) -> u32 {
    let id = match previous {
        Some(p) => u64::from(p) + 1 + gap,
        None => gap,
    };
    r.check(Field::EntityId, id, u64::from(u32::MAX));
    id as u32
}

/// Reads a record kind: `0` update, `1 0` spawn, `1 1` despawn.
#[inline(always)]
fn read_kind(r: &mut BitReader<'_>) -> u64 {
    if !r.read_bit(Field::RecordKind) {
        return KIND_UPDATE;
    }
    if r.read_bit(Field::RecordKind) {
        KIND_DESPAWN
    } else {
        KIND_SPAWN
    }
}

/// `base + delta`, recording an out-of-range result (below 0 or above `max`) as an error.
#[inline(always)]
fn offset(r: &mut BitReader<'_>, base: i64, delta: i32, max: i64, field: Field) -> i64 {
    let value = base + i64::from(delta);
    // A negative result wraps to a huge unsigned value, which the check refuses too.
    r.check(field, value as u64, max as u64);
    value
}

/// Applies a velocity change (delta or absolute) read from `r` to `value`.
#[inline(always)]
fn update_velocity(
    r: &mut BitReader<'_>,
    value: &mut [i32; 3],
    quantizer: &VelocityQuantizer,
    field: Field,
) {
    match read_delta(r, VELOCITY_DELTA_WIDTHS, field) {
        Some(d) => {
            let half = i64::from(quantizer.half());
            for k in 0..3 {
                let shifted = offset(r, i64::from(value[k]) + half, d[k], 2 * half, field);
                value[k] = (shifted - half) as i32;
            }
        }
        None => *value = read_velocity(r, quantizer, field),
    }
}

#[inline(always)]
fn read_velocity(r: &mut BitReader<'_>, quantizer: &VelocityQuantizer, field: Field) -> [i32; 3] {
    if !r.read_bit(field) {
        return [0; 3];
    }
    read_velocity_components(r, quantizer, field)
}

/// Reads three velocity components if `present`, else consumes nothing and returns zeros,
/// without a branch on `present`.
#[inline(always)]
fn read_velocity_if(
    r: &mut BitReader<'_>,
    quantizer: &VelocityQuantizer,
    present: bool,
    field: Field,
) -> [i32; 3] {
    let word = r.peek();
    r.advance(u32::from(present) * 3 * quantizer.bits(), field);
    velocity_from(r, word, quantizer, present, field)
}

/// Three velocity components from the start of `word` if `present`, else zeros.
#[inline(always)]
fn velocity_from(
    r: &mut BitReader<'_>,
    word: u64,
    quantizer: &VelocityQuantizer,
    present: bool,
    field: Field,
) -> [i32; 3] {
    let b = quantizer.bits();
    let half = quantizer.half();
    let keep = -i32::from(present);
    let mut code = [0i32; 3];
    let mut worst = 0;
    for (k, value) in code.iter_mut().enumerate() {
        let raw = (word >> (k as u32 * b)) & mask(b);
        worst = worst.max(raw & keep as u64);
        *value = (raw as i32 - half) & keep;
    }
    r.check(field, worst, 2 * half as u64);
    code
}

#[inline(always)]
fn read_velocity_components(
    r: &mut BitReader<'_>,
    quantizer: &VelocityQuantizer,
    field: Field,
) -> [i32; 3] {
    let b = quantizer.bits();
    let half = quantizer.half();
    let all = r.read(3 * b, field);
    let mut code = [0i32; 3];
    for (k, value) in code.iter_mut().enumerate() {
        let raw = (all >> (k as u32 * b)) & mask(b);
        r.check(field, raw, 2 * half as u64);
        *value = raw as i32 - half;
    }
    code
}

#[inline(always)]
fn read_velocity_change(
    r: &mut BitReader<'_>,
    quantizer: &VelocityQuantizer,
    field: Field,
) -> Change<[i32; 3]> {
    match read_delta(r, VELOCITY_DELTA_WIDTHS, field) {
        Some(delta) => Change::Delta(delta),
        None => Change::Absolute(read_velocity(r, quantizer, field)),
    }
}

/// Reads a tier marker and, unless it is the absolute tier, the three deltas.
#[inline(always)]
fn read_delta(r: &mut BitReader<'_>, widths: [u32; 3], field: Field) -> Option<[i32; 3]> {
    let word = r.peek();
    let tier = word & 3;
    if tier == ABSOLUTE_TIER {
        r.advance(2, field);
        return None;
    }
    let width = widths[tier as usize];
    r.advance(2 + 3 * width, field);
    let all = word >> 2;
    Some(crate::map3([0, 1, 2], |k| unzigzag(((all >> (k * width)) & mask(width)) as u32)))
}
