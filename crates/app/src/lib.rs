//! `rally`: the command-line front end: the demo and its dashboard, the server, the
//! simulator, inspect and the tools. The binary (src/main.rs) only calls [`main`];
//! everything lives in this library so that cargo can compile it while the physics crates it
//! depends on are still being optimized (a library starts from its dependencies' metadata; a
//! binary waits for their code), which shortens a fresh build.
//!
//! The benchmarks, their peer processes, plots and counting allocator live in their own crate
//! and binary, `rally-bench` (crates/bench), so that this one links none of them: no C source,
//! no plotting, the system allocator. `rally-bench` plays the games, seals the tokens and
//! summarizes the samples this crate does, through the public modules below; they are shared
//! with the test bed, not a stable API. `rally bench ...` is kept, hidden from `--help`, only to
//! say where the benchmarks went.

pub mod agones;
pub(crate) mod demo;
mod echo;
pub mod game;
pub mod gateway;
pub mod http_client;
mod inspect;
mod scene;
mod server;
mod sim;
mod sim_scene;
pub mod stats;
pub mod token;
pub mod web;

/// `rally server`'s telemetry endpoint (`/metrics`, `/stats`), for the load benchmark's
/// scrape figures.
pub use server::Telemetry;

use clap::{Parser, Subcommand};
use rally_engine::Pipeline;
use std::error::Error;
use std::process::ExitCode;

/// Rally: a server-authoritative, latency-first networking engine for multiplayer and XR games.
#[derive(Debug, Parser)]
#[command(name = "rally", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The benchmarks moved to their own binary, `rally-bench`: this only says so.
    #[command(hide = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
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
}

/// Parses the command line and runs the command; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { rest } => Err(format!(
            "the benchmarks are a binary of their own: cargo run --release -p rally-bench -- {}",
            rest.join(" ")
        )
        .into()),
        Command::Demo(args) => demo::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Server(args) => server::run(&args),
        Command::Scene { command } => scene::run(&command),
        Command::Sim(args) => sim::run(&args),
        Command::Echo { side } => echo::run(&side),
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

/// Parses a pipeline's name as command lines spell it: `fast`, `greedy` or `naive`.
pub fn pipeline(name: &str) -> Result<Pipeline, Box<dyn Error>> {
    match name {
        "fast" => Ok(Pipeline::Fast),
        "greedy" => Ok(Pipeline::Greedy),
        "naive" => Ok(Pipeline::Naive),
        other => Err(format!("pipeline {other}: use fast, greedy or naive").into()),
    }
}
