//! `rally echo server|client`: the W1 echo over real UDP sockets, to try the transport by hand
//! (on loopback, or between two machines).

use crate::stats::summary;
use rally_driver::UdpDriver;
use rally_proto::{EndpointConfig, Event, SendError};
use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

/// The two sides.
#[derive(Debug, clap::Subcommand)]
pub enum EchoCommand {
    /// Echo every message back to its sender.
    Server {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7777")]
        bind: SocketAddr,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long)]
        duration: Option<u64>,
    },
    /// Send payloads at a fixed rate and report the round trips.
    Client {
        /// The server's address.
        #[arg(long, default_value = "127.0.0.1:7777")]
        server: SocketAddr,
        /// Payloads to send.
        #[arg(long, default_value_t = 600)]
        count: u32,
        /// Payloads per second.
        #[arg(long, default_value_t = 60)]
        rate: u32,
        /// Bytes per payload (at least 4).
        #[arg(long, default_value_t = 400)]
        size: usize,
    },
}

/// Runs one side.
pub fn run(command: &EchoCommand) -> Result<(), Box<dyn Error>> {
    match command {
        EchoCommand::Server { bind, duration } => server(*bind, *duration),
        EchoCommand::Client { server, count, rate, size } => client(*server, *count, *rate, *size),
    }
}

fn server(bind: SocketAddr, duration: Option<u64>) -> Result<(), Box<dyn Error>> {
    let mut driver =
        UdpDriver::bind(bind, plaintext()).map_err(|e| format!("binding {bind}: {e}"))?;
    println!(
        "echo server listening on {} (plaintext: for trying the transport)",
        driver.local_addr()?
    );
    let end = duration.map(|s| driver.now() + Duration::from_secs(s));
    while end.is_none_or(|end| driver.now() < end) {
        driver.run_for(Duration::from_millis(100), |endpoint, handle, event| match event {
            Event::Connected => println!("{handle:?} connected"),
            Event::Message { channel, payload } => {
                // A full queue means the client outruns the link: drop the echo, as W1 allows.
                let _ = endpoint.send(handle, channel, &payload);
            }
            Event::Disconnected { reason } => println!("{handle:?} disconnected: {reason:?}"),
        })?;
    }
    Ok(())
}

fn client(server: SocketAddr, count: u32, rate: u32, size: usize) -> Result<(), Box<dyn Error>> {
    if size < 4 || rate == 0 {
        return Err("--size must be at least 4 and --rate above 0".into());
    }
    let mut driver = UdpDriver::bind("0.0.0.0:0", plaintext())?;
    let handle = driver.connect(server);
    let interval = Duration::from_secs(1) / rate;
    let (mut connected, mut sent, mut refused) = (false, 0u32, 0u32);
    let mut sent_at = vec![None; count as usize];
    let mut rtts = Vec::new();
    let start = driver.now();
    let mut next_send = start;
    while rtts.len() + (refused as usize) < count as usize {
        if driver.now() - start > Duration::from_secs(10) + interval * count {
            break;
        }
        if connected && sent < count && driver.now() >= next_send {
            let mut payload = vec![0u8; size];
            payload[..4].copy_from_slice(&sent.to_le_bytes());
            match driver.endpoint().send(handle, 0, &payload) {
                Ok(()) => sent_at[sent as usize] = Some(driver.now()),
                Err(SendError::QueueFull(_)) => refused += 1,
                Err(e) => return Err(format!("send: {e}").into()),
            }
            sent += 1;
            next_send += interval;
        }
        let now_ref = &mut rtts;
        let times = &sent_at;
        let clock = driver.clock();
        driver.run_for(Duration::from_millis(1), |_, _, event| match event {
            Event::Connected => {
                connected = true;
            }
            Event::Message { payload, .. } => {
                let index = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes")) as usize;
                if let Some(Some(at)) = times.get(index) {
                    now_ref.push((clock.now() - *at).as_secs_f64() * 1e3);
                }
            }
            Event::Disconnected { reason } => eprintln!("disconnected: {reason:?}"),
        })?;
        if connected && next_send < start {
            next_send = driver.now();
        }
    }
    let s = summary(&rtts);
    println!("{} of {count} echoed, {refused} refused by a full queue", rtts.len());
    println!(
        "rtt ms: mean {:.3} sd {:.3} p50 {:.3} p99 {:.3} max {:.3}",
        s.mean, s.sd, s.p50, s.p99, s.max
    );
    if let Some(connection) = driver.endpoint().connection(handle) {
        let stats = connection.stats();
        println!(
            "packets sent {} received {} lost {}",
            stats.packets_sent, stats.packets_received, stats.packets_lost
        );
    }
    Ok(())
}

/// The echo tries the transport without tokens: `Security::DangerPlaintext`, anyone can connect.
fn plaintext() -> EndpointConfig {
    EndpointConfig { security: rally_proto::Security::DangerPlaintext, ..EndpointConfig::default() }
}
