//! The kernel's TCP with TCP_NODELAY: a UDP relay cannot impair it, so the client and the
//! server live in two network namespaces joined by TUN devices, and the link emulator sits
//! between the devices ([`crate::testbed::netns::TunLink`]), seeing every segment, ack and
//! retransmission the kernel sends. Payloads are 400 bytes each on one stream; the client
//! cuts the echoed stream back into payloads.

use super::{index_of, w1, Client, RealRun, CONNECT_TIMEOUT};
use crate::bench::transport::PAYLOAD_BYTES;
use crate::testbed::netns::{Side, TunLink, SERVER_IP};
use rally_driver::Clock;
use rally_netem::LinkConfig;
use rally_proto::Instant;
use std::error::Error;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PORT: u16 = 7000;
/// The IPv4 header each packet through the TUN devices carries: not the protocol's bytes, as
/// a UDP peer's IP and UDP headers are not counted either.
const IP_HEADER: u64 = 20;

/// Why TCP cannot run here, if it cannot.
pub fn available() -> Result<(), String> {
    // The effective uid, from /proc rather than an unsafe libc call.
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        return Err(
            "needs root for network namespaces and TUN devices: run the bench as root".into()
        );
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("needs /dev/net/tun (the tun module)".into());
    }
    Ok(())
}

pub fn run(link: &LinkConfig, seed: u64, duration: Duration) -> Result<RealRun, Box<dyn Error>> {
    let clock = Clock::start();
    let tag = format!("rally-bench-{}", std::process::id());
    let tun = TunLink::start(&tag, *link, *link, seed)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let server = tun.spawn_in(Side::B, move || echo(&stopped).map_err(|e| e.to_string()))?;
    let stream = tun
        .spawn_in(Side::A, move || connect(clock))?
        .join()
        .map_err(|_| "the TCP client's thread panicked")??
        .map_err(|e| format!("tcp: {e}"))?;
    let mut client = TcpClient { stream, clock, received: Vec::new() };
    let run = w1(&mut client, &clock, duration);
    drop(client);
    stop.store(true, Ordering::Relaxed);
    let served = server.join().map_err(|_| "the TCP server panicked")?;
    let relay = tun.stop()?;
    let run = run?;
    served?.map_err(|e| format!("tcp server: {e}"))?;
    let packets = relay.up.sent + relay.down.sent;
    let wire_bytes = relay.up.bytes_sent + relay.down.bytes_sent - IP_HEADER * packets;
    Ok(RealRun { run: super::Run { wire_bytes, ..run }, relay })
}

/// The server: accepts one connection and echoes until it closes or `stop`.
fn echo(stop: &AtomicBool) -> std::io::Result<()> {
    let listener = TcpListener::bind((SERVER_IP, PORT))?;
    listener.set_nonblocking(true)?;
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    };
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(5)))?;
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => stream.write_all(&buf[..n])?,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The client's connection, made from inside namespace a (it stays there wherever it is used).
fn connect(clock: Clock) -> std::io::Result<TcpStream> {
    let to = SocketAddr::from((SERVER_IP, PORT));
    let deadline = clock.now() + CONNECT_TIMEOUT;
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                stream.set_nonblocking(true)?;
                return Ok(stream);
            }
            // The server's thread may not be listening yet.
            Err(_) if clock.now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(e),
        }
    }
}

struct TcpClient {
    stream: TcpStream,
    clock: Clock,
    /// Echoed bytes not yet a whole payload.
    received: Vec<u8>,
}

impl Client for TcpClient {
    fn send(&mut self, payload: &[u8]) -> Result<bool, Box<dyn Error>> {
        // A non-blocking stream may take part of a payload; the rest must follow, in order.
        let mut rest = payload;
        while !rest.is_empty() {
            match self.stream.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    fn poll(
        &mut self,
        until: Instant,
        echoes: &mut Vec<(u32, Instant)>,
    ) -> Result<(), Box<dyn Error>> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Err("tcp: the server closed the connection".into()),
                Ok(n) => {
                    self.received.extend_from_slice(&buf[..n]);
                    let whole = self.received.len() / PAYLOAD_BYTES * PAYLOAD_BYTES;
                    let now = self.clock.now();
                    for payload in self.received[..whole].chunks(PAYLOAD_BYTES) {
                        echoes.extend(index_of(payload).map(|index| (index, now)));
                    }
                    self.received.drain(..whole);
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            let wait = until.saturating_duration_since(self.clock.now());
            if wait.is_zero() {
                return Ok(());
            }
            rally_driver::readable_fds(&[self.stream.as_raw_fd()], wait)?;
        }
    }
}
