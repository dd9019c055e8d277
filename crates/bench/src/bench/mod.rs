//! `rally-bench ...`: benchmarks that run Rally and its peers side by side in one run, interleaved
//! so that machine noise hits all of them alike, and report ratios, distributions and allocations
//! as a table, JSON and PNG plots.

mod count;
mod count_callgrind;
mod count_cold;
mod count_seal;
mod harness;
mod latency;
pub mod load;
mod reference_message;
mod room;
mod room_scene;
mod transport;
mod wire;

use clap::Subcommand;
use std::path::{Path, PathBuf};

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// W4: snapshot and message serialization against bitcode, postcard, rmp-serde and serde_json.
    Wire(WireArgs),
    /// W1: reliable echo latency against KCP (sim) or every peer (real) through the W1 links.
    Transport(transport::TransportArgs),
    /// W3 (the engine's part): CPU per reference room-tick, by phase; the reference room with
    /// the sandbox's motion and shape; and the scene cases (the sandbox with 64 moving bodies
    /// beside it, 256 settled bodies' bytes per client).
    Room(room::RoomArgs),
    /// W2: total latency of each pipeline against the latency model.
    Latency(latency::LatencyArgs),
    /// W3 on real sockets: the host's CPU per room-tick and tick lateness as rooms ramp up.
    Load(load::LoadArgs),
    /// W3 counted: the host's instructions per reference room-tick, by phase, telemetry off
    /// and on (callgrind; without `--callgrind`, the same run's CPU time).
    Count(count::CountArgs),
}

/// Options of `rally-bench wire`.
#[derive(Debug, clap::Args)]
pub struct WireArgs {
    /// Fewer, shorter batches: finishes in well under 30 seconds.
    #[arg(long)]
    pub quick: bool,
    /// Write the full report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Draw PNG plots into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Seed of the reference snapshot generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs one benchmark command.
pub fn run(command: BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        BenchCommand::Wire(args) => wire::run(&args),
        BenchCommand::Transport(args) => transport::run(&args),
        BenchCommand::Room(args) => room::run(&args),
        BenchCommand::Latency(args) => latency::run(&args),
        BenchCommand::Load(args) => load::run(&args),
        BenchCommand::Count(args) => count::run(&args),
    }
}

/// Writes a benchmark report as pretty JSON, creating the file's directory if needed.
pub fn write_json(
    path: &Path,
    report: &serde_json::Value,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
