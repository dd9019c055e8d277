//! `rally-bench wire`: the W4 workload of docs/design.md.
//!
//! Three cases, each codec on the same data in the same run:
//! - `snapshot_full`: the 256-body reference snapshot. Rally encodes its quantized snapshot; the
//!   general-purpose codecs encode the same bodies as plain structs of f32s, which is what a game
//!   without a snapshot codec would send.
//! - `snapshot_delta`: the snapshot one tick later, 64 bodies moved. Every codec does the same
//!   per-client job: the sender encodes what changed since the client's baseline; the receiver
//!   rebuilds the full current state from its baseline and the datagram, keeping the baseline (a
//!   later delta may refer to it). Finding what changed is per-tick work shared by all clients
//!   and is reported apart (`per_tick`): Rally's `SnapshotHistory` records change ticks when the
//!   snapshot is pushed and encodes a delta; for the others the bench compares the two ticks'
//!   bodies once, encodes the changed ones, and on receipt copies the baseline and overwrites the
//!   changed bodies, the best a general-purpose codec can do without a delta codec.
//! - `churn` (Rally alone, outside the table): the delta of `snapshot_delta` with one body
//!   despawned and one spawned among its updates, a tick of a shooter where projectiles come
//!   and go. The general-purpose stand-in above has no records for either.
//! - `complex_message`: the reference match report. Rally's user-message path is bitcode through
//!   serde, so `rally` here measures that path against bitcode's own derive.

use super::harness::{self, Measurement, Plan, Task};
use super::reference_message::{self, MatchReport};
use super::WireArgs;
use crate::machine::Machine;
use crate::plot::{self, Panel};
use rally_wire::{
    reference, EntityState, MessageCodec, QuantizedEntity, Snapshot, SnapshotConfig,
    SnapshotHistory,
};
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
    /// The server's history holding `baseline` and `current`.
    history: SnapshotHistory,
    /// `current` with one body despawned and one spawned, and a history holding it after
    /// `baseline`: a tick of a shooter, where projectiles come and go.
    churned: Snapshot,
    churn_history: SnapshotHistory,
    bodies: Vec<EntityState>,
    rows_baseline: Vec<BodyRow>,
    rows_full: Vec<BodyRow>,
    message: MatchReport,
}

impl Data {
    fn new(seed: u64) -> Self {
        let config = SnapshotConfig::default();
        let (mut bodies, moving) = reference::bodies(seed);
        let baseline = reference::quantize(&config, BASELINE_TICK, &bodies);
        let rows_baseline: Vec<BodyRow> = bodies.iter().map(BodyRow::from).collect();
        reference::step(&mut bodies, &moving);
        let current = reference::quantize(&config, CURRENT_TICK, &bodies);
        let rows_full: Vec<BodyRow> = bodies.iter().map(BodyRow::from).collect();
        let message = reference_message::generate(seed);
        let mut history = SnapshotHistory::new(64);
        history.push(&baseline).expect("the first push");
        history.push(&current).expect("ticks increase");
        let churned = churn(&current);
        let mut churn_history = SnapshotHistory::new(64);
        churn_history.push(&baseline).expect("the first push");
        churn_history.push(&churned).expect("ticks increase");
        Self {
            config,
            baseline,
            current,
            history,
            churned,
            churn_history,
            bodies,
            rows_baseline,
            rows_full,
            message,
        }
    }
}

