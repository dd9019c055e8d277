//! Snapshots: the server's world state as one client sees it, full or as a delta against a
//! baseline the client acknowledged.
//!
//! A [`Snapshot`] holds quantized entities ([`QuantizedEntity`]) sorted by id. The server
//! quantizes once per tick and keeps the result: it is what every client's delta is computed
//! against later, and comparing integers decides exactly which fields changed. The float form
//! ([`EntityState`]) is what game code reads and writes.
//!
//! The format is specified bit by bit in docs/wire.md; the constants here are its numbers.

mod columns;
mod decode;
mod encode;
mod history;

pub use columns::{ColumnsListing, FORMAT_DELTA_COLUMNS};
pub use decode::read_header;
pub use history::{NextSnapshot, SnapshotHistory};

use crate::error::{ConfigError, SnapshotError};
use crate::quant::{PositionQuantizer, QuantizedRotation, RotationQuantizer, VelocityQuantizer};
use crate::varint::Tiers;
use glam::{Quat, Vec3};
use serde::{Deserialize, Serialize};

/// The format byte of a full snapshot.
pub const FORMAT_FULL: u8 = 0x01;
/// The format byte of a record delta, the delta before the column delta
/// ([`FORMAT_DELTA_COLUMNS`]); decoders still read it.
pub const FORMAT_DELTA_RECORDS: u8 = 0x02;
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
/// An update record gives each field a 4-bit width: 0 means unchanged, 1 to 14 the bits of each
/// of its three zigzagged deltas, and this value that the new value follows in absolute form.
pub const WIDTH_ABSOLUTE: u32 = 15;
/// The widest delta component an update carries before the field is sent absolute instead.
pub const DELTA_WIDTH_MAX: u32 = 14;

const KIND_UPDATE: u64 = 0b0;
const KIND_SPAWN: u64 = 0b01;
const KIND_DESPAWN: u64 = 0b11;

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
#[derive(Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
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

impl Clone for Snapshot {
    fn clone(&self) -> Self {
        Self { tick: self.tick, entities: self.entities.clone() }
    }

    /// Reuses this snapshot's allocation: the history's steady state copies without allocating.
    fn clone_from(&mut self, source: &Self) {
        self.tick = source.tick;
        self.entities.clone_from(&source.entities);
    }
}

impl Snapshot {
    /// An empty snapshot of `tick`.
    pub const fn new(tick: u32) -> Self {
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

    /// Relabels the snapshot with another tick, keeping its entities (for reusing one buffer).
    pub fn set_tick(&mut self, tick: u32) {
        self.tick = tick;
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
    /// Entities (full), records (delta) or updates (column delta) that follow.
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
    /// Checks the limits the quantizers cannot check themselves. The codec also clamps
    /// `entities_max` to what the format carries, so an unchecked configuration is safe, only
    /// not what was asked for.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.entities_max == 0 || self.entities_max > ENTITIES_MAX_FORMAT {
            let (value, max) = (self.entities_max, ENTITIES_MAX_FORMAT);
            return Err(ConfigError::EntitiesMax { value, max });
        }
        Ok(())
    }

    /// Quantizes an entity.
    // Always inlined: in the room's world walk, a call here spilled the walk's state around it
    // (about 30 instructions a moved entity).
    #[inline(always)]
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
