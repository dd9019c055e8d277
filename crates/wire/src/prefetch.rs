//! A hint to the core: start fetching a value's cache line now, so that a read of it later
//! finds it in the cache, or at least on its way.
//!
//! A server worker with many rooms reads each connection's state once a tick, after the other
//! rooms' work has pushed it out of the core's caches: each first read of a line waits on
//! memory. A host that holds a batch of datagrams can ask for the lines each one will read
//! before it takes the first, so that the batch's misses overlap instead of coming one after
//! another (`rally_proto::Endpoint::prefetch`). Here rather than in the protocol crate so
//! that every layer can use it without a dependency of its own.

/// Asks for the cache line holding the start of `value` (into every level of the cache).
/// Nothing is read and nothing changes: a hint the core may drop. A no-op off x86-64.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    safe_arch::prefetch_t0(value);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