/// `current` with its middle body gone and a body spawned past the largest id, with the gone
/// one's state.
fn churn(current: &Snapshot) -> Snapshot {
    let entities = current.entities();
    let gone = entities.len() / 2;
    let mut churned = Snapshot::with_capacity(current.tick(), entities.len());
    let kept = entities.iter().enumerate().filter(|(k, _)| *k != gone).map(|(_, e)| *e);
    let spawned =
        entities.last().map(|last| QuantizedEntity { id: last.id + 1000, ..entities[gone] });
    for e in kept.chain(spawned) {
        churned.push(e).expect("ascending ids");
    }
    churned
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

/// The encoded size of one case for one codec: (codec, case, bytes).
type Size = (&'static str, &'static str, usize);

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
    let measurements = {
        let mut tasks = per_tick_tasks(&data);
        tasks.extend(codec_tasks(&data));
        harness::measure(&mut tasks, plan)
    };
    let rows = collate(&measurements, &sizes);
    let (per_tick, churn) = (timings(&measurements, "per_tick/"), timings(&measurements, "churn/"));
    print_table(&rows, &per_tick, &churn);
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
            "per_tick": per_tick,
            "churn": churn,
            "results": rows,
            "targets": targets,
        });
        super::write_json(path, &report)?;
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
fn verify(data: &Data) -> Result<Vec<Size>, Box<dyn Error>> {
    let mut sizes = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Snapshot::default();
    let c = &data.config;
    let full = c.encode_full(&data.current, &mut buf)?;
    c.decode(&buf[..full], None, &mut out)?;
    check(out == data.current, "rally full snapshot")?;
    let delta = c.encode_delta(&data.baseline, &data.current, &mut buf)?;
    let compared = buf[..delta].to_vec();
    let tracked = data.history.encode_delta(c, data.baseline.tick(), &mut buf)?;
    check(buf[..tracked] == compared[..], "rally history delta")?;
    c.decode(&buf[..delta], Some(&data.baseline), &mut out)?;
    check(out == data.current, "rally delta snapshot")?;
    let churn = data.churn_history.encode_delta(c, data.baseline.tick(), &mut buf)?;
    c.decode(&buf[..churn], Some(&data.baseline), &mut out)?;
    check(out == data.churned, "rally delta with a spawn and a despawn")?;
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
        let mut delta = RowDelta::new(&data.rows_baseline);
        check(delta.track(&data.rows_full) == reference::MOVING, "the reference's moving bodies")?;
        let bytes = peer.encoded(delta.gather(&data.rows_full, BASELINE_TICK));
        let rebuilt = delta.apply(peer.decode::<Vec<BodyRow>>(&bytes));
        check(rebuilt == data.rows_full.as_slice(), name)?;
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

/// Per-tick work shared by all of a room's clients: Rally quantizes the bodies and pushes the
/// snapshot into its history (which records what changed); a general-purpose codec's user
/// compares the two ticks' bodies to find the changed ones.
fn per_tick_tasks(data: &Data) -> Vec<Task<'_>> {
    let mut snapshot = Snapshot::with_capacity(0, data.bodies.len());
    let mut history = data.history.clone();
    let mut contents = [data.baseline.clone(), data.current.clone()];
    let mut tick = data.current.tick();
    let mut diff = RowDelta::new(&data.rows_baseline);
    vec![
        task("per_tick/rally/quantize", move |n| {
            for _ in 0..n {
                snapshot.clear(CURRENT_TICK);
                for body in black_box(&data.bodies) {
                    // Bodies are in ascending id order.
                    let _ = snapshot.push(data.config.quantize(body));
                }
                black_box(&snapshot);
            }
        }),
        task("per_tick/rally/history_push", move |n| {
            // Alternate the two ticks' contents so that every push sees 64 changed bodies.
            for _ in 0..n {
                tick = tick.wrapping_add(1);
                let next = &mut contents[tick as usize % 2];
                next.set_tick(tick);
                let _ = history.push(black_box(next));
            }
        }),
        task("per_tick/peers/track_changes", move |n| {
            for _ in 0..n {
                black_box(diff.track(black_box(&data.rows_full)));
            }
        }),
    ]
}

fn codec_tasks(data: &Data) -> Vec<Task<'_>> {
    let mut tasks = rally_tasks(data);
    for name in &CODECS[1..] {
        tasks.extend(peer_tasks(name, CASES[0], &data.rows_full));
        tasks.extend(peer_delta_tasks(name, &data.rows_baseline, &data.rows_full));
        tasks.extend(peer_tasks(name, CASES[2], &data.message));
    }
    tasks
}

