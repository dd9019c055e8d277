//! The `rally` binary: see the library ([`rally_app`]) for everything it does.

/// The server's heap is mimalloc's, not the C library's. A worker at 32 rooms touches some
/// 2 MB of scattered state every tick period (connections, keys, histories, worlds) and waits
/// on every line of it that the third level, shared with the rest of the machine, has lost.
/// mimalloc keeps objects of one size together in pages of their own, where glibc's malloc
/// interleaves every size in one arena; Rally's own CPU per room-tick at 32 rooms fell from 26.7
/// to 20.5 us with it (docs/benchmarks.md, "Round 25"). It is built without its advice for
/// transparent huge pages (the `no_thp` feature): that took the host's resident memory from
/// about 100 to 280 MB at 32 rooms for a further gain not told apart from noise. A machine
/// whose THP mode is `always` gets huge pages anyway (docs/operating.md, "How the host works").
/// Libraries that embed Rally keep whatever allocator their program chose.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rally_app::main()
}
