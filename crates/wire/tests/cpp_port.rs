//! Goal: docs/wire.md is precise enough to write an independent decoder, and the C++ one in
//! ports/cpp (written from the spec, for Unreal and native clients) stays right. Method: compile
//! it with the system's C++ compiler (`CXX`, else `c++`), then hand it every test vector and
//! thousands of random datagrams (fulls and deltas from random baselines, then the same bytes
//! with a bit flipped, cut short or lengthened) and want the answer rally-wire gives: the same
//! entities, or an error for the same datagrams.

mod common;

use glam::Vec3;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use rally_wire::bits::BitWriter;
use rally_wire::hex;
use rally_wire::snapshot::ID_TIERS;
use rally_wire::{
    DecodeError, PositionQuantizer, QuantizedEntity, Snapshot, SnapshotConfig, VelocityQuantizer,
};
use serde::Deserialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds ports/cpp/decode_lines once for all the tests here (they run in parallel, and one
/// must not run the binary while another rewrites it).
fn port() -> &'static Path {
    static PORT: OnceLock<PathBuf> = OnceLock::new();
    PORT.get_or_init(build_port)
}

/// Builds ports/cpp/decode_lines with warnings as errors; panics with the compiler's output.
fn build_port() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("decode_lines");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let source = repo().join("ports/cpp/decode_lines.cpp");
    let result = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("running {cxx} (a C++17 compiler; set CXX): {e}"));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{cxx} failed on {}:\n{stderr}", source.display());
    out
}

/// Runs the port on `lines`, one answer per line.
fn run_port(lines: &[String]) -> Vec<String> {
    let mut child = Command::new(port())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the port runs");
    let mut stdin = child.stdin.take().expect("piped");
    let input = lines.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("the port finishes");
    writer.join().expect("writer thread").expect("writing to the port");
    assert!(output.status.success(), "the port exited with {}", output.status);
    let answers: Vec<String> =
        String::from_utf8(output.stdout).expect("ascii").lines().map(str::to_owned).collect();
    assert_eq!(answers.len(), lines.len(), "one answer per line");
    answers
}

fn full_hex(config: &SnapshotConfig, snapshot: &Snapshot) -> String {
    let mut buf = vec![0u8; 1 << 20];
    let len = config.encode_full(snapshot, &mut buf).expect("encodes");
    hex::encode(&buf[..len])
}

/// What the port should print for `bytes`: the snapshot's codes, or `err KIND` (the error's
/// variant name; the port's value and bound follow it).
fn expected(config: &SnapshotConfig, bytes: &[u8], baseline: Option<&Snapshot>) -> String {
    let mut out = Snapshot::default();
    match config.decode(bytes, baseline, &mut out) {
        Ok(_) => codes_line(&out),
        Err(e) => format!("err {}", kind(&e)),
    }
}

fn kind(e: &DecodeError) -> String {
    let debug = format!("{e:?}");
    debug.split([' ', '(', '{']).next().unwrap_or_default().to_owned()
}

fn codes_line(s: &Snapshot) -> String {
    let mut line = format!("ok {} {}", s.tick(), s.len());
    for e in s.entities() {
        let r = e.rotation;
        let fields = [e.id, e.position[0], e.position[1], e.position[2], r.largest.into()]
            .into_iter()
            .chain(r.components.map(u32::from))
            .map(i64::from)
            .chain(e.linear_velocity.map(i64::from))
            .chain(e.angular_velocity.map(i64::from));
        for f in fields {
            line += &format!(" {f}");
        }
    }
    line
}

#[derive(Deserialize)]
struct Vector {
    name: String,
    baseline: Option<Snapshot>,
    snapshot: Snapshot,
    entities_si: Vec<EntitySi>,
    hex: String,
}

#[derive(Deserialize)]
struct EntitySi {
    id: u32,
    position: [f64; 3],
    rotation: [f64; 4],
    linear_velocity: [f64; 3],
    angular_velocity: [f64; 3],
}

impl EntitySi {
    /// The values in the port's `si` order.
    fn values(&self) -> Vec<f64> {
        let fields = [&self.position[..], &self.rotation, &self.linear_velocity];
        fields.into_iter().flatten().chain(&self.angular_velocity).copied().collect()
    }
}

