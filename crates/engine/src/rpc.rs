//! Request/response bookkeeping shared by the room and the client session: ids, deadlines and
//! the outbox of framed messages.

use crate::protocol::{Envelope, RELIABLE, UNRELIABLE};
use rally_proto::Instant;
use rally_wire::{MessageCodec, MessageError};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// How an RPC travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Resent until acknowledged, delivered once, in the order sent.
    Reliable,
    /// Sent once, in the tick it is issued; may be lost.
    Unreliable,
}

impl Delivery {
    pub(crate) fn channel(self) -> u8 {
        match self {
            Delivery::Reliable => RELIABLE,
            Delivery::Unreliable => UNRELIABLE,
        }
    }
}

/// Identifies a request to the side that sent it; its response carries the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u32);

/// Requests awaiting a response, keyed by `K` (the peer and the id), each with a deadline.
#[derive(Debug)]
pub(crate) struct Pending<K> {
    deadlines: BTreeMap<K, Instant>,
    next_id: u32,
    max: usize,
}

impl<K: Ord + Copy> Pending<K> {
    pub(crate) fn new(max: usize) -> Self {
        Self { deadlines: BTreeMap::new(), next_id: 1, max }
    }

    /// A fresh request id, or `None` when `max` requests are already waiting.
    pub(crate) fn next_id(&mut self) -> Option<u32> {
        if self.deadlines.len() >= self.max {
            return None;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        Some(id)
    }

    /// Records a request whose id came from [`Pending::next_id`], which checked the limit.
    pub(crate) fn insert(&mut self, key: K, deadline: Instant) {
        self.deadlines.insert(key, deadline);
        debug_assert!(self.deadlines.len() <= self.max, "a request past requests_max");
    }

    /// Whether `key` was waiting (and is no longer).
    pub(crate) fn complete(&mut self, key: K) -> bool {
        self.deadlines.remove(&key).is_some()
    }

    /// Removes and returns every request whose deadline passed.
    pub(crate) fn expire(&mut self, now: Instant, mut f: impl FnMut(K)) {
        self.deadlines.retain(|key, deadline| {
            let expired = *deadline <= now;
            if expired {
                f(*key);
            }
            !expired
        });
    }

    /// Forgets every request matching `pred` without reporting it.
    pub(crate) fn forget(&mut self, mut pred: impl FnMut(&K) -> bool) {
        self.deadlines.retain(|key, _| !pred(key));
    }

    /// Requests waiting.
    pub(crate) fn len(&self) -> usize {
        self.deadlines.len()
    }

    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.deadlines.values().min().copied()
    }
}

/// Encodes a user message into an envelope's payload and the envelope into bytes.
pub(crate) fn frame<M: Serialize>(
    codec: &MessageCodec,
    message: &M,
    wrap: impl FnOnce(Vec<u8>) -> Envelope,
) -> Result<Vec<u8>, MessageError> {
    let payload = codec.encode(message)?;
    codec.encode(&wrap(payload))
}

/// The end of a message shared with other messages (`Endpoint::send_parts`): a room's snapshot
/// encoding, behind each client's own prefix.
pub(crate) type Body = Arc<Vec<u8>>;

/// Messages framed and waiting for `transmit`, to whom, on which channel; bounded. A message
/// may end with a [`Body`].
#[derive(Debug)]
pub(crate) struct Outbox<To> {
    pub(crate) queue: VecDeque<(To, u8, Vec<u8>, Option<Body>)>,
    max: usize,
    /// Buffers of messages already handed on, for the next ones: a room sends every client a
    /// snapshot every tick, and would otherwise allocate (and free) one buffer per snapshot.
    spare: Vec<Vec<u8>>,
}

/// Spare buffers kept at most, and the largest kept: enough for a room's messages of a tick
/// (a snapshot per client, and on the fast path a message per client per input: 110 for 10
/// players), without holding on to a rare large message (at most 4 MiB held in all).
const SPARE_MAX: usize = 256;
const SPARE_BYTES_MAX: usize = 16 * 1024;

impl<To> Outbox<To> {
    pub(crate) fn new(max: usize) -> Self {
        Self { queue: VecDeque::new(), max, spare: Vec::new() }
    }

    /// An empty buffer for a message, reused when one is spare.
    pub(crate) fn buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// Asks for the first line of each of the next `count` buffers [`Outbox::buffer`] hands
    /// out: each was last written a tick or more ago, and a message's first bytes waited on
    /// it (the load run's profile put most of the state prefix's writing there).
    pub(crate) fn prefetch_buffers(&mut self, count: usize) {
        let from = self.spare.len().saturating_sub(count);
        for buffer in &mut self.spare[from..] {
            if let Some(first) = buffer.spare_capacity_mut().first() {
                rally_wire::prefetch::prefetch(first);
            }
        }
    }

    /// Takes back the buffer of a message that was handed on.
    pub(crate) fn recycle(&mut self, mut bytes: Vec<u8>) {
        if self.spare.len() < SPARE_MAX && bytes.capacity() <= SPARE_BYTES_MAX {
            bytes.clear();
            self.spare.push(bytes);
        }
    }

    /// Queues a message; `false` (and nothing queued) when the outbox is full.
    pub(crate) fn push(&mut self, to: To, channel: u8, bytes: Vec<u8>) -> bool {
        self.push_parts(to, channel, bytes, None)
    }

    /// [`Outbox::push`] of the message `bytes` followed by `body`, if any.
    #[inline]
    pub(crate) fn push_parts(
        &mut self,
        to: To,
        channel: u8,
        bytes: Vec<u8>,
        body: Option<Body>,
    ) -> bool {
        if self.queue.len() >= self.max {
            return false;
        }
        self.queue.push_back((to, channel, bytes, body));
        debug_assert!(self.queue.len() <= self.max);
        true
    }
}

/// How long a request waits for its response by default.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_keeps_spare_max_spare_buffers_and_none_larger_than_spare_bytes_max() {
        // Goal: recycling keeps at most `SPARE_MAX` buffers, none over `SPARE_BYTES_MAX`, so a
        // burst or one large message does not stay held. Method: recycle more, and a big one.
        let mut outbox: Outbox<()> = Outbox::new(8);
        outbox.recycle(Vec::with_capacity(SPARE_BYTES_MAX + 1));
        assert!(outbox.spare.is_empty());
        for _ in 0..SPARE_MAX + 10 {
            outbox.recycle(Vec::with_capacity(100));
        }
        assert_eq!(outbox.spare.len(), SPARE_MAX);
    }
}
