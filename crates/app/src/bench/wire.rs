//! `rally bench wire`: the W4 workload of shared/DESIGN.md.
//!
//! Three cases, each codec on the same data in the same run:
//! - `snapshot_full`: the 256-body reference snapshot. Rally encodes its quantized snapshot; the
//!   general-purpose codecs encode the same bodies as plain structs of f32s, which is what a game
//!   without a snapshot codec would send.
//! - `snapshot_delta`: the snapshot one tick later, 64 bodies moved. Rally encodes a delta against
//!   the previous snapshot; the others have no delta, so they encode just the 64 changed bodies,
//!   the best a general-purpose codec can do without one.
//! - `complex_message`: the reference match report. Rally's user-message path is bitcode through
//!   serde, so `rally` here measures that path against bitcode's own derive.

use super::harness::{self, Measurement, Plan, Task};
use super::reference_message::{self, MatchReport};
use super::WireArgs;
use crate::machine::Machine;
use crate::plot::{self, Panel};
use rally_wire::{reference, EntityState, MessageCodec, Snapshot, SnapshotConfig};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::error::Error;
use std::hint::black_box;
use std::time::Duration;

const CODECS: [&str; 5] = ["rally", "bitcode", "postcard", "rmp-serde", "serde_json"];
const CASES: [&str; 3] = ["snapshot_full", "snapshot_delta", "complex_message"];

/// One body as a general-purpose codec sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
struct BodyRow {
    id: u32,
    position: [f32; 3],
    rotation: [f32; 4],
    linear_velocity: [f32; 3],
    angular_velocity: [f32; 3],
}

impl From<&EntityState> for BodyRow {
    fn from(e: &EntityState) -> Self {
        Self {
            id: e.id,
            position: e.position.to_array(),
            rotation: e.rotation.to_array(),
            linear_velocity: e.linear_velocity.to_array(),
            angular_velocity: e.angular_velocity.to_array(),
        }
    }
}

/// The inputs of every case, built once from the seed.
struct Data {
    config: SnapshotConfig,
    baseline: Snapshot,
    current: Snapshot,
    bodies: Vec<EntityState>,
    rows_full: Vec<BodyRow>,
    rows_delta: Vec<BodyRow>,
    message: MatchReport,
}

impl Data {
    fn new(seed: u64) -> Self {
        let config = SnapshotConfig::default();
        let (mut bodies, moving) = reference::bodies(seed);
        let baseline = reference::quantize(&config, 1000, &bodies);
        reference::step(&mut bodies, &moving);
        let current = reference::quantize(&config, 1001, &bodies);
        let rows_full: Vec<BodyRow> = bodies.iter().map(BodyRow::from).collect();
        let rows_delta = bodies
            .iter()
            .zip(baseline.entities().iter().zip(current.entities()))
            .filter(|(_, (old, new))| old != new)
            .map(|(body, _)| BodyRow::from(body))
            .collect();
        let message = reference_message::generate(seed);
        Self { config, baseline, current, bodies, rows_full, rows_delta, message }
    }
}

/// A general-purpose codec with the buffers it reuses between operations.
struct Peer {
    name: &'static str,
    bitcode: bitcode::Buffer,
    /// Output for postcard (a fixed slice) and for rmp-serde and serde_json (a reused Vec).
    bytes: Vec<u8>,
}

impl Peer {
    fn new(name: &'static str) -> Self {
        Self { name, bitcode: bitcode::Buffer::new(), bytes: Vec::with_capacity(1 << 20) }
    }

    fn encode<T: Serialize + bitcode::Encode>(&mut self, value: &T) -> usize {
        match self.name {
            "bitcode" => self.bitcode.encode(value).len(),
            "postcard" => {
                self.bytes.resize(1 << 20, 0);
                // 1 MiB holds every case with room to spare.
                postcard::to_slice(value, &mut self.bytes).expect("1 MiB suffices").len()
            }
            "rmp-serde" => {
                self.bytes.clear();
                rmp_serde::encode::write(&mut self.bytes, value).expect("writing to a Vec");
                self.bytes.len()
            }
            "serde_json" => {
                self.bytes.clear();
                serde_json::to_writer(&mut self.bytes, value).expect("writing to a Vec");
                self.bytes.len()
            }
            other => unreachable!("no peer named {other}"),
        }
    }

    fn encoded<T: Serialize + bitcode::Encode>(&mut self, value: &T) -> Vec<u8> {
        match self.name {
            "bitcode" => self.bitcode.encode(value).to_vec(),
            _ => {
                let len = self.encode(value);
                self.bytes[..len].to_vec()
            }
        }
    }

