//! A UDP relay on loopback that emulates a link in real time, for peers that cannot be run in
//! virtual time: unmodified libraries (ENet, KCP, QUIC) and processes on their own clocks.
//!
//! Clients send to the relay's front address; it forwards to the server and the server's
//! replies back to the client that last sent. Each direction is a [`rally_netem::Link`] (delay
//! and jitter, loss models, a bottleneck with a finite queue, MTU) driven by the OS clock: the
//! same emulator, the same profiles and the same seeds as the virtual-time benchmarks, so a
//! profile means the same thing in both. The relay counts what it applied per direction
//! ([`RelayStats`]), so a report can print the link it measured beside the one it asked for.

use crate::wait::{precise_timers, readable_any};
use crate::Clock;
use rally_netem::{Link, LinkConfig, LinkStats};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The longest the relay waits without looking at its stop flag.
const WAIT_MAX: Duration = Duration::from_millis(5);

/// What the relay did to each direction.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RelayStats {
    /// Client to server.
    pub up: LinkStats,
    /// Server to client.
    pub down: LinkStats,
}

/// A running relay; dropping it stops the thread.
#[derive(Debug)]
pub struct LinkRelay {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<RelayStats>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl LinkRelay {
    /// Starts relaying between clients that send to [`LinkRelay::address`] and `server`, each
    /// direction through its own link: `up` (client to server) and `down`, seeded from `seed`.
    pub fn start(
        server: SocketAddr,
        up: LinkConfig,
        down: LinkConfig,
        seed: u64,
    ) -> io::Result<Self> {
        let front = UdpSocket::bind("127.0.0.1:0")?;
        let back = UdpSocket::bind("127.0.0.1:0")?;
        front.set_nonblocking(true)?;
        back.set_nonblocking(true)?;
        let address = front.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(RelayStats::default()));
        let links = Links {
            up: Link::new(up, seed),
            down: Link::new(down, seed ^ 0x9e37_79b9_7f4a_7c15),
            client: None,
        };
        let (stopped, shared) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name("rally-relay".into())
            .spawn(move || relay(&front, &back, server, links, &stopped, &shared))?;
        Ok(Self { address, stop, stats, thread: Some(thread) })
    }

    /// A relay that only delays: `one_way` each way, nothing lost.
    pub fn delay(server: SocketAddr, one_way: Duration) -> io::Result<Self> {
        let link = LinkConfig { delay: one_way, ..LinkConfig::default() };
        Self::start(server, link, link, 0)
    }

    /// Where clients send.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// What the relay has applied so far (updated as datagrams pass).
    pub fn stats(&self) -> RelayStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the relay; what it applied, or how its thread failed.
    pub fn stop(mut self) -> io::Result<RelayStats> {
        self.shut()?;
        Ok(self.stats())
    }

    fn shut(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the relay thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for LinkRelay {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// Both directions, and the client the server's replies go to.
struct Links {
    up: Link<Vec<u8>>,
    down: Link<Vec<u8>>,
    client: Option<SocketAddr>,
}

fn relay(
    front: &UdpSocket,
    back: &UdpSocket,
    server: SocketAddr,
    mut links: Links,
    stop: &AtomicBool,
    stats: &Mutex<RelayStats>,
) -> io::Result<()> {
    precise_timers();
    let clock = Clock::start();
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let mut changed = false;
        while let Some((len, from)) = receive(front, &mut buf)? {
            links.client = Some(from);
            links.up.send(clock.now(), buf[..len].to_vec(), len);
            changed = true;
        }
        while let Some((len, _)) = receive(back, &mut buf)? {
            links.down.send(clock.now(), buf[..len].to_vec(), len);
            changed = true;
        }
        let now = clock.now();
        while let Some(datagram) = links.up.poll_deliver(now) {
            // A refused send is a lost datagram, as on a network.
            let _ = back.send_to(&datagram, server);
            changed = true;
        }
        while let Some(datagram) = links.down.poll_deliver(now) {
            if let Some(client) = links.client {
                let _ = front.send_to(&datagram, client);
            }
            changed = true;
        }
        if changed {
            *stats.lock().unwrap_or_else(|p| p.into_inner()) =
                RelayStats { up: *links.up.stats(), down: *links.down.stats() };
        }
        let next = [links.up.poll_timeout(), links.down.poll_timeout()].into_iter().flatten().min();
        let wait = next.map_or(WAIT_MAX, |at| at.saturating_duration_since(clock.now()));
        if !wait.is_zero() {
            readable_any(&[front, back], wait.min(WAIT_MAX))?;
        }
    }
    Ok(())
}

fn receive(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
    match socket.recv_from(buf) {
        Ok(got) => Ok(Some(got)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        // A reply to a datagram that found no listener: nothing to relay.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(None),
        Err(e) => Err(e),
    }
}
