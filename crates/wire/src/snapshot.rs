//! Snapshots: the server's world state as one client sees it, full or as a delta against a
//! baseline the client acknowledged.
//!
//! A [`Snapshot`] holds quantized entities ([`QuantizedEntity`]) sorted by id. The server
//! quantizes once per tick and keeps the result: it is what every client's delta is computed
//! against later, and comparing integers decides exactly which fields changed. The float form
//! ([`EntityState`]) is what game code reads and writes.
//!
//! The format is specified bit by bit in docs/wire.md; the constants here are its numbers.

use crate::bits::{mask, patch_bits, BitReader, BitWriter, BITS_PER_CALL_MAX};
use crate::error::{ConfigError, DecodeError, EncodeError, Field, SnapshotError};
use crate::quant::{PositionQuantizer, QuantizedRotation, RotationQuantizer, VelocityQuantizer};
use crate::varint::{unzigzag, zigzag, Tiers};
use glam::{Quat, Vec3};
use serde::{Deserialize, Serialize};

/// The format byte of a full snapshot.
pub const FORMAT_FULL: u8 = 0x01;
/// The format byte of a delta snapshot.
pub const FORMAT_DELTA: u8 = 0x02;
/// The most entities a snapshot can hold, so that a delta's record count (at most twice this)
/// fits its 16-bit field.
pub const ENTITIES_MAX_FORMAT: usize = 32_767;
const COUNT_BITS: u32 = 16;
/// Bits of a full snapshot's header: format, tick, entity count.
pub const FULL_HEADER_BITS: usize = 8 + 32 + COUNT_BITS as usize;
/// Bits of a delta snapshot's header: format, tick, baseline tick, record count.
pub const DELTA_HEADER_BITS: usize = 8 + 32 + 32 + COUNT_BITS as usize;

/// Id gaps (`id - previous id - 1`): consecutive ids cost one bit.
pub const ID_TIERS: Tiers<4> = Tiers { widths: [0, 3, 8, 32] };
/// Value bits of the three delta tiers of a position, in quantizer steps (zigzagged).
pub const POSITION_DELTA_WIDTHS: [u32; 3] = [4, 7, 11];
/// Value bits of the three delta tiers of a rotation's components.
pub const ROTATION_DELTA_WIDTHS: [u32; 3] = [3, 6, 9];
/// Value bits of the three delta tiers of a velocity.
pub const VELOCITY_DELTA_WIDTHS: [u32; 3] = [4, 7, 10];
const ABSOLUTE_TIER: u64 = 3;

const KIND_UPDATE: u64 = 0b0;
const KIND_SPAWN: u64 = 0b01;
const KIND_DESPAWN: u64 = 0b11;

const MASK_POSITION: u64 = 1;
const MASK_ROTATION: u64 = 2;
const MASK_LINEAR: u64 = 4;
const MASK_ANGULAR: u64 = 8;

/// An entity as game code sees it: id, transform and velocities in SI units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EntityState {
    /// The entity's id, unique in its room.
    pub id: u32,
    /// Position, metres.
    pub position: Vec3,
    /// Orientation, a unit quaternion.
    pub rotation: Quat,
    /// Linear velocity, m/s.
    pub linear_velocity: Vec3,
    /// Angular velocity, rad/s.
    pub angular_velocity: Vec3,
}

/// An entity as the wire carries it: every field an integer code of its quantizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct QuantizedEntity {
    /// The entity's id.
    pub id: u32,
    /// Position codes, steps from the box's minimum corner.
    pub position: [u32; 3],
    /// Smallest-three rotation codes.
    pub rotation: QuantizedRotation,
    /// Linear velocity codes, signed steps.
    pub linear_velocity: [i32; 3],
    /// Angular velocity codes, signed steps.
    pub angular_velocity: [i32; 3],
}

/// The state of one room at one tick: quantized entities in strictly ascending id order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "SnapshotRepr")]
pub struct Snapshot {
    tick: u32,
    entities: Vec<QuantizedEntity>,
}

#[derive(Deserialize)]
struct SnapshotRepr {
    tick: u32,
    entities: Vec<QuantizedEntity>,
}

impl TryFrom<SnapshotRepr> for Snapshot {
    type Error = SnapshotError;
    fn try_from(repr: SnapshotRepr) -> Result<Self, SnapshotError> {
        let mut snapshot = Snapshot::new(repr.tick);
        for entity in repr.entities {
            snapshot.push(entity)?;
        }
        Ok(snapshot)
    }
}