#[test]
fn the_cpp_port_decodes_every_test_vector_to_its_codes_and_si_units() {
    let config = SnapshotConfig::default();
    let text = std::fs::read_to_string(repo().join("docs/wire-vectors.json")).expect("vectors");
    let vectors: Vec<Vector> = serde_json::from_str(&text).expect("vector file parses");
    let mut lines = Vec::new();
    for v in &vectors {
        let baseline = v.baseline.as_ref().map_or("-".into(), |b| full_hex(&config, b));
        lines.push(format!("{baseline} {}", v.hex));
        lines.push(format!("si {baseline} {}", v.hex));
    }
    let answers = run_port(&lines);
    for (v, pair) in vectors.iter().zip(answers.chunks(2)) {
        assert_eq!(pair[0], codes_line(&v.snapshot), "vector {}: codes", v.name);
        let si: Vec<&str> = pair[1].split(' ').collect();
        assert_eq!(
            si[..3],
            ["si", &v.snapshot.tick().to_string(), &v.entities_si.len().to_string()]
        );
        for (e, got) in v.entities_si.iter().zip(si[3..].chunks(14)) {
            assert_eq!(got[0], e.id.to_string(), "vector {}: id", v.name);
            for (k, (want, got)) in e.values().iter().zip(&got[1..]).enumerate() {
                let got: f64 = got.parse().expect("a number");
                // A tenth of the finest step (rotation codes are 3.5e-4 apart): a wrong
                // formula is off by a step or more, f32 rounding by far less.
                assert!(
                    (want - got).abs() < 3e-5,
                    "vector {} entity {} value {k}: {want} vs {got}",
                    v.name,
                    e.id
                );
            }
        }
    }
}

#[test]
fn the_cpp_port_derives_the_same_configuration_from_the_same_parameters() {
    // The defaults, decimal precisions that are not exact in binary, spans that are not a
    // whole number of steps, and ranges whose quotient lands just above an integer.
    // Per case: box min and max, position precision, rotation bits, then the linear velocity's
    // max and precision and the angular one's.
    let cases: [(Vec3, Vec3, f32, u32, [f32; 4]); 4] = [
        (
            Vec3::new(-256.0, -64.0, -256.0),
            Vec3::new(256.0, 192.0, 256.0),
            0.001,
            12,
            [64.0, 0.01, 64.0, 0.01],
        ),
        (
            Vec3::new(-10.0, -2.0, -10.0),
            Vec3::new(10.0, 8.0, 10.5),
            0.002,
            10,
            [20.0, 0.05, 12.5, 0.01],
        ),
        (
            Vec3::new(-1.0, 0.0, -3.3),
            Vec3::new(1.0, 2.7, 3.3),
            0.0005,
            14,
            [7.3, 0.003, 100.0, 0.1],
        ),
        // 1.12 / 0.01 and 2.47 / 0.01 are a hair above 112 and 247 in f64.
        (Vec3::ZERO, Vec3::new(1000.0, 1.12, 0.3), 0.01, 8, [2.47, 0.01, 3.0, 0.2]),
    ];
    let mut lines = Vec::new();
    let mut wanted = Vec::new();
    for (min, max, precision, rotation, velocities) in cases {
        let position = PositionQuantizer::new(min, max, precision).expect("a valid box");
        let [lin_max, lin_precision, ang_max, ang_precision] = velocities;
        let linear = VelocityQuantizer::new(lin_max, lin_precision).expect("valid");
        let angular = VelocityQuantizer::new(ang_max, ang_precision).expect("valid");
        let numbers = [&min.to_array()[..], &max.to_array(), &[precision]].concat();
        let mut params: Vec<String> = numbers.iter().map(f32::to_string).collect();
        params.push(rotation.to_string());
        params.extend(velocities.iter().map(f32::to_string));
        lines.push(format!("config {}", params.join(" ")));
        let derived = position.steps().into_iter().chain(position.bits());
        let derived = derived.chain([linear.half() as u32, linear.bits()]);
        let derived = derived.chain([angular.half() as u32, angular.bits()]);
        wanted.push(derived.fold("config".to_owned(), |line, v| format!("{line} {v}")));
    }
    assert_eq!(run_port(&lines), wanted);
}

