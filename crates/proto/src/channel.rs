//! Per-channel send queues and receive buffers.
//!
//! A message larger than one packet is split into up to 255 fragments; on reliable channels
//! each fragment is resent on its own, so one lost packet costs one fragment, not the message.
//! Every queue and buffer is bounded by the connection's configuration.

use crate::config::{ChannelConfig, ChannelKind};
use crate::time::Instant;
use rally_wire::seq::seq16_newer;
use std::collections::VecDeque;

/// One fragment (or a whole message, as fragment 0 of 1) waiting to be sent or acked.
#[derive(Debug)]
pub(crate) struct Unit {
    pub(crate) seq: u16,
    pub(crate) index: u8,
    pub(crate) count: u8,
    pub(crate) payload: Vec<u8>,
    /// How many packets carried it.
    pub(crate) sends: u8,
    /// Sends since it was queued or last declared lost: redundancy counts its copies here, so
    /// that a repair is copied as the first send was (a repair lost again costs another round
    /// trip, and on a lossy path it is as likely to be lost as any packet).
    pub(crate) round_sends: u8,
    pub(crate) last_sent: Option<Instant>,
    /// A packet carrying it was declared lost: send it again at once.
    pub(crate) lost: bool,
    pub(crate) acked: bool,
    /// When the application queued it.
    pub(crate) queued_at: Instant,
}

/// The sending half of a channel.
#[derive(Debug)]
pub(crate) struct SendChannel {
    pub(crate) config: ChannelConfig,
    next_seq: u16,
    pub(crate) units: VecDeque<Unit>,
    /// Payload buffers of units done with, for the next messages: a channel carrying a
    /// message per tick would otherwise allocate and free one per message.
    spare: Vec<Vec<u8>>,
}

/// Spare payload buffers kept per channel: a few, of at most a packet each, so that an idle
/// connection holds little.
const SPARE_MAX: usize = 2;

impl SendChannel {
    pub(crate) fn new(config: ChannelConfig) -> Self {
        Self { config, next_seq: 0, units: VecDeque::new(), spare: Vec::new() }
    }

    /// Keeps `payload`'s buffer for a later unit, if there is room.
    fn recycle(&mut self, mut payload: Vec<u8>) {
        if self.spare.len() < SPARE_MAX {
            payload.clear();
            self.spare.push(payload);
        }
    }

    /// Drops the units of an unreliable channel that went out: they are sent once.
    pub(crate) fn forget_sent(&mut self) {
        while self.units.front().is_some_and(|u| u.sends > 0) {
            let unit = self.units.pop_front().expect("front exists");
            self.recycle(unit.payload);
        }
        if self.units.iter().any(|u| u.sends > 0) {
            // Sent out of order (a smaller unit fit where a larger one did not): rare.
            let (sent, waiting): (VecDeque<Unit>, VecDeque<Unit>) =
                std::mem::take(&mut self.units).into_iter().partition(|u| u.sends > 0);
            self.units = waiting;
            sent.into_iter().for_each(|u| self.recycle(u.payload));
        }
    }

    /// Queues a message split into pieces of at most `piece` bytes at `now`; false if that
    /// would exceed `limits.0` units or if the oldest unacknowledged unit has waited longer
    /// than `limits.1`.
    pub(crate) fn push(
        &mut self,
        payload: &[u8],
        piece: usize,
        now: Instant,
        limits: (usize, std::time::Duration),
    ) -> bool {
        let (queue_max, delay_max) = limits;
        let count = payload.len().div_ceil(piece).max(1);
        if self.units.len() + count > queue_max || count > 255 {
            return false;
        }
        if self.units.iter().find(|u| !u.acked).is_some_and(|u| now - u.queued_at > delay_max) {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        for (index, chunk) in payload.chunks(piece.max(1)).chain(empty_if(payload)).enumerate() {
            let mut buffer = self.spare.pop().unwrap_or_default();
            buffer.extend_from_slice(chunk);
            self.units.push_back(Unit {
                seq,
                index: index as u8,
                count: count as u8,
                payload: buffer,
                sends: 0,
                round_sends: 0,
                last_sent: None,
                lost: false,
                acked: false,
                queued_at: now,
            });
        }
        true
    }

    /// Marks the unit acked and drops acked units from the front of the queue.
    pub(crate) fn ack(&mut self, seq: u16, index: u8) {
        if let Some(unit) = self.units.iter_mut().find(|u| u.seq == seq && u.index == index) {
            unit.acked = true;
        }
        while self.units.front().is_some_and(|u| u.acked) {
            let unit = self.units.pop_front().expect("front exists");
            self.recycle(unit.payload);
        }
    }

    /// Marks the unit lost, to be resent at once.
    pub(crate) fn lose(&mut self, seq: u16, index: u8) {
        if let Some(unit) = self.units.iter_mut().find(|u| u.seq == seq && u.index == index) {
            unit.lost = !unit.acked;
            unit.round_sends = 0;
        }
    }

    /// Units waiting, acked ones excluded.
    pub(crate) fn pending(&self) -> usize {
        self.units.iter().filter(|u| !u.acked).count()
    }
}

/// An empty message still needs one (empty) fragment.
fn empty_if(payload: &[u8]) -> impl Iterator<Item = &[u8]> {
    payload.is_empty().then_some(payload).into_iter()
}

/// A message being put back together.
#[derive(Debug)]
struct Assembly {
    seq: u16,
    parts: Vec<Option<Vec<u8>>>,
    received: usize,
}

impl Assembly {
    fn new(seq: u16, count: u8) -> Self {
        Self { seq, parts: (0..count).map(|_| None).collect(), received: 0 }
    }

