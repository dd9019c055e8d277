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
    /// Bit `j % 64` of word `j / 64` is set when entity `j` changed at this slot's tick (or is
    /// new). Between snapshots with the same ids, the union of these sets over the slots newer
    /// than a baseline is what changed since it: a few words per tick instead of a comparison
    /// per entity.
    moved: Vec<u64>,
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
        self.back_from_newest(tick).map(|back| &self.slots[self.index_back(back)])
    }

    /// How many pushes ago the snapshot of `tick` was pushed (0 for the newest).
    fn back_from_newest(&self, tick: u32) -> Option<usize> {
        (0..self.len).find(|back| self.slots[self.index_back(*back)].snapshot.tick == tick)
    }

    /// The index of the slot pushed `back` pushes before the newest.
    fn index_back(&self, back: usize) -> usize {
        let newest = self.newest.unwrap_or(0);
        (newest + self.slots.len() - back) % self.slots.len()
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
        slot.moved.clear();
        slot.moved.resize(snapshot.len().div_ceil(64), 0);
        slot.ids_changed = match self.newest {
            Some(previous) => track_changes(&self.slots[previous], &mut slot),
            None => {
                slot.changed.resize(snapshot.len(), snapshot.tick);
                slot.moved.fill(u64::MAX);
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
        let no_baseline = || EncodeError::NoSuchBaseline(baseline_tick);
        let newest_index = self.newest.ok_or_else(no_baseline)?;
        let depth = self.back_from_newest(baseline_tick).ok_or_else(no_baseline)?;
        let (newest, baseline) = (&self.slots[newest_index], &self.slots[self.index_back(depth)]);
        let same_ids = !seq32_newer(newest.ids_changed, baseline_tick);
        // The slots newer than the baseline hold the same ids as it, entity for entity.
        let moved = |chunk: usize| self.moved_since(newest_index, depth, chunk);
        let unchanged = |_: &_, _: &_, j: usize| !seq32_newer(newest.changed[j], baseline_tick);
        let (old, new) = (&baseline.snapshot, &newest.snapshot);
        config.encode_delta_with(old, new, out, same_ids.then_some(moved), unchanged)
    }

    /// [`SnapshotHistory::encode_delta`] as a column delta (format `0x03`, see
    /// [`SnapshotConfig::encode_delta_columns`]).
    pub fn encode_delta_columns(
        &self,
        config: &SnapshotConfig,
        baseline_tick: u32,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let no_baseline = || EncodeError::NoSuchBaseline(baseline_tick);
        let newest_index = self.newest.ok_or_else(no_baseline)?;
        let depth = self.back_from_newest(baseline_tick).ok_or_else(no_baseline)?;
        let (newest, baseline) = (&self.slots[newest_index], &self.slots[self.index_back(depth)]);
        let same_ids = !seq32_newer(newest.ids_changed, baseline_tick);
        let moved = |chunk: usize| self.moved_since(newest_index, depth, chunk);
        let unchanged = |j: usize| !seq32_newer(newest.changed[j], baseline_tick);
        let (old, new) = (&baseline.snapshot, &newest.snapshot);
        config.encode_columns_with(old, new, out, same_ids.then_some(moved), unchanged)
    }

    /// The union of the change sets of the `depth` slots from `newest_index` back, for the run
    /// of 64 entities `chunk`: those that may differ from the baseline `depth` pushes back.
    fn moved_since(&self, newest_index: usize, depth: usize, chunk: usize) -> u64 {
        let (mut all, mut index) = (0, newest_index);
        for _ in 0..depth {
            // A missing word cannot happen with the same ids; were it to, compare them all.
            all |= self.slots[index].moved.get(chunk).copied().unwrap_or(u64::MAX);
            index = index.checked_sub(1).unwrap_or(self.slots.len() - 1);
        }
        all
    }
}

/// Fills `next.changed` and `next.moved` from `previous`: an entity with the same codes keeps
/// its change tick, a changed or new one gets the new tick and its bit. Returns the tick the set
/// of ids last changed.
fn track_changes(previous: &Slot, next: &mut Slot) -> u32 {
    let tick = next.snapshot.tick;
    let old = previous.snapshot.entities();
    let mut i = 0;
    let mut same_ids = old.len() == next.snapshot.len();
    let chunks = next.snapshot.entities().chunks(64);
    for (entities, moved) in chunks.zip(&mut next.moved) {
        // Gathered in a register: a read-modify-write of the word per entity would wait on the
        // store before it each time.
        let mut word = 0;
        for (k, entity) in entities.iter().enumerate() {
            while old.get(i).is_some_and(|o| o.id < entity.id) {
                i += 1;
            }
            let matched = old.get(i).filter(|o| o.id == entity.id);
            same_ids &= matched.is_some();
            let kept = matched.filter(|o| *o == entity);
            next.changed.push(kept.map_or(tick, |_| previous.changed[i]));
            word |= u64::from(kept.is_none()) << k;
        }
        *moved = word;
    }
    if same_ids {
        previous.ids_changed
    } else {
        tick
    }
}
