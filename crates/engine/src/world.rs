//! The authoritative world of one room: entities with transforms and velocities, and the grab
//! graph that moves grabbables with their grabbers.

use crate::grab::{GrabError, GrabGraph, GrabRule};
use glam::{Quat, Vec3};

/// An entity's id, unique within its room for the room's lifetime (never reused).
pub type EntityId = u32;

/// A rigid pose: where an entity is and which way it faces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transform {
    /// Position, metres.
    pub position: Vec3,
    /// Orientation.
    pub rotation: Quat,
}

impl Transform {
    /// The origin, facing the default way.
    pub const IDENTITY: Transform = Transform { position: Vec3::ZERO, rotation: Quat::IDENTITY };

    /// A pose at `position` with no rotation.
    pub fn from_position(position: Vec3) -> Self {
        Self { position, rotation: Quat::IDENTITY }
    }

    /// This pose followed by `local`, a pose expressed in this pose's frame.
    pub fn mul(&self, local: &Transform) -> Transform {
        Transform {
            position: self.position + self.rotation * local.position,
            rotation: (self.rotation * local.rotation).normalize(),
        }
    }

    /// The pose that, applied after this one, gives `world`: `self.mul(&self.local(world))`
    /// equals `world`.
    pub fn local(&self, world: &Transform) -> Transform {
        let inverse = self.rotation.conjugate();
        Transform {
            position: inverse * (world.position - self.position),
            rotation: (inverse * world.rotation).normalize(),
        }
    }
}

/// One replicated thing: a controller, a hand, a paddle, a ball.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entity {
    /// Where it is.
    pub transform: Transform,
    /// Metres per second.
    pub linear_velocity: Vec3,
    /// Radians per second, as an axis scaled by the rate.
    pub angular_velocity: Vec3,
    /// How fast its replication priority grows while it has unsent changes (1 by default);
    /// raise it for what players look at (held objects, the ball).
    pub priority: f32,
}

impl Entity {
    /// An entity at rest at `transform`.
    pub fn at(transform: Transform) -> Self {
        Self { transform, linear_velocity: Vec3::ZERO, angular_velocity: Vec3::ZERO, priority: 1.0 }
    }
}

/// Why a world operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorldError {
    /// No entity has this id (never spawned, or despawned).
    #[error("no entity {0}")]
    UnknownEntity(EntityId),
    /// The world holds `entities_max` entities already.
    #[error("the world holds its maximum of {0} entities")]
    Full(usize),
}

/// The entities of one room and the grab graph between them.
pub struct World {
    entities: Entities,
    /// Tells this world apart from every other one made in the process ([`World::serial`]).
    serial: u64,
    next_id: EntityId,
    entities_max: usize,
    grabs: GrabGraph,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("entities", &self.entities.ids.len())
            .field("grabs", &self.grabs)
            .finish()
    }
}

impl World {
    /// An empty world holding at most `entities_max` entities.
    pub fn new(entities_max: usize) -> Self {
        static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self {
            entities: Entities::default(),
            serial: SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            next_id: 1,
            entities_max,
            grabs: GrabGraph::default(),
        }
    }