    /// Adds a piece; returns the whole message when it is complete.
    fn add(&mut self, index: u8, payload: &[u8]) -> Option<Vec<u8>> {
        let slot = self.parts.get_mut(usize::from(index))?;
        if slot.is_none() {
            *slot = Some(payload.to_vec());
            self.received += 1;
        }
        (self.received == self.parts.len())
            .then(|| self.parts.iter_mut().flat_map(|p| p.take().unwrap_or_default()).collect())
    }
}

/// What a receive channel did with an incoming piece.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// Deliver these messages, in order.
    Deliver,
    /// Kept for later (a gap before it, or more fragments to come).
    Held,
    /// Already delivered, or older than what the channel still accepts.
    Duplicate,
    /// Refused: outside the window or inconsistent with what arrived before.
    Refused,
}

/// The receiving half of a channel.
#[derive(Debug)]
pub(crate) struct ReceiveChannel {
    kind: ChannelKind,
    window: usize,
    /// Ordered: the next sequence to deliver.
    next: u16,
    /// Sequenced: the newest sequence delivered.
    last: Option<u16>,
    /// Messages (or their assemblies) received ahead of `next`, or in reassembly.
    held: VecDeque<Assembly>,
    /// Unordered: sequences delivered recently, by `seq % window`.
    delivered: Vec<Option<u16>>,
    /// Unordered: the newest sequence seen.
    newest: Option<u16>,
    /// Messages ready for the application.
    pub(crate) ready: VecDeque<Vec<u8>>,
}

impl ReceiveChannel {
    pub(crate) fn new(kind: ChannelKind, window: usize) -> Self {
        let delivered =
            if kind == ChannelKind::ReliableUnordered { vec![None; window] } else { Vec::new() };
        Self {
            kind,
            window,
            next: 0,
            last: None,
            held: VecDeque::new(),
            delivered,
            newest: None,
            ready: VecDeque::new(),
        }
    }

    /// Whether message `seq` of a reliable channel comes after one not yet received: a hole
    /// that only the sender can fill.
    pub(crate) fn is_ahead(&self, seq: u16) -> bool {
        match self.kind {
            ChannelKind::ReliableOrdered => seq16_newer(seq, self.next),
            ChannelKind::ReliableUnordered => {
                let expected = self.newest.map_or(0, |n| n.wrapping_add(1));
                seq16_newer(seq, expected)
            }
            ChannelKind::Unreliable | ChannelKind::UnreliableSequenced => false,
        }
    }

    /// Takes one piece of message `seq`.
    pub(crate) fn receive(&mut self, seq: u16, index: u8, count: u8, payload: &[u8]) -> Received {
        match self.kind {
            ChannelKind::ReliableOrdered => self.receive_ordered(seq, index, count, payload),
            ChannelKind::ReliableUnordered => self.receive_unordered(seq, index, count, payload),
            ChannelKind::Unreliable | ChannelKind::UnreliableSequenced => {
                self.receive_unreliable(seq, index, count, payload)
            }
        }
    }

    fn receive_ordered(&mut self, seq: u16, index: u8, count: u8, payload: &[u8]) -> Received {
        if seq != self.next && !seq16_newer(seq, self.next) {
            return Received::Duplicate;
        }
        if usize::from(seq.wrapping_sub(self.next)) >= self.window {
            return Received::Refused;
        }
        if self.held.iter().any(|a| a.seq == seq && a.parts.len() == 1) {
            // Complete and waiting for an earlier message: this copy is a resend.
            return Received::Duplicate;
        }
        let Some(complete) = self.assemble(seq, index, count, payload) else {
            return Received::Held;
        };
        let Some(complete) = complete else { return Received::Refused };
        // Keep the whole message until its turn; deliver everything now in order.
        let position =
            self.held.iter().position(|a| seq16_newer(a.seq, seq)).unwrap_or(self.held.len());
        let mut done = Assembly::new(seq, 1);
        done.parts[0] = Some(complete);
        done.received = 1;
        self.held.insert(position, done);
        let before = self.ready.len();
        while let Some(front) = self.held.front() {
            if front.seq != self.next || front.received != front.parts.len() {
                break;
            }
            let mut front = self.held.pop_front().expect("front exists");
            self.ready.push_back(front.parts[0].take().unwrap_or_default());
            self.next = self.next.wrapping_add(1);
        }
        if self.ready.len() > before {
            Received::Deliver
        } else {
            Received::Held
        }
    }