impl Snapshot {
    /// An empty snapshot of `tick`.
    pub fn new(tick: u32) -> Self {
        Self { tick, entities: Vec::new() }
    }

    /// An empty snapshot with room for `capacity` entities, so that filling it allocates once.
    pub fn with_capacity(tick: u32, capacity: usize) -> Self {
        Self { tick, entities: Vec::with_capacity(capacity) }
    }

    /// The tick this snapshot describes.
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// Empties the snapshot for reuse at `tick`, keeping its allocation.
    pub fn clear(&mut self, tick: u32) {
        self.tick = tick;
        self.entities.clear();
    }

    /// Appends an entity; ids must be strictly ascending.
    pub fn push(&mut self, entity: QuantizedEntity) -> Result<(), SnapshotError> {
        if let Some(last) = self.entities.last() {
            if entity.id <= last.id {
                return Err(SnapshotError::IdNotAscending { id: entity.id, last: last.id });
            }
        }
        self.entities.push(entity);
        Ok(())
    }

    /// The entities, ascending by id.
    pub fn entities(&self) -> &[QuantizedEntity] {
        &self.entities
    }

    /// The entity with `id`, if present.
    pub fn get(&self, id: u32) -> Option<&QuantizedEntity> {
        self.entities.binary_search_by_key(&id, |e| e.id).ok().map(|i| &self.entities[i])
    }

    /// Number of entities.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether the snapshot has no entities.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }
}

/// Whether a datagram holds a full snapshot or a delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotKind {
    /// Every entity, standalone.
    Full,
    /// Changes against the snapshot of `baseline_tick`.
    Delta {
        /// The tick of the baseline.
        baseline_tick: u32,
    },
}

/// The fixed fields at the start of every snapshot, readable before choosing a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SnapshotHeader {
    /// Full or delta, and the baseline.
    pub kind: SnapshotKind,
    /// The tick the snapshot describes.
    pub tick: u32,
    /// Entities (full) or records (delta) that follow.
    pub count: u16,
}

/// The quantizers and limits both ends of a connection agree on. The configuration is not on the
/// wire: a decoder with another configuration misreads the data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotConfig {
    /// Positions.
    pub position: PositionQuantizer,
    /// Rotations.
    pub rotation: RotationQuantizer,
    /// Linear velocities.
    pub linear_velocity: VelocityQuantizer,
    /// Angular velocities.
    pub angular_velocity: VelocityQuantizer,
    /// The most entities a snapshot may hold; a decoder refuses more before allocating for them.
    pub entities_max: usize,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            position: PositionQuantizer::default(),
            rotation: RotationQuantizer::default(),
            linear_velocity: VelocityQuantizer::default_linear(),
            angular_velocity: VelocityQuantizer::default_angular(),
            entities_max: 4096,
        }
    }
}

/// One change in a delta, as read from the wire: either an offset from the baseline or a new
/// absolute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change<A> {
    /// Add these signed steps to the baseline's codes.
    Delta([i32; 3]),
    /// Replace the baseline's value.
    Absolute(A),
}

/// An update record: the fields of one entity that changed since the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EntityUpdate {
    /// The entity.
    pub id: u32,
    /// The new position, if it changed.
    pub position: Option<Change<[u32; 3]>>,
    /// The new rotation, if it changed.
    pub rotation: Option<Change<QuantizedRotation>>,
    /// The new linear velocity, if it changed.
    pub linear_velocity: Option<Change<[i32; 3]>>,
    /// The new angular velocity, if it changed.
    pub angular_velocity: Option<Change<[i32; 3]>>,
}

/// One record of a delta snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaRecord {
    /// An entity in both the baseline and the snapshot whose fields changed.
    Update(EntityUpdate),
    /// An entity that is not in the baseline.
    Spawn(QuantizedEntity),
    /// An entity of the baseline that is gone.
    Despawn {
        /// The entity.
        id: u32,
    },
}

