//! What the I/O thread hands the game thread without either ever waiting for the other.
//!
//! A frame's calls must not stop behind the I/O thread: on a loaded machine the scheduler
//! preempts that thread for milliseconds at a time, and a lock it holds then holds the game
//! too. So the I/O thread publishes a [`View`] of the session (the interpolator's inputs, not
//! its output, so that the game samples it at the frame's own time) through a triple buffer,
//! and sends events through a channel; the game thread sends its inputs and presents back
//! through another. None of these takes a lock.

use crate::error::FfiError;
use crate::roster::Tag;
use rally_engine::Interpolator;
use rally_proto::Instant;
use rally_wire::EntityState;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// What a frame reads, as the I/O thread last left it.
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// The session's interpolator, sampled by the reader at the frame's time.
    pub(crate) interpolator: Interpolator,
    /// The newest state of every entity, ids ascending.
    pub(crate) shown: Vec<EntityState>,
    /// Each entity's class and holder, ids ascending.
    pub(crate) tags: Vec<Tag>,
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
            shown: Vec::new(),
            tags: Vec::new(),
            status: Ok(()),
            live: Err(FfiError::NotConnected),
            arrived_by: Instant::ZERO,
        }
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
