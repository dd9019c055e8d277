//! `rally`: the command-line front end: the demo and its dashboard, the server, the
//! benchmarks, the simulator, inspect and the tools. The binary (src/main.rs) only calls
//! [`main`]; everything lives in this library so that cargo can compile it while the
//! physics crates it depends on are still being optimized (a library starts from its
//! dependencies' metadata; a binary waits for their code), which shortens a fresh build.

mod alloc_counter;
#[cfg(feature = "bench")]
mod bench;
mod demo;
mod echo;
mod game;
mod inspect;
#[cfg(feature = "bench")]
mod machine;
mod peer;
#[cfg(feature = "bench")]
mod plot;
mod scene;
mod server;
mod sim;
mod stats;
mod token;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: alloc_counter::CountingAllocator = alloc_counter::CountingAllocator;

/// Rally: a server-authoritative, latency-first networking engine for multiplayer and XR games.
#[derive(Debug, Parser)]
#[command(name = "rally", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark: Rally and its peers side by side, in one run.
    #[cfg(feature = "bench")]
    Bench {
        #[command(subcommand)]
        bench: bench::BenchCommand,
    },
    /// Run a benchmark (not in this build: it was built without the `bench` feature).
    #[cfg(not(feature = "bench"))]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        rest: Vec<String>,
    },
    /// Table tennis played by bots over UDP on this machine, with a live web dashboard.
    Demo(demo::DemoArgs),
    /// Decode Rally datagrams (hex, or a pcap/pcapng capture) into their JSON debug form.
    Inspect(inspect::InspectArgs),
    /// Host rooms: worker threads from a TOML config, telemetry on HTTP, drain on SIGTERM.
    Server(server::ServerArgs),
    /// Scene files, rooms without server code: check one and see what its room will hold.
    Scene {
        #[command(subcommand)]
        command: scene::SceneCommand,
    },
    /// Run seeded deterministic simulations with invariant checkers; replay one with --seed.
    Sim(sim::SimArgs),
    /// Try the transport over real UDP: an echo server and a client that measures round trips.
    Echo {
        #[command(subcommand)]
        side: echo::EchoCommand,
    },
    /// Connect tokens: make a shared key, issue a token, open one as a server would.
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// One side of a benchmark in its own process (the benchmarks start these).
    #[command(hide = true)]
    Peer {
        #[command(subcommand)]
        side: peer::PeerCommand,
    },
}

/// Parses the command line and runs the command; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        #[cfg(feature = "bench")]
        Command::Bench { bench } => bench::run(bench),
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => Err("this rally was built without its benchmarks (the `cargo \
                                      demo` build): run them with cargo run --release -- bench"
            .into()),
        Command::Demo(args) => demo::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Server(args) => server::run(&args),
        Command::Scene { command } => scene::run(&command),
        Command::Sim(args) => sim::run(&args),
        Command::Echo { side } => echo::run(&side),
        Command::Peer { side } => peer::run(&side),
        Command::Token { command } => token::run(&command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
