//! `rally-bench peer`: one side of a benchmark in its own process, so that a server and a client
//! share no process, no allocator and no scheduler queue with each other or with the bench.
//! Hidden from `--help`: the benchmarks start these themselves.
//!
//! - `rally-bench peer server`: prints `listening <address>` on its first line, then serves a room
//!   of the latency workload until its standard input closes.
//! - `rally-bench peer player`: plays in that room and prints, each second, one JSON line of the
//!   latency samples its meter took (microseconds) and its connection's RTT, until its
//!   standard input closes or `--seconds` pass.

mod latency;

use latency::{play, serve, Report};
use rally_app::pipeline;
use rally_engine::{connection_config, LatencySample};
use rally_proto::EndpointConfig;
use serde::{Deserialize, Serialize};
use std::error::Error;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Options of `rally-bench peer`.
#[derive(Debug, clap::Subcommand)]
pub enum PeerCommand {
    /// Serve a room of the latency workload on loopback.
    Server {
        /// Ticks per second.
        #[arg(long, default_value_t = 120)]
        hz: u32,
        /// `fast`, `greedy` or `naive`.
        #[arg(long, default_value = "fast")]
        pipeline: String,
        /// Grab chain depth of each controller.
        #[arg(long, default_value_t = 1)]
        depth: usize,
        /// The key its tokens are sealed with, hex.
        #[arg(long)]
        key: String,
    },
    /// The W3 load's bots: many client sessions on their own sockets, then one JSON report.
    Bots(crate::bench::load::bots::BotsArgs),
    /// Play in a room, printing latency samples.
    Player {
        /// Its connect token, hex: it connects to the first address the token names (the
        /// relay in front of the server, say).
        #[arg(long)]
        token: String,
        /// Frames per second.
        #[arg(long, default_value_t = 120)]
        hz: u32,
        /// Send inputs at the next frame (the naive pipeline's client half).
        #[arg(long)]
        defer: bool,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

/// One second of a player's samples, as `rally-bench peer player` prints them.
#[derive(Debug, Serialize, Deserialize)]
pub struct PlayerLine {
    /// Per sample: total, round trip (or -1), server hold (or -1), frame wait, microseconds.
    pub samples: Vec<[i64; 4]>,
    /// The connection's smoothed RTT, microseconds.
    pub rtt_us: u64,
}

impl PlayerLine {
    /// The samples back as the meter's.
    pub fn samples(&self) -> Vec<LatencySample> {
        let micros = |v: i64| u64::try_from(v).ok().map(Duration::from_micros);
        self.samples
            .iter()
            .map(|s| LatencySample {
                seq: 0,
                total: micros(s[0]).unwrap_or_default(),
                round_trip: micros(s[1]),
                server_hold: micros(s[2]),
                frame_wait: micros(s[3]).unwrap_or_default(),
            })
            .collect()
    }
}

/// Runs one peer until its standard input closes.
pub fn run(command: &PeerCommand) -> Result<(), Box<dyn Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = stop.clone();
    // The parent closes our standard input (or dies) to stop us.
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
        watcher.store(true, Ordering::Relaxed);
    });
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let (reports, received) = mpsc::channel();
    let worker = match command {
        PeerCommand::Server { hz, pipeline: name, depth, key } => {
            let (hz, depth, pipeline) = (*hz, *depth, pipeline(name)?);
            let (key, protocol) =
                (crate::token::key_from_hex(key)?, crate::token::LOCAL_PROTOCOL_ID);
            let driver =
                rally_driver::UdpDriver::bind_secure("127.0.0.1:0", config, key, protocol)?;
            println!("listening {}", driver.local_addr()?);
            std::io::stdout().flush()?;
            let stopped = stop.clone();
            drop(reports);
            std::thread::spawn(move || serve(driver, hz, pipeline, depth, &stopped))
        }
        // The bots report once, at the end, on their own.
        PeerCommand::Bots(args) => return crate::bench::load::bots::run(args),
        PeerCommand::Player { token, hz, defer, seconds } => {
            let token = crate::token::token_from_hex(token)?;
            let (hz, defer, seconds) = (*hz, *defer, *seconds);
            let stopped = stop.clone();
            let timer = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(seconds));
                timer.store(true, Ordering::Relaxed);
            });
            std::thread::spawn(move || play(0, token, config, hz, defer, &stopped, &reports))
        }
    };
    for Report { samples, rtt } in received {
        print_line(&samples, rtt)?;
    }
    worker.join().map_err(|_| "the peer's thread panicked")?.map_err(|e| e.to_string())?;
    Ok(())
}

fn print_line(samples: &[LatencySample], rtt: Duration) -> Result<(), Box<dyn Error>> {
    let micros = |d: Option<Duration>| d.map_or(-1, |d| d.as_micros() as i64);
    let line = PlayerLine {
        samples: samples
            .iter()
            .map(|s| {
                [
                    micros(Some(s.total)),
                    micros(s.round_trip),
                    micros(s.server_hold),
                    micros(Some(s.frame_wait)),
                ]
            })
            .collect(),
        rtt_us: rtt.as_micros() as u64,
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &line)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}