impl SnapshotConfig {
    /// Checks the limits the quantizers cannot check themselves.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.entities_max == 0 || self.entities_max > ENTITIES_MAX_FORMAT {
            let (value, max) = (self.entities_max, ENTITIES_MAX_FORMAT);
            return Err(ConfigError::EntitiesMax { value, max });
        }
        Ok(())
    }

    /// Quantizes an entity.
    pub fn quantize(&self, entity: &EntityState) -> QuantizedEntity {
        QuantizedEntity {
            id: entity.id,
            position: self.position.quantize(entity.position),
            rotation: self.rotation.quantize(entity.rotation),
            linear_velocity: self.linear_velocity.quantize(entity.linear_velocity),
            angular_velocity: self.angular_velocity.quantize(entity.angular_velocity),
        }
    }

    /// The entity a quantized entity stands for.
    pub fn dequantize(&self, entity: &QuantizedEntity) -> EntityState {
        EntityState {
            id: entity.id,
            position: self.position.dequantize(entity.position),
            rotation: self.rotation.dequantize(entity.rotation),
            linear_velocity: self.linear_velocity.dequantize(entity.linear_velocity),
            angular_velocity: self.angular_velocity.dequantize(entity.angular_velocity),
        }
    }

    fn entities_max(&self) -> usize {
        self.entities_max.min(ENTITIES_MAX_FORMAT)
    }

    /// Encodes every entity of `snapshot` into `out` and returns the bytes written.
    pub fn encode_full(&self, snapshot: &Snapshot, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.check_count(snapshot)?;
        let capacity = out.len();
        let mut w = BitWriter::new(out);
        w.write(u64::from(FORMAT_FULL), 8);
        w.write(u64::from(snapshot.tick), 32);
        w.write(snapshot.len() as u64, COUNT_BITS);
        let mut previous: Option<u32> = None;
        for entity in snapshot.entities() {
            ID_TIERS.write(&mut w, id_gap(previous, entity.id));
            self.write_body(&mut w, entity);
            previous = Some(entity.id);
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
        self.write_position(w, entity.position);
        self.write_rotation(w, entity.rotation);
        write_velocity(w, &self.linear_velocity, entity.linear_velocity);
        write_velocity(w, &self.angular_velocity, entity.angular_velocity);
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
        let max = self.entities_max();
        if usize::from(count) > max {
            let (value, max) = (u64::from(count), max as u64);
            return Err(DecodeError::OutOfBounds { field: Field::EntityCount, value, max });
        }
        out.entities.reserve(usize::from(count));
        let mut previous = None;
        for _ in 0..count {
            let id = read_id(r, previous)?;
            let entity = self.read_body(r, id)?;
            out.entities.push(entity);
            previous = Some(id);
        }
        Ok(())
    }

    #[inline(always)]
    fn read_body(&self, r: &mut BitReader<'_>, id: u32) -> Result<QuantizedEntity, DecodeError> {
        Ok(QuantizedEntity {
            id,
            position: self.read_position(r)?,
            rotation: self.read_rotation(r)?,
            linear_velocity: read_velocity(r, &self.linear_velocity, Field::LinearVelocity)?,
            angular_velocity: read_velocity(r, &self.angular_velocity, Field::AngularVelocity)?,
        })
    }

    #[inline(always)]
    fn read_position(&self, r: &mut BitReader<'_>) -> Result<[u32; 3], DecodeError> {
        let [bx, by, bz] = self.position.bits();
        let (x, yz) = if bx + by + bz <= BITS_PER_CALL_MAX {
            let all = r.read(bx + by + bz, Field::Position)?;
            (all & mask(bx), all >> bx)
        } else {
            (r.read(bx, Field::Position)?, r.read(by + bz, Field::Position)?)
        };
        let code = [x, yz & mask(by), yz >> by];
        let steps = self.position.steps();
        for axis in 0..3 {
            check_bound(Field::Position, code[axis], u64::from(steps[axis]))?;
        }
        Ok(code.map(|c| c as u32))
    }

    #[inline(always)]
    fn read_rotation(&self, r: &mut BitReader<'_>) -> Result<QuantizedRotation, DecodeError> {
        let b = self.rotation.bits();
        let all = r.read(2 + 3 * b, Field::Rotation)?;
        let component = |i: u32| ((all >> (2 + i * b)) & mask(b)) as u16;
        Ok(QuantizedRotation {
            largest: (all & 3) as u8,
            components: [component(0), component(1), component(2)],
        })
    }

    fn read_delta(
        &self,
        r: &mut BitReader<'_>,
        count: u16,
        baseline: &Snapshot,
        out: &mut Snapshot,
    ) -> Result<(), DecodeError> {
        let old = baseline.entities();
        let mut i = 0;
        let mut previous = None;
        for _ in 0..count {
            let record = self.read_record(r, previous)?;
            let id = record.id();
            previous = Some(id);
            // Entities before this record's id are unchanged.
            while i < old.len() && old[i].id < id {
                self.push_bounded(out, old[i])?;
                i += 1;
            }
            let base = old.get(i).filter(|e| e.id == id);
            match (record, base) {
                (DeltaRecord::Update(update), Some(base)) => {
                    let entity = self.apply(&update, base)?;
                    self.push_bounded(out, entity)?;
                    i += 1;
                }
                (DeltaRecord::Despawn { .. }, Some(_)) => i += 1,
                (DeltaRecord::Spawn(entity), None) => self.push_bounded(out, entity)?,
                _ => return Err(DecodeError::BaselineConflict { id }),
            }
        }
        for entity in &old[i..] {
            self.push_bounded(out, *entity)?;
        }
        Ok(())
    }

    #[inline(always)]
    fn push_bounded(&self, out: &mut Snapshot, entity: QuantizedEntity) -> Result<(), DecodeError> {
        let max = self.entities_max();
        if out.entities.len() >= max {
            let value = out.entities.len() as u64 + 1;
            return Err(DecodeError::OutOfBounds {
                field: Field::EntityCount,
                value,
                max: max as u64,
            });
        }
        // Records arrive in ascending id order (read_id enforces it) and the baseline is sorted,
        // so the merge keeps `out` sorted.
        out.entities.push(entity);
        Ok(())
    }

    /// Reads one delta record. Public so that tools can show a delta without its baseline.
    pub fn read_record(
        &self,
        r: &mut BitReader<'_>,
        previous: Option<u32>,
    ) -> Result<DeltaRecord, DecodeError> {
        let id = read_id(r, previous)?;
        if !r.read_bit(Field::RecordKind)? {
            return self.read_update(r, id).map(DeltaRecord::Update);
        }
        if r.read_bit(Field::RecordKind)? {
            Ok(DeltaRecord::Despawn { id })
        } else {
            self.read_body(r, id).map(DeltaRecord::Spawn)
        }
    }

    fn read_update(&self, r: &mut BitReader<'_>, id: u32) -> Result<EntityUpdate, DecodeError> {
        let field_mask = r.read(4, Field::FieldMask)?;
        if field_mask == 0 {
            // An update that changes nothing is never encoded.
            return Err(DecodeError::OutOfBounds { field: Field::FieldMask, value: 0, max: 0 });
        }
        let mut update = EntityUpdate {
            id,
            position: None,
            rotation: None,
            linear_velocity: None,
            angular_velocity: None,
        };
        if field_mask & MASK_POSITION != 0 {
            update.position = Some(match read_delta(r, POSITION_DELTA_WIDTHS, Field::Position)? {
                Some(delta) => Change::Delta(delta),
                None => Change::Absolute(self.read_position(r)?),
            });
        }
        if field_mask & MASK_ROTATION != 0 {
            update.rotation = Some(match read_delta(r, ROTATION_DELTA_WIDTHS, Field::Rotation)? {
                Some(delta) => Change::Delta(delta),
                None => Change::Absolute(self.read_rotation(r)?),
            });
        }
        if field_mask & MASK_LINEAR != 0 {
            update.linear_velocity =
                Some(read_velocity_change(r, &self.linear_velocity, Field::LinearVelocity)?);
        }
        if field_mask & MASK_ANGULAR != 0 {
            update.angular_velocity =
                Some(read_velocity_change(r, &self.angular_velocity, Field::AngularVelocity)?);
        }
        Ok(update)
    }

    /// Applies an update record to its baseline entity, checking every result against its bound.
    pub fn apply(
        &self,
        update: &EntityUpdate,
        base: &QuantizedEntity,
    ) -> Result<QuantizedEntity, DecodeError> {
        let mut entity = *base;
        match update.position {
            Some(Change::Delta(d)) => {
                let steps = self.position.steps();
                for axis in 0..3 {
                    let max = i64::from(steps[axis]);
                    entity.position[axis] =
                        offset(base.position[axis].into(), d[axis], max, Field::Position)? as u32;
                }
            }
            Some(Change::Absolute(code)) => entity.position = code,
            None => {}
        }
        match update.rotation {
            Some(Change::Delta(d)) => {
                let max = i64::from(mask(self.rotation.bits()) as u32);
                for k in 0..3 {
                    let value =
                        offset(base.rotation.components[k].into(), d[k], max, Field::Rotation)?;
                    entity.rotation.components[k] = value as u16;
                }
            }
            Some(Change::Absolute(code)) => entity.rotation = code,
            None => {}
        }
        let velocities = [
            (
                update.linear_velocity,
                &self.linear_velocity,
                &mut entity.linear_velocity,
                Field::LinearVelocity,
            ),
            (
                update.angular_velocity,
                &self.angular_velocity,
                &mut entity.angular_velocity,
                Field::AngularVelocity,
            ),
        ];
        for (change, quantizer, value, field) in velocities {
            match change {
                Some(Change::Delta(d)) => {
                    let half = i64::from(quantizer.half());
                    for k in 0..3 {
                        let shifted = offset(i64::from(value[k]) + half, d[k], 2 * half, field)?;
                        value[k] = (shifted - half) as i32;
                    }
                }
                Some(Change::Absolute(code)) => *value = code,
                None => {}
            }
        }
        Ok(entity)
    }
}

