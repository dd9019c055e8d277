//! What the I/O thread hands the game thread without either ever waiting for the other.
//!
//! A frame's calls must not stop behind the I/O thread: on a loaded machine the scheduler
//! preempts that thread for milliseconds at a time, and a lock it holds then holds the game
//! too. So the I/O thread publishes a [`View`] of the session (the interpolator's inputs, not
//! its output, so that the game samples it at the frame's own time) through a triple buffer,
//! and sends events through a channel; the game thread sends its inputs and presents back
//! through another. None of these takes a lock.

use crate::error::FfiError;
use crate::types::RallyEntity;
use rally_engine::{Interpolator, Resting};
use rally_proto::Instant;
use rally_wire::EntityState;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// What a frame reads, as the I/O thread last left it.
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// The session's interpolator, for the entities a frame samples.
    pub(crate) interpolator: Interpolator,
    /// Every entity as the read gives it, ids ascending: its newest state, class and holder.
    pub(crate) rows: Vec<RallyEntity>,
    /// How each row shows at a frame's time, as columns (one pass, nothing else in the
    /// cache): a frame before `from` samples `track`, in the timeline of `class`; one at or
    /// past it shows the row as it is ([`Resting`]).
    pub(crate) from: Vec<f64>,
    pub(crate) class: Vec<u8>,
    pub(crate) track: Vec<u32>,
    /// What `rally_client_update` says: fine, or why the connection is over.
    pub(crate) status: Result<(), FfiError>,
    /// Whether an input can be sent: connecting or connected, or why not.
    pub(crate) live: Result<(), FfiError>,
    /// The newest arrival the session had handled: what a frame reading this view can show.
    pub(crate) arrived_by: Instant,
}

impl Default for View {
    fn default() -> Self {
        Self {
            interpolator: Interpolator::default(),
            rows: Vec::new(),
            from: Vec::new(),
            class: Vec::new(),
            track: Vec::new(),
            status: Ok(()),
            live: Err(FfiError::NotConnected),
            arrived_by: Instant::ZERO,
        }
    }
}

impl View {
    /// Fills the rows and columns from `shown` (the newest states, ids ascending) and the
    /// interpolator's [`Resting`] of each, which `tag` fills the class and holder of. Only what
    /// changed is written: in a room mostly at rest most rows are as the copy already holds
    /// them, and a row left alone stays clean in the game thread's cache. The buffers are
    /// reused: nothing is allocated in a steady room.
    pub(crate) fn fill_rows(
        &mut self,
        shown: &[EntityState],
        resting: impl Iterator<Item = Resting>,
        mut entity: impl FnMut(EntityState) -> RallyEntity,
    ) {
        let mut count = 0;
        for (i, (state, rest)) in shown.iter().zip(resting).enumerate() {
            set(&mut self.rows, i, entity(*state));
            // The interpolator's newest can differ from the session's (a repeated pose keeps
            // the older update's velocities): a frame samples such an entity.
            let same = rest.state == *state;
            set(&mut self.from, i, if same { rest.from } else { f64::INFINITY });
            set(&mut self.class, i, rest.class.min(3));
            set(&mut self.track, i, rest.track);
            count = i + 1;
        }
        self.rows.truncate(count);
        self.from.truncate(count);
        self.class.truncate(count);
        self.track.truncate(count);
    }

    /// Every entity into `out`: the rows as they are, or (`at`) as a frame at that time shows
    /// them, sampling only the entities that frame is before the rest of.
    pub(crate) fn read(&self, at: Option<Instant>, out: &mut EntitiesOut<'_>) {
        out.put_all(&self.rows);
        let Some(at) = at else { return };
        let frame = self.interpolator.frame(at);
        let times = [0, 1, 2, 3].map(|class| frame.time(class));
        let columns = self.from.iter().zip(&self.class).zip(&self.track);
        for (i, ((&from, &class), &track)) in columns.enumerate() {
            if times[usize::from(class)] < from {
                if let Some(state) = self.interpolator.sample_track(&frame, track) {
                    out.put_motion(i, &state);
                }
            }
        }
    }
}

/// Puts `value` at `i` of `column` (`i` at most its length), writing only if it differs.
fn set<T: PartialEq>(column: &mut Vec<T>, i: usize, value: T) {
    match column.get_mut(i) {
        Some(old) if *old == value => {}
        Some(old) => *old = value,
        None => column.push(value),
    }
}

