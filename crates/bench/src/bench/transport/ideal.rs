//! The link's own RTT: what an ideal protocol would measure on the same profile.
//!
//! The ideal protocol sends each payload once, in a packet of exactly the payload's size, never
//! loses one, and echoes it the instant it arrives: the link's delay, jitter and serialization,
//! and nothing else. Loss is switched off, since it is what the protocols under test recover
//! from, and no acks or copies share the bottleneck, since the peers' own traffic is part of
//! what they are measured on. Every peer's mean and p99 are compared with this one baseline per
//! profile and seed, rather than with delays sampled from its own packets, which a protocol that
//! floods the link would push up in its own favour.

use super::{send_time, Run, PAYLOAD_BYTES};
use rally_netem::{Link, LinkConfig, LossModel};
use rally_proto::Instant;
use std::time::Duration;

/// Round trips of one payload per send interval for `duration` over `link` without loss.
pub fn run(link: &LinkConfig, seed: u64, duration: Duration) -> Run {
    let lossless = LinkConfig { loss: LossModel::None, ..*link };
    let mut up: Link<usize> = Link::new(lossless, seed.wrapping_mul(13).wrapping_add(5));
    let mut down: Link<usize> = Link::new(lossless, seed.wrapping_mul(17).wrapping_add(6));
    let start = Instant::ZERO;
    let end = start + duration;
    let mut sent_at = Vec::new();
    let mut run = Run::default();
    loop {
        let next_send = send_time(start, sent_at.len() as u64);
        let now = [Some(next_send).filter(|t| *t < end), up.poll_timeout(), down.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(now) = now else { break };
        if now == next_send && now < end {
            up.send(now, sent_at.len(), PAYLOAD_BYTES);
            sent_at.push(now);
            run.payload_bytes += PAYLOAD_BYTES as u64;
        }
        while let Some(index) = up.poll_deliver(now) {
            down.send(now, index, PAYLOAD_BYTES);
            run.payload_bytes += PAYLOAD_BYTES as u64;
        }
        while let Some(index) = down.poll_deliver(now) {
            run.rtts_ms.push((now - sent_at[index]).as_secs_f64() * 1e3);
        }
    }
    run.wire_bytes = run.payload_bytes;
    run
}
