//! The ideal of Rally's streaming repair: the same code with perfect knowledge of loss, in the
//! same virtual time and through the same emulator as the peers.
//!
//! Each payload goes out once. The sender knows the fate of every packet the moment it sends
//! it (the link decides it then), so it sends a repair only when the receiver, given what is
//! on its way, will still miss something: `repair interval` (2 ms, Rally's) after a send
//! leaves a hole, again after each repair that is lost, one repair per interval at most. A
//! repair's window runs from the receiver's first hole (as the sender foresees it) to the
//! newest payload, and is 406 bytes (a 400-byte symbol and its header). There are no packet
//! headers, acks or handshake. The receiver decodes as soon as the repairs it holds have
//! full rank over its holes, counted with the generic-rank condition of random coefficients
//! over GF(256) (each repair covers every hole up to its newest payload; a prefix of `k` holes
//! solves when, for every `j`, at least `k - j + 1` of the repairs that reach no further than
//! hole `k` reach hole `j`), then delivers in order; the server echoes what it delivers, the
//! same way back. What lies between Rally's coded row and this one is the cost of learning of
//! losses from acks, and of headers and acks themselves.

use super::{record_echoes, send_surviving, send_time, Run, PAYLOAD_BYTES, SEND_INTERVAL};
use rally_netem::{Link, LinkConfig};
use rally_proto::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// The gap between a payload and its repair (Rally's default).
pub const REPAIR_GAP: Duration = Duration::from_millis(2);
/// A repair's bytes: a symbol of a 400-byte payload with its length and checksum.
const REPAIR_BYTES: usize = PAYLOAD_BYTES + 6;

/// A packet on the link: a payload, or a repair of the payloads from the receiver's first
/// hole to `end`.
#[derive(Debug, Clone, Copy)]
enum Packet {
    Payload(usize),
    Repair { end: usize },
}

/// What one receiver holds: payloads, repairs, and how far it delivered in order.
#[derive(Debug, Default, Clone)]
struct Receiver {
    received: Vec<bool>,
    /// The newest payload each repair it holds combines, for repairs not yet used up.
    repairs: Vec<usize>,
    delivered: usize,
}

impl Receiver {
    fn new(payloads: usize) -> Self {
        Self { received: vec![false; payloads], ..Self::default() }
    }

    /// Takes a packet; returns the payloads now deliverable in order.
    fn take(&mut self, packet: Packet) -> std::ops::Range<usize> {
        match packet {
            Packet::Payload(index) => self.received[index] = true,
            Packet::Repair { end, .. } if end >= self.delivered => self.repairs.push(end),
            Packet::Repair { .. } => {}
        }
        self.decode();
        let from = self.delivered;
        while self.received.get(self.delivered).copied().unwrap_or(false) {
            self.delivered += 1;
        }
        self.repairs.retain(|end| *end >= self.delivered);
        from..self.delivered
    }

    /// The holes from the first undelivered payload to the newest any repair combines.
    fn holes(&self) -> Vec<usize> {
        let newest = self.repairs.iter().copied().max().unwrap_or(0);
        (self.delivered..=newest.min(self.received.len().saturating_sub(1)))
            .filter(|i| !self.received[*i])
            .collect()
    }

    /// Solves the longest prefix of holes the repairs have full rank over, and uses up the
    /// repairs that solved it.
    fn decode(&mut self) {
        let holes = self.holes();
        // How many holes each repair reaches.
        let reach: Vec<usize> = self
            .repairs
            .iter()
            .map(|end| holes.iter().take_while(|h| **h <= *end).count())
            .collect();
        let solvable = (1..=holes.len()).rev().find(|&k| {
            (1..=k).all(|j| reach.iter().filter(|r| **r >= j && **r <= k).count() > k - j)
        });
        let Some(k) = solvable else { return };
        for hole in &holes[..k] {
            self.received[*hole] = true;
        }
        // The repairs reaching no further than hole k were spent on it.
        let mut spent = 0;
        let mut kept = Vec::new();
        for (end, r) in self.repairs.iter().zip(&reach) {
            if *r <= k && spent < k {
                spent += 1;
            } else {
                kept.push(*end);
            }
        }
        self.repairs = kept;
    }

    /// The first hole, if any, up to `newest`.
    fn first_hole(&self, newest: usize) -> Option<usize> {
        (self.delivered..=newest).find(|i| !self.received[*i])
    }
}

/// One direction: the link, the receiver, and the sender's foresight of the receiver (every
/// packet that survives the link, taken at once).
struct Direction {
    link: Link<Packet>,
    receiver: Receiver,
    foreseen: Receiver,
    newest: Option<usize>,
    /// When the next repair may go: one per interval.
    repair_at: Option<Instant>,
}

