//! The floor of a two-copy protocol: the best any protocol that sends each payload twice could
//! measure on a profile, in the same virtual time and through the same emulator as the peers.
//!
//! W1's byte budget (2.5x the payload on a lossy link) holds two copies of each payload but not
//! three, so two copies are what a protocol within the budget can send up front. This reference
//! sends both, [`COPY_GAP`] apart, like Rally's default, and knows perfectly which were lost
//! (a copy still queued at the bottleneck is not: it will arrive, and copying it again would
//! only lengthen the queue, a resend storm once held-back echoes are released together):
//! when neither survived it sends both again one send interval plus one link round trip later,
//! the soonest a steady sender learns of a loss (its next payload arrives past the hole and the
//! receiver's ack comes back). It has no headers, acks or handshake, delivers in order, and the
//! echo goes back the same way. A real protocol pays for its acks and its loss detection on top
//! of this; targets below this floor cannot be met by copies within the budget.

use super::{record_echoes, send_surviving, send_time, Run, PAYLOAD_BYTES, SEND_HZ, SEND_INTERVAL};
use rally_netem::{Link, LinkConfig, LossModel};
use rally_proto::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// The gap between a payload's two copies (Rally's default repeat interval).
pub const COPY_GAP: Duration = Duration::from_millis(2);

/// One direction: its link, what its receiver holds, and how far it delivered in order.
struct Direction {
    link: Link<usize>,
    received: Vec<bool>,
    /// Whether some copy of the payload got past the link's loss and queue: it will arrive.
    surviving: Vec<bool>,
    delivered: usize,
}

impl Direction {
    fn new(link: &LinkConfig, seed: u64, payloads: usize) -> Self {
        let link = Link::new(*link, seed);
        let (received, surviving) = (vec![false; payloads], vec![false; payloads]);
        Self { link, received, surviving, delivered: 0 }
    }

    /// Sends a copy of payload `index`, noting whether it survives (the floor's perfect
    /// knowledge of loss: the link decides a packet's fate when it is sent).
    fn send(&mut self, now: Instant, index: usize) {
        self.surviving[index] |= send_surviving(&mut self.link, now, index, PAYLOAD_BYTES);
    }

    /// Marks `index` received; returns the payloads now deliverable in order.
    fn receive(&mut self, index: usize) -> std::ops::Range<usize> {
        self.received[index] = true;
        let from = self.delivered;
        while self.received.get(self.delivered).copied().unwrap_or(false) {
            self.delivered += 1;
        }
        from..self.delivered
    }
}

/// Something due at an instant: a copy of a payload to send, or a check whether it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Copy { down: bool, index: usize },
    Check { down: bool, index: usize },
}

/// Whether the floor means anything on `link`: it loses packets (without loss a protocol has
/// no reason to copy) and carries two copies of every payload at half its rate or less (the
/// floor has no congestion control; on a narrower link it would only measure its own queue).
pub fn applies(link: &LinkConfig) -> bool {
    let copies_bits_per_sec = 2 * PAYLOAD_BYTES as u64 * 8 * SEND_HZ;
    let wide = link.rate_bits_per_sec.is_none_or(|rate| rate >= 2 * copies_bits_per_sec);
    link.loss != LossModel::None && wide
}

