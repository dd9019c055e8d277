//! The server's recent snapshots of one room, so that each client's snapshot can be a delta
//! against whichever snapshot that client acknowledged last.
//!
//! Finding what changed is done once per tick, when a snapshot is pushed: each entity records the
//! tick its codes last changed. Encoding a delta for a client then skips every entity that has not
//! changed since that client's baseline without comparing its fields, so the per-client cost
//! follows the number of changed entities, not the number of entities (the push-not-poll lesson of
//! the VALORANT source).

use super::*;
use crate::error::{EncodeError, HistoryError, SnapshotError};
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
    /// Parallel to `snapshot.entities`: the tick each entity's codes last changed, or a later
    /// one (an entity pushed by [`NextSnapshot::push_changed`] with the same codes): a delta
    /// skips an entity unchanged since its baseline and compares the others, so a later tick
    /// costs a compare, never a byte.
    changed: Vec<u32>,
    /// Bit `j % 64` of word `j / 64` is set when entity `j` changed at this slot's tick (or is
    /// new, or may have: as `changed`). Between snapshots with the same ids, the union of these
    /// sets over the slots newer than a baseline is what may have changed since it: a few
    /// words per tick instead of a comparison per entity.
    moved: Vec<u64>,
    /// For each run of 64 entities (as `moved`), a tick no older than any of its entities'
    /// change ticks: a run of a slot coming round whose tick is older than this slot's old
    /// snapshot's is in place there whole, and [`NextSnapshot::keep_run`] steps over it
    /// without reading its change ticks (at 32 rooms a worker, a miss for every 16). Shorter
    /// than `moved` (or empty) where not known: those runs are looked at entity by entity.
    newest_change: Vec<u32>,
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
        newest_changes(&slot.changed, &mut slot.newest_change);
        self.slots[index] = slot;
        self.newest = Some(index);
        self.len = (self.len + 1).min(self.slots.len());
        Ok(())
    }

    /// Adds the snapshot of a new tick as [`SnapshotHistory::push`] does, but written by `fill`
    /// straight into the slot it will occupy: no copy, and an entity `fill` keeps from the
    /// newest snapshot ([`NextSnapshot::keep`]) keeps its change tick without a comparison.
    /// The slot is overwritten in place: an entity kept in a run ([`NextSnapshot::keep_run`])
    /// that has not changed since the slot's own, older snapshot is there already and is not
    /// written at all. Ticks must increase; `fill` is not called otherwise.
    pub fn push_with(
        &mut self,
        tick: u32,
        fill: impl FnOnce(&mut NextSnapshot<'_>),
    ) -> Result<(), HistoryError> {
        if let Some(newest) = self.newest() {
            if !seq32_newer(tick, newest.tick) {
                return Err(HistoryError::TickNotNewer { tick, newest: newest.tick });
            }
        }
        let index = self.newest.map_or(0, |i| (i + 1) % self.slots.len());
        let mut slot = std::mem::take(&mut self.slots[index]);
        let previous = self.newest.map(|i| &self.slots[i]);
        let stale = previous.and_then(|previous| reusable(previous, &slot));
        if stale.is_none() {
            slot.snapshot.entities.clear();
            slot.changed.clear();
        }
        slot.snapshot.tick = tick;
        slot.moved.clear();
        slot.newest_change.clear();
        let mut next =
            NextSnapshot { previous, slot: &mut slot, aligned: true, word: 0, len: 0, stale };
        fill(&mut next);
        next.finish();
        self.slots[index] = slot;
        self.newest = Some(index);
        self.len = (self.len + 1).min(self.slots.len());
        Ok(())
    }

    /// Encodes the newest snapshot as a delta against the snapshot of `baseline_tick` into `out`
    /// (a column delta, as [`SnapshotConfig::encode_delta`] writes) and returns the bytes
    /// written. Entities unchanged since the baseline are skipped without comparing their
    /// fields.
    pub fn encode_delta(
        &self,
        config: &SnapshotConfig,
        baseline_tick: u32,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let pair = self.pair(baseline_tick)?;
        let unchanged = |j: usize| pair.unchanged(j);
        let (old, new, moved) = (pair.baseline, pair.newest, pair.moved(self));
        config.encode_columns_with(old, new, out, moved, unchanged)
    }

    /// [`SnapshotHistory::encode_delta`] into `out`, which is cleared and then holds exactly the
    /// encoding, refused (as `encode_delta` refuses a buffer of `max` bytes) if longer than
    /// `max`: for a buffer reused tick after tick, which `encode_delta` needs grown to the
    /// largest length (zeroed) each time. The bytes are the same.
    pub fn encode_delta_into(
        &self,
        config: &SnapshotConfig,
        baseline_tick: u32,
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<usize, EncodeError> {
        let pair = self.pair(baseline_tick)?;
        let (old, new) = (pair.baseline, pair.newest);
        if let Some(moved) = pair.moved(self) {
            return config.encode_same_ids_into(old, new, out, max, moved);
        }
        // Spawns or despawns since the baseline: edits, written as the first pass meets them.
        out.clear();
        out.resize(max, 0);
        let written = self.encode_delta(config, baseline_tick, out);
        out.truncate(*written.as_ref().unwrap_or(&0));
        written
    }

    /// [`SnapshotHistory::encode_delta`] as a record delta (format `0x02`, see
    /// [`SnapshotConfig::encode_delta_records`]).
    pub fn encode_delta_records(
        &self,
        config: &SnapshotConfig,
        baseline_tick: u32,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let pair = self.pair(baseline_tick)?;
        let unchanged = |_: &_, _: &_, j: usize| pair.unchanged(j);
        let (old, new, moved) = (pair.baseline, pair.newest, pair.moved(self));
        config.encode_records_with(old, new, out, moved, unchanged)
    }

    /// The newest snapshot and the one of `baseline_tick`, as a delta between them needs them.
    fn pair(&self, baseline_tick: u32) -> Result<Pair<'_>, EncodeError> {
        let no_baseline = || EncodeError::NoSuchBaseline(baseline_tick);
        let newest_index = self.newest.ok_or_else(no_baseline)?;
        let depth = self.back_from_newest(baseline_tick).ok_or_else(no_baseline)?;
        let newest = &self.slots[newest_index];
        Ok(Pair {
            newest: &newest.snapshot,
            baseline: &self.slots[self.index_back(depth)].snapshot,
            changed: &newest.changed,
            baseline_tick,
            same_ids: !seq32_newer(newest.ids_changed, baseline_tick),
            newest_index,
            depth,
        })
    }

    /// The union of the change sets of the `depth` slots from `newest_index` back, for the run
    /// of 64 entities `chunk`: those that may differ from the baseline `depth` pushes back.
    /// Only for a baseline with the newest's ids, which the slots between hold too, entity
    /// for entity, so that their bit sets line up.
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

/// The snapshot being written into a history's next slot ([`SnapshotHistory::push_with`]),
/// recording what changed since the newest as it fills.
pub struct NextSnapshot<'a> {
    previous: Option<&'a Slot>,
    slot: &'a mut Slot,
    /// Whether every entity so far sits at the index of the previous snapshot's entity of the
    /// same id (no spawn or despawn yet): then the change set is built as the entities come.
    aligned: bool,
    /// The change bits of the current run of 64 entities, gathered in a register.
    word: u64,
    /// Entities written so far; the slot's entities and change ticks past it are its old
    /// snapshot's (or none), overwritten as the new one fills and cut off by `finish`.
    len: usize,
    /// The tick of the slot's old snapshot, when it holds the newest snapshot's ids entity for
    /// entity: then an entity that has not changed since that tick is in place already.
    stale: Option<u32>,
}

