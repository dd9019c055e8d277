//! A UDP relay on loopback that emulates a link in real time, for peers that cannot be run in
//! virtual time: unmodified libraries (ENet, KCP, QUIC) and processes on their own clocks.
//!
//! Clients send to the relay's front address; it forwards to the server and the server's
//! replies back to the client that last sent. Each direction is a [`rally_netem::Link`] (delay
//! and jitter, loss models, a bottleneck with a finite queue, MTU) driven by the OS clock: the
//! same emulator, the same profiles and the same seeds as the virtual-time benchmarks, so a
//! profile means the same thing in both. The relay counts what it applied per direction
//! ([`RelayStats`]), so a report can print the link it measured beside the one it asked for.

use rally_driver::{precise_timers, Clock};
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
    running: Running,
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
        Self::start_on("127.0.0.1:0".parse().expect("a literal address"), server, up, down, seed)
    }

    /// [`LinkRelay::start`] with the clients' side bound to `listen` (port 0: the OS picks).
    pub fn start_on(
        listen: SocketAddr,
        server: SocketAddr,
        up: LinkConfig,
        down: LinkConfig,
        seed: u64,
    ) -> io::Result<Self> {
        let front = UdpSocket::bind(listen)?;
        // The server's side on the same family and interface as the clients' side.
        let back = UdpSocket::bind(SocketAddr::new(listen.ip(), 0))?;
        front.set_nonblocking(true)?;
        back.set_nonblocking(true)?;
        let address = front.local_addr()?;
        let (front, back) = (Front { socket: front, client: None }, Back { socket: back, server });
        let running = Running::spawn(front, back, Links::new(up, down, seed))?;
        Ok(Self { address, running })
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
        self.running.stats()
    }

    /// Stops the relay; what it applied, or how its thread failed.
    pub fn stop(mut self) -> io::Result<RelayStats> {
        self.running.shut()?;
        Ok(self.running.stats())
    }
}

/// A relay's thread, its stop flag and its figures; dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct Running {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<RelayStats>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Running {
    /// Relays between `a` and `b` through `links` on a thread of its own.
    pub(crate) fn spawn(
        a: impl Port + Send + 'static,
        b: impl Port + Send + 'static,
        links: Links,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(RelayStats::default()));
        let (stopped, shared) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name("rally-relay".into())
            .spawn(move || relay(a, b, links, &stopped, &shared))?;
        Ok(Self { stop, stats, thread: Some(thread) })
    }

    pub(crate) fn stats(&self) -> RelayStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the thread; how it ended.
    pub(crate) fn shut(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the relay thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// Both directions of an emulated path.
pub(crate) struct Links {
    /// From the first port to the second (client to server).
    pub(crate) up: Link<Vec<u8>>,
    /// From the second port to the first.
    pub(crate) down: Link<Vec<u8>>,
}

impl Links {
    pub(crate) fn new(up: LinkConfig, down: LinkConfig, seed: u64) -> Self {
        Self { up: Link::new(up, seed), down: Link::new(down, seed ^ 0x9e37_79b9_7f4a_7c15) }
    }
}

/// One end of a relay: where datagrams (or IP packets) come in and go out.
pub(crate) trait Port {
    /// What to wait on.
    fn fd(&self) -> i32;
    /// The next datagram waiting, if any.
    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Sends one; a refused send is a lost datagram, as on a network.
    fn send(&mut self, bytes: &[u8]);
}

/// The clients' side of a UDP relay: replies go to whichever client sent last.
struct Front {
    socket: UdpSocket,
    client: Option<SocketAddr>,
}

/// The server's side of a UDP relay.
struct Back {
    socket: UdpSocket,
    server: SocketAddr,
}

impl Port for Front {
    fn fd(&self) -> i32 {
        raw_fd(&self.socket)
    }

    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let got = receive(&self.socket, buf)?;
        if let Some((_, from)) = got {
            self.client = Some(from);
        }
        Ok(got.map(|(len, _)| len))
    }

    fn send(&mut self, bytes: &[u8]) {
        if let Some(client) = self.client {
            let _ = self.socket.send_to(bytes, client);
        }
    }
}

impl Port for Back {
    fn fd(&self) -> i32 {
        raw_fd(&self.socket)
    }

    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(receive(&self.socket, buf)?.map(|(len, _)| len))
    }

    fn send(&mut self, bytes: &[u8]) {
        let _ = self.socket.send_to(bytes, self.server);
    }
}

#[cfg(unix)]
fn raw_fd(socket: &UdpSocket) -> i32 {
    std::os::fd::AsRawFd::as_raw_fd(socket)
}

#[cfg(not(unix))]
fn raw_fd(_socket: &UdpSocket) -> i32 {
    -1
}

/// Passes what arrives at `a` through `links.up` to `b`, and back through `links.down`, on the
/// OS clock, until `stop`; keeps `stats` current.
pub(crate) fn relay(
    mut a: impl Port,
    mut b: impl Port,
    mut links: Links,
    stop: &AtomicBool,
    stats: &Mutex<RelayStats>,
) -> io::Result<()> {
    precise_timers();
    let clock = Clock::start();
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let mut changed = false;
        while let Some(len) = a.receive(&mut buf)? {
            links.up.send(clock.now(), buf[..len].to_vec(), len);
            changed = true;
        }
        while let Some(len) = b.receive(&mut buf)? {
            links.down.send(clock.now(), buf[..len].to_vec(), len);
            changed = true;
        }
        let now = clock.now();
        while let Some(datagram) = links.up.poll_deliver(now) {
            b.send(&datagram);
            changed = true;
        }
        while let Some(datagram) = links.down.poll_deliver(now) {
            a.send(&datagram);
            changed = true;
        }
        if changed {
            *stats.lock().unwrap_or_else(|p| p.into_inner()) =
                RelayStats { up: *links.up.stats(), down: *links.down.stats() };
        }
        let next = [links.up.poll_timeout(), links.down.poll_timeout()].into_iter().flatten().min();
        let wait = next.map_or(WAIT_MAX, |at| at.saturating_duration_since(clock.now()));
        if !wait.is_zero() {
            wait_either(a.fd(), b.fd(), wait.min(WAIT_MAX))?;
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn wait_either(a: i32, b: i32, timeout: Duration) -> io::Result<()> {
    rally_driver::readable_fds(&[a, b], timeout).map(|_| ())
}

#[cfg(not(target_os = "linux"))]
fn wait_either(_a: i32, _b: i32, timeout: Duration) -> io::Result<()> {
    std::thread::sleep(timeout.min(Duration::from_micros(200)));
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
