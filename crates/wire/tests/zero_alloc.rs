//! Goal: encoding and decoding snapshots allocates nothing once buffers are warm. Method: a
//! counting global allocator wraps the system one; after one warm-up round, repeated full and
//! delta encodes and decodes (records and columns) of the W4 reference snapshot must not
//! allocate at all.

use rally_wire::{reference, Snapshot, SnapshotConfig, SnapshotHistory};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator unchanged; counting has no effect on
// the memory handed out.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn snapshot_encode_and_decode_allocate_nothing_after_warm_up() {
    let config = SnapshotConfig::default();
    let (baseline, current) = reference::snapshots(&config, 11, 500);
    let mut buf = vec![0u8; 16 * 1024];
    let mut decoded = Snapshot::default();
    // The server's side: a history that takes a snapshot per tick and encodes per client.
    let mut history = SnapshotHistory::new(4);
    let mut ticks = [baseline.clone(), current.clone()];
    let mut tick = 0u32;
    let mut round = |buf: &mut [u8], decoded: &mut Snapshot| {
        tick += 1;
        let pushed = &mut ticks[tick as usize % 2];
        pushed.set_tick(tick);
        history.push(pushed).unwrap();
        if tick > 1 {
            history.encode_delta_records(&config, tick - 1, buf).unwrap();
            history.encode_delta(&config, tick - 1, buf).unwrap();
        }
        let full = config.encode_full(&current, buf).unwrap();
        config.decode(&buf[..full], None, decoded).unwrap();
        assert_eq!(decoded.len(), current.len());
        let delta = config.encode_delta_records(&baseline, &current, buf).unwrap();
        config.decode(&buf[..delta], Some(&baseline), decoded).unwrap();
        assert_eq!(*decoded, current);
        let columns = config.encode_delta(&baseline, &current, buf).unwrap();
        config.decode(&buf[..columns], Some(&baseline), decoded).unwrap();
        assert_eq!(*decoded, current);
    };
    let start = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..4 {
        // Fills the history's ring.
        round(&mut buf, &mut decoded);
    }
    // The warm-up grows the decoded snapshot, which proves the counter sees allocations.
    assert!(ALLOCATIONS.load(Ordering::Relaxed) > start);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..100 {
        round(&mut buf, &mut decoded);
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations in 100 warm rounds");
}