/// The caller's array of entities, as the read writes it.
pub(crate) struct EntitiesOut<'a> {
    out: &'a mut [std::mem::MaybeUninit<RallyEntity>],
}

impl<'a> EntitiesOut<'a> {
    /// Over `out`.
    pub(crate) fn new(out: &'a mut [std::mem::MaybeUninit<RallyEntity>]) -> Self {
        Self { out }
    }

    /// Entity `i` (ignored past the array's end: a read hands out the count it checked).
    pub(crate) fn put(&mut self, i: usize, entity: RallyEntity) {
        if let Some(slot) = self.out.get_mut(i) {
            slot.write(entity);
        }
    }

    /// The first `rows.len()` entities (as many as fit).
    fn put_all(&mut self, rows: &[RallyEntity]) {
        for (slot, row) in self.out.iter_mut().zip(rows) {
            slot.write(*row);
        }
    }

    /// Entity `i`'s motion, its other fields as `put_all` left them.
    fn put_motion(&mut self, i: usize, state: &EntityState) {
        let Some(slot) = self.out.get_mut(i) else { return };
        // SAFETY: `put_all` wrote every slot it reaches before any motion is put; `i` is one
        // of its rows (the columns are as long as the rows).
        #[allow(unsafe_code)]
        let entity = unsafe { slot.assume_init_mut() };
        entity.position = state.position.into();
        entity.rotation = state.rotation.into();
        entity.linear_velocity = state.linear_velocity.into();
        entity.angular_velocity = state.angular_velocity.into();
    }
}

/// Three copies of a value: the writer fills its own, then swaps it with the middle one; the
/// reader swaps its own with the middle one when that is newer. Each copy belongs to one side
/// at a time, so neither side ever waits; the reader sees the newest complete copy.
#[derive(Debug)]
struct Triple<T> {
    slots: [UnsafeCell<T>; 3],
    /// The middle copy's index, with [`FRESH`] set when the writer put it there since the
    /// reader last took it.
    middle: AtomicU8,
}

const FRESH: u8 = 4;

// SAFETY: each slot is touched only by the side whose index names it (the writer's, the
// reader's, or nobody's: the middle one), and an index changes hands only through `middle`'s
// acquire-release swaps, which order the writes to a slot before the reads of it.
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for Triple<T> {}

/// The writer's side.
#[derive(Debug)]
pub(crate) struct Publisher<T> {
    shared: Arc<Triple<T>>,
    index: u8,
}

/// The reader's side.
#[derive(Debug)]
pub(crate) struct Reader<T> {
    shared: Arc<Triple<T>>,
    index: u8,
}

/// A triple buffer of `T`, each copy starting as `T::default()`.
pub(crate) fn triple<T: Default>() -> (Publisher<T>, Reader<T>) {
    let shared = Arc::new(Triple {
        slots: std::array::from_fn(|_| UnsafeCell::new(T::default())),
        middle: AtomicU8::new(1),
    });
    (Publisher { shared: Arc::clone(&shared), index: 0 }, Reader { shared, index: 2 })
}

#[allow(unsafe_code)]
impl<T> Publisher<T> {
    /// The writer's own copy, to fill before [`Publisher::publish`].
    pub(crate) fn back(&mut self) -> &mut T {
        // SAFETY: the slot at `index` is the writer's alone until it publishes it (above), and
        // `&mut self` keeps this borrow the only one.
        unsafe { &mut *self.shared.slots[usize::from(self.index)].get() }
    }

    /// Hands the writer's copy to the reader; the writer gets the middle one back.
    pub(crate) fn publish(&mut self) {
        let old = self.shared.middle.swap(self.index | FRESH, Ordering::AcqRel);
        self.index = old & !FRESH;
    }
}

#[allow(unsafe_code)]
impl<T> Reader<T> {
    /// The newest copy published, now the reader's own until the next call.
    pub(crate) fn latest(&mut self) -> &mut T {
        if self.shared.middle.load(Ordering::Relaxed) & FRESH != 0 {
            let old = self.shared.middle.swap(self.index, Ordering::AcqRel);
            self.index = old & !FRESH;
        }
        // SAFETY: the slot at `index` is the reader's alone until it swaps it back, and
        // `&mut self` keeps this borrow the only one.
        unsafe { &mut *self.shared.slots[usize::from(self.index)].get() }
    }

