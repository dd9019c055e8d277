//! Decodes the W4 reference snapshot in a loop, for profilers (perf, callgrind).

use rally_wire::{reference, Snapshot, SnapshotConfig};

fn main() {
    let delta = std::env::args().nth(1).as_deref() == Some("delta");
    let config = SnapshotConfig::default();
    let (baseline, current) = reference::snapshots(&config, 1, 1000);
    let mut buf = vec![0u8; 64 * 1024];
    let len = if delta {
        config.encode_delta(&baseline, &current, &mut buf)
    } else {
        config.encode_full(&current, &mut buf)
    }
    .expect("64 KiB holds the reference");
    let mut out = Snapshot::default();
    let iterations = std::env::args().nth(2).and_then(|n| n.parse().ok()).unwrap_or(200_000);
    for _ in 0..iterations {
        let base = delta.then_some(&baseline);
        config.decode(std::hint::black_box(&buf[..len]), base, &mut out).expect("valid");
    }
    println!("{}", out.len());
}
