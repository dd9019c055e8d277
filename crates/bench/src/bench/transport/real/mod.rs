//! `rally-bench transport --mode real`: W1 on real sockets and the OS clock, every peer the
//! real library, each through the same real-time link emulator
//! ([`crate::testbed::LinkRelay`]: the profiles of the sim mode, per direction, with real
//! delays), in one run.
//!
//! Each run starts a peer's echo server on loopback, a relay in front of it with the profile
//! and the run's seed, and the peer's client against the relay; the client hands a 400-byte
//! payload to its library every 1/60 s and records the round trip to its echo. Rounds go
//! over every profile and every peer in turn, so that whatever else the machine does falls
//! on all peers alike. The relay counts what it applied per direction; the report prints it
//! beside the profile asked for.
//!
//! Peers: `link` (a bare UDP echo: one datagram per payload, no protocol; its surviving
//! round trips are the link's own, the baseline every peer is compared with), `rally` (its
//! driver, sealed), `tcp` (the kernel's, TCP_NODELAY, between two network namespaces whose
//! TUN devices the same emulator joins; root only), `kcp-source` and `kcp-flush` (the
//! original C ikcp.c, as in sim mode), `enet` (the original C library, Debian's libenet
//! loaded at run time), `kcp-go-fec` (kcp-go with Reed-Solomon FEC, a Go program built when
//! Go is present) and `quic` (quinn, one bidirectional stream, a program of its own); see
//! [`external`]. A peer that cannot run here is skipped with the reason.

mod enet;
mod external;
mod kcp;
mod rally;
#[cfg(target_os = "linux")]
mod tcp;
mod udp;

use super::{Run, PAYLOAD_BYTES, SEND_INTERVAL};
use crate::testbed::{LinkRelay, RelayStats};
use rally_driver::Clock;
use rally_netem::LinkConfig;
use rally_proto::Instant;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Peers of real mode, in report order.
pub const REAL_PEERS: [&str; 9] = [
    "link",
    "rally",
    "rally-coded",
    "tcp",
    "enet",
    "kcp-source",
    "kcp-flush",
    "kcp-go-fec",
    "quic",
];

/// How long a client waits for its connection before the run counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after its last send a client still waits for echoes.
const DRAIN: Duration = Duration::from_millis(500);

/// The result of one run: the client's figures and what the relay applied.
pub struct RealRun {
    /// Round trips and bytes.
    pub run: Run,
    /// The link as the relay applied it.
    pub relay: RelayStats,
}

/// A W1 client over some library.
pub trait Client {
    /// Hands one payload to the library; `false` if the library refused it.
    fn send(&mut self, payload: &[u8]) -> Result<bool, Box<dyn Error>>;
    /// Runs the library until `until` or a little before, pushing the index (the payload's
    /// first four bytes) of every echo that arrived, with when it arrived.
    fn poll(
        &mut self,
        until: Instant,
        echoes: &mut Vec<(u32, Instant)>,
    ) -> Result<(), Box<dyn Error>>;
}

