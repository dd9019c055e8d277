//! Per-client replication: what each client is sent, tick by tick.
//!
//! The room quantizes its world once per tick into a snapshot. For each client the replicator
//! then builds that client's *view*: its acknowledged view (the baseline) with the changes it
//! is missing applied in priority order until the tick's byte budget is spent. The view is
//! encoded as a delta against the baseline (or in full when the client has acknowledged
//! nothing still held), and kept, since the client may acknowledge it later. A burst of changes
//! thus spreads over several ticks, the most important first, instead of queueing behind a
//! datagram too large to send; and because a change that did not fit grows in priority every
//! tick it waits, nothing starves. A late joiner starts from an empty view and is brought up
//! to date the same way.
//!
//! The common case is cheap: when everything a client is missing fits its budget, its view is
//! the room's own snapshot of the tick, recorded by tick alone (no copy), and the delta is
//! encoded through the room's [`SnapshotHistory`], which skips unchanged entities without
//! comparing them; clients acknowledging the same tick share one encoding. Only a client
//! whose changes overflow the budget gets a view of its own, built as above.

use crate::World;
use rally_wire::seq::seq32_newer;
use rally_wire::{EncodeError, QuantizedEntity, Snapshot, SnapshotConfig, SnapshotHistory};

/// Accumulated priorities by entity id, ids ascending.
type Priorities = Vec<(u32, f32)>;

/// Estimated bytes of one changed entity in a delta, for the budget. The encoder's exact
/// size is checked afterwards.
const CHANGE_BYTES: usize = 10;
/// Estimated bytes of one entity the client has not seen (every field absolute).
const SPAWN_BYTES: usize = 16;
/// Bytes of the snapshot header and the input-ack prefix, for the budget.
const HEADER_BYTES: usize = 16;

/// A view sent to a client: either the room's snapshot of its tick (`complete`, held by the
/// room's history) or a budget-limited view of the client's own, whose entities are kept apart
/// (`Replicator::owns`). An ack, the baseline and each tick's new view read and write only
/// these marks, 8 bytes a view: a client's tick touches a line or two of its ring, where views
/// holding their entities' buffer inline took a line each (at 32 rooms a worker, every one a
/// miss: the ring was last touched a tick ago, 31 rooms back).
#[derive(Debug, Default, Clone, Copy)]
struct View {
    used: bool,
    tick: u32,
    complete: bool,
}

/// What a client's next snapshot is a delta against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Baseline {
    /// Nothing acknowledged: a full snapshot.
    Nothing,
    /// The room's snapshot of this tick.
    Room(u32),
    /// The client's own view of this tick.
    Own(u32),
}

/// One client's replication state. Laid out in the order written (`repr(C)`): what an ack,
/// the baseline and a complete view read and write every tick first, within one cache line
/// (the session's second), the scratch of views built for the client alone after it.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Replicator {
    /// Recent views sent, a ring; the acknowledged one is the next baseline.
    views: Box<[View]>,
    acked: Option<u32>,
    /// The ring slot of the next view (ring slots are u32: views_kept is at most 1,024).
    next: u32,
    /// The ring slot of the acknowledged view, while `acked` is some.
    acked_slot: u32,
    /// Whether `priority` may hold entries (a view was ranked since it was last cleared):
    /// a complete view then clears it, and otherwise reads no line of it.
    ranked: bool,
    /// Each view's entities when it is not complete, parallel to `views` (otherwise an unused,
    /// reused buffer).
    owns: Vec<Snapshot>,
    /// Accumulated priority of entities with changes not yet sent, by id ascending: rebuilt
    /// by each ranking in one walk beside the room's entities (whose ids ascend too), so it
    /// holds no more entries than the room has entities, and an id costs no hash.
    priority: Priorities,
    /// Scratch: the next ranking's `priority`.
    ranking: Priorities,
    /// Scratch: the candidates, most urgent first.
    candidates: Vec<Candidate>,
    /// Scratch: whether each room-snapshot entity goes into the view.
    chosen: Vec<bool>,
    /// Scratch: the view being built.
    building: Snapshot,
}

impl Replicator {
    /// The bytes from the start of the fields every tick touches (ack, baseline, a complete
    /// view) to the end of them: they end the session's second line.
    pub(crate) const HOT_BYTES: usize = std::mem::offset_of!(Replicator, owns);
}

/// What one tick's replication for one client produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Built {
    /// Bytes written.
    pub len: usize,
    /// Entities with changes that did not fit this tick.
    pub deferred: usize,
}