/// Datagrams that random corruption seldom makes, each with its baseline: an update that
/// changes nothing (all widths zero), an unknown format byte, a delta against another tick, a
/// column delta that steps past the box.
fn crafted() -> Vec<(Snapshot, Vec<u8>)> {
    let (mut baseline, mut buf) = (Snapshot::new(7), vec![0u8; 64]);
    baseline.push(QuantizedEntity { id: 3, ..Default::default() }).expect("one entity");
    let mut datagrams = Vec::new();
    for (format, baseline_tick, widths) in [(0x02, 7, 0), (0x7f, 7, 1), (0x02, 6, 1)] {
        let mut w = BitWriter::new(&mut buf);
        w.write(format, 8);
        w.write(8, 32);
        w.write(baseline_tick, 32);
        w.write(1, 16);
        ID_TIERS.write(&mut w, 3);
        w.write(0, 1);
        w.write(widths, 16);
        w.write(0, 3 * widths as u32);
        let len = w.finish().expect("64 bytes hold one record");
        datagrams.push((baseline.clone(), buf[..len].to_vec()));
    }
    datagrams.push(column_step_past_the_edge());
    datagrams
}

/// A column delta of the reference pair against a baseline whose moving body sits just short of
/// the box's far edge, so that its step forward ends one code past it: a bound off by one in
/// either decoder shows.
fn column_step_past_the_edge() -> (Snapshot, Vec<u8>) {
    let config = SnapshotConfig::default();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 1, 1000);
    let mut buf = vec![0u8; 64 * 1024];
    let len = config.encode_delta(&baseline, &current, &mut buf).expect("encodes");
    let mut pairs = baseline.entities().iter().zip(current.entities());
    let k = pairs.position(|(o, n)| n.position[0] > o.position[0]).expect("one moves in +x");
    let mut edge = Snapshot::new(baseline.tick());
    for (j, e) in baseline.entities().iter().enumerate() {
        let mut e = *e;
        if j == k {
            let step = current.entities()[k].position[0] - e.position[0];
            e.position[0] = config.position.steps()[0] + 1 - step;
        }
        edge.push(e).expect("ids ascend");
    }
    (edge, buf[..len].to_vec())
}

/// A datagram changed the way a bad link or an attacker would: a bit flipped, cut short, or a
/// byte appended, chosen by `salt`.
fn corrupt(bytes: &[u8], salt: u64) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    let at = (salt >> 8) as usize % bytes.len().max(1);
    match salt % 3 {
        0 if !bytes.is_empty() => bytes[at] ^= 1 << ((salt >> 40) % 8),
        1 => bytes.truncate(at),
        _ => bytes.push((salt >> 32) as u8),
    }
    bytes
}

#[test]
fn random_and_corrupted_datagrams_decode_the_same_in_rally_wire_and_the_cpp_port() {
    let config = SnapshotConfig::default();
    let mut runner = TestRunner::deterministic();
    let pairs = common::baseline_and_current();
    let (mut lines, mut wanted) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 1 << 20];
    for case in 0..400u64 {
        let (baseline, current) = pairs.new_tree(&mut runner).expect("a case").current();
        let base_hex = full_hex(&config, &baseline);
        let full = config.encode_full(&current, &mut buf).map(|len| buf[..len].to_vec());
        let delta = config
            .encode_delta_records(&baseline, &current, &mut buf)
            .map(|len| buf[..len].to_vec());
        let columns =
            config.encode_delta(&baseline, &current, &mut buf).map(|len| buf[..len].to_vec());
        for bytes in [full, delta, columns].map(|bytes| bytes.expect("encodes")) {
            let salt = case.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ bytes.len() as u64;
            for datagram in [bytes.clone(), corrupt(&bytes, salt), corrupt(&bytes, salt >> 1)] {
                lines.push(format!("{base_hex} {}", hex::encode(&datagram)));
                wanted.push(expected(&config, &datagram, Some(&baseline)));
            }
        }
    }
    let random = lines.len();
    for (baseline, datagram) in crafted() {
        lines.push(format!("{} {}", full_hex(&config, &baseline), hex::encode(&datagram)));
        wanted.push(expected(&config, &datagram, Some(&baseline)));
    }
    let answers = run_port(&lines);
    // Each crafted datagram has one thing wrong, which both must name.
    for (want, got) in wanted[random..].iter().zip(&answers[random..]) {
        assert!(got.starts_with(&format!("{want} ")), "crafted: rally-wire {want}, the port {got}");
    }
    let mut errors = 0;
    for ((line, want), got) in lines.iter().zip(&wanted).zip(&answers) {
        if want.starts_with("err") {
            errors += 1;
            assert!(got.starts_with("err"), "rally-wire refuses, the port accepts: {line}\n{got}");
        } else {
            assert_eq!(got, want, "the port disagrees on {line}");
        }
    }
    // Both outcomes are well represented, or the comparison proves little.
    assert!(
        errors > lines.len() / 5 && errors < lines.len() * 3 / 5,
        "{errors} errors of {}",
        lines.len()
    );
}
