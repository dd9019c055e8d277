//! Arbitrary bytes as a full or delta snapshot (against a real baseline) and through the JSON
//! inspector: an error is fine, a panic or an entity count past the limit is not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_wire::{debug, reference, Snapshot, SnapshotConfig};

fuzz_target!(|data: &[u8]| {
    let config = SnapshotConfig { entities_max: 512, ..SnapshotConfig::default() };
    let (baseline, _) = reference::snapshots(&config, 1, 1000);
    let mut out = Snapshot::default();
    let _ = config.decode(data, Some(&baseline), &mut out);
    assert!(out.len() <= config.entities_max);
    let _ = debug::inspect_snapshot(&config, data);
});