impl Replicator {
    /// A replicator keeping `views` views (at least 2, which `RoomConfig::validate` checks).
    pub(crate) fn new(views: usize) -> Self {
        debug_assert!(views >= 2, "a ring of {views} views holds no baseline while sending");
        Self {
            views: vec![View::default(); views.max(2)].into_boxed_slice(),
            owns: (0..views.max(2)).map(|_| Snapshot::default()).collect(),
            next: 0,
            acked: None,
            acked_slot: 0,
            ranked: false,
            priority: Vec::new(),
            ranking: Vec::new(),
            candidates: Vec::new(),
            chosen: Vec::new(),
            building: Snapshot::default(),
        }
    }

    /// The client holds the view of `tick`: later deltas build on it. Stale or unknown ticks
    /// are ignored (an old ack arriving late, or a forged one).
    pub(crate) fn ack(&mut self, tick: u32) {
        if self.acked.is_some_and(|a| !seq32_newer(tick, a)) {
            return;
        }
        if let Some(slot) = self.find(tick) {
            self.acked = Some(tick);
            self.acked_slot = slot as u32;
        }
        self.assert_baseline_held();
    }

    /// The acknowledged view, if any, is still in the ring: a delta is only ever built
    /// against a view the client was sent (`advance` forgets the ack when it reuses its slot).
    fn assert_baseline_held(&self) {
        debug_assert!(
            self.acked.is_none_or(|tick| self.views.iter().any(|v| v.used && v.tick == tick)),
            "the acknowledged view left the ring"
        );
    }

    /// Forgets everything the client held: the next view starts from nothing (a client that
    /// reconnects may have lost its state).
    pub(crate) fn reset(&mut self) {
        self.acked = None;
        for view in &mut self.views {
            view.used = false;
        }
    }

    /// Asks for the line of the newest view: an ack most likely names it or one just before
    /// it, and [`Self::ack`]'s look-up reads from there back (see `Room::prefetch_replication`).
    pub(crate) fn prefetch(&self) {
        let Some(back_one) = self.views.len().checked_sub(1) else { return };
        let newest = (self.next as usize + back_one) % self.views.len();
        rally_wire::prefetch::prefetch(&self.views[newest]);
    }

    /// The ring slot of the view of `tick`, newest first: acks name recent views, so this
    /// takes a look or two where a walk from the ring's start took half the ring.
    fn find(&self, tick: u32) -> Option<usize> {
        let n = self.views.len();
        let newest_first = (1..=n).map(|back| (self.next as usize + n - back) % n);
        newest_first.into_iter().find(|&i| self.views[i].used && self.views[i].tick == tick)
    }

    /// What the next snapshot is a delta against.
    pub(crate) fn baseline(&self) -> Baseline {
        let Some(tick) = self.acked else { return Baseline::Nothing };
        // `advance` forgets the ack when it reuses the slot, so the slot still holds the view.
        match self.views.get(self.acked_slot as usize).filter(|v| v.used && v.tick == tick) {
            Some(view) if view.complete => Baseline::Room(tick),
            Some(_) => Baseline::Own(tick),
            None => Baseline::Nothing,
        }
    }

    /// Records that the client was sent the room's whole snapshot of `tick` (everything it
    /// missed fitted the budget).
    pub(crate) fn sent_complete(&mut self, tick: u32) {
        if std::mem::take(&mut self.ranked) {
            self.priority.clear();
        }
        let slot = self.advance();
        let view = &mut self.views[slot];
        (view.used, view.tick, view.complete) = (true, tick, true);
        self.assert_baseline_held();
    }

    /// The ring slot for the next view; if it held the acknowledged view, the client's ack of
    /// the new one (or a later one) will give the next baseline.
    fn advance(&mut self) -> usize {
        let slot = self.next as usize;
        self.next = ((slot + 1) % self.views.len()) as u32;
        let view = &self.views[slot];
        if view.used && self.acked == Some(view.tick) {
            self.acked = None;
        }
        slot
    }

