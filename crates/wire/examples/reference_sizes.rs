//! Prints the encoded sizes of the W4 reference snapshot (full and delta) for a few seeds.

use rally_wire::{reference, SnapshotConfig};

fn main() {
    let config = SnapshotConfig::default();
    let mut buf = vec![0u8; 64 * 1024];
    for seed in 1..=5 {
        let (baseline, current) = reference::snapshots(&config, seed, 1000);
        let full = config.encode_full(&current, &mut buf).expect("64 KiB holds the reference");
        let delta = config.encode_delta(&baseline, &current, &mut buf).expect("same");
        let per_body = full as f64 / reference::BODIES as f64;
        println!("seed {seed}: full {full} B ({per_body:.2} B/body), delta {delta} B");
    }
}
