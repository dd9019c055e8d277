//! Per-channel send queues and receive buffers.
//!
//! A message larger than one packet is split into up to 255 fragments; on reliable channels
//! each fragment is resent on its own, so one lost packet costs one fragment, not the message.
//! Every queue and buffer is bounded by the connection's configuration.

use crate::config::{ChannelConfig, ChannelKind};
use crate::connection::Event;
use crate::time::{Instant, Nanos};
use rally_wire::seq::seq16_newer;
use std::collections::VecDeque;
use std::sync::Arc;

/// One fragment (or a whole message, as fragment 0 of 1) waiting to be sent or acked.
///
/// Aligned to a cache line (it is 64 bytes): a unit a packet reads and updates is then one
/// line, not two straddled ones (a queue's buffer is only as aligned as the allocator makes it).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Unit {
    pub(crate) seq: u16,
    pub(crate) index: u8,
    pub(crate) count: u8,
    /// The message's bytes (its head, when it has a shared `body`).
    pub(crate) payload: Vec<u8>,
    /// The rest of a message queued in two parts ([`SendChannel::push_parts`]): bytes shared
    /// with other messages (a room's snapshot encoding, sent to each of its clients behind a
    /// head of their own), copied into the packet straight from there.
    pub(crate) body: Option<Arc<Vec<u8>>>,
    /// How many packets carried it.
    pub(crate) sends: u8,
    /// Sends since it was queued or last declared lost: redundancy counts its copies here, so
    /// that a repair is copied as the first send was (a repair lost again costs another round
    /// trip, and on a lossy path it is as likely to be lost as any packet).
    pub(crate) round_sends: u8,
    /// When a packet last carried it: meaningful once `sends` is above 0 (an `Option` would
    /// take 8 bytes more, and the unit its line).
    pub(crate) sent_at: Instant,
    /// A packet carrying it was declared lost: send it again at once.
    pub(crate) lost: bool,
    pub(crate) acked: bool,
    /// When the application queued it.
    pub(crate) queued_at: Instant,
    /// Its checksum as a repaired message's symbol carries it, once a repair needed it.
    pub(crate) check: Option<u32>,
}

impl Unit {
    /// Piece `index` of `count` of message `seq`, queued at `now` and not yet sent.
    fn new((seq, index, count): (u16, u8, u8), payload: Vec<u8>, now: Instant) -> Self {
        Self {
            seq,
            index,
            count,
            payload,
            body: None,
            sends: 0,
            round_sends: 0,
            sent_at: Instant::ZERO,
            lost: false,
            acked: false,
            queued_at: now,
            check: None,
        }
    }

    /// When a packet last carried it, if one did.
    pub(crate) fn last_sent(&self) -> Option<Instant> {
        (self.sends > 0).then_some(self.sent_at)
    }

    /// The message's length: its payload and its body's.
    pub(crate) fn len(&self) -> usize {
        self.payload.len() + self.body.as_ref().map_or(0, |b| b.len())
    }

    /// The body's bytes (empty without one).
    pub(crate) fn body(&self) -> &[u8] {
        self.body.as_ref().map_or(&[], |b| b.as_slice())
    }
}

// One line a unit (see `Unit`'s alignment): a field more must take the place of another.
const _: () = assert!(std::mem::size_of::<Unit>() == 64);

/// The sending half of a channel.
///
/// Aligned to a cache line (its fields fill 64 bytes): a packet reads the channels it takes
/// units from, and at many connections a worker each one's line is a miss; straddling two
/// lines made it two.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct SendChannel {
    pub(crate) config: ChannelConfig,
    next_seq: u16,
    pub(crate) units: VecDeque<Unit>,
    /// The payload buffer of a unit done with, for the next message: a channel carrying a
    /// message per tick would otherwise allocate and free one per message. One, held here
    /// rather than in a list of its own: a list's allocation was one more line a packet.
    spare: Option<Vec<u8>>,
}

impl SendChannel {
    pub(crate) fn new(config: ChannelConfig) -> Self {
        Self { config, next_seq: 0, units: VecDeque::new(), spare: None }
    }

