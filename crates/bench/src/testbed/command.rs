//! `rally-bench relay`: the real-time link relay ([`LinkRelay`]) as a command, so that a
//! program that is not Rust (the conformance client, `tests/conformance/`) can put the same
//! emulated link between itself and a server.
//!
//! It prints `relay listening on ADDRESS` on standard output once bound, relays until its
//! standard input closes (or `--duration` passes), then prints what each direction applied
//! as one line of JSON. One client per relay: replies go to whoever sent last.

use super::LinkRelay;
use rally_netem::{LinkConfig, LossModel};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Options of `rally-bench relay`.
#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// Where clients send (port 0: the OS picks; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The server datagrams are relayed to.
    #[arg(long)]
    pub to: SocketAddr,
    /// Probability that a datagram is lost, each way, independently (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// One-way delay, milliseconds, each way.
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Seed of the loss draws (the same seed loses the same datagrams).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop after this many seconds instead of when standard input closes.
    #[arg(long)]
    pub duration: Option<f64>,
}

/// Runs the relay until standard input closes or the duration passes.
pub fn run(args: &RelayArgs) -> Result<(), Box<dyn std::error::Error>> {
    if !(0.0..=1.0).contains(&args.loss) {
        return Err(format!("--loss {} is not a probability (0 to 1)", args.loss).into());
    }
    let delay = Duration::try_from_secs_f64(args.delay_ms / 1e3)
        .map_err(|e| format!("--delay-ms {}: {e}", args.delay_ms))?;
    let loss = if args.loss > 0.0 {
        LossModel::Bernoulli { probability: args.loss }
    } else {
        LossModel::None
    };
    let link = LinkConfig { delay, loss, ..LinkConfig::default() };
    let relay = LinkRelay::start_on(args.listen, args.to, link, link, args.seed)?;
    println!("relay listening on {}", relay.address());
    std::io::stdout().flush()?;
    match args.duration {
        Some(seconds) => std::thread::sleep(
            Duration::try_from_secs_f64(seconds).map_err(|e| format!("--duration: {e}"))?,
        ),
        // Until the parent closes our standard input (or it is not open at all).
        None => {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
    }
    let stats = relay.stop()?;
    let line = serde_json::json!({
        "up": { "sent": stats.up.sent, "lost": stats.up.lost, "delivered": stats.up.delivered },
        "down": {
            "sent": stats.down.sent, "lost": stats.down.lost, "delivered": stats.down.delivered
        },
    });
    println!("{line}");
    Ok(())
}
