//! The error types of the wire layer: one per API surface (decode, encode, configuration,
//! messages, hex). Decoding errors say which field failed and, where a bound was broken, which
//! bound.

use std::fmt;

/// A field of the snapshot format, named in decode errors and in docs/wire.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Field {
    /// The format byte that opens every snapshot.
    Header,
    /// The snapshot's tick.
    Tick,
    /// The tick of the baseline a delta is against.
    BaselineTick,
    /// The number of entities (full) or records (delta).
    EntityCount,
    /// The gap coding an entity id.
    EntityId,
    /// The two flags saying whether an entity's velocities are not zero.
    MovingFlags,
    /// A delta record's kind (update, spawn, despawn).
    RecordKind,
    /// An update record's four field widths.
    FieldWidths,
    /// A position.
    Position,
    /// A rotation.
    Rotation,
    /// A linear velocity.
    LinearVelocity,
    /// An angular velocity.
    AngularVelocity,
    /// A varint.
    Varint,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Field::Header => "header",
            Field::Tick => "tick",
            Field::BaselineTick => "baseline tick",
            Field::EntityCount => "entity count",
            Field::EntityId => "entity id",
            Field::MovingFlags => "moving flags",
            Field::RecordKind => "record kind",
            Field::FieldWidths => "field widths",
            Field::Position => "position",
            Field::Rotation => "rotation",
            Field::LinearVelocity => "linear velocity",
            Field::AngularVelocity => "angular velocity",
            Field::Varint => "varint",
        };
        f.write_str(name)
    }
}

/// Why a datagram did not decode. Decoding never panics and never allocates past the configured
/// `entities_max`; every failure is one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The datagram ended inside `field`.
    #[error("truncated: the data ends inside the {field}")]
    Truncated {
        /// The field that was cut short.
        field: Field,
    },
    /// `field` held `value`, which is above its bound `max`.
    #[error("{field} value {value} is above its bound {max}")]
    OutOfBounds {
        /// The field holding the value.
        field: Field,
        /// The value read.
        value: u64,
        /// The largest value allowed by the format or the configuration.
        max: u64,
    },
    /// The format byte is not one this version knows.
    #[error("unknown snapshot format byte {0:#04x}")]
    UnknownFormat(u8),
    /// A delta arrived without the baseline it refers to, or with a baseline of another tick.
    #[error("delta against tick {wanted} but the baseline given is {given:?}")]
    BaselineMismatch {
        /// The tick the delta was encoded against.
        wanted: u32,
        /// The tick of the baseline the caller passed, if any.
        given: Option<u32>,
    },
    /// A delta record refers to an entity the baseline does not have (update, despawn) or
    /// already has (spawn).
    #[error("delta record for entity {id} does not match the baseline")]
    BaselineConflict {
        /// The entity id of the record.
        id: u32,
    },
    /// Bytes remain after the last field.
    #[error("{count} bytes after the end of the snapshot")]
    TrailingBytes {
        /// How many whole bytes were left over.
        count: usize,
    },
    /// The padding bits of the last byte are not zero.
    #[error("padding bits in the last byte are not zero")]
    NonZeroPadding,
}

/// Why a snapshot could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is smaller than the encoded snapshot.
    #[error("output buffer holds {capacity} bytes but the snapshot needs {needed}")]
    BufferTooSmall {
        /// Bytes the encoding needed.
        needed: usize,
        /// Bytes the buffer had.
        capacity: usize,
    },
    /// The history no longer (or never) held the snapshot of this tick; send a full snapshot.
    #[error("no snapshot of tick {0} is held to encode a delta against")]
    NoSuchBaseline(u32),
    /// The snapshot has more entities than `entities_max`.
    #[error("{count} entities exceed the configured entities_max of {max}")]
    TooManyEntities {
        /// Entities in the snapshot.
        count: usize,
        /// The configured limit.
        max: usize,
    },
}

/// Why a snapshot could not join a [`crate::snapshot::SnapshotHistory`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// Snapshots must be pushed in increasing tick order.
    #[error("snapshot of tick {tick} is not newer than the newest held, {newest}")]
    TickNotNewer {
        /// The tick pushed.
        tick: u32,
        /// The newest tick held.
        newest: u32,
    },
}

/// Why a snapshot could not take an entity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Entities must be pushed in strictly ascending id order.
    #[error("entity {id} pushed after entity {last}: ids must be strictly ascending")]
    IdNotAscending {
        /// The id pushed.
        id: u32,
        /// The last id in the snapshot.
        last: u32,
    },
    /// The snapshot already holds `entities_max` entities.
    #[error("the snapshot is full ({max} entities)")]
    Full {
        /// The configured limit.
        max: usize,
    },
    /// An entity to keep from the previous snapshot that it does not hold.
    #[error("the previous snapshot has no entity at index {index}")]
    NoSuchEntity {
        /// The index asked for.
        index: usize,
    },
}

/// A quantizer or codec configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `field` must be finite and above zero.
    #[error("{field} must be finite and above zero, got {value}")]
    NotPositive {
        /// The configuration field.
        field: &'static str,
        /// The value given.
        value: f32,
    },
    /// The bounds and precision need more bits per component than the format allows.
    #[error("{field} needs {bits} bits per component; the format allows at most {max}")]
    TooManyBits {
        /// The configuration field.
        field: &'static str,
        /// Bits the configuration would need.
        bits: u32,
        /// Bits the format allows.
        max: u32,
    },
    /// A box's minimum is not below its maximum on some axis.
    #[error("{field}: min must be below max on every axis")]
    EmptyBox {
        /// The configuration field.
        field: &'static str,
    },
    /// `entities_max` is zero or above what the 16-bit count field can carry.
    #[error("entities_max must be in 1..={max}, got {value}")]
    EntitiesMax {
        /// The value given.
        value: usize,
        /// The largest value allowed.
        max: usize,
    },
}

/// Why a user message did not encode or decode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The bytes are not a valid binary encoding of the requested type.
    #[error("binary message: {0}")]
    Binary(#[from] bitcode::Error),
    /// JSON (de)serialization failed.
    #[error("JSON message: {0}")]
    Json(#[from] serde_json::Error),
    /// The message is larger than the configured limit.
    #[error("message of {len} bytes exceeds message_bytes_max of {max}")]
    TooLarge {
        /// The message's size in bytes.
        len: usize,
        /// The configured limit.
        max: usize,
    },
}

/// Text that does not spell bytes in hex ([`crate::hex::decode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HexError {
    /// An odd number of digits: every byte takes two.
    #[error("{digits} hex digits: every byte takes two")]
    OddLength {
        /// The length of the text, in bytes.
        digits: usize,
    },
    /// Something other than `0-9`, `a-f` or `A-F`.
    #[error("not a hex digit at position {at}")]
    NotADigit {
        /// Its position in the text, in bytes.
        at: usize,
    },
}