    /// Asks for the oldest unit's line, which queueing a message reads (whether it has
    /// waited too long), by way of this struct's line, which it reads too (see
    /// `Connection::prefetch_queue`).
    pub(crate) fn prefetch(&self) {
        if let Some(unit) = self.units.front() {
            rally_wire::prefetch::prefetch(unit);
        }
    }

    /// Keeps `payload`'s buffer for a later unit, if none is kept yet (so that an idle
    /// connection holds little).
    fn recycle(&mut self, mut payload: Vec<u8>) {
        if self.spare.is_none() {
            payload.clear();
            self.spare = Some(payload);
        }
    }

    /// The spare buffer, or a new (empty, unallocated) one.
    fn spare(&mut self) -> Vec<u8> {
        self.spare.take().unwrap_or_default()
    }

    /// Drops the units of an unreliable channel that went out: they are sent once.
    #[inline]
    pub(crate) fn forget_sent(&mut self) {
        // The payload taken in place and the unit dropped as it leaves: moved out whole, its
        // 64 bytes went through the stack twice for the one field kept.
        while let Some(unit) = self.units.front_mut().filter(|u| u.sends > 0) {
            let payload = std::mem::take(&mut unit.payload);
            self.units.pop_front();
            self.recycle(payload);
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
        limits: (usize, Nanos),
    ) -> bool {
        let count = payload.len().div_ceil(piece).max(1);
        if !self.admits(count, now, limits) {
            return false;
        }
        let seq = self.take_seq();
        for (index, chunk) in payload.chunks(piece.max(1)).chain(empty_if(payload)).enumerate() {
            let mut buffer = self.spare();
            buffer.extend_from_slice(chunk);
            self.units.push_back(Unit::new((seq, index as u8, count as u8), buffer, now));
        }
        true
    }

    /// [`SendChannel::push`] of the message in `payload`, taking the buffer itself when the
    /// message goes in one piece and the buffer holds no more than a piece (what a copied
    /// unit's buffer grows to, so a queue holds no more memory than before): `payload` is left
    /// empty (a spare buffer of the channel's, or a new one) once queued, and untouched if not.
    pub(crate) fn push_buffer(
        &mut self,
        payload: &mut Vec<u8>,
        piece: usize,
        now: Instant,
        limits: (usize, Nanos),
    ) -> bool {
        if payload.len() > piece || payload.capacity() > piece {
            let pushed = self.push(payload, piece, now, limits);
            if pushed {
                payload.clear();
            }
            return pushed;
        }
        if !self.admits(1, now, limits) {
            return false;
        }
        let seq = self.take_seq();
        let buffer = std::mem::replace(payload, self.spare());
        self.units.push_back(Unit::new((seq, 0, 1), buffer, now));
        true
    }

    /// [`SendChannel::push_buffer`] of the message `head` followed by `body`, keeping `body`
    /// shared instead of copying it when the whole goes in one piece, `head` holds no more than
    /// a piece and `whole` is false (a channel whose repairs combine whole payloads); otherwise
    /// `body` is copied after `head` and the message queued as `push_buffer` queues it. `head`
    /// is left empty once queued, and as it was if not.
    #[inline]
    pub(crate) fn push_parts(
        &mut self,
        (head, body): (&mut Vec<u8>, Arc<Vec<u8>>),
        piece: usize,
        now: Instant,
        (limits, whole): ((usize, Nanos), bool),
    ) -> bool {
        let len = head.len() + body.len();
        if whole || len > piece || head.capacity() > piece {
            let head_len = head.len();
            head.extend_from_slice(&body);
            let pushed = self.push_buffer(head, piece, now, limits);
            if !pushed {
                head.truncate(head_len);
            }
            return pushed;
        }
        if !self.admits(1, now, limits) {
            return false;
        }
        let seq = self.take_seq();
        let buffer = std::mem::replace(head, self.spare());
        let mut unit = Unit::new((seq, 0, 1), buffer, now);
        unit.body = Some(body);
        self.units.push_back(unit);
        true
    }

    /// Whether `count` more units fit within `limits.0` units, and the oldest unacknowledged
    /// unit has waited at most `limits.1`.
    fn admits(&self, count: usize, now: Instant, limits: (usize, Nanos)) -> bool {
        let (queue_max, delay_max) = limits;
        if self.units.len() + count > queue_max || count > 255 {
            return false;
        }
        // In nanoseconds, as the limit is kept: no `Duration` built for the comparison.
        let waited = |u: &Unit| now.saturating_nanos_since(u.queued_at);
        self.units.iter().find(|u| !u.acked).is_none_or(|u| waited(u) <= delay_max)
    }

    /// The next message's sequence, taken.
    fn take_seq(&mut self) -> u16 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        seq
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

    /// Marks every unit of the messages before `next` acked (the receiver reports it delivered
    /// them, some perhaps from repairs), and drops acked units from the front.
    pub(crate) fn ack_before(&mut self, next: u16) {
        for unit in self.units.iter_mut().filter(|u| seq16_newer(next, u.seq)) {
            unit.acked = true;
        }
        while self.units.front().is_some_and(|u| u.acked) {
            let unit = self.units.pop_front().expect("front exists");
            self.recycle(unit.payload);
        }
    }

    /// The sequence the next message will take.
    pub(crate) fn next_seq(&self) -> u16 {
        self.next_seq
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

/// A message being put back together, or (one part, complete) waiting for its turn.
#[derive(Debug)]
struct Assembly {
    seq: u16,
    parts: Vec<Option<Vec<u8>>>,
    received: usize,
    /// Payload bytes received so far.
    bytes: usize,
    /// Payload bytes it may hold at most: what its announced piece count allows.
    bytes_max: usize,
    /// What it counts against the receive limit: `bytes_max` and its bookkeeping
    /// ([`held_cost`]), reserved when it is created so that a message let in can complete.
    cost: usize,
}

impl Assembly {
    fn new(seq: u16, count: u8, bytes_max: usize) -> Self {
        Self {
            seq,
            parts: (0..count).map(|_| None).collect(),
            received: 0,
            bytes: 0,
            bytes_max,
            cost: held_cost(bytes_max, count),
        }
    }

    /// A complete message held until the messages before it arrive.
    fn complete(seq: u16, message: Vec<u8>) -> Self {
        let bytes = message.len();
        Self {
            seq,
            parts: vec![Some(message)],
            received: 1,
            bytes,
            bytes_max: bytes,
            cost: held_cost(bytes, 1),
        }
    }

    /// Adds a piece; returns the whole message when it is complete, `Err` when the pieces
    /// add up to more than the announced count allows.
    fn add(&mut self, index: u8, payload: &[u8]) -> Result<Option<Vec<u8>>, ()> {
        let Some(slot) = self.parts.get_mut(usize::from(index)) else { return Ok(None) };
        if slot.is_none() {
            if self.bytes + payload.len() > self.bytes_max {
                return Err(());
            }
            *slot = Some(payload.to_vec());
            self.received += 1;
            self.bytes += payload.len();
        }
        let complete = self.received == self.parts.len();
        Ok(complete
            .then(|| self.parts.iter_mut().flat_map(|p| p.take().unwrap_or_default()).collect()))
    }
}

/// What holding a message of at most `bytes_max` payload bytes in `count` pieces counts
/// against the receive limit: the payload and the bookkeeping of its pieces, so that many
/// tiny pieces cost what they occupy.
pub(crate) fn held_cost(bytes_max: usize, count: u8) -> usize {
    const ASSEMBLY: usize = std::mem::size_of::<Assembly>();
    const PIECE: usize = std::mem::size_of::<Option<Vec<u8>>>();
    ASSEMBLY + usize::from(count) * PIECE + bytes_max
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
    /// Refused for want of receive room (`receive_bytes_max`): nothing was kept, and the
    /// packet that carried it must not be acked, so that the sender sends it again.
    NoRoom,
    /// Announces, or adds up to, a message larger than `message_bytes_max`: a peer that
    /// shares the configuration never sends one.
    Oversized,
}

/// Bytes a receive channel may newly hold: `ahead` for a message after a gap or a new
/// assembly, `head` for the next message of an ordered channel, which must always find room
/// (the connection keeps it aside), or the messages held behind it could never be delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    pub(crate) ahead: usize,
    pub(crate) head: usize,
}

/// How an assembly step ended.
enum Assembled {
    /// More pieces to come.
    More,
    /// The message is complete.
    Complete(Vec<u8>),
    /// The piece was not kept, for this reason.
    Not(Received),
}

/// The receiving half of a channel.
#[derive(Debug)]
pub(crate) struct ReceiveChannel {
    kind: ChannelKind,
    window: usize,
    /// The largest piece of a fragmented message.
    piece: usize,
    /// The largest message accepted.
    message_bytes_max: usize,
    /// Ordered: the next sequence to deliver.
    next: u16,
    /// Sequenced: the newest sequence delivered.
    last: Option<u16>,
    /// Messages (or their assemblies) received ahead of `next`, or in reassembly.
    held: VecDeque<Assembly>,
    /// What `held` counts against the receive limit (the sum of their costs).
    held_bytes: usize,
    /// Unordered: sequences delivered recently, by `seq % window`.
    delivered: Vec<Option<u16>>,
    /// Unordered: the newest sequence seen.
    newest: Option<u16>,
    /// Delivered messages' buffers given back ([`ReceiveChannel::recycle`]), for the next
    /// messages in one piece to be copied into instead of new allocations; an empty slot has
    /// no capacity. Kept inline: a list on the heap was one more cache line each message.
    spare: [Vec<u8>; RECYCLED_MAX],
}

/// Where a channel delivers its messages: straight into its connection's events, tagged with
/// the channel's index, so that each message is moved once (a queue of the channel's own in
/// between cost a write to one more heap line, and a read of it, on every message).
pub(crate) struct Ready<'a> {
    pub(crate) events: &'a mut VecDeque<Queued>,
    pub(crate) channel: u8,
}

impl Ready<'_> {
    fn push(&mut self, payload: Vec<u8>) {
        self.events.push_back(Queued(Event::Message { channel: self.channel, payload }));
    }
}

