//! Goal: the column delta (format 0x03, docs/wire.md section 6) rebuilds the current
//! snapshot from any baseline, spawns, despawns and exceptions included, and refuses bad bytes
//! with a typed error, never a panic. Method: property tests against random baseline and
//! successor pairs, the reference delta, and every truncation and bit flip of valid datagrams.

mod common;

use proptest::prelude::*;
use rally_wire::debug::inspect_snapshot;
use rally_wire::snapshot::FORMAT_DELTA_COLUMNS;
use rally_wire::{DecodeError, EncodeError, Field, Snapshot, SnapshotKind};

fn round_trip(baseline: &Snapshot, current: &Snapshot) -> Vec<u8> {
    let config = common::config();
    let mut buf = vec![0u8; 256 * 1024];
    let len = config.encode_delta(baseline, current, &mut buf).unwrap();
    let mut out = Snapshot::default();
    let kind = config.decode(&buf[..len], Some(baseline), &mut out).unwrap();
    assert_eq!(kind, SnapshotKind::Delta { baseline_tick: baseline.tick() });
    assert_eq!(&out, current);
    buf.truncate(len);
    buf
}

/// Decodes `bytes` against `baseline` listing the updates, checks the listing against the
/// snapshot decoded: listed exactly when the ids are the baseline's, indices ascending and in
/// range, every entity not listed the baseline's.
fn check_listing(baseline: &Snapshot, current: &Snapshot, bytes: &[u8]) {
    let config = common::config();
    let (mut out, mut updated) = (Snapshot::default(), vec![u32::MAX]);
    let decoded = config.decode_listing_updates(bytes, Some(baseline), &mut out, &mut updated);
    let (kind, listed) = decoded.unwrap();
    assert_eq!(kind, SnapshotKind::Delta { baseline_tick: baseline.tick() });
    assert_eq!(&out, current);
    let ids = |s: &Snapshot| s.entities().iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(listed, ids(baseline) == ids(current));
    if !listed {
        assert!(updated.is_empty());
        return;
    }
    assert!(updated.windows(2).all(|w| w[0] < w[1]), "ascending");
    assert!(updated.iter().all(|i| (*i as usize) < out.len()));
    for (i, (o, b)) in out.entities().iter().zip(baseline.entities()).enumerate() {
        if !updated.contains(&(i as u32)) {
            assert_eq!(o, b, "entity {i} is not listed but changed");
        }
    }
}

/// `current`'s entities that `baseline` has, the rest `baseline`'s: a successor without spawns
/// or despawns.
fn same_ids(baseline: &Snapshot, current: &Snapshot) -> Snapshot {
    let entities = baseline.entities().iter().map(|b| *current.get(b.id).unwrap_or(b)).collect();
    common::build(current.tick(), entities)
}

proptest! {
    /// Goal: the updates a delta lists are all that a client keeping something per entity of
    /// its baseline must redo: listed exactly when the delta has no spawns or despawns, and
    /// then every entity not listed is the baseline's. Method: random baseline and successor
    /// pairs, and each successor with the baseline's ids.
    #[test]
    fn the_listed_updates_are_all_that_differs_from_the_baseline(
        (baseline, current) in common::baseline_and_current(),
    ) {
        check_listing(&baseline, &current, &round_trip(&baseline, &current));
        let same = same_ids(&baseline, &current);
        check_listing(&baseline, &same, &round_trip(&baseline, &same));
    }

    #[test]
    fn any_successor_round_trips((baseline, current) in common::baseline_and_current()) {
        let bytes = round_trip(&baseline, &current);
        prop_assert_eq!(bytes[0], FORMAT_DELTA_COLUMNS);
    }

    #[test]
    fn a_short_buffer_is_told_the_exact_length(
        (baseline, current) in common::baseline_and_current(), cut in 0usize..64,
    ) {
        let config = common::config();
        let whole = round_trip(&baseline, &current);
        let mut buf = vec![0u8; whole.len().saturating_sub(cut + 1)];
        let result = config.encode_delta(&baseline, &current, &mut buf);
        let (needed, capacity) = (whole.len(), buf.len());
        prop_assert_eq!(result, Err(EncodeError::BufferTooSmall { needed, capacity }));
    }

    #[test]
    fn cut_or_flipped_datagrams_are_an_error_or_a_valid_snapshot(
        (baseline, current) in common::baseline_and_current(),
        bit in 0usize..8 * 4096,
        cut in 0usize..4096,
    ) {
        let config = common::config();
        let bytes = round_trip(&baseline, &current);
        let mut out = Snapshot::default();
        let cut = cut % bytes.len();
        prop_assert!(config.decode(&bytes[..cut], Some(&baseline), &mut out).is_err());
        let mut flipped = bytes.clone();
        flipped[(bit / 8) % bytes.len()] ^= 1 << (bit % 8);
        let _ = inspect_snapshot(&config, &flipped);
        let _ = inspect_snapshot(&config, &bytes[..cut]);
        if config.decode(&flipped, Some(&baseline), &mut out).is_ok() {
            let ids = out.entities().windows(2).all(|w| w[0].id < w[1].id);
            prop_assert!(ids && out.len() <= config.entities_max);
        }
    }
}