    /// Adds an entity and returns its id; ids ascend and are never reused.
    pub fn spawn(&mut self, entity: Entity) -> Result<EntityId, WorldError> {
        if self.entities.ids.len() >= self.entities_max {
            return Err(WorldError::Full(self.entities_max));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.entities.push(id, entity);
        Ok(id)
    }

    /// Removes an entity; what it held is released where it is, and it is released from
    /// whatever held it.
    pub fn despawn(&mut self, id: EntityId) -> Result<Entity, WorldError> {
        let entity = self.entities.remove(&id).ok_or(WorldError::UnknownEntity(id))?;
        self.grabs.remove_entity(id);
        Ok(entity)
    }

    /// The entity with `id`.
    pub fn get(&self, id: EntityId) -> Option<&Entity> {
        self.entities.get(&id)
    }

    /// The entity with `id`, to change. A grabbed entity's pose is overwritten by its grabber's
    /// at the next interact phase.
    #[inline]
    pub fn get_mut(&mut self, id: EntityId) -> Option<&mut Entity> {
        self.entities.get_mut(&id)
    }

    /// The entities with `ids`, to change together, or `None` for an id the world does not
    /// hold or one not above the id before it (so that no entity is lent twice). Entities
    /// spawned one after the other sit in consecutive rows, so each id after the first is
    /// looked for in the row after the last one found before any search: a player's head and
    /// hands cost one look-up, not three.
    pub fn get_many_mut<const N: usize>(&mut self, ids: [EntityId; N]) -> [Option<&mut Entity>; N] {
        // The common case first: the ids are a run of consecutive rows, found by one look-up
        // and one compare each (the general walk below cost a player's input 90 instructions).
        if let Some(at) = self.entities.run(ids) {
            // `run` found the `N` rows: lending them cannot fail.
            return match self.entities.lend_run(at) {
                Some(run) => run.map(Some),
                None => [const { None }; N],
            };
        }
        let mut found = [const { None }; N];
        let Entities { ids: held, rows, touched } = &mut self.entities;
        let mut rest = rows.as_mut_slice();
        // The row in the whole world where `rest` starts.
        let mut base = 0;
        let mut last = None;
        for (slot, id) in found.iter_mut().zip(ids) {
            if last.is_some_and(|last| id <= last) {
                continue;
            }
            last = Some(id);
            let (at, hit) = match Entities::position_in(held.get(base..).unwrap_or_default(), &id) {
                Ok(at) => (at, true),
                Err(at) => (at, false),
            };
            // The rows from `id` on: the next id is above it.
            let tail = std::mem::take(&mut rest).split_at_mut(at).1;
            base += at;
            if !hit {
                rest = tail;
                continue;
            }
            let Some((row, after)) = tail.split_first_mut() else { break };
            touched.mark(base);
            *slot = Some(&mut row.0);
            rest = after;
            base += 1;
        }
        found
    }

    /// The entities with `ids` if they sit in consecutive rows (spawned one after the other,
    /// as a player's head and hands are, and none of them despawned), to change together; `None`
    /// otherwise ([`World::get_many_mut`] finds them wherever they are). One look-up for the
    /// first, a compare for each next, and one mark for the run: a player's input took 109
    /// instructions to find its avatar through `get_many_mut`'s options.
    #[inline]
    pub fn get_run_mut<const N: usize>(&mut self, ids: [EntityId; N]) -> Option<[&mut Entity; N]> {
        self.entities.lend_ids(ids)
    }

    /// Every entity, ascending by id.
    pub fn iter(&self) -> impl Iterator<Item = (EntityId, &Entity)> {
        self.entities.ids.iter().zip(&self.entities.rows).map(|(id, row)| (*id, &row.0))
    }

    /// Every entity, ascending by id, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (EntityId, &mut Entity)> {
        let Entities { ids, rows, touched } = &mut self.entities;
        ids.iter().zip(rows).enumerate().map(move |(k, (id, row))| {
            touched.mark(k);
            (*id, &mut row.0)
        })
    }

