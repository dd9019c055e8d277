//! Packet sequence numbers, acks and round-trip time.
//!
//! Every data packet carries the newest sequence received and a 32-bit field for the 32 before
//! it, so one lost ack costs nothing: the next packet repeats it. The sender keeps a ring of
//! the packets it sent (what they carried, when) and learns from each ack which arrived and,
//! from the gaps below the newest, which were lost.

use crate::time::Instant;
use rally_wire::seq::seq16_newer;
use std::time::Duration;
use std::vec::Drain;

/// Packets remembered on each side; acks older than this are ignored.
pub const SENT_RING: usize = 1024;

/// What is remembered of a sent packet until it is acked or known lost. 32 bytes, two to a
/// cache line: each packet sent writes one and each ack reads one, and the packet acked is
/// mostly the one before the packet sent. Its reliable units lie in a ring of their own,
/// looked at only when it carried some (most packets carry none).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SentPacket {
    pub(crate) sent_at: Instant,
    /// Bytes the peer had acknowledged when this packet was sent, for delivery-rate samples.
    pub(crate) delivered_at_send: u64,
    /// The datagram's size (a datagram's fits 32 bits).
    size: u32,
    pub(crate) seq: u16,
    /// The ack field it carried, if any.
    pub(crate) ack: Option<u16>,
    pub(crate) in_flight: bool,
    /// Whether it carried reliable units (its slot of `SentPackets::units` holds them).
    has_units: bool,
}

/// The sender's ring of packets in flight.
#[derive(Debug)]
pub(crate) struct SentPackets {
    /// Boxed slices, not `Vec`s: the connection keeps this struct among what each packet
    /// touches, and a length that never changes needs no capacity beside it.
    ring: Box<[SentPacket]>,
    /// The reliable units (channel, message sequence, fragment index) each packet of `ring`
    /// carried, by the same index.
    units: Box<[Vec<(u8, u16, u8)>]>,
    /// Sequence of the next packet to send.
    pub(crate) next_seq: u16,
    /// The newest packet acked so far, if any.
    pub(crate) newest_acked: Option<u16>,
    /// The ack field of that packet: the peer has learned what its acks said.
    pub(crate) peer_acks_known: Option<u16>,
    /// No packet before this one is in flight.
    oldest: u16,
    /// Bytes of the packets in flight.
    pub(crate) bytes_in_flight: usize,
    /// Bytes of packets the peer acknowledged, ever.
    pub(crate) delivered: u64,
}

impl SentPackets {
    pub(crate) fn new() -> Self {
        Self {
            ring: vec![SentPacket::default(); SENT_RING].into_boxed_slice(),
            units: vec![Vec::new(); SENT_RING].into_boxed_slice(),
            next_seq: 0,
            newest_acked: None,
            peer_acks_known: None,
            oldest: 0,
            bytes_in_flight: 0,
            delivered: 0,
        }
    }

