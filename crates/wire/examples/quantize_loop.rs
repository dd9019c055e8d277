//! Quantizes the W4 reference bodies in a loop, for profilers.

use rally_wire::{reference, Snapshot, SnapshotConfig};

fn main() {
    let config = SnapshotConfig::default();
    let (bodies, _) = reference::bodies(1);
    let mut snapshot = Snapshot::with_capacity(0, bodies.len());
    let iterations: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    for _ in 0..iterations {
        snapshot.clear(1);
        for body in std::hint::black_box(&bodies) {
            snapshot.push(config.quantize(body)).expect("ascending ids");
        }
    }
    println!("{}", snapshot.len());
}