    fn decode<T: DeserializeOwned + bitcode::DecodeOwned>(&mut self, bytes: &[u8]) -> T {
        match self.name {
            "bitcode" => self.bitcode.decode(bytes).expect("bytes from encode"),
            "postcard" => postcard::from_bytes(bytes).expect("bytes from encode"),
            "rmp-serde" => rmp_serde::from_slice(bytes).expect("bytes from encode"),
            "serde_json" => serde_json::from_slice(bytes).expect("bytes from encode"),
            other => unreachable!("no peer named {other}"),
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, Serialize)]
struct Row {
    codec: &'static str,
    case: &'static str,
    bytes: usize,
    encode_ns: f64,
    decode_ns: f64,
    /// Heap allocations of one encode plus one decode.
    allocs_per_op: f64,
    encode_allocs_per_op: f64,
    decode_allocs_per_op: f64,
    encode_ns_range: [f64; 2],
    decode_ns_range: [f64; 2],
    bytes_vs_bitcode: f64,
    encode_vs_bitcode: f64,
    decode_vs_bitcode: f64,
    /// serde_json's encode + decode time divided by this codec's.
    speedup_vs_serde_json: f64,
}

pub fn run(args: &WireArgs) -> Result<(), Box<dyn Error>> {
    let machine = Machine::detect();
    if machine.profile == "debug" {
        eprintln!("warning: this is a debug build; timings mean little (use cargo run --release)");
    }
    let data = Data::new(args.seed);
    let sizes = verify(&data)?;
    let plan = if args.quick {
        Plan { batches: 21, batch_time: Duration::from_millis(4) }
    } else {
        Plan { batches: 101, batch_time: Duration::from_millis(15) }
    };
    let quantize_ns = measure_quantize(&data, plan);
    let measurements = {
        let mut tasks = tasks(&data);
        harness::measure(&mut tasks, plan)
    };
    let rows = collate(&measurements, &sizes);
    print_table(&rows, quantize_ns);
    let targets = targets(&rows);
    for t in &targets {
        println!("{} {}", if t.met { "MET " } else { "MISS" }, t.text);
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "bench": "wire",
            "quick": args.quick,
            "seed": args.seed,
            "machine": machine,
            "plan": { "batches": plan.batches, "batch_ms": plan.batch_time.as_secs_f64() * 1e3 },
            "rally_quantize_ns": quantize_ns,
            "results": rows,
            "targets": targets,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot {
        let path = dir.join("wire.png");
        draw(&rows, &path)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Round-trips every codec on every case before timing anything, so a broken codec cannot post a
/// fast time, and returns each encoding's size.
fn verify(data: &Data) -> Result<Vec<(&'static str, &'static str, usize)>, Box<dyn Error>> {
    let mut sizes = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Snapshot::default();
    let c = &data.config;
    let full = c.encode_full(&data.current, &mut buf)?;
    c.decode(&buf[..full], None, &mut out)?;
    check(out == data.current, "rally full snapshot")?;
    let delta = c.encode_delta(&data.baseline, &data.current, &mut buf)?;
    c.decode(&buf[..delta], Some(&data.baseline), &mut out)?;
    check(out == data.current, "rally delta snapshot")?;
    let codec = MessageCodec::default();
    let message = codec.encode(&data.message)?;
    check(codec.decode::<MatchReport>(&message)? == data.message, "rally message")?;
    sizes.extend([
        ("rally", CASES[0], full),
        ("rally", CASES[1], delta),
        ("rally", CASES[2], message.len()),
    ]);
    for name in &CODECS[1..] {
        let mut peer = Peer::new(name);
        let bytes = peer.encoded(&data.rows_full);
        check(peer.decode::<Vec<BodyRow>>(&bytes) == data.rows_full, name)?;
        sizes.push((name, CASES[0], bytes.len()));
        let bytes = peer.encoded(&data.rows_delta);
        check(peer.decode::<Vec<BodyRow>>(&bytes) == data.rows_delta, name)?;
        sizes.push((name, CASES[1], bytes.len()));
        let bytes = peer.encoded(&data.message);
        check(peer.decode::<MatchReport>(&bytes) == data.message, name)?;
        sizes.push((name, CASES[2], bytes.len()));
    }
    Ok(sizes)
}

fn check(ok: bool, what: &str) -> Result<(), Box<dyn Error>> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: decoded value differs from the input; refusing to time it").into())
    }
}

/// The server's per-tick cost of quantizing the 256 bodies, shared by all its clients.
fn measure_quantize(data: &Data, plan: Plan) -> f64 {
    let mut snapshot = Snapshot::with_capacity(0, data.bodies.len());
    let mut tasks = vec![Task {
        name: "rally/quantize".into(),
        run: Box::new(|n| {
            for _ in 0..n {
                snapshot.clear(1001);
                for body in black_box(&data.bodies) {
                    // Bodies are in ascending id order.
                    let _ = snapshot.push(data.config.quantize(body));
                }
                black_box(&snapshot);
            }
        }),
    }];
    harness::measure(&mut tasks, Plan { batches: plan.batches.min(21), ..plan })[0].ns_median
}

fn tasks(data: &Data) -> Vec<Task<'_>> {
    let mut tasks = rally_tasks(data);
    for name in &CODECS[1..] {
        tasks.extend(peer_tasks(name, CASES[0], &data.rows_full));
        tasks.extend(peer_tasks(name, CASES[1], &data.rows_delta));
        tasks.extend(peer_tasks(name, CASES[2], &data.message));
    }
    tasks
}

fn rally_tasks(data: &Data) -> Vec<Task<'_>> {
    let c = data.config;
    let (baseline, current) = (&data.baseline, &data.current);
    let mut scratch = vec![0u8; 64 * 1024];
    let len = c.encode_full(current, &mut scratch).expect("verified");
    let full = scratch[..len].to_vec();
    let len = c.encode_delta(baseline, current, &mut scratch).expect("verified");
    let delta = scratch[..len].to_vec();
    let codec = MessageCodec::default();
    let message = codec.encode(&data.message).expect("verified");
    let (mut b1, mut b2) = (scratch.clone(), scratch);
    let (mut out1, mut out2) = (Snapshot::default(), Snapshot::default());
    vec![
        task("snapshot_full/rally/encode", move |n| {
            for _ in 0..n {
                black_box(c.encode_full(black_box(current), &mut b1).ok());
            }
        }),
        task("snapshot_full/rally/decode", move |n| {
            for _ in 0..n {
                black_box(c.decode(black_box(&full), None, &mut out1).ok());
            }
        }),
        task("snapshot_delta/rally/encode", move |n| {
            for _ in 0..n {
                black_box(c.encode_delta(black_box(baseline), black_box(current), &mut b2).ok());
            }
        }),
        task("snapshot_delta/rally/decode", move |n| {
            for _ in 0..n {
                black_box(c.decode(black_box(&delta), Some(baseline), &mut out2).ok());
            }
        }),
        task("complex_message/rally/encode", move |n| {
            for _ in 0..n {
                black_box(codec.encode(black_box(&data.message)).ok());
            }
        }),
        task("complex_message/rally/decode", move |n| {
            for _ in 0..n {
                black_box(codec.decode::<MatchReport>(black_box(&message)).ok());
            }
        }),
    ]
}