    /// Builds this tick's view of `room` (the quantized `world`, whose entities' priorities
    /// weigh their changes) within `budget` bytes and encodes it into `out`.
    pub(crate) fn build(
        &mut self,
        config: &SnapshotConfig,
        room: &Snapshot,
        history: &SnapshotHistory,
        world: &World,
        budget: usize,
        out: &mut [u8],
    ) -> Result<Built, EncodeError> {
        // The baseline's entities: the room's snapshot from the history, or the client's own
        // view (taken out of the ring while the new view is built, and put back).
        let own = match self.baseline() {
            Baseline::Own(tick) => self.views.iter().position(|v| v.used && v.tick == tick),
            _ => None,
        };
        let own_view = own.map(|i| std::mem::take(&mut self.owns[i]));
        let baseline = match self.baseline() {
            Baseline::Nothing => None,
            Baseline::Room(tick) => history.get(tick),
            Baseline::Own(_) => own_view.as_ref(),
        };
        let result = self.build_from(config, room, baseline, world, budget, out);
        if let (Some(i), Some(view)) = (own, own_view) {
            self.owns[i] = view;
        }
        let (built, take) = result?;
        if built.deferred == 0 {
            // Nothing left out: the view is the room's snapshot, which the history holds.
            self.sent_complete(room.tick());
            return Ok(built);
        }
        for candidate in &self.candidates[..take] {
            // Sent: its priority starts again from nothing, as an entity never ranked.
            if let Some((_, accumulated)) = self.priority.get_mut(candidate.slot) {
                *accumulated = 0.0;
            }
        }
        let slot = self.advance();
        std::mem::swap(&mut self.owns[slot], &mut self.building);
        self.views[slot] = View { used: true, tick: room.tick(), complete: false };
        Ok(built)
    }

