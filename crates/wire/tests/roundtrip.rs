//! Goal: everything the wire layer encodes comes back exactly. Method: property tests over random
//! snapshots (ids near both ends of the u32 range, every field at its bounds), deltas between
//! random baselines and successors, bit streams, varints and serde messages.

mod common;

use proptest::prelude::*;
use rally_wire::bits::{mask, BitReader, BitWriter};
use rally_wire::varint::{read_varint, unzigzag, write_varint, zigzag, Tiers};
use rally_wire::{Field, MessageCodec, Snapshot, SnapshotConfig, SnapshotKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const BUF: usize = 64 * 1024;

proptest! {
    #[test]
    fn full_snapshots_round_trip(snapshot in common::snapshot(80)) {
        let config = common::config();
        let mut buf = vec![0u8; BUF];
        let len = config.encode_full(&snapshot, &mut buf).unwrap();
        let mut decoded = Snapshot::default();
        let kind = config.decode(&buf[..len], None, &mut decoded).unwrap();
        prop_assert_eq!(kind, SnapshotKind::Full);
        prop_assert_eq!(decoded, snapshot);
    }

    #[test]
    fn delta_applied_to_baseline_is_current((baseline, current) in common::baseline_and_current()) {
        let config = common::config();
        let mut buf = vec![0u8; BUF];
        // The column delta servers send, and the record delta decoders still read.
        for records in [false, true] {
            let len = match records {
                false => config.encode_delta(&baseline, &current, &mut buf).unwrap(),
                true => config.encode_delta_records(&baseline, &current, &mut buf).unwrap(),
            };
            let mut decoded = Snapshot::default();
            let kind = config.decode(&buf[..len], Some(&baseline), &mut decoded).unwrap();
            prop_assert_eq!(kind, SnapshotKind::Delta { baseline_tick: baseline.tick() });
            prop_assert_eq!(&decoded, &current);
        }
    }

    #[test]
    fn unchanged_entities_cost_nothing_in_a_delta(
        snapshot in common::snapshot(80),
        tick in any::<u32>(),
    ) {
        let config = common::config();
        let same = common::build(tick, snapshot.entities().to_vec());
        let mut buf = vec![0u8; BUF];
        let len = config.encode_delta(&snapshot, &same, &mut buf).unwrap();
        // The 26-byte header and nothing else.
        prop_assert_eq!(len, 26);
    }

    #[test]
    fn bit_streams_round_trip(fields in prop::collection::vec((1u32..=56, any::<u64>()), 0..200)) {
        let mut buf = vec![0u8; 200 * 8];
        let mut w = BitWriter::new(&mut buf);
        for &(bits, value) in &fields {
            w.write(value & mask(bits), bits);
        }
        let len = w.finish().unwrap();
        let mut r = BitReader::new(&buf[..len]);
        for &(bits, value) in &fields {
            prop_assert_eq!(r.read(bits, Field::Header), value & mask(bits));
        }
        prop_assert!(r.finish().is_ok());
    }

    #[test]
    fn varints_and_zigzag_round_trip(value in any::<u64>(), signed in any::<i32>()) {
        let mut buf = [0u8; 10];
        let len = write_varint(value, &mut buf).unwrap();
        prop_assert_eq!(read_varint(&buf[..len]), Ok((value, len)));
        prop_assert_eq!(unzigzag(zigzag(signed)), signed);
        prop_assert!(zigzag(signed) <= signed.unsigned_abs().saturating_mul(2));
    }

    #[test]
    fn tiered_codes_round_trip(values in prop::collection::vec(any::<u32>(), 0..100)) {
        let tiers = Tiers { widths: [0, 3, 8, 32] };
        let mut buf = vec![0u8; 100 * 5 + 8];
        let mut w = BitWriter::new(&mut buf);
        for &v in &values {
            tiers.write(&mut w, u64::from(v >> (v % 32)));
        }
        let len = w.finish().unwrap();
        let mut r = BitReader::new(&buf[..len]);
        for &v in &values {
            prop_assert_eq!(tiers.read(&mut r, Field::EntityId), u64::from(v >> (v % 32)));
        }
    }

    #[test]
    fn snapshots_round_trip_through_json(snapshot in common::snapshot(20)) {
        let codec = MessageCodec::default();
        let json = codec.to_json(&snapshot).unwrap();
        let back: Snapshot = codec.from_json(&json).unwrap();
        prop_assert_eq!(back, snapshot);
    }

    #[test]
    fn user_messages_round_trip_binary_and_json(message in message()) {
        let codec = MessageCodec::default();
        let bytes = codec.encode(&message).unwrap();
        prop_assert_eq!(&codec.decode::<Rpc>(&bytes).unwrap(), &message);
        let json = codec.to_json(&message).unwrap();
        prop_assert_eq!(codec.from_json::<Rpc>(&json).unwrap(), message);
    }
}

#[test]
fn ticks_wrap_between_baseline_and_snapshot() {
    let config = common::config();
    let (mut baseline, current) = rally_wire::reference::snapshots(&config, 7, u32::MAX);
    assert_eq!(current.tick(), 0, "the reference successor wraps");
    let mut buf = vec![0u8; BUF];
    let len = config.encode_delta(&baseline, &current, &mut buf).unwrap();
    let mut decoded = Snapshot::default();
    config.decode(&buf[..len], Some(&baseline), &mut decoded).unwrap();
    assert_eq!(decoded, current);
    // A baseline of another tick is refused, not misapplied.
    baseline.clear(u32::MAX - 1);
    assert!(config.decode(&buf[..len], Some(&baseline), &mut decoded).is_err());
}

#[test]
fn reference_snapshot_fits_the_w4_size_targets() {
    // Sizes are a property of the format, not of the machine, so they can be tested.
    let config = SnapshotConfig::default();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 1, 1000);
    let mut buf = vec![0u8; BUF];
    let full = config.encode_full(&current, &mut buf).unwrap();
    let delta = config.encode_delta(&baseline, &current, &mut buf).unwrap();
    assert!(full <= 16 * 256, "full snapshot is {full} bytes");
    assert!(delta <= 1024, "delta is {delta} bytes");
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Effect {
    Sound { clip: String, volume: f32 },
    Haptic(u8, u16),
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rpc {
    target: Option<u32>,
    effects: Vec<Effect>,
    metadata: BTreeMap<String, i64>,
}

fn message() -> impl Strategy<Value = Rpc> {
    let effect = prop_oneof![
        (".{0,12}", -1.0f32..1.0).prop_map(|(clip, volume)| Effect::Sound { clip, volume }),
        (any::<u8>(), any::<u16>()).prop_map(|(a, b)| Effect::Haptic(a, b)),
        Just(Effect::None),
    ];
    (
        any::<Option<u32>>(),
        prop::collection::vec(effect, 0..8),
        prop::collection::btree_map(".{0,8}", any::<i64>(), 0..6),
    )
        .prop_map(|(target, effects, metadata)| Rpc { target, effects, metadata })
}