fn peer_tasks<'a, T>(name: &'static str, case: &str, value: &'a T) -> [Task<'a>; 2]
where
    T: Serialize + DeserializeOwned + bitcode::Encode + bitcode::DecodeOwned + 'a,
{
    let mut encoder = Peer::new(name);
    let mut decoder = Peer::new(name);
    let bytes = encoder.encoded(value);
    [
        task(&format!("{case}/{name}/encode"), move |n| {
            for _ in 0..n {
                black_box(encoder.encode(black_box(value)));
            }
        }),
        task(&format!("{case}/{name}/decode"), move |n| {
            for _ in 0..n {
                black_box(decoder.decode::<T>(black_box(&bytes)));
            }
        }),
    ]
}

fn task<'a>(name: &str, run: impl FnMut(u64) + 'a) -> Task<'a> {
    Task { name: name.into(), run: Box::new(run) }
}

fn collate(
    measurements: &[Measurement],
    sizes: &[(&'static str, &'static str, usize)],
) -> Vec<Row> {
    let find = |case: &str, codec: &str, op: &str| {
        let name = format!("{case}/{codec}/{op}");
        measurements.iter().find(|m| m.name == name).expect("every task was measured")
    };
    let mut rows = Vec::new();
    for &(codec, case, bytes) in sizes {
        let (enc, dec) = (find(case, codec, "encode"), find(case, codec, "decode"));
        let (bc_enc, bc_dec) = (find(case, "bitcode", "encode"), find(case, "bitcode", "decode"));
        let (js_enc, js_dec) =
            (find(case, "serde_json", "encode"), find(case, "serde_json", "decode"));
        let bc_bytes = sizes.iter().find(|s| s.0 == "bitcode" && s.1 == case).expect("measured").2;
        rows.push(Row {
            codec,
            case,
            bytes,
            encode_ns: enc.ns_median,
            decode_ns: dec.ns_median,
            allocs_per_op: enc.allocs_per_op + dec.allocs_per_op,
            encode_allocs_per_op: enc.allocs_per_op,
            decode_allocs_per_op: dec.allocs_per_op,
            encode_ns_range: [enc.ns_min, enc.ns_max],
            decode_ns_range: [dec.ns_min, dec.ns_max],
            bytes_vs_bitcode: bytes as f64 / bc_bytes as f64,
            encode_vs_bitcode: enc.ns_median / bc_enc.ns_median,
            decode_vs_bitcode: dec.ns_median / bc_dec.ns_median,
            speedup_vs_serde_json: (js_enc.ns_median + js_dec.ns_median)
                / (enc.ns_median + dec.ns_median),
        });
    }
    rows.sort_by_key(|r| {
        let case = CASES.iter().position(|c| *c == r.case);
        (case, CODECS.iter().position(|c| *c == r.codec))
    });
    rows
}