/// An event in its connection's queue, aligned to its 32 bytes: the queue's buffer then
/// starts on a 32-byte boundary, and no event straddles two cache lines (a 16-byte aligned
/// buffer put every other one across two, each a miss when the room's turn comes round:
/// docs/benchmarks.md, "Round 15").
#[derive(Debug)]
#[repr(align(32))]
pub(crate) struct Queued(pub(crate) Event);

// One event to a half line, never more.
const _: () = assert!(std::mem::size_of::<Queued>() == 32);

/// Buffers a channel keeps for its next messages: a client's datagram of a tick carries an
/// input frame and often an acknowledgement on the same channel, both read before either is
/// given back.
const RECYCLED_MAX: usize = 2;

impl ReceiveChannel {
    /// Asks the core for the fields a piece received reads first: the kind, the sequences
    /// and the recycled buffers (see `Connection::prefetch_receive`).
    pub(crate) fn prefetch(&self) {
        use rally_wire::prefetch::prefetch;
        prefetch(&self.kind);
        prefetch(&self.next);
        prefetch(&self.spare);
    }

    /// A channel of `kind` holding at most `window` messages, of at most `message_bytes_max`
    /// bytes in pieces of at most `piece`.
    pub(crate) fn new(
        kind: ChannelKind,
        window: usize,
        piece: usize,
        message_bytes_max: usize,
    ) -> Self {
        let delivered =
            if kind == ChannelKind::ReliableUnordered { vec![None; window] } else { Vec::new() };
        Self {
            kind,
            window,
            piece,
            message_bytes_max,
            next: 0,
            last: None,
            held: VecDeque::new(),
            held_bytes: 0,
            delivered,
            newest: None,
            spare: Default::default(),
        }
    }

