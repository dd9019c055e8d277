//! Validation of the engine's settings: every count, size and duration a room or a client
//! session takes has a stated range, and a setting outside it is refused with the field's name
//! and the range, never clamped behind the caller's back.
//!
//! [`RoomConfig::validate`](crate::RoomConfig::validate),
//! [`ClientConfig::validate`](crate::ClientConfig::validate) and
//! [`InterpolationConfig::validate`](crate::InterpolationConfig::validate) check them;
//! [`Room::new`](crate::Room::new) and [`ClientSession::new`](crate::ClientSession::new) call
//! them and return the error.

use std::ops::RangeInclusive;
use std::time::Duration;

/// Why a room's or a client session's settings were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A count or a size is outside its range.
    #[error("{field} is {value}, outside its range {min}..={max}")]
    OutOfRange {
        /// The setting, as its path in the config (`snapshot.entities_max`).
        field: &'static str,
        /// What it was set to.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A duration is outside its range.
    #[error("{field} is {value:?}, outside its range {min:?}..={max:?}")]
    DurationOutOfRange {
        /// The setting.
        field: &'static str,
        /// What it was set to.
        value: Duration,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// A fraction is outside its range.
    #[error("{field} is {value}, outside its range {min}..={max}")]
    FractionOutOfRange {
        /// The setting.
        field: &'static str,
        /// What it was set to.
        value: f64,
        /// The smallest allowed.
        min: f64,
        /// The largest allowed.
        max: f64,
    },
}

/// Ticks per second at most: a millisecond per tick.
pub const TICK_RATE_MAX: u32 = 1000;
/// Entities a room or a snapshot may hold at most.
pub const ENTITIES_MAX: usize = 1 << 20;
/// The smallest snapshot budget: room for the largest prefix and a few entities.
pub const SNAPSHOT_BUDGET_BYTES_MIN: usize = 64;
/// The largest snapshot budget: one message of the default size limit.
pub const SNAPSHOT_BUDGET_BYTES_MAX: usize = 64 * 1024;
/// Views kept as baselines at most (eight seconds at 128 Hz).
pub const VIEWS_KEPT_MAX: usize = 1024;
/// Clients in one room at most.
pub const CLIENTS_MAX: usize = 4096;
/// Inputs in one frame, and inputs a client keeps for resending, at most.
pub const INPUTS_MAX: usize = 1024;
/// Requests awaiting responses at most: ids are 32 bits and must not come round while one
/// still waits.
pub const REQUESTS_MAX: usize = 1 << 16;
/// Queued messages or events at most.
pub const QUEUE_MAX: usize = 1 << 20;
/// The longest resume window and request timeout.
pub const WAIT_MAX: Duration = Duration::from_secs(3600);
/// The largest user message.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;

// The largest snapshot prefix must leave room for entities in the smallest budget.
const _: () = assert!(crate::protocol::STATE_PREFIX_MAX + 32 <= SNAPSHOT_BUDGET_BYTES_MIN);
const _: () = assert!(SNAPSHOT_BUDGET_BYTES_MAX <= rally_wire::message::MESSAGE_BYTES_MAX_DEFAULT);
// A request id is a u32: the ids waiting at once must be far fewer than it counts.
const _: () = assert!((REQUESTS_MAX as u64) < u32::MAX as u64 / 2);

/// `Ok` if `value` is within `range`, else the error naming `field`.
pub(crate) fn count(
    field: &'static str,
    value: usize,
    range: RangeInclusive<usize>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let wide = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    Err(ConfigError::OutOfRange {
        field,
        value: wide(value),
        min: wide(*range.start()),
        max: wide(*range.end()),
    })
}

/// `Ok` if `value` is within `range`, else the error naming `field`.
pub(crate) fn duration(
    field: &'static str,
    value: Duration,
    range: RangeInclusive<Duration>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::DurationOutOfRange { field, value, min: *range.start(), max: *range.end() })
}

/// `Ok` if `value` is within `range` (NaN never is), else the error naming `field`.
pub(crate) fn fraction(
    field: &'static str,
    value: f64,
    range: RangeInclusive<f64>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::FractionOutOfRange { field, value, min: *range.start(), max: *range.end() })
}

/// Checks what a room and a client session share: the snapshot's entity limit and the user
/// messages' size limit.
pub(crate) fn shared(
    snapshot: &rally_wire::SnapshotConfig,
    codec: &rally_wire::MessageCodec,
) -> Result<(), ConfigError> {
    count("snapshot.entities_max", snapshot.entities_max, 1..=ENTITIES_MAX)?;
    count("codec.message_bytes_max", codec.message_bytes_max, 1..=MESSAGE_BYTES_MAX)
}
