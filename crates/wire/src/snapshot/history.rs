//! The server's recent snapshots of one room, so that each client's snapshot can be a delta
//! against whichever snapshot that client acknowledged last.
//!
//! Finding what changed is done once per tick, when a snapshot is pushed: each entity records the
//! tick its codes last changed. Encoding a delta for a client then skips every entity that has not
//! changed since that client's baseline without comparing its fields, so the per-client cost
//! follows the number of changed entities, not the number of entities (the push-not-poll lesson of
//! the VALORANT source).

use super::*;
use crate::error::{EncodeError, HistoryError};
use crate::seq::seq32_newer;

/// A ring of the last `capacity` snapshots of one room, each with the tick every entity last
/// changed. All buffers are reused once the ring is full.
#[derive(Debug, Clone)]
pub struct SnapshotHistory {
    slots: Vec<Slot>,
    /// Index of the newest slot, if any snapshot was pushed.
    newest: Option<usize>,
    len: usize,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    snapshot: Snapshot,
    /// Parallel to `snapshot.entities`: the tick each entity's codes last changed.
    changed: Vec<u32>,
    /// The tick the set of ids last changed (an entity spawned or despawned): a baseline of
    /// this tick or later holds exactly the same ids, which spares the encoder a pass over both
    /// snapshots to find out.
    ids_changed: u32,
}

impl SnapshotHistory {
    /// An empty history keeping the last `capacity` snapshots (at least 1). At 128 Hz, 64
    /// snapshots cover half a second of unacknowledged state.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self { slots: vec![Slot::default(); capacity], newest: None, len: 0 }
    }

    /// How many snapshots are held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no snapshot was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The newest snapshot.
    pub fn newest(&self) -> Option<&Snapshot> {
        self.newest.map(|i| &self.slots[i].snapshot)
    }

    /// The snapshot of `tick`, if it is still held.
    pub fn get(&self, tick: u32) -> Option<&Snapshot> {
        self.slot(tick).map(|slot| &slot.snapshot)
    }

    fn slot(&self, tick: u32) -> Option<&Slot> {
        let newest = self.newest?;
        (0..self.len)
            .map(|back| &self.slots[(newest + self.slots.len() - back) % self.slots.len()])
            .find(|slot| slot.snapshot.tick == tick)
    }

    /// Adds the snapshot of a new tick, replacing the oldest when full, and records which
    /// entities changed since the previous one. Ticks must increase.
    pub fn push(&mut self, snapshot: &Snapshot) -> Result<(), HistoryError> {
        if let Some(newest) = self.newest() {
            if !seq32_newer(snapshot.tick, newest.tick) {
                let (tick, newest) = (snapshot.tick, newest.tick);
                return Err(HistoryError::TickNotNewer { tick, newest });
            }
        }
        let index = self.newest.map_or(0, |i| (i + 1) % self.slots.len());
        let mut slot = std::mem::take(&mut self.slots[index]);
        slot.snapshot.clone_from(snapshot);
        slot.changed.clear();
        slot.ids_changed = match self.newest {
            Some(previous) => track_changes(&self.slots[previous], &mut slot),
            None => {
                slot.changed.resize(snapshot.len(), snapshot.tick);
                snapshot.tick
            }
        };
        self.slots[index] = slot;
        self.newest = Some(index);
        self.len = (self.len + 1).min(self.slots.len());
        Ok(())
    }

    /// Encodes the newest snapshot as a delta against the snapshot of `baseline_tick` into `out`
    /// and returns the bytes written. Entities unchanged since the baseline are skipped without
    /// comparing their fields.
    pub fn encode_delta(
        &self,
        config: &SnapshotConfig,
        baseline_tick: u32,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let newest = &self.slots[self.newest.ok_or(EncodeError::NoSuchBaseline(baseline_tick))?];
        let baseline =
            self.slot(baseline_tick).ok_or(EncodeError::NoSuchBaseline(baseline_tick))?;
        let unchanged = |_: &_, _: &_, j: usize| !seq32_newer(newest.changed[j], baseline_tick);
        let same_ids = !seq32_newer(newest.ids_changed, baseline_tick);
        let (old, new) = (&baseline.snapshot, &newest.snapshot);
        config.encode_delta_with(old, new, out, Some(same_ids), unchanged)
    }
}

/// Fills `next.changed` from `previous`: an entity with the same codes keeps its change tick, a
/// changed or new one gets the new tick. Returns the tick the set of ids last changed.
fn track_changes(previous: &Slot, next: &mut Slot) -> u32 {
    let tick = next.snapshot.tick;
    let old = previous.snapshot.entities();
    let mut i = 0;
    let mut same_ids = old.len() == next.snapshot.len();
    for entity in next.snapshot.entities() {
        while old.get(i).is_some_and(|o| o.id < entity.id) {
            i += 1;
        }
        let matched = old.get(i).filter(|o| o.id == entity.id);
        same_ids &= matched.is_some();
        let kept = matched.filter(|o| *o == entity);
        next.changed.push(kept.map_or(tick, |_| previous.changed[i]));
    }
    if same_ids {
        previous.ids_changed
    } else {
        tick
    }
}
