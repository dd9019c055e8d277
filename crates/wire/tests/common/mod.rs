//! Strategies shared by the wire tests: quantized entities and snapshots within the default
//! configuration's bounds.

#![allow(dead_code)]

use proptest::prelude::*;
use rally_wire::{QuantizedEntity, QuantizedRotation, Snapshot, SnapshotConfig};
use std::collections::BTreeMap;

pub fn config() -> SnapshotConfig {
    SnapshotConfig::default()
}

/// Any entity the default configuration can carry, with `id`.
pub fn entity(id: u32) -> impl Strategy<Value = QuantizedEntity> {
    let c = config();
    let [sx, sy, sz] = c.position.steps();
    let rot_max = (1u32 << c.rotation.bits()) - 1;
    let lin = c.linear_velocity.half();
    let ang = c.angular_velocity.half();
    // Half the velocities are zero, the common case of a body at rest.
    let velocity =
        move |half: i32| prop_oneof![Just([0i32; 3]), prop::array::uniform3(-half..=half)];
    (
        (0..=sx, 0..=sy, 0..=sz),
        (0u8..4, prop::array::uniform3(0..=rot_max)),
        velocity(lin),
        velocity(ang),
    )
        .prop_map(move |((x, y, z), (largest, comps), linear_velocity, angular_velocity)| {
            QuantizedEntity {
                id,
                position: [x, y, z],
                rotation: QuantizedRotation { largest, components: comps.map(|c| c as u16) },
                linear_velocity,
                angular_velocity,
            }
        })
}

/// A set of distinct ids, small and near both ends of the range.
pub fn ids(max_len: usize) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::btree_set(
        prop_oneof![0u32..64, 0u32..5000, (u32::MAX - 64)..=u32::MAX, any::<u32>()],
        0..max_len,
    )
    .prop_map(|set| set.into_iter().collect())
}

pub fn snapshot(max_len: usize) -> impl Strategy<Value = Snapshot> {
    (any::<u32>(), ids(max_len)).prop_flat_map(|(tick, ids)| {
        let entities: Vec<_> = ids.into_iter().map(entity).collect();
        entities.prop_map(move |entities| build(tick, entities))
    })
}

pub fn build(tick: u32, entities: Vec<QuantizedEntity>) -> Snapshot {
    let mut snapshot = Snapshot::new(tick);
    for e in entities {
        snapshot.push(e).expect("strategies produce ascending ids");
    }
    snapshot
}

/// A baseline and a successor: some entities kept unchanged, some changed by small, medium or
/// large steps, some despawned, some spawned.
pub fn baseline_and_current() -> impl Strategy<Value = (Snapshot, Snapshot)> {
    (snapshot(48), snapshot(48), any::<u64>())
        .prop_flat_map(|(baseline, extra, salt)| {
            let kept: Vec<_> = baseline.entities().to_vec();
            let edits = prop::collection::vec((0u8..6, any::<i32>()), kept.len());
            (Just(baseline), Just(extra), Just(salt), edits)
        })
        .prop_map(|(baseline, extra, salt, edits)| {
            let c = config();
            let mut next: BTreeMap<u32, QuantizedEntity> = BTreeMap::new();
            for (e, (op, r)) in baseline.entities().iter().zip(edits) {
                let mut e = *e;
                match op {
                    0 => continue, // despawned
                    1 => {}        // unchanged
                    2 => nudge(&c, &mut e, r % 8),
                    3 => nudge(&c, &mut e, r % 300),
                    4 => nudge(&c, &mut e, r % 70_000),
                    _ => e.rotation.largest = (e.rotation.largest + 1) % 4,
                }
                next.insert(e.id, e);
            }
            for (i, e) in extra.entities().iter().enumerate() {
                if (salt >> (i % 64)) & 1 == 1 {
                    next.entry(e.id).or_insert(*e);
                }
            }
            let tick = baseline.tick().wrapping_add(1 + (salt % 7) as u32);
            (baseline, build(tick, next.into_values().collect()))
        })
}

/// Moves every field of `e` by about `step` codes, staying inside the configured bounds.
fn nudge(c: &SnapshotConfig, e: &mut QuantizedEntity, step: i32) {
    let steps = c.position.steps();
    for axis in 0..3 {
        let v = (i64::from(e.position[axis]) + i64::from(step)).clamp(0, i64::from(steps[axis]));
        e.position[axis] = v as u32;
    }
    let rot_max = (1i64 << c.rotation.bits()) - 1;
    for k in 0..3 {
        let v = (i64::from(e.rotation.components[k]) - i64::from(step)).clamp(0, rot_max);
        e.rotation.components[k] = v as u16;
    }
    let (lin, ang) = (c.linear_velocity.half(), c.angular_velocity.half());
    for k in 0..3 {
        e.linear_velocity[k] = (e.linear_velocity[k].saturating_add(step)).clamp(-lin, lin);
        e.angular_velocity[k] = (e.angular_velocity[k].saturating_sub(step)).clamp(-ang, ang);
    }
}