    /// Records a packet and returns its sequence. `units` is reused storage from the caller.
    ///
    /// Always inlined, as `in_flight_before` is: their inlining came and went with unrelated
    /// edits of this file, and out of line (with `write_packet` inlined instead) they cost the
    /// send path about 440 instructions and 8 misses a room-tick (docs/benchmarks.md).
    #[inline(always)]
    pub(crate) fn record(
        &mut self,
        now: Instant,
        size: usize,
        units: &mut Vec<(u8, u16, u8)>,
    ) -> u16 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        let index = usize::from(seq) % SENT_RING;
        // The slot's last occupant, packet `seq - SENT_RING`, may be in flight (and hold
        // units) only if it is not older than `oldest`; otherwise the slot is not read at all.
        // It was written SENT_RING packets ago, so that read was a miss on every packet sent,
        // the send path's longest wait in the load run's profile, for a flag almost always
        // clear.
        let reused = usize::from(seq.wrapping_sub(self.oldest)) >= SENT_RING;
        let mut had_units = false;
        if reused {
            // The slot is reused: whatever was in flight there is forgotten, as too old to ack.
            self.oldest = seq.wrapping_sub(SENT_RING as u16 - 1);
            let slot = &self.ring[index];
            if slot.in_flight {
                self.bytes_in_flight -= slot.size as usize;
            }
            had_units = slot.has_units;
        }
        // A packet leaves flight with its units (`take_in_flight`, then `take_units`), so an
        // occupant older than `oldest` holds neither.
        debug_assert!(
            reused || !(self.ring[index].in_flight || self.ring[index].has_units),
            "slot {index} still held"
        );
        // Never clamped: a datagram is at most 64 KiB.
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        let slot = &mut self.ring[index];
        *slot = SentPacket {
            sent_at: now,
            delivered_at_send: self.delivered,
            size,
            seq,
            ack: None,
            in_flight: true,
            has_units: !units.is_empty(),
        };
        self.bytes_in_flight += size as usize;
        if had_units || !units.is_empty() {
            // A slot reused before its units were taken (too old to ack) forgets them here.
            let carried = &mut self.units[index];
            carried.clear();
            carried.append(units);
        }
        seq
    }

    /// Of an ack's `bits` (bit `i` names packet `ack - 1 - i`), those naming a packet that may
    /// still be in flight: none older than `oldest` is.
    pub(crate) fn bits_maybe_in_flight(&self, ack: u16, bits: u32) -> u32 {
        // Packets from `oldest` up to `ack`, `ack` excluded (an `ack` older than `oldest`
        // wraps to a large span: every bit is kept, and the look-ups find nothing).
        let span = ack.wrapping_sub(self.oldest);
        if span >= 32 {
            bits
        } else {
            bits & ((1u32 << span) - 1)
        }
    }

    /// The slot of the newest packet sent (or of none yet): the one a steady flow's next ack
    /// names, for `Connection::prefetch_receive`.
    pub(crate) fn newest(&self) -> &SentPacket {
        &self.ring[usize::from(self.next_seq.wrapping_sub(1)) % SENT_RING]
    }

    /// The slot the next packet sent will take, for `Connection::prefetch_packet` and
    /// `Connection::prefetch_queue`.
    pub(crate) fn next_slot(&self) -> &SentPacket {
        &self.ring[usize::from(self.next_seq) % SENT_RING]
    }

    /// Takes packet `seq` out of flight, if it still was, as acked (counting it delivered) or
    /// lost, and returns it.
    pub(crate) fn take_in_flight(&mut self, seq: u16, acked: bool) -> Option<&mut SentPacket> {
        let slot = &mut self.ring[usize::from(seq) % SENT_RING];
        if !(slot.in_flight && slot.seq == seq) {
            return None;
        }
        slot.in_flight = false;
        self.bytes_in_flight -= slot.size as usize;
        if acked {
            self.delivered += u64::from(slot.size);
        }
        Some(slot)
    }

    /// Takes out the reliable units packet `seq` carried, if it carried any (the slot keeps
    /// its allocation); only then is its slot of `units` looked at.
    pub(crate) fn take_units(&mut self, seq: u16) -> Option<Drain<'_, (u8, u16, u8)>> {
        let index = usize::from(seq) % SENT_RING;
        let carried = std::mem::take(&mut self.ring[index].has_units);
        carried.then(|| self.units[index].drain(..))
    }

    /// Adds to `out` the packets still in flight that were sent before `newest`, oldest first,
    /// as candidates for loss detection. Only the span from the oldest packet in flight is
    /// visited. Always inlined (see `record`).
    #[inline(always)]
    pub(crate) fn in_flight_before(&mut self, newest: u16, out: &mut Vec<u16>) {
        while self.oldest != self.next_seq && !self.is_in_flight(self.oldest) {
            self.oldest = self.oldest.wrapping_add(1);
        }
        let span = newest.wrapping_sub(self.oldest);
        if !seq16_newer(newest, self.oldest) || usize::from(span) >= SENT_RING {
            return;
        }
        let candidates = (0..span).map(|i| self.oldest.wrapping_add(i));
        out.extend(candidates.filter(|s| self.is_in_flight(*s)));
    }

    fn is_in_flight(&self, seq: u16) -> bool {
        let slot = &self.ring[usize::from(seq) % SENT_RING];
        slot.in_flight && slot.seq == seq
    }

    pub(crate) fn slot(&mut self, seq: u16) -> &mut SentPacket {
        &mut self.ring[usize::from(seq) % SENT_RING]
    }
}

/// The receiver's record of which packet sequences arrived, for the ack fields. 16 bytes (an
/// `Option<(u16, Instant)>` took 24 and the whole 32): every packet in reads it and every
/// packet out.
#[derive(Debug, Default)]
pub(crate) struct ReceivedPackets {
    /// When the newest sequence arrived (if `any`).
    newest_at: Instant,
    /// Bit `i`: `newest - 1 - i` was received.
    bits: u32,
    /// The newest sequence received (if `any`).
    newest_seq: u16,
    /// Whether any packet was received.
    any: bool,
}