/// Round trips of the W1 workload over `link` for `duration`; `link_rtt` is the link's own
/// mean round trip, which sets when a loss is known.
pub fn run(link: &LinkConfig, seed: u64, duration: Duration, link_rtt: Duration) -> Run {
    let payloads = (duration.as_nanos() / SEND_INTERVAL.as_nanos()) as usize + 1;
    let mut up = Direction::new(link, seed.wrapping_mul(13).wrapping_add(5), payloads);
    let mut down = Direction::new(link, seed.wrapping_mul(17).wrapping_add(6), payloads);
    let known_after = SEND_INTERVAL + link_rtt;
    let mut due: BinaryHeap<Reverse<(Instant, Due)>> = BinaryHeap::new();
    let mut run = Run::default();
    let start = Instant::ZERO;
    let end = start + duration;
    let mut sent = 0;
    let send = |due: &mut BinaryHeap<_>, now: Instant, down: bool, index: usize| {
        due.push(Reverse((now, Due::Copy { down, index })));
        due.push(Reverse((now + COPY_GAP, Due::Copy { down, index })));
        due.push(Reverse((now + known_after, Due::Check { down, index })));
    };
    loop {
        let next_payload = Some(send_time(start, sent as u64)).filter(|t| *t < end);
        let next_due = due.peek().map(|d| d.0 .0);
        let links = [up.link.poll_timeout(), down.link.poll_timeout()];
        let now = [next_payload, next_due, links[0], links[1]].into_iter().flatten().min();
        let Some(now) = now else { break };
        if next_payload == Some(now) {
            send(&mut due, now, false, sent);
            run.payload_bytes += PAYLOAD_BYTES as u64;
            sent += 1;
        }
        while due.peek().is_some_and(|d| d.0 .0 <= now) {
            let Some(Reverse((_, what))) = due.pop() else { break };
            match what {
                Due::Copy { down: d, index } => {
                    let direction = if d { &mut down } else { &mut up };
                    direction.send(now, index);
                    run.wire_bytes += PAYLOAD_BYTES as u64;
                }
                Due::Check { down: d, index } => {
                    // Both copies again only if none survived: a copy still queued at the
                    // bottleneck will arrive, and copying it again would only lengthen the
                    // queue (a resend storm once held-back echoes are released together).
                    let direction = if d { &down } else { &up };
                    if !direction.received[index] && !direction.surviving[index] {
                        send(&mut due, now, d, index);
                    }
                }
            }
        }
        while let Some(index) = up.link.poll_deliver(now) {
            // The server echoes each payload as it is delivered in order.
            for echoed in up.receive(index) {
                send(&mut due, now, true, echoed);
                run.payload_bytes += PAYLOAD_BYTES as u64;
            }
        }
        while let Some(index) = down.link.poll_deliver(now) {
            record_echoes(&mut run, start, now, down.receive(index));
        }
    }
    run.missing = (sent - run.rtts_ms.len()) as u64;
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link with a fixed one-way delay, no jitter and no rate limit, losing `loss`.
    fn fixed(loss: f64) -> LinkConfig {
        let profile = rally_netem::LinkProfile::parse("clean").expect("a known profile");
        LinkConfig {
            delay: Duration::from_millis(10),
            jitter: Duration::ZERO,
            rate_bits_per_sec: None,
            loss: LossModel::Bernoulli { probability: loss },
            ..profile.config
        }
    }

    #[test]
    fn without_loss_every_payload_takes_the_links_round_trip_and_two_copies() {
        let run = run(&fixed(0.0), 1, Duration::from_secs(2), Duration::from_millis(20));
        assert_eq!(run.missing, 0);
        assert!(run.rtts_ms.iter().all(|rtt| (rtt - 20.0).abs() < 1e-6), "{:?}", run.rtts_ms);
        assert_eq!(run.wire_bytes, 2 * run.payload_bytes);
    }

    #[test]
    fn a_payload_whose_copies_were_all_lost_comes_back_an_interval_and_a_round_trip_later() {
        let run = run(&fixed(0.3), 7, Duration::from_secs(10), Duration::from_millis(20));
        assert_eq!(run.missing, 0, "every payload is repaired until it arrives");
        let repair = (SEND_INTERVAL + Duration::from_millis(20)).as_secs_f64() * 1e3;
        let slowest = run.rtts_ms.iter().copied().fold(0.0, f64::max);
        // At 30% loss some payload or echo lost both copies (9% of sends in each direction).
        assert!(slowest >= 20.0 + repair - 1e-6, "slowest {slowest} ms");
        let fastest = run.rtts_ms.iter().copied().fold(f64::INFINITY, f64::min);
        assert!((fastest - 20.0).abs() < 1e-6, "fastest {fastest} ms");
    }
}