    /// Keeps a delivered message's buffer for a next message in one piece: at most
    /// `RECYCLED_MAX`, each no larger than a piece, so what a channel keeps stays within two
    /// pieces.
    pub(crate) fn recycle(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > self.piece {
            return;
        }
        if let Some(slot) = self.spare.iter_mut().find(|s| s.capacity() == 0) {
            *slot = buffer;
        }
    }

    /// `payload` copied into a spare buffer if there is one, else into a new one.
    fn copy(&mut self, payload: &[u8]) -> Vec<u8> {
        let slot = self.spare.iter_mut().rev().find(|s| s.capacity() > 0);
        let mut buffer = slot.map(std::mem::take).unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(payload);
        buffer
    }

    /// What the channel holds against the receive limit.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Ordered: the next message to deliver.
    pub(crate) fn next_seq(&self) -> u16 {
        self.next
    }

    /// Ordered: message `seq`, if it is complete and held behind a gap.
    pub(crate) fn held_message(&self, seq: u16) -> Option<&[u8]> {
        let held = self.held.iter().find(|a| a.seq == seq && a.parts.len() == 1)?;
        held.parts[0].as_deref()
    }

    /// Whether the channel's messages may be dropped to make room (unreliable ones).
    pub(crate) fn is_evictable(&self) -> bool {
        !self.kind.is_reliable()
    }

