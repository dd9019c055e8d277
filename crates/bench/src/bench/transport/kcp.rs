//! KCP on the W1 workload, in virtual time: the original C ikcp.c (bundled by the kcp-rs
//! crate) on both ends, driven by the same clock and links as Rally.
//!
//! Two configurations, as docs/design.md names them: `kcp-source` as the source ran it
//! (nodelay 1, interval 10 ms, fast resend 2, no congestion control, no explicit flush) and
//! `kcp-flush` as KCP's author recommends (the same plus `ikcp_flush` after every send and
//! every input), which removes the wait for the next 10 ms update.

use super::{send_time, Run, PAYLOAD_BYTES};
use kcp::Kcp;
use rally_netem::{Link, LinkConfig};
use rally_proto::Instant;
use std::time::Duration;

/// One end: a KCP control block and whether it flushes eagerly.
pub(super) struct End {
    pub(super) kcp: Box<Kcp>,
    flush: bool,
}

impl End {
    /// An end configured as `kcp-flush` (`flush`) or `kcp-source`.
    pub(super) fn new(flush: bool) -> Self {
        // Boxed before `initialize`, which stores the block's address for the output callback.
        let mut kcp = Box::new(Kcp::new(1));
        kcp.initialize();
        kcp.set_nodelay(true, 10, 2, true);
        Self { kcp, flush }
    }

    pub(super) fn send(&mut self, payload: &[u8]) {
        // The queue is unbounded in KCP; W1's load never fills its window on these links.
        let _ = self.kcp.send(payload);
        if self.flush {
            self.kcp.flush();
        }
    }

    pub(super) fn input(&mut self, packet: &[u8]) {
        let _ = self.kcp.input(packet);
        if self.flush {
            self.kcp.flush();
        }
    }

    /// Moves every datagram KCP produced into `link`; returns the bytes.
    fn drain(&mut self, now: Instant, link: &mut Link<Vec<u8>>) -> u64 {
        let mut bytes = 0;
        while let Some(packet) = self.kcp.pop_output() {
            bytes += packet.len() as u64;
            link.send(now, packet.to_vec(), packet.len());
        }
        bytes
    }
}

/// KCP's clock: whole milliseconds.
pub(super) fn millis(t: Instant) -> u32 {
    (t.as_nanos() / 1_000_000) as u32
}

pub fn run(link: &LinkConfig, seed: u64, duration: Duration, flush: bool) -> Run {
    let mut up: Link<Vec<u8>> = Link::new(*link, seed.wrapping_mul(7).wrapping_add(3));
    let mut down: Link<Vec<u8>> = Link::new(*link, seed.wrapping_mul(11).wrapping_add(4));
    let (mut client, mut server) = (End::new(flush), End::new(flush));
    let mut run = Run::default();
    let mut sent_at: Vec<Instant> = Vec::new();
    let mut now = Instant::ZERO;
    let end = now + duration;
    let mut buf = vec![0u8; 64 * 1024];
    let mut payload = vec![0u8; PAYLOAD_BYTES];
    while now < end {
        if now >= send_time(Instant::ZERO, sent_at.len() as u64) {
            payload[..4].copy_from_slice(&(sent_at.len() as u32).to_le_bytes());
            client.send(&payload);
            run.payload_bytes += PAYLOAD_BYTES as u64;
            sent_at.push(now);
        }
        while let Some(packet) = up.poll_deliver(now) {
            server.input(&packet);
        }
        while let Ok(len) = server.kcp.recv(&mut buf) {
            if len == 0 {
                break;
            }
            server.send(&buf[..len]);
            run.payload_bytes += len as u64;
        }
        while let Some(packet) = down.poll_deliver(now) {
            client.input(&packet);
        }
        while let Ok(len) = client.kcp.recv(&mut buf) {
            if len < 4 {
                break;
            }
            let index = u32::from_le_bytes(buf[..4].try_into().expect("four bytes")) as usize;
            run.rtts_ms.push((now - sent_at[index]).as_secs_f64() * 1e3);
        }
        let ms = millis(now);
        for end in [&mut client, &mut server] {
            if end.kcp.check(ms) <= ms {
                end.kcp.update(ms);
            }
        }
        run.wire_bytes += client.drain(now, &mut up) + server.drain(now, &mut down);
        now = next_time(now, &sent_at, &up, &down, &client, &server).min(end);
    }
    run.missing = (sent_at.len() - run.rtts_ms.len()) as u64;
    run
}

/// The next instant anything happens: a send, a delivery, or a KCP timer (whole ms).
fn next_time(
    now: Instant,
    sent_at: &[Instant],
    up: &Link<Vec<u8>>,
    down: &Link<Vec<u8>>,
    client: &End,
    server: &End,
) -> Instant {
    let ms = millis(now);
    let timer = |end: &End| Instant::from_millis(u64::from(end.kcp.check(ms).max(ms + 1)));
    [
        Some(send_time(Instant::ZERO, sent_at.len() as u64)),
        up.poll_timeout(),
        down.poll_timeout(),
        Some(timer(client)),
        Some(timer(server)),
    ]
    .into_iter()
    .flatten()
    .min()
    .expect("the send schedule is always there")
    .max(now + Duration::from_nanos(1))
}
