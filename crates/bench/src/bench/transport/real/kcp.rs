//! KCP on real sockets: the original C ikcp.c at both ends, configured as in sim mode
//! (`kcp-source` as the source ran it, `kcp-flush` with a flush after every send and input),
//! updated when `ikcp_check` says, each end on its own UDP socket.

use super::super::kcp::{millis, End};
use super::{index_of, Client, Server};
use rally_driver::Clock;
use rally_proto::Instant;
use std::error::Error;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a server waits at most before looking at its stop flag.
const WAIT_MAX: Duration = Duration::from_millis(5);

/// One end on a socket, talking to one peer.
struct Socketed {
    end: End,
    socket: UdpSocket,
    /// Where its datagrams go (the server learns it from the first datagram).
    peer: Option<SocketAddr>,
    clock: Clock,
}

impl Socketed {
    fn new(flush: bool, peer: Option<SocketAddr>, clock: Clock) -> std::io::Result<Self> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_nonblocking(true)?;
        Ok(Self { end: End::new(flush), socket, peer, clock })
    }

    /// Feeds every datagram that arrived to KCP, runs its timer if due, sends what it made.
    fn turn(&mut self) {
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = self.socket.recv_from(&mut buf) {
            self.peer.get_or_insert(from);
            self.end.input(&buf[..len]);
        }
        let now = millis(self.clock.now());
        if self.end.kcp.check(now) <= now {
            self.end.kcp.update(now);
        }
        self.transmit();
    }

    fn transmit(&mut self) {
        while let Some(packet) = self.end.kcp.pop_output() {
            if let Some(peer) = self.peer {
                // A refused send is a lost datagram; KCP resends.
                let _ = self.socket.send_to(&packet, peer);
            }
        }
    }

    /// Sleeps until a datagram arrives, KCP's next timer, or `until`.
    fn wait(&self, until: Instant) -> std::io::Result<()> {
        let now = self.clock.now();
        let timer = Instant::from_millis(u64::from(self.end.kcp.check(millis(now))));
        let wait = until.min(timer).saturating_duration_since(now);
        if !wait.is_zero() {
            rally_driver::readable(&self.socket, wait)?;
        }
        Ok(())
    }
}

pub fn server(flush: bool) -> std::io::Result<Server> {
    let mut end = Socketed::new(flush, None, Clock::start())?;
    let address = end.socket.local_addr()?;
    Server::spawn(address, move |stop: &AtomicBool| {
        rally_driver::precise_timers();
        let mut buf = vec![0u8; 64 * 1024];
        while !stop.load(Ordering::Relaxed) {
            end.turn();
            while let Ok(len) = end.end.kcp.recv(&mut buf) {
                if len == 0 {
                    break;
                }
                end.end.send(&buf[..len]);
            }
            end.transmit();
            end.wait(end.clock.now() + WAIT_MAX).map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

pub struct KcpClient(Socketed);

pub fn client(to: SocketAddr, flush: bool, clock: &Clock) -> std::io::Result<KcpClient> {
    rally_driver::precise_timers();
    Ok(KcpClient(Socketed::new(flush, Some(to), *clock)?))
}

impl Client for KcpClient {
    fn send(&mut self, payload: &[u8]) -> Result<bool, Box<dyn Error>> {
        // KCP's queue is unbounded; W1's load never fills its window on these links.
        self.0.end.send(payload);
        self.0.transmit();
        Ok(true)
    }

    fn poll(
        &mut self,
        until: Instant,
        echoes: &mut Vec<(u32, Instant)>,
    ) -> Result<(), Box<dyn Error>> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            self.0.turn();
            while let Ok(len) = self.0.end.kcp.recv(&mut buf) {
                match index_of(&buf[..len]) {
                    Some(index) => echoes.push((index, self.0.clock.now())),
                    None => break,
                }
            }
            if self.0.clock.now() >= until {
                return Ok(());
            }
            self.0.wait(until)?;
        }
    }
}