    /// The rows lent to change ([`World::get_mut`], [`World::get_many_mut`],
    /// [`World::iter_mut`], a grab's propagation) since [`World::untouch`], ascending;
    /// `None` if an entity was spawned or despawned since (rows moved). A row lent is not
    /// necessarily changed: a reader compares what it kept. Replicate walks these rows
    /// instead of the whole world.
    pub(crate) fn touched_rows(&self) -> Option<impl Iterator<Item = usize> + '_> {
        let touched = &self.entities.touched;
        (!touched.reshaped).then(|| touched.rows())
    }

    /// [`World::touched_rows`] as a bit set: bit `r % 64` of word `r / 64` for row `r` (the
    /// words may run past the last row, with their bits clear).
    pub(crate) fn touched_words(&self) -> &[u64] {
        &self.entities.touched.words
    }

    /// Tells this world apart from any other made in the process: a reader that kept a view
    /// of a world's rows knows by it whether [`World::touched_rows`] speaks of that world.
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// The entity in `row` (rows ascend by id), as [`World::touched_rows`] names it.
    pub(crate) fn row(&self, row: usize) -> Option<(EntityId, &Entity)> {
        let entities = &self.entities;
        Some((*entities.ids.get(row)?, &entities.rows.get(row)?.0))
    }

    /// Forgets the rows lent so far: [`World::touched_rows`] starts again from here.
    pub(crate) fn untouch(&mut self) {
        self.entities.touched.clear();
    }

    /// Number of entities.
    pub fn len(&self) -> usize {
        self.entities.ids.len()
    }

    /// Whether the world is empty.
    pub fn is_empty(&self) -> bool {
        self.entities.ids.is_empty()
    }

    /// Sets the rule every grab must pass (all grabs are allowed by default).
    pub fn set_grab_rule(&mut self, rule: Box<dyn GrabRule>) {
        self.grabs.set_rule(rule);
    }

    /// `grabber` takes hold of `grabbable` where both are now: the grabbable keeps its pose
    /// relative to the grabber until released. Refused if either is unknown, if the grab would
    /// close a cycle, or if the grab rule says no; a grabbable already held changes hands.
    pub fn grab(&mut self, grabber: EntityId, grabbable: EntityId) -> Result<(), GrabError> {
        let (Some(a), Some(b)) = (self.entities.get(&grabber), self.entities.get(&grabbable))
        else {
            let unknown = if self.entities.contains_key(&grabber) { grabbable } else { grabber };
            return Err(GrabError::UnknownEntity(unknown));
        };
        let offset = a.transform.local(&b.transform);
        self.grab_at(grabber, grabbable, offset)
    }

    /// Like [`World::grab`], with the grabbable held at `offset` in the grabber's frame.
    pub fn grab_at(
        &mut self,
        grabber: EntityId,
        grabbable: EntityId,
        offset: Transform,
    ) -> Result<(), GrabError> {
        for id in [grabber, grabbable] {
            if !self.entities.contains_key(&id) {
                return Err(GrabError::UnknownEntity(id));
            }
        }
        self.grabs.check_rule(self, grabber, grabbable)?;
        self.grabs.insert(grabber, grabbable, offset)
    }

    /// Lets go of `grabbable`, which stays where it is. Returns whether it was held.
    pub fn release(&mut self, grabbable: EntityId) -> bool {
        self.grabs.remove(grabbable)
    }

    /// `root` and every entity held under it, down chains of any depth, grabbers first.
    pub fn chain_of(&mut self, root: EntityId) -> Vec<EntityId> {
        self.grabs.chain_of(root)
    }

    /// Appends [`World::chain_of`]`(root)` to `out`, reusing its allocation.
    pub(crate) fn chain_into(&mut self, root: EntityId, out: &mut Vec<EntityId>) {
        self.grabs.chain_into(root, out);
    }

    /// What holds `grabbable`, if anything.
    pub fn grabber_of(&self, grabbable: EntityId) -> Option<EntityId> {
        self.grabs.grabber_of(grabbable)
    }

    /// Moves every grabbed entity to its grabber's pose times its offset, grabbers first (in
    /// topological order), so a chain of any depth follows its root within one call. A held
    /// entity also takes its grabber's velocity at its offset, so that what is released flies
    /// on.
    pub fn propagate_grabs(&mut self) {
        let entities = &mut self.entities;
        self.grabs.for_each_in_order(|grabber, grabbable, offset| {
            let Some(parent) = entities.get(&grabber).copied() else { return };
            let Some(child) = entities.get_mut(&grabbable) else { return };
            child.transform = parent.transform.mul(offset);
            let lever = child.transform.position - parent.transform.position;
            child.linear_velocity = parent.linear_velocity + parent.angular_velocity.cross(lever);
            child.angular_velocity = parent.angular_velocity;
        });
    }
}