impl ReceivedPackets {
    /// The newest sequence received and when.
    fn newest(&self) -> Option<(u16, Instant)> {
        self.any.then_some((self.newest_seq, self.newest_at))
    }

    fn set_newest(&mut self, seq: u16, at: Instant) {
        (self.any, self.newest_seq, self.newest_at) = (true, seq, at);
    }

    /// Whether `seq` is neither a duplicate nor too old to track (what `record` would return,
    /// without recording it).
    pub(crate) fn is_new(&self, seq: u16) -> bool {
        let Some((newest, _)) = self.newest() else { return true };
        if seq16_newer(seq, newest) {
            return true;
        }
        let back = u32::from(newest.wrapping_sub(seq));
        (1..=32).contains(&back) && self.bits & (1 << (back - 1)) == 0
    }

    /// Records `seq`; returns false for a duplicate or a packet too old to track.
    pub(crate) fn record(&mut self, seq: u16, now: Instant) -> bool {
        let Some((newest, _)) = self.newest() else {
            // Nothing received yet: the ack fields start here.
            self.set_newest(seq, now);
            return true;
        };
        if seq == newest {
            return false;
        }
        if seq16_newer(seq, newest) {
            let shift = u32::from(seq.wrapping_sub(newest));
            // The old newest becomes bit shift - 1.
            self.bits = if shift >= 33 { 0 } else { ((self.bits << 1) | 1) << (shift - 1) };
            self.set_newest(seq, now);
            return true;
        }
        let back = u32::from(newest.wrapping_sub(seq));
        if back > 32 {
            return false;
        }
        let bit = 1u32 << (back - 1);
        let fresh = self.bits & bit == 0;
        self.bits |= bit;
        fresh
    }

    /// The ack fields for an outgoing packet: newest, bits, and the delay since the newest
    /// arrived in units of 8 microseconds.
    pub(crate) fn ack_fields(&self, now: Instant) -> Option<crate::packet::Acks> {
        let (ack, at) = self.newest()?;
        // Whole 8-microsecond units, from the nanoseconds: `Duration::as_micros` of the
        // difference gives the same floor through a division by 10^9 and 128-bit arithmetic.
        let units = now.saturating_nanos_since(at).as_u64() / 8_000;
        let delay = units.min(u64::from(u16::MAX)) as u16;
        Some(crate::packet::Acks { ack, bits: self.bits, delay })
    }
}

/// Smoothed RTT, its variance and its minimum, as RFC 6298 and QUIC estimate them, and a
/// recent minimum that forgets old samples.
///
/// The minimums and the latest sample in nanoseconds of 64 bits, not [`Duration`]s of 128
/// (72 bytes, not 104: an ack reads and writes every field, and the connection keeps the
/// estimator among what each packet touches); the smoothed RTT and its deviation, which the
/// sender reads for every unit it times, stay `Duration`s. Exactly the values `Duration`s
/// held: a sample is a whole number of nanoseconds far below 2^64 (584 years).
#[derive(Debug, Clone, Copy)]
pub struct RttEstimator {
    smoothed: Option<Duration>,
    variance: Duration,
    /// [`NONE`] before the first sample.
    min: u64,
    latest: u64,
    /// The smallest samples of the current and of the previous epoch of
    /// [`RECENT_MIN_SAMPLES`] samples ([`NONE`]: none).
    recent: [u64; 2],
    samples: u32,
}

/// Samples per epoch of the recent minimum: it forgets a low sample after one to two epochs
/// (a second or two at a game's packet rates).
const RECENT_MIN_SAMPLES: u32 = 64;

/// No sample (a sample as long saturates to it: 584 years).
const NONE: u64 = u64::MAX;

/// `duration` in nanoseconds, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(NONE)
}

/// A mean of 64-bit terms back in 64 bits (it always fits; saturating all the same).
fn narrow(nanos: u128) -> u64 {
    u64::try_from(nanos).unwrap_or(NONE)
}

/// `nanos` as a [`Duration`], if it is one.
fn some(nanos: u64) -> Option<Duration> {
    (nanos != NONE).then(|| Duration::from_nanos(nanos))
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self {
            smoothed: None,
            variance: Duration::ZERO,
            min: NONE,
            latest: 0,
            recent: [NONE; 2],
            samples: 0,
        }
    }
}

