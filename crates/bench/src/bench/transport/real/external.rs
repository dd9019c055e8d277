//! Peers that run as programs of their own, built from this checkout when the bench first
//! needs them:
//!
//! - `kcp-go-fec`: kcp-go with Reed-Solomon FEC (github.com/xtaci/kcp-go, 10 data and 3
//!   parity shards), a small Go program in peers/kcp-go/, built with the Go toolchain when one
//!   is present;
//! - `quic`: quinn on one bidirectional stream, a Rust program in peers/quic/ (its own crate,
//!   so that quinn, tokio and rustls stay out of the rally binary), built with cargo.
//!
//! Each program's server prints `listening ADDR [EXTRA]`; its client takes the relay's
//! address (and EXTRA), runs the same W1 schedule as every other peer's client (400 bytes
//! every 1/60 s, round trips from handing a payload to the library to its echo, half a
//! second's wait for the last echoes) and prints one JSON line. Both are killed on any exit.

use super::{RealRun, Run, PAYLOAD_BYTES};
use crate::testbed::LinkRelay;
use rally_netem::LinkConfig;
use serde::Deserialize;
use std::error::Error;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The checkout this binary was built from.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a build command; the error quotes its output.
fn built(what: &str, output: std::io::Result<Output>, missing: &str) -> Result<(), String> {
    let output = output.map_err(|e| format!("{missing} ({e})"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("building {what} failed: {}", stderr.trim()));
    }
    Ok(())
}

fn build_kcp_go() -> Result<PathBuf, String> {
    let sources = checkout().join("peers/kcp-go");
    if !sources.join("main.go").exists() {
        return Err(format!("its sources are not at {} (run from a checkout)", sources.display()));
    }
    let program = checkout().join("target/peers/kcp-go-echo");
    let output = Command::new("go")
        .args(["build", "-o"])
        .arg(&program)
        .arg(".")
        .current_dir(&sources)
        // The toolchain at hand: never download another one.
        .env("GOTOOLCHAIN", "local")
        .output();
    built("kcp-go-echo", output, "no Go toolchain: install Go to run kcp-go")?;
    Ok(program)
}

fn build_quic() -> Result<PathBuf, String> {
    let root = checkout();
    if !root.join("peers/quic/Cargo.toml").exists() {
        return Err(format!("its sources are not in {} (run from a checkout)", root.display()));
    }
    let output = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "-p", "rally-quic-peer"])
        .current_dir(&root)
        .output();
    built("rally-quic-peer", output, "cargo did not run")?;
    Ok(root.join("target/release/rally-quic-peer"))
}

/// `peer`'s program, built once per run of the bench; where it is, or why it is not.
fn program(peer: &str) -> Result<&'static Path, String> {
    static KCP_GO: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static QUIC: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = match peer {
        "kcp-go-fec" => KCP_GO.get_or_init(build_kcp_go),
        "quic" => QUIC.get_or_init(build_quic),
        other => return Err(format!("{other} is not a program of its own")),
    };
    built.as_ref().map(PathBuf::as_path).map_err(Clone::clone)
}

/// Whether `peer` can run here (building it if need be); why not.
pub fn available(peer: &str) -> Result<(), String> {
    program(peer).map(|_| ())
}

/// The client's report.
#[derive(Deserialize)]
struct Report {
    rtts_ms: Vec<f64>,
    sent: u64,
}

/// A child process killed when dropped, whatever happened.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(
    peer: &str,
    link: &LinkConfig,
    seed: u64,
    duration: Duration,
) -> Result<RealRun, Box<dyn Error>> {
    let program = program(peer)?;
    let mut server = Killed(
        Command::new(program).arg("server").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?,
    );
    let stdout = server.0.stdout.take().ok_or("the server's output")?;
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first)?;
    let mut words = first.split_whitespace();
    if words.next() != Some("listening") {
        return Err(format!("{peer}'s server said {first:?}, not its address").into());
    }
    let address = words.next().ok_or("no address")?.parse()?;
    let extra: Vec<&str> = words.collect();
    let relay = LinkRelay::start(address, *link, *link, seed)?;
    let (via, seconds) = (relay.address().to_string(), duration.as_secs_f64().to_string());
    let mut client = Command::new(program);
    match peer {
        "kcp-go-fec" => client.args(["client", "-server", &via, "-seconds", &seconds]),
        _ => client.args(["client", &via]).args(&extra).arg(&seconds),
    };
    let client = client.stderr(Stdio::inherit()).output()?;
    drop(server);
    let relay = relay.stop()?;
    if !client.status.success() {
        return Err(format!("{peer}'s client failed ({})", client.status).into());
    }
    let report: Report = serde_json::from_slice(&client.stdout)?;
    let run = Run {
        payload_bytes: 2 * report.sent * PAYLOAD_BYTES as u64,
        wire_bytes: relay.up.bytes_sent + relay.down.bytes_sent,
        missing: report.sent.saturating_sub(report.rtts_ms.len() as u64),
        rtts_ms: report.rtts_ms,
        refused: 0,
    };
    Ok(RealRun { run, relay })
}