/// The entities by id, in arrays sorted by id: every tick reads all of them in order (to
/// quantize the snapshot) and looks some up (inputs, grabs), and ids only ascend, so a spawn
/// appends. A tree would scatter them over the heap; a room's ticks would then spend their
/// time on cache misses once many rooms share a core. The ids are an array of their own, and
/// each entity a cache line of its own: a look-up reads ids packed 16 a line, and a moved
/// entity is one line to write, where rows of an id and an entity (80 bytes) put the id a
/// look-up reads in the next row's line and spread a moved entity over two (at 32 rooms a
/// worker, each line a miss: the room last touched it a tick ago).
#[derive(Debug, Default)]
struct Entities {
    /// Ascending; `ids[k]` is the id of `rows[k]`.
    ids: Vec<EntityId>,
    rows: Vec<Row>,
    /// The rows lent to change since the reader last looked.
    touched: Touched,
}

/// Which rows were lent mutably, a bit a row: setting one costs an `or` on a look-up that
/// found the row already, and reading them skips 64 untouched rows a word.
#[derive(Debug)]
struct Touched {
    words: Vec<u64>,
    /// Rows were added or removed since the last clear: row numbers no longer name the rows
    /// they named then.
    reshaped: bool,
}

impl Default for Touched {
    fn default() -> Self {
        // A new world has no reader's view to compare with.
        Self { words: Vec::new(), reshaped: true }
    }
}

impl Touched {
    /// Marks `row`, one the world holds ([`Touched::fit`] made room for it).
    #[inline(always)]
    fn mark(&mut self, row: usize) {
        if let Some(word) = self.words.get_mut(row / 64) {
            *word |= 1 << (row % 64);
        }
    }

    /// Marks rows `at..at + n`, ones the world holds: one `or` if they share a word.
    #[inline(always)]
    fn mark_run(&mut self, at: usize, n: usize) {
        let (word, bit) = (at / 64, at % 64);
        match self.words.get_mut(word) {
            Some(word) if bit + n <= 64 && n < 64 => *word |= ((1 << n) - 1) << bit,
            _ => (at..at + n).for_each(|row| self.mark(row)),
        }
    }

    /// Rows were added or removed: `rows` of them now, each with its bit.
    fn fit(&mut self, rows: usize) {
        self.words.resize(rows.div_ceil(64), 0);
        self.reshaped = true;
    }

    fn rows(&self) -> SetBits<'_> {
        // The first word's base, once 64 is added.
        SetBits { words: &self.words, word: 0, base: 0usize.wrapping_sub(64) }
    }

    fn clear(&mut self) {
        self.words.fill(0);
        self.reshaped = false;
    }
}

/// The rows whose bit is set, ascending. Its own iterator rather than a `flat_map` over the
/// words: the world walk's loop then keeps its four words of state in registers, where the
/// `flat_map`'s (an option around each word's iterator) went through the stack for every row.
pub(crate) struct SetBits<'a> {
    /// The words not yet begun.
    words: &'a [u64],
    /// What is left of the current word.
    word: u64,
    /// The row of the current word's bit 0.
    base: usize,
}

impl Iterator for SetBits<'_> {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        while self.word == 0 {
            let (&word, rest) = self.words.split_first()?;
            (self.words, self.word, self.base) = (rest, word, self.base.wrapping_add(64));
        }
        let bit = self.word.trailing_zeros() as usize;
        self.word &= self.word - 1;
        Some(self.base + bit)
    }
}

/// An entity alone on its cache line (an [`Entity`] is 64 bytes).
#[derive(Debug)]
#[repr(align(64))]
struct Row(Entity);

// A row is one line only if an entity stays 64 bytes (glam's layout of its fields).
const _: () = assert!(std::mem::size_of::<Row>() == 64);

