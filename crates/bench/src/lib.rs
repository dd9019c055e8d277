//! # rally-bench
//!
//! Rally's test bed: everything that measures the product and is not part of it. The `rally`
//! binary (crates/app) is what users deploy; this crate's `rally-bench` binary runs the
//! benchmarks, and its library holds the real-time link emulation they and their tests use.
//!
//! - `rally-bench wire|transport|room|latency|load [--quick] [--json PATH] [--plot DIR]`: the
//!   benchmarks (W1 to W4), Rally and its peers side by side in one run, as a table, JSON and
//!   PNG plots; `rally-bench <name> --help` lists each one's options.
//! - `rally-bench peer server|player|bots`: one side of a benchmark in a process of its own;
//!   hidden from `--help`, the benchmarks start these themselves (the running executable, found
//!   with `std::env::current_exe`).
//! - `rally-bench relay --to ADDRESS [--loss P] [--delay-ms MS] [--seed N]`: the real-time
//!   link relay as a process; prints its bound address, relays until standard input closes.
//! - [`testbed`]: the loopback relay that emulates a link in real time, and the network
//!   namespaces that do the same for the kernel's TCP.
//!
//! The binary installs a counting global allocator, so that the benchmarks can report heap
//! allocations per operation (one relaxed atomic add per allocation: a cost the product does
//! not pay). The peers (KCP's C source, ENet loaded at run time, MessagePack) and the plots
//! (plotters, png) are this crate's dependencies and no one else's.
//!
//! It plays the games, seals the tokens and summarizes the samples the app does, through the
//! app's library (`rally_app::{game, token, stats}`), under the same names as when the
//! benchmarks lived there.

#![deny(missing_docs)]

mod alloc_counter;
mod bench;
mod machine;
mod peer;
mod plot;
pub mod testbed;

// The app's modules the benchmarks share, under the paths they had inside the app.
use rally_app::{game, stats, token};

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: alloc_counter::CountingAllocator = alloc_counter::CountingAllocator;

/// Rally's benchmarks: Rally and its peers side by side, in one run.
#[derive(Debug, Parser)]
#[command(name = "rally-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Bench(bench::BenchCommand),
    /// One side of a benchmark in its own process (the benchmarks start these).
    #[command(hide = true)]
    Peer {
        #[command(subcommand)]
        side: peer::PeerCommand,
    },
    /// A UDP relay emulating a lossy, delayed link in real time between a client and a server.
    Relay(testbed::command::RelayArgs),
}

/// Parses the command line and runs the command; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(bench) => bench::run(bench),
        Command::Peer { side } => peer::run(&side),
        Command::Relay(args) => testbed::command::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