fn print_table(rows: &[Row], quantize_ns: f64) {
    println!(
        "{:<16} {:<11} {:>7} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8} {:>9}",
        "case",
        "codec",
        "bytes",
        "encode ns",
        "decode ns",
        "allocs/op",
        "bytes/bc",
        "enc/bc",
        "dec/bc",
        "x json"
    );
    for r in rows {
        println!(
            "{:<16} {:<11} {:>7} {:>11.0} {:>11.0} {:>9.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1}",
            r.case,
            r.codec,
            r.bytes,
            r.encode_ns,
            r.decode_ns,
            r.allocs_per_op,
            r.bytes_vs_bitcode,
            r.encode_vs_bitcode,
            r.decode_vs_bitcode,
            r.speedup_vs_serde_json
        );
    }
    println!(
        "rally quantize (256 bodies, once per tick for all clients): {quantize_ns:.0} ns; \
         bc = bitcode, x json = serde_json's encode+decode time / this codec's"
    );
}

/// One W4 target of shared/DESIGN.md and whether this run met it.
#[derive(Debug, Serialize)]
struct Target {
    text: String,
    met: bool,
}

fn targets(rows: &[Row]) -> Vec<Target> {
    let row =
        |case: &str| rows.iter().find(|r| r.codec == "rally" && r.case == case).expect("rally ran");
    let (full, delta) = (row(CASES[0]), row(CASES[1]));
    let per_body = full.bytes as f64 / reference::BODIES as f64;
    let mut targets = vec![
        Target {
            text: format!("full snapshot {per_body:.2} bytes/body <= 16"),
            met: per_body <= 16.0,
        },
        Target {
            text: format!("delta snapshot {} bytes <= 1024", delta.bytes),
            met: delta.bytes <= 1024,
        },
    ];
    for r in [full, delta] {
        let time = r.encode_vs_bitcode.max(r.decode_vs_bitcode);
        targets.push(Target {
            text: format!(
                "{}: encode {:.2}x and decode {:.2}x bitcode's time <= 1.5x, bytes {:.2}x < 0.5x",
                r.case, r.encode_vs_bitcode, r.decode_vs_bitcode, r.bytes_vs_bitcode
            ),
            met: time <= 1.5 && r.bytes_vs_bitcode < 0.5,
        });
        targets.push(Target {
            text: format!(
                "{}: {:.0}x faster than serde_json >= 30x",
                r.case, r.speedup_vs_serde_json
            ),
            met: r.speedup_vs_serde_json >= 30.0,
        });
        targets.push(Target {
            text: format!("{}: {:.3} allocations per encode+decode == 0", r.case, r.allocs_per_op),
            met: r.allocs_per_op == 0.0,
        });
    }
    targets
}

fn draw(rows: &[Row], path: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let codecs: Vec<String> = CODECS.iter().map(|c| c.to_string()).collect();
    let pick = |case: &str, f: &dyn Fn(&Row) -> f64| -> Vec<f64> {
        CODECS
            .iter()
            .map(|c| rows.iter().find(|r| r.case == case && r.codec == *c).map_or(0.0, f))
            .collect()
    };
    let mut panels = Vec::new();
    for case in CASES {
        panels.push(Panel {
            title: format!("{case}: time per op (log)"),
            y_label: "ns".into(),
            groups: codecs.clone(),
            series: vec![
                ("encode".into(), pick(case, &|r| r.encode_ns)),
                ("decode".into(), pick(case, &|r| r.decode_ns)),
            ],
        });
    }
    for case in CASES {
        panels.push(Panel {
            title: format!("{case}: bytes (log)"),
            y_label: "bytes".into(),
            groups: codecs.clone(),
            series: vec![("bytes".into(), pick(case, &|r| r.bytes as f64))],
        });
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    plot::grouped_bars(path, "rally bench wire (W4): lower is better", 3, &panels)
}