impl Entities {
    /// Where `id` is (or would go). Ids ascend by one from spawn to spawn and are never reused,
    /// so an entity is at most `id - first` rows in, and exactly there until an older one is
    /// despawned: that row is looked at first, and only on a miss are the rows before it
    /// searched. Inputs, grabs and the fast path look up a few entities per input; in a room
    /// whose entities stay, each look-up costs a subtraction and a compare, not a search.
    fn position(&self, id: &EntityId) -> Result<usize, usize> {
        Self::position_in(&self.ids, id)
    }

    /// [`Entities::position`] in `ids`, any run of the ids (ascending).
    #[inline(always)]
    fn position_in(ids: &[EntityId], id: &EntityId) -> Result<usize, usize> {
        let Some(&first) = ids.first() else { return Err(0) };
        let Some(offset) = id.checked_sub(first) else { return Err(0) };
        let at = (offset as usize).min(ids.len() - 1);
        match ids[at].cmp(id) {
            std::cmp::Ordering::Equal => Ok(at),
            std::cmp::Ordering::Less => Err(at + 1),
            // Every row past `at` holds a newer id still, so only the rows before it can.
            std::cmp::Ordering::Greater => ids[..at].binary_search(id),
        }
    }

    /// The `N` rows holding exactly `ids`, in order, one after the other, marked lent; `None`
    /// if they do not. One slice for the check and the loan, and the look-up inlined (out of
    /// line, its call and the bounds checked twice cost an input about a tenth of its look-up).
    #[inline(always)]
    fn lend_ids<const N: usize>(&mut self, ids: [EntityId; N]) -> Option<[&mut Entity; N]> {
        let at = Self::position_in(&self.ids, ids.first()?).ok()?;
        if self.ids.get(at..at + N)? != ids {
            return None;
        }
        let run: &mut [Row; N] = self.rows.get_mut(at..at + N)?.try_into().ok()?;
        self.touched.mark_run(at, N);
        Some(run.each_mut().map(|row| &mut row.0))
    }

    /// The first id's row, if the `N` rows from it on hold exactly `ids`, in order.
    fn run<const N: usize>(&self, ids: [EntityId; N]) -> Option<usize> {
        let at = self.position(ids.first()?).ok()?;
        (self.ids.get(at..at + N)? == ids).then_some(at)
    }

    /// The `N` rows from `at` on, marked lent; `None` if the world has fewer.
    #[inline(always)]
    fn lend_run<const N: usize>(&mut self, at: usize) -> Option<[&mut Entity; N]> {
        let run: &mut [Row; N] = self.rows.get_mut(at..at + N)?.try_into().ok()?;
        self.touched.mark_run(at, N);
        Some(run.each_mut().map(|row| &mut row.0))
    }

    /// Adds `entity`; `id` is newer than every id held (ids ascend).
    fn push(&mut self, id: EntityId, entity: Entity) {
        debug_assert!(self.ids.last().is_none_or(|last| *last < id));
        self.ids.push(id);
        self.rows.push(Row(entity));
        self.touched.fit(self.ids.len());
    }

    fn remove(&mut self, id: &EntityId) -> Option<Entity> {
        let at = self.position(id).ok()?;
        self.ids.remove(at);
        let entity = self.rows.remove(at).0;
        self.touched.fit(self.ids.len());
        Some(entity)
    }

    fn get(&self, id: &EntityId) -> Option<&Entity> {
        self.position(id).ok().map(|at| &self.rows[at].0)
    }

    #[inline]
    fn get_mut(&mut self, id: &EntityId) -> Option<&mut Entity> {
        let at = self.position(id).ok()?;
        self.touched.mark(at);
        Some(&mut self.rows[at].0)
    }