#[test]
fn the_reference_delta_is_smaller_than_the_records() {
    let config = common::config();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 1, 1000);
    let columns = round_trip(&baseline, &current);
    let mut buf = vec![0u8; 64 * 1024];
    let records = config.encode_delta_records(&baseline, &current, &mut buf).unwrap();
    assert!(columns.len() < records, "{} bytes against {records}", columns.len());
}

#[test]
fn a_spawn_of_a_present_id_is_a_conflict() {
    let config = common::config();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 1, 1000);
    // Encoded against an empty baseline every entity is a spawn; decoded against the real one
    // the first spawn collides.
    let empty = Snapshot::new(1000);
    let mut buf = vec![0u8; 64 * 1024];
    let len = config.encode_delta(&empty, &current, &mut buf).unwrap();
    let mut out = Snapshot::default();
    let first = current.entities()[0].id;
    let result = config.decode(&buf[..len], Some(&baseline), &mut out);
    assert_eq!(result, Err(DecodeError::BaselineConflict { id: first }));
    assert!(out.is_empty());
}

#[test]
fn the_listing_shows_each_changed_entity_with_its_deltas() {
    let config = common::config();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 1, 1000);
    let bytes = round_trip(&baseline, &current);
    let listing = config.list_columns(&bytes).unwrap();
    let pairs = baseline.entities().iter().zip(current.entities()).enumerate();
    let changed: Vec<u64> = pairs.filter(|(_, (o, n))| o != n).map(|(i, _)| i as u64).collect();
    let listed: Vec<u64> = listing.updates.iter().map(|(index, _)| *index).collect();
    assert_eq!(listed, changed);
    // The first update's position deltas take the baseline's position to the current one.
    let (index, deltas) = listing.updates[0];
    let (old, new) = (baseline.entities()[index as usize], current.entities()[index as usize]);
    let moved: [u32; 3] = std::array::from_fn(|k| old.position[k].wrapping_add_signed(deltas[k]));
    assert_eq!(moved, new.position);
    assert!(listing.edits.is_empty());
    let value = inspect_snapshot(&config, &bytes).unwrap();
    assert_eq!(value["kind"], "delta_columns");
    assert_eq!(value["columns"]["updates"].as_array().map(Vec::len), Some(changed.len()));
}

#[test]
fn a_sum_out_of_range_names_the_field_and_bound() {
    let config = common::config();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 1, 1000);
    let bytes = round_trip(&baseline, &current);
    // Decoded against a baseline whose body sits on the box's far edge, a step forward leaves it.
    let mut pairs = baseline.entities().iter().zip(current.entities());
    let k = pairs.position(|(o, n)| n.position[0] > o.position[0]).expect("one moves in +x");
    let edge = config.position.steps()[0];
    let mut entities = baseline.entities().to_vec();
    entities[k].position[0] = edge;
    let moved = common::build(baseline.tick(), entities);
    let mut out = Snapshot::default();
    let result = config.decode(&bytes, Some(&moved), &mut out);
    let step = current.entities()[k].position[0] - baseline.entities()[k].position[0];
    let (field, value, max) = (Field::Position, u64::from(edge + step), u64::from(edge));
    assert_eq!(result, Err(DecodeError::OutOfBounds { field, value, max }));
}

#[test]
fn deltas_of_more_updates_than_a_chunk_round_trip() {
    // Every body changes, with a rotation of another layout every 50th and a teleport every
    // 70th, exceptions in several chunks: 256 updates (four chunks, all held by the encoder's
    // first pass), and 512 (past what it holds: the rest walked again).
    let config = common::config();
    let (reference, _) = rally_wire::reference::snapshots(&config, 2, 1000);
    for copies in [1, 2] {
        let copy = |c: u32| reference.entities().iter().map(move |e| (c, *e));
        let mut entities: Vec<_> = (0..copies)
            .flat_map(copy)
            .map(|(c, mut e)| {
                e.id += c * 100_000;
                e
            })
            .collect();
        let baseline = common::build(1000, entities.clone());
        for (k, e) in entities.iter_mut().enumerate() {
            e.position[0] = (e.position[0] + 1 + k as u32 % 5).min(config.position.steps()[0]);
            e.position[1] = e.position[1].saturating_sub(1);
            if k % 50 == 0 {
                e.rotation.largest = (e.rotation.largest + 1) % 4;
            }
            if k % 70 == 0 {
                e.position[2] = config.position.steps()[2] - e.position[2];
            }
        }
        let current = common::build(1001, entities);
        let bytes = round_trip(&baseline, &current);
        let listing = config.list_columns(&bytes).unwrap();
        assert_eq!(listing.updates.len(), 256 * copies as usize);
        let exceptions = listing.exceptions.len();
        assert!(exceptions >= 6 * copies as usize, "{exceptions} exceptions");
    }
}