impl RttEstimator {
    /// Adds a sample: the time from sending a packet to receiving its ack, less the peer's
    /// reported ack delay (but never below the minimum seen). The minimums are of raw samples,
    /// as QUIC's.
    pub fn update(&mut self, sample: Duration, ack_delay: Duration) {
        let raw = nanos(sample);
        self.min = self.min.min(raw);
        if self.samples % RECENT_MIN_SAMPLES == 0 {
            self.recent = [NONE, self.recent[0]];
        }
        self.samples = self.samples.wrapping_add(1);
        self.recent[0] = self.recent[0].min(raw);
        // In nanoseconds, not `Duration`s, whose sums and divisions cost about 56 more
        // instructions a datagram. `min <= raw`, so a sum past 2^64 is past `raw` too:
        // saturating keeps the test exact.
        let delay = nanos(ack_delay);
        let adjusted = if raw >= self.min.saturating_add(delay) { raw - delay } else { raw };
        self.latest = adjusted;
        self.smooth(adjusted);
    }

    /// Moves the smoothed RTT and its deviation towards `adjusted` (nanoseconds), as QUIC's
    /// weights of 1/8 and 1/4. Exactly what the same sums in `Duration`s gave: a second is a
    /// multiple of 8 nanoseconds, so dividing a `Duration` by 8 or 4 floors its nanoseconds.
    fn smooth(&mut self, adjusted: u64) {
        let (smoothed, variance) = match self.smoothed {
            None => (adjusted, adjusted / 2),
            Some(smoothed) => {
                let smoothed = nanos(smoothed);
                let deviation = u128::from(smoothed.abs_diff(adjusted));
                // In 128 bits, so that seven times a sample cannot overflow; each mean is at
                // most the larger of its terms, so it fits 64 bits again.
                let variance = (u128::from(nanos(self.variance)) * 3 + deviation) / 4;
                let smoothed = (u128::from(smoothed) * 7 + u128::from(adjusted)) / 8;
                (narrow(smoothed), narrow(variance))
            }
        };
        self.smoothed = Some(Duration::from_nanos(smoothed));
        self.variance = Duration::from_nanos(variance);
    }

    /// The smoothed RTT, or `initial` before the first sample.
    pub fn smoothed_or(&self, initial: Duration) -> Duration {
        self.smoothed.unwrap_or(initial)
    }

    /// The mean deviation of RTT samples.
    pub fn variance(&self) -> Duration {
        self.variance
    }

    /// The smallest sample, if any.
    pub fn min(&self) -> Option<Duration> {
        some(self.min)
    }

    /// The smallest of the last 64 to 128 samples, if any: the path's round trip as it is now,
    /// where [`RttEstimator::min`] may hold a low draw from a jittery spell long past.
    pub fn recent_min(&self) -> Option<Duration> {
        some(self.recent[0].min(self.recent[1]))
    }

