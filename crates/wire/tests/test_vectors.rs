//! Goal: the bytes of the snapshot format never change by accident, and ports to other languages
//! have vectors to check against. Method: docs/wire-vectors.json holds inputs (quantized codes)
//! and the expected hex; every vector must encode to its hex and decode back to its input, and
//! the file must equal what this test generates. `RALLY_BLESS=1 cargo test` rewrites the file
//! after an intended format change. Each delta case is there twice: as the column delta servers
//! send (format 0x03), and as the record delta before it (0x02, `records_...`), which decoders
//! still read.

use rally_wire::hex;
use rally_wire::{
    reference,
    snapshot::{FORMAT_DELTA_COLUMNS, FORMAT_DELTA_RECORDS},
    QuantizedEntity, QuantizedRotation, Snapshot, SnapshotConfig,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Vector {
    name: String,
    description: String,
    baseline: Option<Snapshot>,
    snapshot: Snapshot,
    /// The snapshot's entities in SI units, as the default quantizers decode them.
    entities_si: serde_json::Value,
    hex: String,
}

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire-vectors.json")
}

fn entity(
    id: u32,
    position: [u32; 3],
    largest: u8,
    components: [u16; 3],
    lin: [i32; 3],
    ang: [i32; 3],
) -> QuantizedEntity {
    QuantizedEntity {
        id,
        position,
        rotation: QuantizedRotation { largest, components },
        linear_velocity: lin,
        angular_velocity: ang,
    }
}

fn snapshot(tick: u32, entities: &[QuantizedEntity]) -> Snapshot {
    let mut s = Snapshot::new(tick);
    for e in entities {
        s.push(*e).expect("vector ids ascend");
    }
    s
}

fn cases() -> Vec<(&'static str, &'static str, Option<Snapshot>, Snapshot)> {
    let config = SnapshotConfig::default();
    // The origin is code (256000, 64000, 256000); the identity rotation is w largest, all 2047.
    let origin = [256_000, 64_000, 256_000];
    let identity = [2047u16; 3];
    let rest = entity(0, origin, 3, identity, [0; 3], [0; 3]);
    let spinning =
        entity(1, [256_100, 65_000, 255_900], 3, [2047, 2100, 2047], [150, -981, 0], [0, 628, 0]);
    let far = entity(
        4_000_000_000,
        [0, 256_000, 512_000],
        0,
        [0, 4094, 1234],
        [-6400, 6400, 1],
        [6400, -6400, -1],
    );
    let top = entity(u32::MAX, origin, 1, identity, [0; 3], [3, 0, 0]);
    let (ref_base, ref_next) = reference::snapshots(&config, 1, 1000);
    let first8 = |s: &Snapshot| snapshot(s.tick(), &s.entities()[..8]);

    let base = snapshot(41, &[rest, spinning, far, top]);
    let mut small = spinning;
    small.position[0] += 3;
    let mut medium = far;
    medium.position[1] -= 60;
    medium.rotation.components[2] += 200;
    medium.linear_velocity = [0; 3];
    let mut large = top;
    large.position = [0, 0, 0];
    large.rotation.largest = 2;
    let spawned = entity(7, origin, 3, identity, [1, 2, 3], [0; 3]);
    let next = snapshot(42, &[small, spawned, medium, large]);
    vec![
        ("full_empty", "A full snapshot of tick 0 with no entities.", None, snapshot(0, &[])),
        (
            "full_one_at_rest",
            "Entity 0 at the origin, identity rotation, at rest.",
            None,
            snapshot(1, &[rest]),
        ),
        (
            "full_four",
            "Dense, sparse and extreme ids (0, 1, 4e9, u32::MAX); velocities at their bounds.",
            None,
            base.clone(),
        ),
        (
            "full_reference_8",
            "The first 8 bodies of the W4 reference snapshot (seed 1).",
            None,
            first8(&ref_next),
        ),
        (
            "delta_every_record",
            "Against full_four: a small move (tier 0), a spawn, a medium move with velocity to \
             zero (tier 1, absolute velocity), an absolute position and a rotation whose \
             largest component changed, and entity 0 despawned.",
            Some(base),
            next,
        ),
        (
            "delta_reference_8",
            "The first 8 reference bodies one tick later (seed 1).",
            Some(first8(&ref_base)),
            first8(&ref_next),
        ),
        (
            "delta_tick_wrap",
            "A delta from tick u32::MAX to tick 0 with one entity moved.",
            Some(snapshot(u32::MAX, &[rest])),
            snapshot(0, &[entity(0, [256_001, 64_000, 256_000], 3, identity, [0; 3], [0; 3])]),
        ),
        (
            "delta_66_moving",
            "66 of the reference bodies, every one moved by 1 to 5 mm in x, and body 65's \
             rotation changed its largest component: more updates than one 64-update chunk, \
             with an exception in the second (column delta only).",
            Some(sixty_six(&ref_next, 0)),
            sixty_six(&ref_next, 1),
        ),
    ]
}