fn rally_tasks(data: &Data) -> Vec<Task<'_>> {
    let c = data.config;
    let current = &data.current;
    let mut scratch = vec![0u8; 64 * 1024];
    let len = c.encode_full(current, &mut scratch).expect("verified");
    let full = scratch[..len].to_vec();
    let codec = MessageCodec::default();
    let message = codec.encode(&data.message).expect("verified");
    let (mut out, mut buf) = (Snapshot::default(), scratch);
    let mut tasks = Vec::from(rally_delta_tasks(CASES[1], c, &data.history, &data.baseline));
    tasks.extend(rally_delta_tasks("churn", c, &data.churn_history, &data.baseline));
    tasks.extend([
        task("snapshot_full/rally/encode", move |n| {
            for _ in 0..n {
                black_box(c.encode_full(black_box(current), &mut buf).ok());
            }
        }),
        task("snapshot_full/rally/decode", move |n| {
            for _ in 0..n {
                black_box(c.decode(black_box(&full), None, &mut out).ok());
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
    ]);
    tasks
}

/// Encoding through `history` the delta from `baseline` to its newest snapshot (one
/// client's job each tick), and decoding it.
fn rally_delta_tasks<'a>(
    case: &str,
    c: SnapshotConfig,
    history: &'a SnapshotHistory,
    baseline: &'a Snapshot,
) -> [Task<'a>; 2] {
    let mut buf = vec![0u8; 64 * 1024];
    let len = history.encode_delta(&c, baseline.tick(), &mut buf).expect("verified");
    let delta = buf[..len].to_vec();
    let mut out = Snapshot::default();
    [
        task(&format!("{case}/rally/encode"), move |n| {
            let tick = baseline.tick();
            for _ in 0..n {
                black_box(history.encode_delta(&c, black_box(tick), &mut buf).ok());
            }
        }),
        task(&format!("{case}/rally/decode"), move |n| {
            for _ in 0..n {
                black_box(c.decode(black_box(&delta), Some(baseline), &mut out).ok());
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

/// A general-purpose codec's stand-in for a delta: the changed rows, and the receiver's copy of
/// the baseline they are applied to. Both buffers are reused, so only the codec allocates.
/// Like Rally's history, the sender keeps the tick each row last changed (found once per tick
/// by comparing with the previous tick) and gathers, per client, the rows changed since that
/// client's baseline.
struct RowDelta<'a> {
    baseline: &'a [BodyRow],
    /// The tick each row last changed, as of the current tick.
    change_ticks: Vec<u32>,
    changed: Vec<BodyRow>,
    state: Vec<BodyRow>,
}

/// The ticks of the reference pair, as in Rally's snapshots.
const BASELINE_TICK: u32 = 1000;
const CURRENT_TICK: u32 = 1001;

impl<'a> RowDelta<'a> {
    fn new(baseline: &'a [BodyRow]) -> Self {
        let change_ticks = vec![BASELINE_TICK; baseline.len()];
        let changed = Vec::with_capacity(baseline.len());
        Self { baseline, change_ticks, changed, state: Vec::new() }
    }

    /// Per tick: compares `current` with the previous tick's rows (both hold the same ids in
    /// order) and records which changed; returns how many.
    fn track(&mut self, current: &[BodyRow]) -> usize {
        let mut count = 0;
        for ((tick, new), old) in self.change_ticks.iter_mut().zip(current).zip(self.baseline) {
            if new != old {
                *tick = CURRENT_TICK;
                count += 1;
            }
        }
        count
    }

    /// Per client: the rows changed since the client's baseline tick.
    fn gather(&mut self, current: &[BodyRow], baseline_tick: u32) -> &Vec<BodyRow> {
        self.changed.clear();
        let rows = current.iter().zip(&self.change_ticks);
        self.changed.extend(rows.filter(|(_, t)| **t > baseline_tick).map(|(r, _)| r.clone()));
        &self.changed
    }

    /// The receiver's new state: the baseline with the decoded rows written over it.
    fn apply(&mut self, rows: Vec<BodyRow>) -> &[BodyRow] {
        self.state.clear();
        self.state.extend_from_slice(self.baseline);
        for row in rows {
            if let Ok(i) = self.state.binary_search_by_key(&row.id, |r| r.id) {
                self.state[i] = row;
            }
        }
        &self.state
    }
}

fn peer_delta_tasks<'a>(
    name: &'static str,
    baseline: &'a [BodyRow],
    current: &'a [BodyRow],
) -> [Task<'a>; 2] {
    let (mut encoder, mut decoder) = (Peer::new(name), Peer::new(name));
    let (mut sender, mut receiver) = (RowDelta::new(baseline), RowDelta::new(baseline));
    // Changes are tracked once per tick (measured in `per_tick`), gathered and encoded per client.
    sender.track(current);
    let bytes = encoder.encoded(sender.gather(current, BASELINE_TICK));
    [
        task(&format!("snapshot_delta/{name}/encode"), move |n| {
            for _ in 0..n {
                black_box(encoder.encode(sender.gather(black_box(current), BASELINE_TICK)));
            }
        }),
        task(&format!("snapshot_delta/{name}/decode"), move |n| {
            for _ in 0..n {
                let rows = decoder.decode::<Vec<BodyRow>>(black_box(&bytes));
                black_box(receiver.apply(rows));
            }
        }),
    ]
}

fn task<'a>(name: &str, run: impl FnMut(u64) + 'a) -> Task<'a> {
    Task { name: name.into(), run: Box::new(run) }
}

fn collate(measurements: &[Measurement], sizes: &[Size]) -> Vec<Row> {
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

/// One measured operation outside the codec table: per-tick work, or Rally alone on churn.
#[derive(Debug, Serialize)]
struct Timing {
    name: String,
    ns: f64,
    allocs_per_op: f64,
}

/// The measurements named `prefix...`, without the prefix.
fn timings(measurements: &[Measurement], prefix: &str) -> Vec<Timing> {
    let named = measurements.iter().filter_map(|m| Some((m.name.strip_prefix(prefix)?, m)));
    named
        .map(|(name, m)| Timing {
            name: name.to_string(),
            ns: m.ns_median,
            allocs_per_op: m.allocs_per_op,
        })
        .collect()
}

fn print_table(rows: &[Row], per_tick: &[Timing], churn: &[Timing]) {
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
    println!("bc = bitcode; x json = serde_json's encode+decode time / this codec's");
    println!("per tick, shared by all clients of a room (256 bodies, 64 moving):");
    for t in per_tick {
        println!("  {:<20} {:>9.0} ns  {:.2} allocs", t.name, t.ns, t.allocs_per_op);
    }
    println!("rally alone, the delta with one body despawned and one spawned among its updates:");
    for t in churn {
        println!("  {:<20} {:>9.0} ns  {:.2} allocs", t.name, t.ns, t.allocs_per_op);
    }
}

/// One W4 target of docs/design.md and whether this run met it.
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
    plot::grouped_bars(path, "rally-bench wire (W4): lower is better", 3, &panels)
}