    /// The copy the last [`Reader::latest`] gave, without looking for a newer one.
    pub(crate) fn current(&mut self) -> &mut T {
        // SAFETY: as in `latest`.
        unsafe { &mut *self.shared.slots[usize::from(self.index)].get() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_from_rows_and_columns_is_the_interpolators_own_sample() {
        // Goal: the game thread's read of a published view gives, for every entity, what the
        // session's interpolator samples for the same frame (and the newest states without a
        // time), with the rows' other fields (class, holder) kept. Method: moving entities,
        // resting ones, one whose velocity changes while its pose repeats (the interpolator
        // keeps the older update) and one it never saw, jittered arrivals; frames around the
        // newest update.
        use crate::client::entity;
        use glam::{Quat, Vec3};
        let mut interpolator = Interpolator::default();
        let mut view = View::default();
        for k in 0..30u32 {
            let server = std::time::Duration::from_millis(u64::from(k) * 8);
            let arrived = Instant::ZERO
                + server
                + std::time::Duration::from_micros(20_000 + u64::from(k % 4) * 1_700);
            let x = k as f32;
            let state = |id, position: f32| EntityState {
                id,
                position: Vec3::new(position, 1.0, 0.0),
                rotation: Quat::from_rotation_z(position * 0.05),
                linear_velocity: Vec3::splat(x),
                angular_velocity: Vec3::ZERO,
            };
            let all = [state(1, x), state(2, x.min(5.0)), state(3, 3.0), state(9, -x)];
            interpolator.update(arrived, server, all[..3].iter().copied());
            // Entity 9 comes and goes: the view's rows grow and shrink.
            let shown = &all[..if k % 5 == 4 { 3 } else { 4 }];
            view.interpolator.clone_from(&interpolator);
            let tag = |state| RallyEntity { holder: 7, ..entity(state) };
            view.fill_rows(shown, interpolator.resting(shown), tag);
            for dt_us in [0u64, 3_000, 9_000, 40_000] {
                let at = arrived + std::time::Duration::from_micros(dt_us);
                for time in [Some(at), None] {
                    // Filled with a sentinel, so that a row the read skipped shows.
                    let mut out = [std::mem::MaybeUninit::new(RallyEntity::default()); 4];
                    view.read(time, &mut EntitiesOut::new(&mut out));
                    // SAFETY: made initialised above.
                    #[allow(unsafe_code)]
                    let ours = out.map(|e| unsafe { e.assume_init() });
                    let theirs: Vec<_> = match time {
                        Some(at) => interpolator.sample_each(at, shown).map(tag).collect(),
                        None => shown.iter().copied().map(tag).collect(),
                    };
                    assert_eq!(view.rows.len(), shown.len(), "update {k}");
                    let ours = &ours[..shown.len()];
                    assert_eq!(ours, theirs, "update {k}, {dt_us} us, {time:?}");
                }
            }
        }
    }

    #[test]
    fn the_reader_sees_the_newest_whole_copy_and_keeps_its_own_until_then() {
        let (mut writer, mut reader) = triple::<Vec<u32>>();
        assert!(reader.latest().is_empty());
        *writer.back() = vec![1, 1];
        writer.publish();
        *writer.back() = vec![2, 2];
        writer.publish();
        assert_eq!(*reader.latest(), [2, 2], "the newer of two publishes");
        assert_eq!(*reader.latest(), [2, 2], "nothing new: the same copy");
        writer.back().clear();
        writer.back().extend([3, 3]);
        assert_eq!(*reader.latest(), [2, 2], "a copy being written is not read");
        writer.publish();
        assert_eq!(*reader.latest(), [3, 3]);
    }

    #[test]
    fn copies_written_on_one_thread_arrive_whole_on_another() {
        // Goal: no torn reads under real concurrency. Each copy is a run of one number.
        let (mut writer, mut reader) = triple::<Vec<u32>>();
        let thread = std::thread::spawn(move || {
            for n in 1..=20_000u32 {
                let back = writer.back();
                back.clear();
                back.extend(std::iter::repeat_n(n, 64));
                writer.publish();
            }
        });
        let mut last = 0;
        while last < 20_000 {
            let copy = reader.latest();
            let Some(&n) = copy.first() else { continue };
            assert!(copy.len() == 64 && copy.iter().all(|&x| x == n), "a torn copy");
            assert!(n >= last, "went back from {last} to {n}");
            last = n;
        }
        thread.join().unwrap();
    }
}