/// The tick of `slot`'s snapshot if it holds `previous`'s ids, entity for entity, with their
/// change ticks: the ids have not changed since, and it is older (a ring slot coming round).
fn reusable(previous: &Slot, slot: &Slot) -> Option<u32> {
    let (old, tick) = (&slot.snapshot, slot.snapshot.tick);
    let same_ids = old.len() == previous.snapshot.len() && slot.changed.len() == old.len();
    let older = seq32_newer(previous.snapshot.tick, tick);
    (same_ids && older && !seq32_newer(previous.ids_changed, tick)).then_some(tick)
}

impl NextSnapshot<'_> {
    /// The newest snapshot's entities, ascending by id (none before the first push).
    #[inline]
    pub fn previous(&self) -> &[QuantizedEntity] {
        self.previous.map(|p| p.snapshot.entities()).unwrap_or_default()
    }

    /// Appends a freshly quantized entity; ids must be strictly ascending.
    // Inlined: called for every moved entity of every tick, its call (a 40-byte entity passed
    // through the stack) cost about as much as its work.
    #[inline]
    pub fn push(&mut self, entity: QuantizedEntity) -> Result<(), SnapshotError> {
        let k = self.len;
        let old = self.previous.and_then(|p| Some((p.snapshot.entities().get(k)?, p.changed[k])));
        let kept = old.filter(|(o, _)| **o == entity).map(|(_, changed)| changed);
        let lines_up = old.is_some_and(|(o, _)| o.id == entity.id);
        self.put_in_order(entity, lines_up, kept)
    }

    /// Appends a freshly quantized entity as [`NextSnapshot::push`] does, recorded as changed at
    /// this tick without comparing its codes with the newest snapshot's: for a caller that
    /// knows its state moved (a room's world walk), whose codes then almost always moved too.
    /// One whose codes came out the same is only compared where a delta is encoded (the
    /// encoders write an update only for codes that differ): the same bytes, for one compare
    /// there instead of one here for every entity that moved.
    #[inline]
    pub fn push_changed(&mut self, entity: QuantizedEntity) -> Result<(), SnapshotError> {
        let k = self.len;
        let previous = self.previous.and_then(|p| p.snapshot.entities().get(k));
        let lines_up = previous.is_some_and(|o| o.id == entity.id);
        self.put_in_order(entity, lines_up, None)
    }

    /// Puts `entity` after checking that its id ascends, unless it `lines_up` with the previous
    /// snapshot's entity at its index while every one before did too.
    #[inline(always)]
    fn put_in_order(
        &mut self,
        entity: QuantizedEntity,
        lines_up: bool,
        kept: Option<u32>,
    ) -> Result<(), SnapshotError> {
        if self.aligned && lines_up {
            // Entities 0..k hold the previous snapshot's ids, entity for entity, so this one
            // (the previous one's k) ascends past them, as in `keep`: no check to make.
            self.put(entity, kept);
            return Ok(());
        }
        self.check_ascending(entity.id)?;
        // Once not aligned, `finish` builds the change set again by id.
        self.aligned = false;
        self.put(entity, kept);
        Ok(())
    }

    /// `id` ascends past the last entity written.
    fn check_ascending(&self, id: u32) -> Result<(), SnapshotError> {
        match self.len.checked_sub(1).map(|last| self.slot.snapshot.entities[last].id) {
            Some(last) if id <= last => Err(SnapshotError::IdNotAscending { id, last }),
            _ => Ok(()),
        }
    }

    /// Appends entity `index` of the newest snapshot as it is (its state did not move): its
    /// change tick carries over without comparing it. Ids must be strictly ascending.
    // Always inlined: called for most entities of every tick, its call costs as much as it.
    #[inline(always)]
    pub fn keep(&mut self, index: usize) -> Result<(), SnapshotError> {
        let previous = self.previous.ok_or(SnapshotError::NoSuchEntity { index })?;
        let entity = *previous
            .snapshot
            .entities()
            .get(index)
            .ok_or(SnapshotError::NoSuchEntity { index })?;
        if self.aligned && index == self.len {
            // Entities 0..k hold the previous snapshot's ids, entity for entity, so entity k
            // (the previous one's k) ascends past them: the check `push` makes holds already.
            self.put(entity, Some(previous.changed[index]));
            return Ok(());
        }
        self.check_ascending(entity.id)?;
        self.aligned = false;
        self.put(entity, None);
        Ok(())
    }

    /// Appends entities `range` of the newest snapshot as they are, as [`NextSnapshot::keep`]
    /// does for each of them. While the ids line up and the run starts at the next index (a
    /// room whose bodies mostly rest: long runs between the few that moved), an entity that
    /// has not changed since the slot's old snapshot is left where it is, and the others are
    /// written without a call each.
    // The empty run (two moved entities next to each other: most of a room whose bodies all
    // move) is checked where it is called, so that it costs no call.
    #[inline]
    pub fn keep_run(&mut self, range: std::ops::Range<usize>) -> Result<(), SnapshotError> {
        if range.is_empty() {
            return Ok(());
        }
        self.keep_some(range)
    }

    /// [`NextSnapshot::keep_run`] of a run that is not empty.
    #[inline(never)]
    fn keep_some(&mut self, range: std::ops::Range<usize>) -> Result<(), SnapshotError> {
        let previous = self.previous.ok_or(SnapshotError::NoSuchEntity { index: range.start })?;
        let aligned = self.aligned && range.start == self.len;
        if !aligned || range.end > previous.snapshot.len() {
            return range.into_iter().try_for_each(|index| self.keep(index));
        }
        let (entities, changed) = (previous.snapshot.entities(), &previous.changed);
        let mut k = range.start;
        while k < range.end {
            if k % 64 == 0 && k + 64 <= range.end && self.run_in_place(previous, k / 64) {
                // The run's change set word is empty: `advance` left `word` at 0 at its start.
                self.len += 64;
                self.end_run(previous);
                k += 64;
                continue;
            }
            // The entities in place from `k` on, short of the run's last (which ends the run):
            // counted in a scan of their change ticks, with no bit to set and nothing to write.
            let run_last = range.end.min(k - k % 64 + 63);
            let in_place = |stale: u32| {
                let ticks = changed.get(k..run_last).unwrap_or_default();
                ticks.iter().take_while(|&&changed| !seq32_newer(changed, stale)).count()
            };
            let skipped = self.stale.map_or(0, in_place);
            if skipped > 0 {
                self.len += skipped;
                k += skipped;
                continue;
            }
            let in_place = self.stale.is_some_and(|tick| !seq32_newer(changed[k], tick));
            if in_place {
                self.advance(false);
            } else {
                self.put(entities[k], Some(changed[k]));
            }
            k += 1;
        }
        Ok(())
    }

    /// Whether the slot's old snapshot holds run `chunk` of 64 entities as `previous` does:
    /// none of them changed since its tick.
    #[inline(always)]
    fn run_in_place(&self, previous: &Slot, chunk: usize) -> bool {
        let newest = previous.newest_change.get(chunk);
        self.stale.zip(newest).is_some_and(|(tick, newest)| !seq32_newer(*newest, tick))
    }

    /// Records the change set word of the run of 64 entities just written (`word`, taken)
    /// and the newest of their change ticks: this tick if any changed, else (the ids lining
    /// up) no newer than `previous`'s for the same run.
    #[inline(always)]
    fn end_run(&mut self, previous: &Slot) {
        let word = std::mem::take(&mut self.word);
        let slot = &mut *self.slot;
        let chunk = slot.moved.len();
        slot.moved.push(word);
        let newest = match word {
            0 => previous.newest_change.get(chunk).copied(),
            _ => Some(slot.snapshot.tick),
        };
        // Known only while every run before is: `newest_change` is a prefix of the runs.
        if let Some(newest) = newest.filter(|_| slot.newest_change.len() == chunk) {
            slot.newest_change.push(newest);
        }
    }

    /// Writes entity `len` and its change tick: `kept` (unchanged since then) or this tick.
    #[inline(always)]
    fn put(&mut self, entity: QuantizedEntity, kept: Option<u32>) {
        let changed = kept.unwrap_or(self.slot.snapshot.tick);
        *place(self.slot, self.len, changed) = entity;
        self.advance(kept.is_none());
    }

    /// Counts entity `len` written, with its change bit.
    #[inline(always)]
    fn advance(&mut self, changed: bool) {
        let k = self.len;
        self.word |= u64::from(changed) << (k % 64);
        if k % 64 == 63 {
            match self.previous {
                Some(previous) => self.end_run(previous),
                None => self.slot.moved.push(std::mem::take(&mut self.word)),
            }
        }
        self.len += 1;
    }

    /// Completes the change set; after a spawn or despawn, builds it by id as `push` does.
    fn finish(mut self) {
        let lined_up = |p: &Slot| self.aligned && self.len == p.snapshot.len();
        if let Some(previous) = self.previous.filter(|p| lined_up(p) && self.len % 64 != 0) {
            // A short last run, its bits in place already.
            self.end_run(previous);
        }
        let (slot, len) = (self.slot, self.len);
        slot.snapshot.entities.truncate(len);
        slot.changed.truncate(len);
        let Some(previous) = self.previous else {
            // Every entity is new: `put` recorded each with this tick and its bit already.
            slot.moved.resize(len.div_ceil(64), u64::MAX);
            slot.newest_change.clear();
            slot.newest_change.resize(len.div_ceil(64), slot.snapshot.tick);
            slot.ids_changed = slot.snapshot.tick;
            return;
        };
        if self.aligned && len == previous.snapshot.len() {
            slot.ids_changed = previous.ids_changed;
            return;
        }
        slot.changed.clear();
        slot.moved.clear();
        slot.moved.resize(len.div_ceil(64), 0);
        slot.ids_changed = track_changes(previous, slot);
        newest_changes(&slot.changed, &mut slot.newest_change);
    }
}