    fn contains_key(&self, id: &EntityId) -> bool {
        self.position(id).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entity that says which id it was spawned as.
    fn marked(k: u32) -> Entity {
        Entity::at(Transform::from_position(Vec3::splat(k as f32)))
    }

    #[test]
    fn every_entity_is_found_by_its_id_after_any_despawns() {
        // Look-ups start where the id would be if nothing was despawned: despawning the first,
        // some in the middle and the last must leave every other entity found, and no id that
        // is gone, never was or is yet to come.
        let mut world = World::new(64);
        let ids: Vec<EntityId> = (0..40).map(|k| world.spawn(marked(k)).unwrap()).collect();
        let gone: Vec<EntityId> =
            ids.iter().copied().filter(|id| id % 7 == 1 || *id == 40).collect();
        for id in &gone {
            world.despawn(*id).unwrap();
        }
        let late = world.spawn(marked(40)).unwrap();
        for (k, id) in ids.iter().chain([&late]).enumerate() {
            let found = world.get(*id).map(|e| e.transform.position.x);
            let expected = (!gone.contains(id)).then_some(k as f32);
            assert_eq!(found, expected, "entity {id}");
            assert_eq!(world.get_mut(*id).is_some(), expected.is_some(), "entity {id}");
        }
        for id in [0, late + 1, EntityId::MAX] {
            assert!(world.get(id).is_none(), "entity {id} was never spawned");
        }
        assert_eq!(world.len(), ids.len() + 1 - gone.len());
    }

    #[test]
    fn many_entities_are_lent_together_each_once() {
        // After despawns in the middle, every run of ids (consecutive, or with a gap) finds
        // what `get` finds; an id gone, never spawned, or not above the one before it (lent
        // already) is none.
        let mut world = World::new(64);
        let ids: Vec<EntityId> = (0..20).map(|k| world.spawn(marked(k)).unwrap()).collect();
        for id in [3, 4, 11] {
            world.despawn(id).unwrap();
        }
        let x = |e: Option<&mut Entity>| e.map(|e| e.transform.position.x);
        for first in 0..ids.len() as EntityId + 2 {
            for run in [[first, first + 1, first + 2], [first, first + 1, first + 5]] {
                let expected = run.map(|id| world.get(id).map(|e| e.transform.position.x));
                assert_eq!(world.get_many_mut(run).map(x), expected, "{run:?}");
            }
        }
        let [a, b, c] = world.get_many_mut([6, 6, 5]);
        assert_eq!([x(a), x(b), x(c)], [Some(5.0), None, None]);
        let [a, b] = world.get_many_mut([9, 8]);
        assert_eq!([x(a), x(b)], [Some(8.0), None]);
        world.get_many_mut([2, 7])[1].as_mut().unwrap().transform.position.x = 70.0;
        assert_eq!(world.get(7).unwrap().transform.position.x, 70.0);
    }

    #[test]
    fn a_run_of_consecutive_rows_is_lent_whole_and_marked() {
        // Runs across a word of marks (rows 62 to 64) and at the end: each run of ids in
        // consecutive rows is lent as `get` finds it, with exactly its rows marked; a run
        // with a despawned id, one past the end, or out of order is not lent, and marks
        // nothing.
        let mut world = World::new(128);
        let ids: Vec<EntityId> = (0..70).map(|k| world.spawn(marked(k)).unwrap()).collect();
        world.despawn(30).unwrap();
        let x = |e: &mut Entity| e.transform.position.x;
        for first in 0..ids.len() as EntityId + 2 {
            world.untouch();
            let run = [first, first + 1, first + 2];
            let expected = run.map(|id| world.get(id).map(|e| e.transform.position.x));
            let lent = world.get_run_mut(run).map(|run| run.map(x));
            let whole = expected.iter().all(Option::is_some);
            assert_eq!(lent, whole.then(|| expected.map(Option::unwrap)), "{run:?}");
            let touched: Vec<usize> = world.touched_rows().unwrap().collect();
            let row = |id: EntityId| id as usize - 1 - usize::from(id > 30);
            let rows: Vec<usize> = if whole { run.map(row).to_vec() } else { vec![] };
            assert_eq!(touched, rows, "{run:?}");
        }
        assert!(world.get_run_mut([5, 4]).is_none());
        let [a, b] = world.get_run_mut([68, 69]).unwrap();
        (a.transform.position.x, b.transform.position.x) = (1.0, 2.0);
        assert_eq!(world.get(69).unwrap().transform.position.x, 2.0);
    }
}
