//! Goal: a server's snapshot history encodes, for any baseline it still holds, a delta that
//! decodes to its newest snapshot, while skipping unchanged entities by change tick alone; it
//! refuses ticks that go backwards and baselines it no longer holds, and allocates nothing once
//! full. Method: property tests over random sequences of snapshots (entities spawning,
//! despawning, changing and changing back), checked against the compare-everything encoder.

mod common;

use proptest::prelude::*;
use rally_wire::{EncodeError, HistoryError, Snapshot, SnapshotHistory};

/// The history's deltas from `baseline` to its newest `snapshot`, records and columns, are
/// byte for byte what comparing every entity produces, and decode to `snapshot`.
fn check_against_comparing(
    history: &SnapshotHistory,
    baseline: &Snapshot,
    snapshot: &Snapshot,
) -> Result<(), TestCaseError> {
    let config = common::config();
    let (mut buf, mut other) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut decoded = Snapshot::default();
    let len = history.encode_delta_records(&config, baseline.tick(), &mut buf).unwrap();
    let compared = config.encode_delta_records(baseline, snapshot, &mut other).unwrap();
    prop_assert_eq!(&buf[..len], &other[..compared]);
    config.decode(&buf[..len], Some(baseline), &mut decoded).unwrap();
    prop_assert_eq!(&decoded, snapshot);
    let len = history.encode_delta(&config, baseline.tick(), &mut buf).unwrap();
    let compared = config.encode_delta(baseline, snapshot, &mut other).unwrap();
    prop_assert_eq!(&buf[..len], &other[..compared]);
    config.decode(&buf[..len], Some(baseline), &mut decoded).unwrap();
    prop_assert_eq!(&decoded, snapshot);
    check_into_a_vec(history, baseline, &other[..compared])
}

/// `encode_delta_into` leaves a reused buffer holding exactly `expected` (whatever it held),
/// at a limit of its length, and refuses a limit a byte short as a buffer that short is.
fn check_into_a_vec(
    history: &SnapshotHistory,
    baseline: &Snapshot,
    expected: &[u8],
) -> Result<(), TestCaseError> {
    let config = common::config();
    let mut reused = vec![0xA5u8; 3 * expected.len() + 7];
    let tick = baseline.tick();
    let len = history.encode_delta_into(&config, tick, &mut reused, expected.len()).unwrap();
    prop_assert_eq!(len, expected.len());
    prop_assert_eq!(&reused[..], expected);
    let short = history.encode_delta_into(&config, tick, &mut reused, expected.len() - 1);
    let mut buf = vec![0u8; expected.len() - 1];
    prop_assert_eq!(&short, &history.encode_delta(&config, tick, &mut buf));
    let refused = matches!(short, Err(EncodeError::BufferTooSmall { .. }));
    prop_assert!(refused, "{short:?}");
    Ok(())
}

fn sequence() -> impl Strategy<Value = Vec<Snapshot>> {
    // Each step's snapshot is a random successor of the one before.
    (common::baseline_and_current(), prop::collection::vec(0usize..3, 1..6)).prop_map(
        |((first, second), choices)| {
            let mut steps = vec![first.clone(), second.clone()];
            for choice in choices {
                // Revisit an earlier state: entities change back to what a baseline held.
                let earlier = &steps[choice.min(steps.len() - 1)];
                let mut next = earlier.clone();
                next.set_tick(steps.last().expect("not empty").tick().wrapping_add(1));
                steps.push(next);
            }
            steps
        },
    )
}

proptest! {
    #[test]
    fn every_held_baseline_decodes_to_the_newest(steps in sequence(), capacity in 1usize..8) {
        let mut history = SnapshotHistory::new(capacity);
        for (n, snapshot) in steps.iter().enumerate() {
            history.push(snapshot).unwrap();
            let held = &steps[(n + 1).saturating_sub(capacity)..=n];
            for baseline in held {
                check_against_comparing(&history, baseline, snapshot)?;
            }
        }
    }
}

/// A large snapshot where most entities stay put for several ticks while a few change, spawn
/// and despawn, the common case of a room: long unchanged runs across the history's 64-entity
/// bit set words, with despawns among them that must still be sent.
fn quiet_sequence() -> impl Strategy<Value = Vec<Snapshot>> {
    let edits = prop::collection::vec((0u8..4, 0usize..400), 0..12);
    (65usize..300, prop::collection::vec(edits, 1..5)).prop_map(|(len, steps)| {
        let reference = rally_wire::reference::snapshots(&common::config(), 3, 100).0;
        let body = |id: u32| {
            let mut e = reference.entities()[id as usize % reference.len()];
            e.id = id;
            e
        };
        // Every third id is left out, so that spawns have room.
        let mut entities: Vec<_> = (0..len as u32).filter(|id| id % 3 != 1).map(body).collect();
        let mut sequence = vec![common::build(100, entities.clone())];
        for (n, edits) in steps.into_iter().enumerate() {
            for (op, at) in edits {
                let k = at % entities.len().max(1);
                match op {
                    0 if !entities.is_empty() => drop(entities.remove(k)),
                    1 => {
                        let id = (at as u32 * 3 + 1) % len as u32;
                        if let Err(slot) = entities.binary_search_by_key(&id, |e| e.id) {
                            entities.insert(slot, body(id));
                        }
                    }
                    _ if !entities.is_empty() => {
                        let e = &mut entities[k];
                        e.position[0] = e.position[0].saturating_sub(1 + op as u32);
                    }
                    _ => {}
                }
            }
            sequence.push(common::build(101 + n as u32, entities.clone()));
        }
        sequence
    })
}

