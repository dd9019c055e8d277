//! The human-readable (JSON) form of Rally's own wire messages, for debugging and `rally inspect`.
//!
//! Two views: [`snapshot_to_json`] shows a decoded snapshot in SI units (metres, unit quaternions,
//! m/s, rad/s); [`inspect_snapshot`] shows a datagram as it is on the wire, which for a delta means
//! its records, since the baseline is not at hand. The quantized [`Snapshot`] itself implements
//! serde, so its exact codes round-trip through JSON too.

use crate::bits::BitReader;
use crate::error::DecodeError;
use crate::snapshot::{
    read_header, DeltaRecord, Snapshot, SnapshotConfig, SnapshotKind, FORMAT_DELTA_COLUMNS,
};
use serde_json::{json, Value};

/// A decoded snapshot in SI units.
pub fn snapshot_to_json(config: &SnapshotConfig, snapshot: &Snapshot) -> Value {
    let entities: Vec<Value> = snapshot
        .entities()
        .iter()
        .map(|e| {
            let state = config.dequantize(e);
            json!({
                "id": state.id,
                "position": state.position.to_array(),
                "rotation": state.rotation.to_array(),
                "linear_velocity": state.linear_velocity.to_array(),
                "angular_velocity": state.angular_velocity.to_array(),
            })
        })
        .collect();
    json!({ "tick": snapshot.tick(), "entities": entities })
}

/// A snapshot datagram as the wire carries it: a full snapshot in SI units, a delta as its
/// records (offsets in quantizer steps, absolute values as codes).
pub fn inspect_snapshot(config: &SnapshotConfig, bytes: &[u8]) -> Result<Value, DecodeError> {
    let header = SnapshotConfig::peek_header(bytes)?;
    match header.kind {
        SnapshotKind::Full => {
            let mut snapshot = Snapshot::new(header.tick);
            config.decode(bytes, None, &mut snapshot)?;
            let mut value = snapshot_to_json(config, &snapshot);
            value["kind"] = json!("full");
            Ok(value)
        }
        SnapshotKind::Delta { baseline_tick } if bytes.first() == Some(&FORMAT_DELTA_COLUMNS) => {
            let listing = config.list_columns(bytes)?;
            Ok(json!({
                "kind": "delta_columns",
                "tick": header.tick,
                "baseline_tick": baseline_tick,
                "columns": listing,
            }))
        }
        SnapshotKind::Delta { baseline_tick } => {
            let mut r = BitReader::new(bytes);
            read_header(&mut r)?;
            let mut records: Vec<DeltaRecord> = Vec::new();
            let mut previous = None;
            for _ in 0..header.count {
                let record = config.read_record(&mut r, previous);
                r.status()?;
                previous = Some(record.id());
                records.push(record);
            }
            r.finish()?;
            Ok(json!({
                "kind": "delta",
                "tick": header.tick,
                "baseline_tick": baseline_tick,
                "records": records,
            }))
        }
    }
}
