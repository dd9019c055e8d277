//! A UDP relay on loopback that delays every datagram by a fixed time each way: a plain stand-in
//! for a real link between a client and a server in real-time benchmarks (the full real-time
//! link emulator, with loss and jitter, is the shootout's).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Datagrams held at most; more are dropped, as a full queue would.
const HELD_MAX: usize = 65_536;
/// The longest the relay sleeps when idle: the precision of its delays. It polls rather than
/// blocking on its sockets because a socket's receive timeout counts in kernel ticks (4 ms at
/// 250 Hz), far coarser than the delays it keeps.
const IDLE_SLEEP: Duration = Duration::from_micros(50);

/// A running relay; dropping it stops the thread.
#[derive(Debug)]
pub struct DelayRelay {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

/// A datagram waiting for its time: when, whether it goes to the server, the bytes.
type Held = Reverse<(Instant, u64, bool, Vec<u8>)>;

impl DelayRelay {
    /// Starts relaying between clients that send to [`DelayRelay::address`] and `server`,
    /// delaying each datagram by `one_way`. One client at a time: replies go to the address
    /// that last sent.
    pub fn start(server: SocketAddr, one_way: Duration) -> io::Result<Self> {
        let front = UdpSocket::bind("127.0.0.1:0")?;
        let back = UdpSocket::bind("127.0.0.1:0")?;
        front.set_nonblocking(true)?;
        back.set_nonblocking(true)?;
        let address = front.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || relay(&front, &back, server, one_way, &stopped));
        Ok(Self { address, stop, thread: Some(thread) })
    }

    /// Where clients send.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops the relay and reports how its thread ended.
    pub fn stop(mut self) -> io::Result<()> {
        self.shut()
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

impl Drop for DelayRelay {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

#[allow(clippy::disallowed_methods)] // the relay runs on the OS clock
fn relay(
    front: &UdpSocket,
    back: &UdpSocket,
    server: SocketAddr,
    one_way: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut held: BinaryHeap<Held> = BinaryHeap::new();
    let mut client: Option<SocketAddr> = None;
    let mut order = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let mut busy = false;
        while let Some((len, from)) = receive(front, &mut buf)? {
            client = Some(from);
            busy |= hold(&mut held, &mut order, one_way, true, &buf[..len]);
        }
        while let Some((len, _)) = receive(back, &mut buf)? {
            busy |= hold(&mut held, &mut order, one_way, false, &buf[..len]);
        }
        let now = Instant::now();
        while held.peek().is_some_and(|Reverse((at, ..))| *at <= now) {
            let Some(Reverse((_, _, to_server, bytes))) = held.pop() else { break };
            let (socket, to) = if to_server { (back, Some(server)) } else { (front, client) };
            if let Some(to) = to {
                // A refused send is a lost datagram, as on a network.
                let _ = socket.send_to(&bytes, to);
            }
            busy = true;
        }
        if !busy {
            std::thread::sleep(IDLE_SLEEP);
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

#[allow(clippy::disallowed_methods)] // the relay runs on the OS clock
fn hold(
    held: &mut BinaryHeap<Held>,
    order: &mut u64,
    delay: Duration,
    up: bool,
    bytes: &[u8],
) -> bool {
    if held.len() < HELD_MAX {
        *order += 1;
        held.push(Reverse((Instant::now() + delay, *order, up, bytes.to_vec())));
    }
    true
}
