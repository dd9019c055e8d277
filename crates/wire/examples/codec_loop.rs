//! Encodes or decodes the W4 reference snapshot in a loop, for profilers (perf, callgrind):
//! `codec_loop <full|delta|history> <encode|decode> [iterations]`; `history` encodes the delta
//! through a `SnapshotHistory`.

use rally_wire::{reference, Snapshot, SnapshotConfig, SnapshotHistory};
use std::hint::black_box;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let history = args.get(1).map(String::as_str) == Some("history");
    let delta = history || args.get(1).map(String::as_str) == Some("delta");
    let encode = args.get(2).map(String::as_str) == Some("encode");
    let iterations: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(200_000);
    let config = SnapshotConfig::default();
    let (baseline, current) = reference::snapshots(&config, 1, 1000);
    let mut buf = vec![0u8; 64 * 1024];
    let mut ring = SnapshotHistory::new(8);
    ring.push(&baseline).expect("first push");
    ring.push(&current).expect("ticks increase");
    let encode_once = |buf: &mut [u8]| {
        let result = if history {
            ring.encode_delta(&config, baseline.tick(), buf)
        } else if delta {
            config.encode_delta(black_box(&baseline), black_box(&current), buf)
        } else {
            config.encode_full(black_box(&current), buf)
        };
        result.expect("64 KiB holds the reference")
    };
    let len = encode_once(&mut buf);
    let mut out = Snapshot::default();
    for _ in 0..iterations {
        if encode {
            black_box(encode_once(&mut buf));
        } else {
            let base = delta.then_some(&baseline);
            config.decode(black_box(&buf[..len]), base, &mut out).expect("valid");
        }
    }
    println!("{len} bytes, {} entities", out.len());
}