/// The first 66 reference bodies at tick `1000 + step`, each `step * (1 + k % 5)` mm further in
/// x, body 65 with another largest rotation component after a step.
fn sixty_six(reference: &Snapshot, step: u32) -> Snapshot {
    let mut bodies: Vec<QuantizedEntity> = reference.entities()[..66].to_vec();
    for (k, body) in bodies.iter_mut().enumerate() {
        body.position[0] += step * (1 + k as u32 % 5);
    }
    if step > 0 {
        bodies[65].rotation.largest = (bodies[65].rotation.largest + 1) % 4;
    }
    snapshot(1000 + step, &bodies)
}

/// The datagram of `snapshot` in `format` (its first byte), against `baseline` for a delta.
fn encode(
    config: &SnapshotConfig,
    format: u8,
    baseline: Option<&Snapshot>,
    snapshot: &Snapshot,
) -> Vec<u8> {
    let mut buf = vec![0u8; 16 * 1024];
    let len = match (baseline, format) {
        (Some(b), FORMAT_DELTA_COLUMNS) => config.encode_delta(b, snapshot, &mut buf),
        (Some(b), _) => config.encode_delta_records(b, snapshot, &mut buf),
        (None, _) => config.encode_full(snapshot, &mut buf),
    }
    .expect("vectors fit 16 KiB");
    buf.truncate(len);
    buf
}

fn generate() -> Vec<Vector> {
    let config = SnapshotConfig::default();
    let mut vectors = Vec::new();
    let mut records = Vec::new();
    for (name, description, baseline, snapshot) in cases() {
        let vector = |name: String, description: String, format| {
            let bytes = encode(&config, format, baseline.as_ref(), &snapshot);
            Vector {
                name,
                description,
                entities_si: rally_wire::debug::snapshot_to_json(&config, &snapshot)["entities"]
                    .clone(),
                hex: hex::encode(&bytes),
                baseline: baseline.clone(),
                snapshot: snapshot.clone(),
            }
        };
        vectors.push(vector(name.into(), description.into(), FORMAT_DELTA_COLUMNS));
        let only_columns = name == "delta_66_moving";
        if let (Some(rest), Some(_), false) = (name.strip_prefix("delta_"), &baseline, only_columns)
        {
            let description = format!("Record delta (format 0x02). {description}");
            records.push(vector(format!("records_{rest}"), description, FORMAT_DELTA_RECORDS));
        }
    }
    vectors.extend(records);
    vectors
}

/// The vectors file, first rewritten from the encoder when `RALLY_BLESS` is set.
fn stored() -> Vec<Vector> {
    // Both tests read the file; with RALLY_BLESS the first one rewrites it, once, before either
    // reads (tests run in parallel threads).
    static BLESSED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BLESSED.get_or_init(|| {
        if std::env::var_os("RALLY_BLESS").is_some() {
            let text = serde_json::to_string_pretty(&generate()).expect("vectors serialize");
            std::fs::write(path(), text + "\n").expect("docs/ is writable");
        }
    });
    let stored = std::fs::read_to_string(path()).expect("docs/wire-vectors.json exists");
    serde_json::from_str(&stored).expect("the vectors file parses")
}

#[test]
fn vectors_file_matches_the_encoder() {
    let generated = generate();
    let stored = stored();
    assert_eq!(stored.len(), generated.len());
    for (s, g) in stored.iter().zip(&generated) {
        assert_eq!(s.hex, g.hex, "vector {} changed: rerun with RALLY_BLESS=1 if intended", s.name);
        assert_eq!(s.snapshot, g.snapshot, "vector {}", s.name);
    }
}

#[test]
fn every_vector_decodes_to_its_input() {
    let config = SnapshotConfig::default();
    for v in stored() {
        let bytes = hex::decode(&v.hex).expect("vectors are hex");
        let format = bytes[0];
        assert_eq!(encode(&config, format, v.baseline.as_ref(), &v.snapshot), bytes, "{}", v.name);
        let mut decoded = Snapshot::default();
        config.decode(&bytes, v.baseline.as_ref(), &mut decoded).expect("vectors decode");
        assert_eq!(decoded, v.snapshot, "{}", v.name);
    }
}