    /// The newest sample.
    pub fn latest(&self) -> Duration {
        Duration::from_nanos(self.latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_bits_below_the_oldest_packet_in_flight_are_skipped_and_the_rest_kept() {
        // Goal: of an ack's bits, only those naming a packet that may still be in flight are
        // looked at; every packet in flight keeps its bit, across the sequence wrap. Method:
        // send, ack the older ones, move `oldest` on, and mask a full field.
        let t = Instant::ZERO;
        for start in [0u16, u16::MAX - 3] {
            let mut sent = SentPackets::new();
            sent.next_seq = start;
            sent.oldest = start;
            let seqs: Vec<u16> = (0..6).map(|_| sent.record(t, 100, &mut Vec::new())).collect();
            for &seq in &seqs[..3] {
                sent.take_in_flight(seq, true);
            }
            sent.in_flight_before(seqs[5], &mut Vec::new());
            // Acking packet 5: bit i names packet 4 - i; 3 and 4 are in flight, 0..3 are not.
            let bits = sent.bits_maybe_in_flight(seqs[5], u32::MAX);
            assert_eq!(bits, 0b11, "start {start}");
            // An ack older than every packet in flight keeps its bits (the look-ups find none).
            let stale = sent.bits_maybe_in_flight(seqs[1], 0b1);
            assert_eq!(stale, 0b1, "start {start}");
        }
    }

    /// Goal: a packet's reliable units come back once, for that packet only, and a slot
    /// reused before its packet was acked (too old to ack) carries nothing of it over.
    /// Method: packets with and without units; ack them; then wrap the ring over a packet
    /// whose units were never taken.
    #[test]
    fn a_packet_s_units_come_back_once_and_never_with_a_later_packet_in_its_slot() {
        let t = Instant::ZERO;
        let mut sent = SentPackets::new();
        let with = sent.record(t, 100, &mut vec![(1, 7, 0), (2, 9, 1)]);
        let without = sent.record(t, 100, &mut Vec::new());
        assert!(sent.take_in_flight(with, true).is_some());
        let units: Vec<_> = sent.take_units(with).into_iter().flatten().collect();
        assert_eq!(units, [(1, 7, 0), (2, 9, 1)]);
        assert!(sent.take_units(with).is_none(), "taken once");
        assert!(sent.take_in_flight(without, true).is_some());
        assert!(sent.take_units(without).is_none());
        assert_eq!(sent.bytes_in_flight, 0);
        assert_eq!(sent.delivered, 200);
        // A packet never acked, then a whole ring of packets: its slot goes to a new one.
        let forgotten = sent.record(t, 100, &mut vec![(3, 1, 0)]);
        for _ in 1..SENT_RING {
            sent.record(t, 50, &mut Vec::new());
        }
        let last = sent.record(t, 50, &mut vec![(4, 2, 0)]);
        assert_eq!(usize::from(last) % SENT_RING, usize::from(forgotten) % SENT_RING);
        assert!(sent.take_in_flight(forgotten, true).is_none(), "too old to ack");
        assert!(sent.take_in_flight(last, true).is_some());
        let units: Vec<_> = sent.take_units(last).into_iter().flatten().collect();
        assert_eq!(units, [(4, 2, 0)], "its own units, nothing of the forgotten packet");
    }

    /// Goal: the bytes in flight stay exactly the sum of the packets in flight, and no
    /// packet's units outlive it, while the ring comes round many times: a sent packet reads
    /// its slot only when the slot's last packet may still be in flight. Method: laps of
    /// packets, most acked a few packets later, some lost (taken with their units), some
    /// never answered, across the sequence wrap; every 997 packets, the accounting against a
    /// scan of the ring.
    #[test]
    fn the_bytes_in_flight_stay_exact_while_the_ring_comes_round() {
        let t = Instant::ZERO;
        let mut sent = SentPackets::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut draw = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for k in 0..(70_000 + 3 * SENT_RING) {
            let mut units = if draw(4) == 0 { vec![(1, k as u16, 0)] } else { Vec::new() };
            let seq = sent.record(t, 40 + draw(500) as usize, &mut units);
            // Now and then an older packet is answered: lost (one in ten), acked (eight in
            // ten), or never (kept until its slot comes round). Its units go with it, as the
            // connection takes them.
            let answered = seq.wrapping_sub(draw(8) as u16);
            let fate = draw(10);
            if fate != 0 && sent.take_in_flight(answered, fate != 1).is_some() {
                sent.take_units(answered).into_iter().flatten().for_each(drop);
            }
            sent.in_flight_before(answered, &mut Vec::new());
            if k % 997 == 0 {
                let held: usize =
                    sent.ring.iter().filter(|p| p.in_flight).map(|p| p.size as usize).sum();
                assert_eq!(sent.bytes_in_flight, held, "after packet {k}");
                let stray = sent.ring.iter().any(|p| p.has_units && !p.in_flight);
                assert!(!stray, "units left behind a packet out of flight, after packet {k}");
            }
        }
    }

    /// Goal: the ack delay in nanoseconds is the 8-microsecond count the `Duration` form
    /// gave, saturating at its 16 bits. Method: delays around each unit's edge, up to past
    /// the field's range, against the old formula.
    #[test]
    fn the_ack_delay_counts_as_its_duration_did() {
        let mut r = ReceivedPackets::default();
        let at = Instant::from_nanos(123_456_789);
        r.record(5, at);
        let edges = [0u64, 1, 7_999, 8_000, 8_001, 15_999, 1_000_000_000, 524_280_000];
        let far = [524_287_999, 524_288_000, 10_000_000_000, u64::MAX - 123_456_789];
        for nanos in edges.into_iter().chain(far) {
            let now = Instant::from_nanos(at.as_nanos() + nanos);
            let old = ((now - at).as_micros() / 8).min(u128::from(u16::MAX)) as u16;
            assert_eq!(r.ack_fields(now).unwrap().delay, old, "{nanos} ns");
        }
        // A `now` before the arrival (never passed, but harmless): no delay.
        assert_eq!(r.ack_fields(Instant::from_nanos(5)).unwrap().delay, 0);
    }

    #[test]
    fn received_bits_track_gaps_and_duplicates() {
        let mut r = ReceivedPackets::default();
        let t = Instant::ZERO;
        assert!(r.record(10, t));
        assert!(r.record(12, t));
        assert!(!r.record(12, t), "duplicate");
        let acks = r.ack_fields(t).unwrap();
        assert_eq!((acks.ack, acks.bits), (12, 0b10), "11 missing, 10 present");
        assert!(r.record(11, t));
        assert_eq!(r.ack_fields(t).unwrap().bits, 0b11);
        assert!(!r.record(11, t));
        // Across the wrap.
        let mut r = ReceivedPackets::default();
        r.record(u16::MAX, t);
        r.record(1, t);
        assert_eq!(r.ack_fields(t).unwrap().ack, 1);
        assert_eq!(r.ack_fields(t).unwrap().bits, 0b10);
        // Too old to track.
        assert!(!r.record(1u16.wrapping_sub(40), t));
    }

    #[test]
    fn the_recent_minimum_forgets_a_low_sample_that_the_minimum_keeps() {
        let mut rtt = RttEstimator::default();
        rtt.update(Duration::from_millis(20), Duration::ZERO);
        for _ in 0..200 {
            rtt.update(Duration::from_millis(150), Duration::ZERO);
        }
        assert_eq!(rtt.min(), Some(Duration::from_millis(20)));
        assert_eq!(rtt.recent_min(), Some(Duration::from_millis(150)));
        // A new low sample shows at once.
        rtt.update(Duration::from_millis(90), Duration::ZERO);
        assert_eq!(rtt.recent_min(), Some(Duration::from_millis(90)));
    }

    /// The estimator's smoothing as it was, in `Duration`s: the reference its nanosecond
    /// arithmetic must match.
    fn smooth_in_durations(
        state: &mut (Option<Duration>, Duration),
        min: Duration,
        sample: Duration,
        ack_delay: Duration,
    ) -> Duration {
        let adjusted = if sample >= min + ack_delay { sample - ack_delay } else { sample };
        match state.0 {
            None => *state = (Some(adjusted), adjusted / 2),
            Some(smoothed) => {
                let deviation = smoothed.abs_diff(adjusted);
                *state = (Some((smoothed * 7 + adjusted) / 8), (state.1 * 3 + deviation) / 4);
            }
        }
        adjusted
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        #[test]
        fn rtt_in_nanoseconds_gives_what_durations_gave(
            samples in proptest::collection::vec(
                (0u64..=u64::MAX / 8, 0u64..=u64::MAX / 8, proptest::bool::ANY), 1..200),
        ) {
            // Goal: the estimator's figures are the values the same sums in `Duration`s
            // gave, to the nanosecond. Method: feed both the same samples (short ones, as a
            // game's, or any up to 73 years, with or without a delay) and compare each time.
            let mut rtt = RttEstimator::default();
            let mut reference = (None, Duration::ZERO);
            let mut min = Duration::MAX;
            for (sample, delay, short) in samples {
                let (sample, delay) = if short {
                    (Duration::from_nanos(sample % 1_000_000_000),
                        Duration::from_nanos(delay % 50_000_000))
                } else {
                    (Duration::from_nanos(sample), Duration::from_nanos(delay))
                };
                rtt.update(sample, delay);
                min = min.min(sample);
                let latest = smooth_in_durations(&mut reference, min, sample, delay);
                proptest::prop_assert_eq!(rtt.latest(), latest);
                proptest::prop_assert_eq!(rtt.smoothed, reference.0);
                proptest::prop_assert_eq!(rtt.variance(), reference.1);
                proptest::prop_assert_eq!(rtt.min(), Some(min));
            }
        }
    }

    #[test]
    fn rtt_converges_and_subtracts_ack_delay_but_not_below_the_minimum() {
        let mut rtt = RttEstimator::default();
        // A 20 ms path, then samples of 30 ms of which the peer held its ack 2 ms.
        rtt.update(Duration::from_millis(20), Duration::ZERO);
        for _ in 0..100 {
            rtt.update(Duration::from_millis(30), Duration::from_millis(2));
        }
        let smoothed = rtt.smoothed_or(Duration::ZERO);
        assert!(smoothed >= Duration::from_micros(27_900) && smoothed <= Duration::from_millis(28));
        assert_eq!(rtt.latest(), Duration::from_millis(28));
        assert_eq!(rtt.min(), Some(Duration::from_millis(20)));
        // A delay that would take the sample below the path's minimum is not subtracted.
        rtt.update(Duration::from_millis(22), Duration::from_millis(5));
        assert_eq!(rtt.latest(), Duration::from_millis(22));
    }
}