    /// Drops the oldest assembly of an unreliable channel; returns what it freed (0 if none).
    pub(crate) fn evict_oldest(&mut self) -> usize {
        debug_assert!(self.is_evictable(), "a reliable channel's held messages were acked");
        let Some(oldest) = self.held.pop_front() else { return 0 };
        self.held_bytes -= oldest.cost;
        oldest.cost
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

    /// Takes one piece of message `seq`, holding at most `room` more bytes for it.
    /// A message it completes goes to `ready`, with those it frees from behind a gap.
    pub(crate) fn receive(
        &mut self,
        piece: (u16, u8, u8),
        payload: &[u8],
        room: Room,
        ready: &mut Ready<'_>,
    ) -> Received {
        let received = match self.kind {
            ChannelKind::ReliableOrdered => self.receive_ordered(piece, payload, room, ready),
            ChannelKind::ReliableUnordered => {
                self.receive_unordered(piece, payload, room.ahead, ready)
            }
            ChannelKind::Unreliable | ChannelKind::UnreliableSequenced => {
                self.receive_unreliable(piece, payload, room.ahead, ready)
            }
        };
        debug_assert!(self.held.len() <= self.window, "held past the window");
        debug_assert_eq!(self.held_bytes, self.held.iter().map(|a| a.cost).sum::<usize>());
        received
    }

    fn receive_ordered(
        &mut self,
        piece: (u16, u8, u8),
        payload: &[u8],
        room: Room,
        ready: &mut Ready<'_>,
    ) -> Received {
        let seq = piece.0;
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
        let head = seq == self.next;
        let room = if head { room.head } else { room.ahead };
        let complete = match self.assemble(piece, payload, room) {
            Assembled::More => return Received::Held,
            Assembled::Not(why) => return why,
            Assembled::Complete(complete) => complete,
        };
        if !head {
            // A fragmented message's reservation covered it; a whole one needs room now.
            let held = Assembly::complete(seq, complete);
            if piece.2 == 1 && held.cost > room {
                return Received::NoRoom;
            }
            let position =
                self.held.iter().position(|a| seq16_newer(a.seq, seq)).unwrap_or(self.held.len());
            self.held_bytes += held.cost;
            self.held.insert(position, held);
            return Received::Held;
        }
        // Deliver it, and everything held behind it that is now in order.
        ready.push(complete);
        self.next = self.next.wrapping_add(1);
        while let Some(front) = self.held.front() {
            if front.seq != self.next || front.parts.len() != 1 {
                break;
            }
            let mut front = self.held.pop_front().expect("front exists");
            self.held_bytes -= front.cost;
            ready.push(front.parts[0].take().unwrap_or_default());
            self.next = self.next.wrapping_add(1);
        }
        Received::Deliver
    }

    fn receive_unordered(
        &mut self,
        piece: (u16, u8, u8),
        payload: &[u8],
        room: usize,
        ready: &mut Ready<'_>,
    ) -> Received {
        let seq = piece.0;
        if let Some(newest) = self.newest {
            let behind = newest.wrapping_sub(seq);
            if seq16_newer(newest, seq) && usize::from(behind) >= self.window {
                return Received::Duplicate;
            }
        }
        if self.delivered[usize::from(seq) % self.window] == Some(seq) {
            return Received::Duplicate;
        }
        let complete = match self.assemble(piece, payload, room) {
            Assembled::More => return Received::Held,
            Assembled::Not(why) => return why,
            Assembled::Complete(complete) => complete,
        };
        self.delivered[usize::from(seq) % self.window] = Some(seq);
        if self.newest.is_none_or(|n| seq16_newer(seq, n)) {
            self.newest = Some(seq);
        }
        ready.push(complete);
        Received::Deliver
    }

    fn receive_unreliable(
        &mut self,
        piece: (u16, u8, u8),
        payload: &[u8],
        room: usize,
        ready: &mut Ready<'_>,
    ) -> Received {
        let seq = piece.0;
        let sequenced = self.kind == ChannelKind::UnreliableSequenced;
        if sequenced && self.last.is_some_and(|last| !seq16_newer(seq, last)) {
            return Received::Duplicate;
        }
        let complete = match self.assemble(piece, payload, room) {
            Assembled::More => return Received::Held,
            Assembled::Not(why) => return why,
            Assembled::Complete(complete) => complete,
        };
        if sequenced {
            self.last = Some(seq);
        }
        ready.push(complete);
        Received::Deliver
    }

    /// The payload bytes a message of `count` pieces may hold, or `None` if even its
    /// smallest possible size (`count - 1` full pieces and one byte) exceeds the limit.
    fn announced_bytes_max(&self, count: u8) -> Option<usize> {
        let count = usize::from(count);
        let smallest = (count - 1) * self.piece + 1;
        (smallest <= self.message_bytes_max)
            .then(|| (count * self.piece).min(self.message_bytes_max))
    }

    /// Adds piece `(seq, index, count)` to its message's assembly, creating the assembly
    /// (and reserving what it may hold) if `room` allows.
    // Inline into each kind's receive: a message in one piece (nearly every one) is then
    // copied and handed on without a call and an `Assembled` written out and matched again
    // (about 40 instructions a message); the fragment's step stays out of line.
    #[inline]
    fn assemble(&mut self, piece: (u16, u8, u8), payload: &[u8], room: usize) -> Assembled {
        if piece.2 == 1 {
            if payload.len() > self.message_bytes_max {
                return Assembled::Not(Received::Oversized);
            }
            return Assembled::Complete(self.copy(payload));
        }
        self.assemble_piece(piece, payload, room)
    }

    /// [`Self::assemble`] for a piece of a fragmented message: out of line, so that the
    /// one-piece message (nearly every message) pays for none of its frame.
    #[inline(never)]
    fn assemble_piece(&mut self, piece: (u16, u8, u8), payload: &[u8], room: usize) -> Assembled {
        let (seq, index, count) = piece;
        let existing = self.held.iter().position(|a| a.seq == seq && a.parts.len() > 1);
        let at = match existing {
            Some(at) => at,
            None => match self.start_assembly(seq, count, room) {
                Ok(at) => at,
                Err(why) => return Assembled::Not(why),
            },
        };
        if self.held[at].parts.len() != usize::from(count) {
            return Assembled::Not(Received::Refused);
        }
        match self.held[at].add(index, payload) {
            Err(()) => Assembled::Not(Received::Oversized),
            Ok(None) => Assembled::More,
            Ok(Some(complete)) => {
                let done = self.held.remove(at).expect("the assembly is at `at`");
                self.held_bytes -= done.cost;
                Assembled::Complete(complete)
            }
        }
    }

    /// Creates the assembly of message `seq` in `count` pieces; returns its position.
    fn start_assembly(&mut self, seq: u16, count: u8, room: usize) -> Result<usize, Received> {
        let bytes_max = self.announced_bytes_max(count).ok_or(Received::Oversized)?;
        let assembly = Assembly::new(seq, count, bytes_max);
        if assembly.cost > room {
            return Err(Received::NoRoom);
        }
        if self.held.len() >= self.window {
            if self.kind.is_reliable() {
                // A sender's window cannot exceed the receiver's: only a broken peer gets here.
                return Err(Received::Refused);
            }
            // Unreliable reassembly makes way for the newest.
            self.evict_oldest();
        }
        self.held_bytes += assembly.cost;
        self.held.push_back(assembly);
        Ok(self.held.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_unreliable_units_go_and_their_buffers_carry_nothing_over() {
        let config = ChannelConfig { kind: ChannelKind::Unreliable, priority: 0 };
        let mut send = SendChannel::new(config);
        let limits = (100, Nanos::new(std::time::Duration::from_secs(1)));
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

    /// Goal: a message handed over in its buffer is queued as `push` would queue a copy (the
    /// same pieces and sequences, whatever the buffer), the caller gets an empty buffer back,
    /// and a refused message is left with the caller. Method: a small message (taken), one
    /// over a piece (split), one in a buffer larger than a piece (copied), then a full queue.
    #[test]
    fn a_handed_over_buffer_is_queued_as_a_copy_would_be_and_refusals_keep_it() {
        use std::time::Duration;
        let config = ChannelConfig { kind: ChannelKind::ReliableOrdered, priority: 0 };
        let (mut send, piece, limits) =
            (SendChannel::new(config), 8, (5, Nanos::new(Duration::from_secs(1))));
        let mut roomy = Vec::with_capacity(piece + 1);
        roomy.extend_from_slice(b"roomy");
        for mut buffer in [b"small".to_vec(), b"over a piece".to_vec(), roomy] {
            assert!(send.push_buffer(&mut buffer, piece, Instant::ZERO, limits));
            assert!(buffer.is_empty());
        }
        let units: Vec<(u16, u8, u8, &[u8])> =
            send.units.iter().map(|u| (u.seq, u.index, u.count, u.payload.as_slice())).collect();
        let expected: [(u16, u8, u8, &[u8]); 4] =
            [(0, 0, 1, b"small"), (1, 0, 2, b"over a p"), (1, 1, 2, b"iece"), (2, 0, 1, b"roomy")];
        assert_eq!(units, expected);
        // Four units of five: a fifth fits, a sixth does not, and its buffer stays.
        assert!(send.push_buffer(&mut b"fifth".to_vec(), piece, Instant::ZERO, limits));
        let mut refused = b"sixth".to_vec();
        assert!(!send.push_buffer(&mut refused, piece, Instant::ZERO, limits));
        assert_eq!(refused, b"sixth");
        assert_eq!(send.next_seq(), 4);
    }

    /// Goal: a channel keeps at most two given-back buffers, none larger than a piece, and
    /// copies its next messages into them, each once, with nothing of their old contents.
    /// Method: give back a too-large buffer and three small ones told apart by their
    /// capacities, then receive three messages and see which buffers carry them.
    #[test]
    fn a_channel_reuses_at_most_two_given_back_buffers_each_once() {
        let mut receive = ReceiveChannel::new(ChannelKind::Unreliable, 64, 100, 4000);
        for capacity in [101, 40, 41, 42] {
            let mut buffer = Vec::with_capacity(capacity);
            buffer.extend_from_slice(b"old contents");
            receive.recycle(buffer);
        }
        let (room, mut events) = (Room { ahead: 4000, head: 4000 }, VecDeque::new());
        for seq in 0..3u16 {
            let mut ready = Ready { events: &mut events, channel: 0 };
            let got = receive.receive((seq, 0, 1), &[seq as u8; 3], room, &mut ready);
            assert_eq!(got, Received::Deliver);
        }
        let payloads: Vec<Vec<u8>> = (events.into_iter())
            .map(|Queued(e)| match e {
                Event::Message { payload, .. } => payload,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(payloads, [[0u8; 3], [1; 3], [2; 3]]);
        let capacities: Vec<usize> = payloads.iter().map(Vec::capacity).collect();
        assert_eq!(capacities[..2], [41, 40], "the two kept, the last given back first");
        assert!(![40, 41, 42, 101].contains(&capacities[2]), "a new buffer: {capacities:?}");
    }

    /// Goal: a message in two parts keeps its body shared only where it goes in one piece and
    /// the channel takes parts; otherwise it is queued as the joined message would be, and a
    /// refused one leaves its head as it was. Method: a fitting message (shared), one over a
    /// piece (split), one on a channel taking whole payloads, then a full queue.
    #[test]
    fn a_message_in_two_parts_shares_its_body_only_when_it_goes_whole_in_one_piece() {
        use std::time::Duration;
        let config = ChannelConfig { kind: ChannelKind::ReliableOrdered, priority: 0 };
        let (mut send, piece, limits) =
            (SendChannel::new(config), 8, (5, Nanos::new(Duration::from_secs(1))));
        let body = Arc::new(b"body".to_vec());
        let cases =
            [(b"head".to_vec(), false, 2), (b"head+".to_vec(), false, 1), (b"h".to_vec(), true, 1)];
        for (mut head, whole, shares) in cases {
            assert!(send.push_parts(
                (&mut head, body.clone()),
                piece,
                Instant::ZERO,
                (limits, whole)
            ));
            assert!(head.is_empty());
            assert_eq!(Arc::strong_count(&body), shares, "whole {whole}");
            send.units.retain(|u| u.body.is_none());
        }
        let units: Vec<(u16, u8, u8, &[u8])> =
            send.units.iter().map(|u| (u.seq, u.index, u.count, u.payload.as_slice())).collect();
        let expected: [(u16, u8, u8, &[u8]); 3] =
            [(1, 0, 2, b"head+bod"), (1, 1, 2, b"y"), (2, 0, 1, b"hbody")];
        assert_eq!(units, expected);
        // Three units of five: two more fit, the next does not, and its head stays.
        for _ in 0..2 {
            assert!(send.push_parts(
                (&mut b"h".to_vec(), body.clone()),
                piece,
                Instant::ZERO,
                (limits, false)
            ));
        }
        let mut refused = b"head".to_vec();
        assert!(!send.push_parts(
            (&mut refused, body.clone()),
            piece,
            Instant::ZERO,
            (limits, false)
        ));
        let mut refused_joined = b"h".to_vec();
        assert!(!send.push_parts(
            (&mut refused_joined, body),
            piece,
            Instant::ZERO,
            (limits, true)
        ));
        assert_eq!((refused.as_slice(), refused_joined.as_slice()), (&b"head"[..], &b"h"[..]));
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
                let limits = (100, Nanos::new(std::time::Duration::from_secs(1)));
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
            let mut receive = ReceiveChannel::new(ChannelKind::ReliableOrdered, 64, 1000, 4000);
            let room = Room { ahead: usize::MAX, head: usize::MAX };
            let mut events = VecDeque::new();
            for (seq, index, count, payload) in &pieces {
                let mut ready = Ready { events: &mut events, channel: 3 };
                receive.receive((*seq, *index, *count), payload, room, &mut ready);
            }
            assert_eq!(receive.held_bytes(), 0, "seed {seed}: nothing left held");
            let got: Vec<Vec<u8>> = (events.into_iter())
                .map(|Queued(e)| match e {
                    Event::Message { channel: 3, payload } => payload,
                    other => panic!("seed {seed}: {other:?}"),
                })
                .collect();
            let want: Vec<Vec<u8>> =
                sizes.iter().enumerate().map(|(i, s)| vec![i as u8; *s]).collect();
            assert_eq!(got, want, "seed {seed}");
        }
    }
}