proptest! {
    #[test]
    fn quiet_rooms_with_spawns_and_despawns_encode_as_comparing_would(
        steps in quiet_sequence(),
    ) {
        let mut history = SnapshotHistory::new(8);
        for (n, snapshot) in steps.iter().enumerate() {
            history.push(snapshot).unwrap();
            for baseline in &steps[..=n] {
                check_against_comparing(&history, baseline, snapshot)?;
            }
        }
    }
}

/// Writes `snapshot` into `history` as a room does: an entity the newest snapshot holds
/// unchanged is kept from it when `keep` says so (by index), every other one pushed afresh.
fn push_with(history: &mut SnapshotHistory, snapshot: &Snapshot, keep: &[bool]) {
    history
        .push_with(snapshot.tick(), |next| {
            for (k, entity) in snapshot.entities().iter().enumerate() {
                let index = next.previous().iter().position(|o| o == entity);
                match index.filter(|_| keep[k % keep.len()]) {
                    Some(index) => next.keep(index).unwrap(),
                    None => next.push(*entity).unwrap(),
                }
            }
        })
        .unwrap();
}

proptest! {
    #[test]
    fn written_in_place_with_kept_entities_encodes_as_comparing_would(
        steps in quiet_sequence(),
        keep in prop::collection::vec(any::<bool>(), 1..8),
    ) {
        let mut history = SnapshotHistory::new(8);
        for (n, snapshot) in steps.iter().enumerate() {
            push_with(&mut history, snapshot, &keep);
            prop_assert_eq!(history.newest(), Some(snapshot));
            for baseline in &steps[..=n] {
                check_against_comparing(&history, baseline, snapshot)?;
            }
        }
    }
}

/// Writes `snapshot` into `history` as a room's world walk does: runs of entities the newest
/// snapshot holds unchanged at the same index are kept a run at a time (when `keep` says so),
/// the others kept one by one or pushed afresh.
fn push_with_runs(history: &mut SnapshotHistory, snapshot: &Snapshot, keep: &[bool]) {
    history
        .push_with(snapshot.tick(), |next| {
            let mut run = 0..0;
            for (k, entity) in snapshot.entities().iter().enumerate() {
                let same_place = next.previous().get(k) == Some(entity);
                if same_place && keep[k % keep.len()] {
                    if run.end != k {
                        next.keep_run(std::mem::replace(&mut run, k..k)).unwrap();
                    }
                    run.end = k + 1;
                    continue;
                }
                next.keep_run(std::mem::take(&mut run)).unwrap();
                match next.previous().iter().position(|o| o == entity) {
                    Some(index) if k % 2 == 0 => next.keep(index).unwrap(),
                    _ => next.push(*entity).unwrap(),
                }
            }
            next.keep_run(run).unwrap();
        })
        .unwrap();
}

proptest! {
    /// A small ring comes round every few ticks, so that runs are kept over slots that still
    /// hold an older snapshot: what is left in place there must be what the newest holds.
    #[test]
    fn kept_in_runs_over_a_ring_coming_round_encodes_as_comparing_would(
        steps in quiet_sequence(),
        keep in prop::collection::vec(any::<bool>(), 1..8),
        capacity in 1usize..4,
    ) {
        let mut history = SnapshotHistory::new(capacity);
        // Each step twice, then back to the first: unchanged runs over slots of every age.
        let steps: Vec<Snapshot> = steps
            .iter()
            .chain(steps.iter())
            .chain(std::iter::once(&steps[0]))
            .enumerate()
            .map(|(n, s)| {
                let mut s = s.clone();
                s.set_tick(1000 + n as u32);
                s
            })
            .collect();
        for (n, snapshot) in steps.iter().enumerate() {
            push_with_runs(&mut history, snapshot, &keep);
            prop_assert_eq!(history.newest(), Some(snapshot));
            for baseline in &steps[(n + 1).saturating_sub(capacity)..=n] {
                check_against_comparing(&history, baseline, snapshot)?;
            }
        }
    }
}

#[test]
fn an_entity_kept_that_the_previous_snapshot_lacks_is_refused() {
    let config = common::config();
    let (a, b) = rally_wire::reference::snapshots(&config, 5, 7);
    let mut history = SnapshotHistory::new(2);
    history.push(&a).unwrap();
    let beyond = a.len();
    history
        .push_with(b.tick(), |next| {
            let refused = next.keep(beyond);
            assert_eq!(refused, Err(rally_wire::SnapshotError::NoSuchEntity { index: beyond }));
        })
        .unwrap();
    assert_eq!(
        history.push_with(b.tick(), |_| {}),
        Err(HistoryError::TickNotNewer { tick: b.tick(), newest: b.tick() })
    );
}