impl Direction {
    fn new(link: &LinkConfig, seed: u64, payloads: usize) -> Self {
        Self {
            link: Link::new(*link, seed),
            receiver: Receiver::new(payloads),
            foreseen: Receiver::new(payloads),
            newest: None,
            repair_at: None,
        }
    }

    fn send(&mut self, now: Instant, packet: Packet, size: usize) -> u64 {
        if send_surviving(&mut self.link, now, packet, size) {
            self.foreseen.take(packet);
        } else {
            self.repair_at.get_or_insert(now + REPAIR_GAP);
        }
        size as u64
    }

    fn send_payload(&mut self, now: Instant, index: usize) -> u64 {
        self.newest = Some(index);
        self.send(now, Packet::Payload(index), PAYLOAD_BYTES)
    }

    /// Sends a repair if one is due and the receiver will still miss something.
    fn poll_repair(&mut self, now: Instant) -> u64 {
        if self.repair_at.is_none_or(|at| at > now) {
            return 0;
        }
        self.repair_at = None;
        let Some(newest) = self.newest else { return 0 };
        // Nothing the receiver will miss: the repairs on their way (if any) solve it.
        if self.foreseen.first_hole(newest).is_none() {
            return 0;
        }
        let bytes = self.send(now, Packet::Repair { end: newest }, REPAIR_BYTES);
        if self.foreseen.first_hole(newest).is_some() {
            self.repair_at.get_or_insert(now + REPAIR_GAP);
        }
        bytes
    }
}

/// Round trips of the W1 workload over `link` for `duration` with the ideal code.
pub fn run(link: &LinkConfig, seed: u64, duration: Duration) -> Run {
    let payloads = (duration.as_nanos() / SEND_INTERVAL.as_nanos()) as usize + 1;
    let mut up = Direction::new(link, seed.wrapping_mul(13).wrapping_add(5), payloads);
    let mut down = Direction::new(link, seed.wrapping_mul(17).wrapping_add(6), payloads);
    let mut run = Run::default();
    let start = Instant::ZERO;
    let end = start + duration;
    let mut sent = 0;
    // Echoes due at the server: (when, index).
    let mut echoes: BinaryHeap<Reverse<(Instant, usize)>> = BinaryHeap::new();
    loop {
        let next_payload = Some(send_time(start, sent as u64)).filter(|t| *t < end);
        let timers =
            [up.repair_at, down.repair_at, up.link.poll_timeout(), down.link.poll_timeout()];
        let next_echo = echoes.peek().map(|e| e.0 .0);
        let now = timers.into_iter().chain([next_payload, next_echo]).flatten().min();
        let Some(now) = now else { break };
        if next_payload == Some(now) {
            run.wire_bytes += up.send_payload(now, sent);
            run.payload_bytes += PAYLOAD_BYTES as u64;
            sent += 1;
        }
        while echoes.peek().is_some_and(|e| e.0 .0 <= now) {
            let Some(Reverse((_, index))) = echoes.pop() else { break };
            run.wire_bytes += down.send_payload(now, index);
            run.payload_bytes += PAYLOAD_BYTES as u64;
        }
        run.wire_bytes += up.poll_repair(now) + down.poll_repair(now);
        while let Some(packet) = up.link.poll_deliver(now) {
            for delivered in up.receiver.take(packet) {
                echoes.push(Reverse((now, delivered)));
            }
        }
        while let Some(packet) = down.link.poll_deliver(now) {
            record_echoes(&mut run, start, now, down.receiver.take(packet));
        }
    }
    run.missing = (sent - run.rtts_ms.len()) as u64;
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the generic-rank rule solves a prefix of holes exactly when enough repairs reach
    /// no further than it. Method: holes 1 and 3; a repair up to 2 solves hole 1 alone; one up
    /// to 4 then solves hole 3; a repair reaching hole 3 first solves nothing by itself.
    #[test]
    fn repairs_solve_the_holes_they_reach_in_order() {
        let mut r = Receiver::new(8);
        for i in [0, 2, 4] {
            r.take(Packet::Payload(i));
        }
        assert_eq!(r.delivered, 1);
        let mut late = r.clone();
        assert_eq!(r.take(Packet::Repair { end: 2 }), 1..3);
        assert_eq!(r.take(Packet::Repair { end: 4 }), 3..5);
        assert_eq!(late.take(Packet::Repair { end: 4 }), 1..1, "two holes, one repair");
        assert_eq!(late.take(Packet::Repair { end: 4 }), 1..5);
    }
}