/// An echo server on its own thread; dropping it stops it.
pub struct Server {
    /// Where it listens.
    pub address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Server {
    /// Runs `serve(stop)` on a thread; it must return soon after `stop` is set.
    pub fn spawn(
        address: SocketAddr,
        serve: impl FnOnce(&AtomicBool) -> Result<(), String> + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rally-bench-server".into())
            .spawn(move || serve(&stopped))?;
        Ok(Self { address, stop, thread: Some(thread) })
    }

    /// Stops the server; how it ended.
    pub fn stop(mut self) -> Result<(), Box<dyn Error>> {
        self.shut()
    }

    fn shut(&mut self) -> Result<(), Box<dyn Error>> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result.map_err(Into::into),
            Some(Err(_)) => Err("the echo server panicked".into()),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// Whether `peer` can run here; the reason when it cannot.
pub fn available(peer: &str) -> Result<(), String> {
    match peer {
        "enet" => enet::available(),
        "kcp-go-fec" | "quic" => external::available(peer),
        #[cfg(target_os = "linux")]
        "tcp" => tcp::available(),
        #[cfg(not(target_os = "linux"))]
        "tcp" => Err("needs Linux network namespaces".into()),
        _ => Ok(()),
    }
}

/// One run of `peer` through `link` (both directions) seeded `seed`, sending for `duration`.
pub fn run(
    peer: &str,
    link: &LinkConfig,
    seed: u64,
    duration: Duration,
) -> Result<RealRun, Box<dyn Error>> {
    #[cfg(target_os = "linux")]
    if peer == "tcp" {
        // Its own link: two network namespaces and the emulator between their TUN devices.
        return tcp::run(link, seed, duration);
    }
    if peer == "kcp-go-fec" || peer == "quic" {
        // Two processes of its own, through the same relay.
        return external::run(peer, link, seed, duration);
    }
    let clock = Clock::start();
    let server = match peer {
        "link" => udp::server()?,
        "rally" => rally::server(false)?,
        "rally-coded" => rally::server(true)?,
        "kcp-source" | "kcp-flush" => kcp::server(peer == "kcp-flush")?,
        "enet" => enet::server()?,
        other => return Err(format!("unknown peer `{other}`").into()),
    };
    let relay = LinkRelay::start(server.address, *link, *link, seed)?;
    let mut client: Box<dyn Client> = match peer {
        "link" => Box::new(udp::client(relay.address(), &clock)?),
        "rally" => Box::new(rally::client(relay.address(), server.address, &clock, false)?),
        "rally-coded" => Box::new(rally::client(relay.address(), server.address, &clock, true)?),
        "kcp-source" | "kcp-flush" => {
            Box::new(kcp::client(relay.address(), peer == "kcp-flush", &clock)?)
        }
        _ => Box::new(enet::client(relay.address(), &clock)?),
    };
    let run = w1(client.as_mut(), &clock, duration)?;
    drop(client);
    let relay = relay.stop()?;
    server.stop()?;
    let wire_bytes = relay.up.bytes_sent + relay.down.bytes_sent;
    Ok(RealRun { run: Run { wire_bytes, ..run }, relay })
}

/// The W1 client loop: a payload every 1/60 s for `duration`, then a short wait for the last
/// echoes. Round trips run from handing a payload to the library to its echo's arrival.
fn w1(client: &mut dyn Client, clock: &Clock, duration: Duration) -> Result<Run, Box<dyn Error>> {
    let start = clock.now();
    let end = start + duration;
    let mut run = Run::default();
    // Per payload, when it was handed over, until its echo arrives.
    let mut sent_at: Vec<Option<Instant>> = Vec::new();
    let mut accepted = 0;
    let mut echoes = Vec::new();
    let mut payload = vec![0u8; PAYLOAD_BYTES];
    loop {
        let now = clock.now();
        let next = start + SEND_INTERVAL * sent_at.len() as u32;
        if next < end && now >= next {
            payload[..4].copy_from_slice(&(sent_at.len() as u32).to_le_bytes());
            let at = clock.now();
            if client.send(&payload)? {
                run.payload_bytes += 2 * PAYLOAD_BYTES as u64;
                sent_at.push(Some(at));
                accepted += 1;
            } else {
                run.refused += 1;
                sent_at.push(None);
            }
            continue;
        }
        if now >= end + DRAIN || (now >= end && run.rtts_ms.len() == accepted) {
            break;
        }
        let until = if next < end { next } else { end + DRAIN };
        client.poll(until, &mut echoes)?;
        for (index, arrived) in echoes.drain(..) {
            // An echo of a payload never sent, or a second echo of one, is not a round trip.
            if let Some(sent) = sent_at.get_mut(index as usize).and_then(Option::take) {
                run.rtts_ms.push((arrived - sent).as_secs_f64() * 1e3);
            }
        }
    }
    run.missing = (accepted - run.rtts_ms.len()) as u64;
    Ok(run)
}

/// The index a payload carries in its first four bytes.
fn index_of(payload: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(payload.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rally_netem::LossModel;

    /// Every reliable peer delivers every payload through a lossy relay, in order of sending
    /// or not, each round trip no shorter than the link's two delays; the bare link loses.
    #[test]
    fn every_peer_echoes_every_payload_through_a_lossy_link() {
        let link = LinkConfig {
            delay: Duration::from_millis(5),
            loss: LossModel::Bernoulli { probability: 0.05 },
            ..LinkConfig::default()
        };
        // The programs of their own (kcp-go, quic) are built and run by the bench's smoke run.
        let in_process = REAL_PEERS.iter().filter(|p| !matches!(**p, "kcp-go-fec" | "quic"));
        for &peer in in_process {
            if let Err(why) = available(peer) {
                eprintln!("not tested here: {peer}: {why}");
                continue;
            }
            let done = run(peer, &link, 3, Duration::from_millis(1500)).expect(peer);
            let run = &done.run;
            let sent = run.rtts_ms.len() as u64 + run.missing;
            assert!(sent >= 85, "{peer}: {sent} payloads in 1.5 s at 60 Hz");
            assert!(run.rtts_ms.iter().all(|ms| *ms >= 10.0), "{peer}: a round trip beat the link");
            assert!(done.relay.up.lost + done.relay.down.lost > 0, "{peer}: the link lost nothing");
            assert!(run.wire_bytes >= run.payload_bytes / 2, "{peer}: wire bytes counted");
            match peer {
                "link" => assert!(run.missing > 0, "the bare link recovers nothing"),
                _ => assert_eq!(run.missing, 0, "{peer} lost a payload"),
            }
        }
    }
}