    fn receive_unordered(&mut self, seq: u16, index: u8, count: u8, payload: &[u8]) -> Received {
        if let Some(newest) = self.newest {
            let behind = newest.wrapping_sub(seq);
            if seq16_newer(newest, seq) && usize::from(behind) >= self.window {
                return Received::Duplicate;
            }
        }
        if self.delivered[usize::from(seq) % self.window] == Some(seq) {
            return Received::Duplicate;
        }
        let Some(complete) = self.assemble(seq, index, count, payload) else {
            return Received::Held;
        };
        let Some(complete) = complete else { return Received::Refused };
        self.delivered[usize::from(seq) % self.window] = Some(seq);
        if self.newest.is_none_or(|n| seq16_newer(seq, n)) {
            self.newest = Some(seq);
        }
        self.ready.push_back(complete);
        Received::Deliver
    }

    fn receive_unreliable(&mut self, seq: u16, index: u8, count: u8, payload: &[u8]) -> Received {
        let sequenced = self.kind == ChannelKind::UnreliableSequenced;
        if sequenced && self.last.is_some_and(|last| !seq16_newer(seq, last)) {
            return Received::Duplicate;
        }
        let Some(complete) = self.assemble(seq, index, count, payload) else {
            return Received::Held;
        };
        let Some(complete) = complete else { return Received::Refused };
        if sequenced {
            self.last = Some(seq);
        }
        self.ready.push_back(complete);
        Received::Deliver
    }

    /// Adds a piece to its message's assembly. `None`: more pieces to come; `Some(None)`: the
    /// piece contradicts what arrived before; `Some(Some(message))`: complete.
    fn assemble(
        &mut self,
        seq: u16,
        index: u8,
        count: u8,
        payload: &[u8],
    ) -> Option<Option<Vec<u8>>> {
        if count == 1 {
            return Some(Some(payload.to_vec()));
        }
        let existing = self.held.iter().position(|a| a.seq == seq && a.parts.len() > 1);
        let at = match existing {
            Some(at) => at,
            None => {
                if self.held.len() >= self.window {
                    // Unreliable reassembly evicts the oldest; reliable ones are bounded by the
                    // window check before this.
                    self.held.pop_front();
                }
                self.held.push_back(Assembly::new(seq, count));
                self.held.len() - 1
            }
        };
        if self.held[at].parts.len() != usize::from(count) {
            return Some(None);
        }
        let complete = self.held[at].add(index, payload)?;
        self.held.remove(at);
        Some(Some(complete))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_unreliable_units_go_and_their_buffers_carry_nothing_over() {
        let config = ChannelConfig { kind: ChannelKind::Unreliable, priority: 0 };
        let mut send = SendChannel::new(config);
        let limits = (100, std::time::Duration::from_secs(1));
        for payload in [b"first message".as_slice(), b"too big to fit", b"third"] {
            assert!(send.push(payload, 1000, Instant::ZERO, limits));
        }
        // The first and the third went out; the second did not fit its packet.
        send.units[0].sends = 1;
        send.units[2].sends = 1;
        send.forget_sent();
        let left: Vec<&[u8]> = send.units.iter().map(|u| u.payload.as_slice()).collect();
        assert_eq!(left, [b"too big to fit".as_slice()]);
        // New messages reuse the freed buffers, with nothing of their old contents.
        assert!(send.push(b"ab", 1000, Instant::ZERO, limits));
        assert!(send.push(b"", 1000, Instant::ZERO, limits));
        let payloads: Vec<&[u8]> = send.units.iter().map(|u| u.payload.as_slice()).collect();
        assert_eq!(payloads, [b"too big to fit".as_slice(), b"ab", b""]);
    }

    /// Splits messages into pieces as the sender does and feeds them in a shuffled order with
    /// duplicates; every message must come out once, in order.
    #[test]
    fn ordered_reassembly_survives_any_arrival_order() {
        for seed in 0..200u64 {
            let mut send =
                SendChannel::new(ChannelConfig { kind: ChannelKind::ReliableOrdered, priority: 0 });
            let sizes = [0usize, 5, 3000, 1, 2500, 7];
            for (i, size) in sizes.iter().enumerate() {
                let limits = (100, std::time::Duration::from_secs(1));
                assert!(send.push(&vec![i as u8; *size], 1000, Instant::ZERO, limits));
            }
            let mut pieces: Vec<_> =
                send.units.iter().map(|u| (u.seq, u.index, u.count, u.payload.clone())).collect();
            let copies = pieces.clone();
            pieces.extend(copies.into_iter().step_by(2));
            // A cheap deterministic shuffle.
            let mut state = seed.wrapping_add(1);
            for i in (1..pieces.len()).rev() {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                pieces.swap(i, (state >> 33) as usize % (i + 1));
            }
            let mut receive = ReceiveChannel::new(ChannelKind::ReliableOrdered, 64);
            for (seq, index, count, payload) in &pieces {
                receive.receive(*seq, *index, *count, payload);
            }
            let got: Vec<Vec<u8>> = receive.ready.drain(..).collect();
            let want: Vec<Vec<u8>> =
                sizes.iter().enumerate().map(|(i, s)| vec![i as u8; *s]).collect();
            assert_eq!(got, want, "seed {seed}");
        }
    }
}
