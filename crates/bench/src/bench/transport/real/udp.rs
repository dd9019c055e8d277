//! The baseline: a bare UDP echo, one datagram per payload and nothing else. Lost payloads
//! stay lost; the round trips of those that survive are the link's own, as the relay applies
//! it on this machine's sockets and clock.

use super::{index_of, Client, Server};
use rally_driver::Clock;
use rally_proto::Instant;
use std::error::Error;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a server waits at most before looking at its stop flag.
const WAIT_MAX: Duration = Duration::from_millis(5);

pub fn server() -> std::io::Result<Server> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_nonblocking(true)?;
    let address = socket.local_addr()?;
    Server::spawn(address, move |stop: &AtomicBool| {
        rally_driver::precise_timers();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            while let Ok((len, from)) = socket.recv_from(&mut buf) {
                // A refused send is a lost datagram.
                let _ = socket.send_to(&buf[..len], from);
            }
            rally_driver::readable(&socket, WAIT_MAX).map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

pub struct UdpClient {
    socket: UdpSocket,
    to: SocketAddr,
    clock: Clock,
}

pub fn client(to: SocketAddr, clock: &Clock) -> std::io::Result<UdpClient> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_nonblocking(true)?;
    Ok(UdpClient { socket, to, clock: *clock })
}

impl Client for UdpClient {
    fn send(&mut self, payload: &[u8]) -> Result<bool, Box<dyn Error>> {
        Ok(self.socket.send_to(payload, self.to).is_ok())
    }

    fn poll(
        &mut self,
        until: Instant,
        echoes: &mut Vec<(u32, Instant)>,
    ) -> Result<(), Box<dyn Error>> {
        let mut buf = [0u8; 2048];
        loop {
            while let Ok((len, _)) = self.socket.recv_from(&mut buf) {
                if let Some(index) = index_of(&buf[..len]) {
                    echoes.push((index, self.clock.now()));
                }
            }
            let wait = until.saturating_duration_since(self.clock.now());
            if wait.is_zero() {
                return Ok(());
            }
            rally_driver::readable(&self.socket, wait)?;
        }
    }
}