    /// Ranks what the client misses, then fills and encodes the view with as many changes as
    /// fit; returns what was written and how many candidates went in.
    fn build_from(
        &mut self,
        config: &SnapshotConfig,
        room: &Snapshot,
        baseline: Option<&Snapshot>,
        world: &World,
        budget: usize,
        out: &mut [u8],
    ) -> Result<(Built, usize), EncodeError> {
        let Self { priority, ranking, candidates, chosen, building, .. } = self;
        self.ranked = true;
        rank(candidates, (priority, ranking), room, world, baseline);
        let mut take = affordable(candidates, budget);
        loop {
            chosen.clear();
            chosen.resize(room.len(), false);
            for candidate in candidates.iter().take(take) {
                chosen[candidate.index] = true;
            }
            fill_view(building, room, baseline, chosen);
            let written = match baseline {
                Some(baseline) => config.encode_delta(baseline, building, out),
                None => config.encode_full(building, out),
            };
            match written {
                // The estimate was short: send fewer changes rather than nothing.
                Ok(len) if len > budget && take > 0 => take = take * 3 / 4,
                Err(EncodeError::BufferTooSmall { .. }) if take > 0 => take = take * 3 / 4,
                Ok(len) => {
                    // Over the budget only when not even one change was taken (the despawns
                    // and the header alone exceed it).
                    debug_assert!(len <= budget || take == 0, "{len} bytes over {budget}");
                    debug_assert!(take <= candidates.len());
                    return Ok((Built { len, deferred: candidates.len() - take }, take));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// An entity with a change the client has not been sent.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    /// Its accumulated priority.
    priority: f32,
    /// Its index in the room snapshot.
    index: usize,
    /// Its estimated bytes in the view.
    bytes: usize,
    /// Its entry in `Replicator::priority`.
    slot: usize,
}

/// Items looked up by ascending id, each look-up stepping on from the last: a walk of the
/// room's entities (ids ascending) finds all of a sorted list's in one pass, where a binary
/// search for each took eight or so probes of it.
struct Ascending<'a, T> {
    items: &'a [T],
    id: fn(&T) -> u32,
}

impl<'a, T> Ascending<'a, T> {
    fn new(items: &'a [T], id: fn(&T) -> u32) -> Self {
        Self { items, id }
    }

    /// The item with `id`, if present; `id` must not be below the last one asked for.
    fn get(&mut self, id: u32) -> Option<&'a T> {
        let skip = self.items.iter().take_while(|item| (self.id)(item) < id).count();
        self.items = &self.items[skip..];
        self.items.first().filter(|item| (self.id)(item) == id)
    }
}

/// The baseline's entities, by ascending id.
fn baseline_by_id(baseline: Option<&Snapshot>) -> Ascending<'_, QuantizedEntity> {
    Ascending::new(baseline.map_or(&[], |b| b.entities()), |e| e.id)
}

/// Collects the entities whose state differs from the baseline, raises their priority by their
/// weight (the world's entity's priority: `room` is the world quantized, row for row), and
/// sorts them most urgent first. The priorities are rebuilt into `ranking` beside the room's
/// entities and swapped into `priority`: an entity the room no longer has drops out (ids are
/// never reused), one whose priority went back to nothing too (it ranks as one never seen).
fn rank(
    candidates: &mut Vec<Candidate>,
    (priority, ranking): (&mut Priorities, &mut Priorities),
    room: &Snapshot,
    world: &World,
    baseline: Option<&Snapshot>,
) {
    candidates.clear();
    ranking.clear();
    let mut known_by_id = baseline_by_id(baseline);
    let mut held = Ascending::new(&priority[..], |(id, _)| *id);
    for (index, entity) in room.entities().iter().enumerate() {
        let carried = held.get(entity.id).map_or(0.0, |e| e.1);
        let known = known_by_id.get(entity.id);
        if known == Some(entity) {
            // Unchanged again: what it accumulated waits for its next change.
            if carried.to_bits() != 0 {
                ranking.push((entity.id, carried));
            }
            continue;
        }
        let row = world.row(index).filter(|(id, _)| *id == entity.id);
        let weight = row.map_or(1.0, |(_, entity)| entity.priority);
        let accumulated = carried + weight;
        let bytes = if known.is_some() { CHANGE_BYTES } else { SPAWN_BYTES };
        let slot = ranking.len();
        ranking.push((entity.id, accumulated));
        candidates.push(Candidate { priority: accumulated, index, bytes, slot });
    }
    std::mem::swap(priority, ranking);
    // Ties go to the lower id, so the order is deterministic.
    candidates.sort_by(|a, b| b.priority.total_cmp(&a.priority).then(a.index.cmp(&b.index)));
}

/// How many of the ranked candidates fit in `budget` by estimate.
fn affordable(candidates: &[Candidate], budget: usize) -> usize {
    let mut left = budget.saturating_sub(HEADER_BYTES);
    let mut take = 0;
    for &Candidate { bytes, .. } in candidates {
        if bytes > left {
            break;
        }
        left -= bytes;
        take += 1;
    }
    take
}

/// The new view: each room entity as the room has it if chosen, else as the baseline has it
/// (absent if the client has never seen it). Entities the room no longer has are left out,
/// which the delta encodes as despawns.
fn fill_view(view: &mut Snapshot, room: &Snapshot, baseline: Option<&Snapshot>, chosen: &[bool]) {
    view.clear(room.tick());
    let mut known_by_id = baseline_by_id(baseline);
    for (index, entity) in room.entities().iter().enumerate() {
        let state: Option<&QuantizedEntity> = if chosen.get(index).copied().unwrap_or(false) {
            Some(entity)
        } else {
            known_by_id.get(entity.id)
        };
        if let Some(state) = state {
            // Ids ascend in the room snapshot, so they ascend here.
            let _ = view.push(*state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Entity, Transform};
    use glam::Vec3;
    use proptest::prelude::*;
    use rally_wire::EntityState;
    use std::collections::HashMap;

    /// The ranking as it was, a hashed map of priorities and a binary search of the baseline
    /// per entity: (priority, room index, bytes) of each candidate, most urgent first.
    fn rank_by_map(
        priority: &mut HashMap<u32, f32>,
        room: &Snapshot,
        world: &World,
        baseline: Option<&Snapshot>,
    ) -> Vec<(f32, usize, usize)> {
        let mut candidates = Vec::new();
        for (index, entity) in room.entities().iter().enumerate() {
            let known = baseline.and_then(|b| b.get(entity.id));
            if known == Some(entity) {
                continue;
            }
            let row = world.row(index).filter(|(id, _)| *id == entity.id);
            let weight = row.map_or(1.0, |(_, entity)| entity.priority);
            let accumulated = priority.entry(entity.id).or_insert(0.0);
            *accumulated += weight;
            let bytes = if known.is_some() { CHANGE_BYTES } else { SPAWN_BYTES };
            candidates.push((*accumulated, index, bytes));
        }
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        candidates
    }

    /// A snapshot of the entities `ids`, each with `code(id)` as its `x` and zeros else.
    fn snapshot(tick: u32, ids: impl Iterator<Item = u32>, code: impl Fn(u32) -> u32) -> Snapshot {
        let mut snapshot = Snapshot::default();
        snapshot.clear(tick);
        for id in ids {
            let entity = QuantizedEntity { id, position: [code(id), 0, 0], ..Default::default() };
            snapshot.push(entity).unwrap();
        }
        snapshot
    }

    proptest! {
        #[test]
        fn the_ranking_walk_is_the_hashed_one(
            weights in proptest::collection::vec(prop_oneof![Just(1.0f32), 0.0f32..8.0], 48),
            steps in proptest::collection::vec(
                (any::<u64>(), proptest::array::uniform32(0u32..4), 0usize..40),
                1..12,
            ),
        ) {
            // Goal: the ranking beside the room's entities (priorities in a vector by id, the
            // baseline walked once) ranks as the hashed map and binary search did, tick after
            // tick, through despawns, changes sent and changes undone, and fills the same view.
            // Method: a world of 48 weighted entities, despawned at random (ids never return);
            // each tick a room of random codes, a baseline holding some of them, older ones
            // and some despawned; the first `take` candidates sent, in both.
            let mut world = World::new(64);
            for weight in &weights {
                let at = Entity::at(Transform::from_position(Vec3::ZERO));
                world.spawn(Entity { priority: *weight, ..at }).unwrap();
            }
            let mut replicator = Replicator::new(4);
            let mut by_map = HashMap::new();
            for (tick, (despawn, codes, take)) in steps.into_iter().enumerate() {
                let alive: Vec<u32> = world.iter().map(|(id, _)| id).collect();
                for id in alive.iter().filter(|id| despawn >> (*id % 64) & 1 == 1 && *id % 5 == 0) {
                    world.despawn(*id).unwrap();
                }
                let code = |id: u32| codes[id as usize % 32] >> (id % 2);
                let room = snapshot(tick as u32, world.iter().map(|(id, _)| id), code);
                // A baseline of the old codes (some equal), missing a third, with the
                // despawned.
                let held = (1..=48).filter(|id| (despawn >> (id % 63)) % 3 != 0);
                let baseline = snapshot(0, held, |id| codes[(id as usize + 1) % 32] >> 1);
                let baseline = (tick % 4 != 0).then_some(&baseline);
                let expected = rank_by_map(&mut by_map, &room, &world, baseline);
                let Replicator { priority, ranking, candidates, .. } = &mut replicator;
                rank(candidates, (priority, ranking), &room, &world, baseline);
                let ranked: Vec<_> =
                    candidates.iter().map(|c| (c.priority, c.index, c.bytes)).collect();
                prop_assert_eq!(&ranked, &expected);
                prop_assert!(priority.len() <= room.len());
                let take = take.min(candidates.len());
                for candidate in &candidates[..take] {
                    priority[candidate.slot].1 = 0.0;
                    by_map.remove(&room.entities()[candidate.index].id);
                }
                let mut chosen = vec![false; room.len()];
                for candidate in &candidates[..take] {
                    chosen[candidate.index] = true;
                }
                let mut view = Snapshot::default();
                fill_view(&mut view, &room, baseline, &chosen);
                let known = |e: &QuantizedEntity| baseline.and_then(|b| b.get(e.id)).copied();
                let by_search: Vec<QuantizedEntity> = room
                    .entities()
                    .iter()
                    .zip(&chosen)
                    .filter_map(|(e, sent)| if *sent { Some(*e) } else { known(e) })
                    .collect();
                prop_assert_eq!(view.entities(), &by_search[..]);
            }
        }
    }

    #[test]
    fn changes_that_do_not_fit_wait_behind_the_entities_the_world_weighs_more() {
        // Goal: under a budget too small for every change, the entities whose priority the
        // world raised go first, whatever their ids, and the rest wait.
        // Method: 20 entities new to a client, the three newest weighted 8, and a budget for
        // five: the view sent holds the three and the two oldest.
        let mut world = World::new(64);
        for k in 0..20 {
            let at = Entity::at(Transform::from_position(Vec3::X * k as f32));
            world.spawn(Entity { priority: if k >= 17 { 8.0 } else { 1.0 }, ..at }).unwrap();
        }
        let config = SnapshotConfig::default();
        let mut history = SnapshotHistory::new(4);
        history
            .push_with(1, |next| {
                for (id, e) in world.iter() {
                    let (position, rotation) = (e.transform.position, e.transform.rotation);
                    let (linear_velocity, angular_velocity) = (Vec3::ZERO, Vec3::ZERO);
                    let state =
                        EntityState { id, position, rotation, linear_velocity, angular_velocity };
                    next.push(config.quantize(&state)).unwrap();
                }
            })
            .unwrap();
        let room = history.newest().unwrap();
        let mut replicator = Replicator::new(4);
        let budget = HEADER_BYTES + 5 * SPAWN_BYTES;
        let built = replicator.build(&config, room, &history, &world, budget, &mut [0; 1500]);
        assert_eq!(built.unwrap().deferred, 15);
        replicator.ack(1);
        assert_eq!(replicator.baseline(), Baseline::Own(1));
        let sent: Vec<u32> = replicator.owns[0].entities().iter().map(|e| e.id).collect();
        assert_eq!(sent, [1, 2, 18, 19, 20]);
    }
}