/// Sets `newest` to the newest of `changed`'s ticks in each run of 64 (for a slot filled
/// other than entity by entity in place: a copy, or ids that moved).
fn newest_changes(changed: &[u32], newest: &mut Vec<u32>) {
    newest.clear();
    let newer = |a: u32, b: u32| if seq32_newer(b, a) { b } else { a };
    newest.extend(changed.chunks(64).map(|run| run.iter().copied().reduce(newer).unwrap_or(0)));
}

/// Writes `changed` as entity `k`'s change tick and returns the place of its codes: the old
/// snapshot's where it has one (the change ticks are as long), else a new one. The caller
/// writes the codes there itself, so that they go from registers to the slot: an entity
/// handed to a call (as the growth's once was) is built on the stack first and copied from
/// there on every path, as the compiler cannot split a value whose address a call takes.
#[inline(always)]
fn place(slot: &mut Slot, k: usize, changed: u32) -> &mut QuantizedEntity {
    if k >= slot.snapshot.entities.len() || k >= slot.changed.len() {
        return append(slot, k, changed);
    }
    // In bounds, as checked above: the compiler drops the indexing's own checks.
    slot.changed[k] = changed;
    &mut slot.snapshot.entities[k]
}

/// Appends entity `k`'s change tick and a place for its codes past the end of `slot` (a slot
/// whose old snapshot is not reused, or shorter). Cold and out of line: were its growth's
/// call in the walk's loop, every moved entity would pay the spills of the registers around
/// it.
#[cold]
#[inline(never)]
fn append(slot: &mut Slot, k: usize, changed: u32) -> &mut QuantizedEntity {
    slot.snapshot.entities.truncate(k);
    slot.changed.truncate(k);
    slot.changed.push(changed);
    let entities = &mut slot.snapshot.entities;
    entities.push(QuantizedEntity::default());
    let last = entities.len() - 1;
    &mut entities[last]
}

