//! A global allocator that counts allocations, so benchmarks can report heap allocations per
//! operation for Rally and for every peer in the same run. The cost is one relaxed atomic add per
//! allocation. Underneath is the heap the `rally` binary ships with (mimalloc: crates/app's
//! `main.rs` says why), so that the host the benchmarks measure is the one users run.

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Forwards to mimalloc, counting `alloc` and `realloc` calls.
pub struct CountingAllocator;

// SAFETY: every method forwards to `MiMalloc` with the caller's arguments unchanged, so this
// allocator upholds exactly the contract `MiMalloc` does; the counter does not touch the memory.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; see above.
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; see above.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; see above.
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; see above.
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// Allocations since the process started.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}