impl DeltaRecord {
    /// The entity the record is about.
    pub fn id(&self) -> u32 {
        match self {
            DeltaRecord::Update(update) => update.id,
            DeltaRecord::Spawn(entity) => entity.id,
            DeltaRecord::Despawn { id } => *id,
        }
    }
}

/// Reads the header fields shared by both kinds.
pub fn read_header(r: &mut BitReader<'_>) -> Result<SnapshotHeader, DecodeError> {
    let format = r.read(8, Field::Header)? as u8;
    let tick = r.read(32, Field::Tick)? as u32;
    let kind = match format {
        FORMAT_FULL => SnapshotKind::Full,
        FORMAT_DELTA => {
            SnapshotKind::Delta { baseline_tick: r.read(32, Field::BaselineTick)? as u32 }
        }
        other => return Err(DecodeError::UnknownFormat(other)),
    };
    let count = r.read(COUNT_BITS, Field::EntityCount)? as u16;
    Ok(SnapshotHeader { kind, tick, count })
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

#[inline(always)]
fn read_id(r: &mut BitReader<'_>, previous: Option<u32>) -> Result<u32, DecodeError> {
    let gap = ID_TIERS.read(r, Field::EntityId)?;
    let id = match previous {
        Some(p) => u64::from(p) + 1 + gap,
        None => gap,
    };
    check_bound(Field::EntityId, id, u64::from(u32::MAX))?;
    Ok(id as u32)
}

#[inline(always)]
fn check_bound(field: Field, value: u64, max: u64) -> Result<(), DecodeError> {
    if value > max {
        return Err(DecodeError::OutOfBounds { field, value, max });
    }
    Ok(())
}

#[inline(always)]
fn offset(base: i64, delta: i32, max: i64, field: Field) -> Result<i64, DecodeError> {
    let value = base + i64::from(delta);
    if !(0..=max).contains(&value) {
        // Report the out-of-range result as the unsigned value the field would have held.
        return Err(DecodeError::OutOfBounds { field, value: value as u64, max: max as u64 });
    }
    Ok(value)
}

#[inline(always)]
fn write_velocity(w: &mut BitWriter<'_>, quantizer: &VelocityQuantizer, code: [i32; 3]) {
    if code == [0; 3] {
        w.write(0, 1);
        return;
    }
    let b = quantizer.bits();
    let half = quantizer.half();
    let [x, y, z] = code.map(|c| (c + half) as u64);
    w.write(1 | x << 1 | y << (1 + b) | z << (1 + 2 * b), 1 + 3 * b);
}

#[inline(always)]
fn read_velocity(
    r: &mut BitReader<'_>,
    quantizer: &VelocityQuantizer,
    field: Field,
) -> Result<[i32; 3], DecodeError> {
    if !r.read_bit(field)? {
        return Ok([0; 3]);
    }
    let b = quantizer.bits();
    let half = quantizer.half();
    let all = r.read(3 * b, field)?;
    let mut code = [0i32; 3];
    for (k, value) in code.iter_mut().enumerate() {
        let raw = (all >> (k as u32 * b)) & mask(b);
        check_bound(field, raw, 2 * half as u64)?;
        *value = raw as i32 - half;
    }
    Ok(code)
}

fn read_velocity_change(
    r: &mut BitReader<'_>,
    quantizer: &VelocityQuantizer,
    field: Field,
) -> Result<Change<[i32; 3]>, DecodeError> {
    Ok(match read_delta(r, VELOCITY_DELTA_WIDTHS, field)? {
        Some(delta) => Change::Delta(delta),
        None => Change::Absolute(read_velocity(r, quantizer, field)?),
    })
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

/// Reads a tier marker and, unless it is the absolute tier, the three deltas.
#[inline(always)]
fn read_delta(
    r: &mut BitReader<'_>,
    widths: [u32; 3],
    field: Field,
) -> Result<Option<[i32; 3]>, DecodeError> {
    let tier = r.read(2, field)?;
    if tier == ABSOLUTE_TIER {
        return Ok(None);
    }
    let width = widths[tier as usize];
    let all = r.read(3 * width, field)?;
    Ok(Some([0, 1, 2].map(|k| unzigzag(((all >> (k * width)) & mask(width)) as u32))))
}