/// A baseline and the newest snapshot of a history, with what the history knows of the changes
/// between them.
struct Pair<'a> {
    newest: &'a Snapshot,
    baseline: &'a Snapshot,
    /// The tick each entity of `newest` last changed.
    changed: &'a [u32],
    baseline_tick: u32,
    /// Whether both hold the same ids, entity for entity.
    same_ids: bool,
    newest_index: usize,
    /// How many pushes back the baseline is.
    depth: usize,
}

impl Pair<'_> {
    /// Entity `j` of the newest snapshot has not changed since the baseline.
    fn unchanged(&self, j: usize) -> bool {
        !seq32_newer(self.changed[j], self.baseline_tick)
    }

    /// With the same ids, the bit sets of the entities that may have changed, by run of 64.
    fn moved<'h>(&self, history: &'h SnapshotHistory) -> Option<impl Fn(usize) -> u64 + 'h> {
        let (index, depth) = (self.newest_index, self.depth);
        self.same_ids.then_some(move |chunk: usize| history.moved_since(index, depth, chunk))
    }
}

/// [`track_changes`] when both snapshots hold the same ids, entity for entity (a room whose
/// entities neither spawned nor despawned: most ticks), without looking ids up.
fn track_same_ids(previous: &Slot, next: &mut Slot) {
    let tick = next.snapshot.tick;
    let (old, old_changed) = (previous.snapshot.entities(), &previous.changed);
    let chunks = next.snapshot.entities().chunks(64).zip(&mut next.moved);
    for (c, (entities, moved)) in chunks.enumerate() {
        let range = c * 64..c * 64 + entities.len();
        let mut word = 0;
        let pairs = entities.iter().zip(&old[range.clone()]).zip(&old_changed[range]);
        for (k, ((entity, o), changed)) in pairs.enumerate() {
            let kept = o == entity;
            next.changed.push(if kept { *changed } else { tick });
            word |= u64::from(!kept) << k;
        }
        *moved = word;
    }
}

/// Fills `next.changed` and `next.moved` from `previous`: an entity with the same codes keeps
/// its change tick, a changed or new one gets the new tick and its bit. Returns the tick the set
/// of ids last changed.
fn track_changes(previous: &Slot, next: &mut Slot) -> u32 {
    let (old, new) = (previous.snapshot.entities(), next.snapshot.entities());
    if old.len() == new.len() && old.iter().zip(new).all(|(o, n)| o.id == n.id) {
        track_same_ids(previous, next);
        return previous.ids_changed;
    }
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