#[test]
fn ticks_must_increase_and_evicted_baselines_are_refused() {
    let config = common::config();
    let (a, b) = rally_wire::reference::snapshots(&config, 5, u32::MAX - 1);
    let mut history = SnapshotHistory::new(2);
    history.push(&a).unwrap();
    history.push(&b).unwrap();
    assert_eq!(
        history.push(&a),
        Err(HistoryError::TickNotNewer { tick: u32::MAX - 1, newest: u32::MAX })
    );
    let mut c = b.clone();
    c.set_tick(0); // newer than u32::MAX across the wrap
    history.push(&c).unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let evicted = history.encode_delta_records(&config, a.tick(), &mut buf);
    assert_eq!(evicted, Err(EncodeError::NoSuchBaseline(u32::MAX - 1)));
    assert_eq!(history.get(u32::MAX), Some(&b));
    assert_eq!(history.len(), 2);
}

/// Writes `snapshot` into `history` as a room's world walk does with the entities whose state
/// moved: pushed as changed without a comparison, whether their codes moved or not (when
/// `moved` says so, by index), the rest kept in runs or pushed afresh.
fn push_with_moved(history: &mut SnapshotHistory, snapshot: &Snapshot, moved: &[bool]) {
    history
        .push_with(snapshot.tick(), |next| {
            let mut run = 0..0;
            for (k, entity) in snapshot.entities().iter().enumerate() {
                let same_place = next.previous().get(k) == Some(entity);
                if same_place && !moved[k % moved.len()] {
                    if run.end != k {
                        next.keep_run(std::mem::replace(&mut run, k..k)).unwrap();
                    }
                    run.end = k + 1;
                    continue;
                }
                next.keep_run(std::mem::take(&mut run)).unwrap();
                match moved[k % moved.len()] {
                    true => next.push_changed(*entity).unwrap(),
                    false => next.push(*entity).unwrap(),
                }
            }
            next.keep_run(run).unwrap();
        })
        .unwrap();
}

proptest! {
    /// Entities pushed as changed whose codes did not change (a state that moved less than a
    /// quantization step) are compared by the encoder and cost no byte: every delta is the
    /// one comparing every entity gives.
    #[test]
    fn pushed_as_changed_with_the_same_codes_encodes_as_comparing_would(
        steps in quiet_sequence(),
        moved in prop::collection::vec(any::<bool>(), 1..8),
        capacity in 1usize..4,
    ) {
        let mut history = SnapshotHistory::new(capacity);
        // Each step twice: the second time every entity's codes are the same as the newest's.
        let steps: Vec<Snapshot> = steps
            .iter()
            .flat_map(|s| [s, s])
            .enumerate()
            .map(|(n, s)| {
                let mut s = s.clone();
                s.set_tick(1000 + n as u32);
                s
            })
            .collect();
        for (n, snapshot) in steps.iter().enumerate() {
            push_with_moved(&mut history, snapshot, &moved);
            prop_assert_eq!(history.newest(), Some(snapshot));
            for baseline in &steps[(n + 1).saturating_sub(capacity)..=n] {
                check_against_comparing(&history, baseline, snapshot)?;
            }
        }
    }
}

/// A room's quiet runs of 64 entities are stepped over whole when a slot coming round holds
/// them already: one entity that moved and moved back since that slot's snapshot must still
/// be written (its run is not in place there), and one that did not move is left.
#[test]
fn a_run_kept_whole_over_a_ring_coming_round_holds_the_newest_codes() {
    let reference = rally_wire::reference::snapshots(&common::config(), 3, 100).0;
    let at = |tick: u32, moved: Option<usize>| {
        let mut entities = reference.entities()[..200].to_vec();
        if let Some(k) = moved {
            entities[k].position[0] ^= 1;
        }
        common::build(tick, entities)
    };
    // Entity 70 (the second run) moves at tick 2 and back at tick 3; entity 10 (the first)
    // moves at tick 7 and stays. Three slots: tick 5 overwrites tick 2's, which holds 70
    // moved; tick 8 overwrites tick 5's.
    let moves = [None, Some(70), None, None, None, None, Some(10), Some(10), Some(10), Some(10)];
    let steps: Vec<Snapshot> =
        moves.iter().enumerate().map(|(n, moved)| at(1 + n as u32, *moved)).collect();
    let mut history = SnapshotHistory::new(3);
    for (n, snapshot) in steps.iter().enumerate() {
        push_with_runs(&mut history, snapshot, &[true]);
        assert_eq!(history.newest(), Some(snapshot), "tick {}", snapshot.tick());
        for baseline in &steps[(n + 1).saturating_sub(3)..=n] {
            check_against_comparing(&history, baseline, snapshot).unwrap();
        }
    }
}
