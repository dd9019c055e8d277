//! The connection's side of streaming repair ([`crate::repair`]): when repairs go out, what
//! they combine, and what the receiver does with them and with repair acks.

use super::{ChannelSet, Connection, Gate, INITIAL_RTT};
use crate::channel::Received;
use crate::config::{ChannelKind, Repair};
use crate::packet::{
    write_data_header, write_repair_ack, write_repair_last, Writer, REPAIR_FRAME_OVERHEAD_MAX,
};
use crate::repair::{self, Decoded, Dropped, Incoming, Source, SYMBOL_HEADER, WINDOW_MAX};
use crate::time::Instant;
use rally_wire::seq::seq16_newer;
use std::time::Duration;

/// Mean run of consecutive lost packets from which losses count as bursty: independent loss
/// of 10% gives runs of 1.1 on average, the W1 bursty profile (mean burst 4) about 3.
const BURSTY: f64 = 2.0;
/// Weight of each run in the burst estimate.
const BURST_GAIN: f64 = 1.0 / 16.0;

impl Connection {
    /// Whether channel `c` sends and takes repairs: a reliable-ordered channel of a
    /// connection configured with them.
    pub(super) fn is_coded(&self, c: usize) -> bool {
        self.repairs_on()
            && self.send.get(c).is_some_and(|s| s.config.kind == ChannelKind::ReliableOrdered)
    }

    /// Whether the connection is configured with repairs: without, no channel is coded, and
    /// the look for a repair due (each packet, each deadline) stops here, not after asking
    /// every channel.
    fn repairs_on(&self) -> bool {
        self.config.repairs
    }

    /// The configured repairs' loss threshold and interval, if any. The flag among the hot
    /// fields is read first: with repairs off (the default), the packets and acks that ask
    /// never touch the cold line the repairs' own fields lie on.
    pub(super) fn repair_settings(&self) -> Option<(f64, Duration)> {
        if !self.config.repairs {
            return None;
        }
        match self.repair {
            Repair::Off => None,
            Repair::Adaptive { loss_threshold, interval } => Some((loss_threshold, interval)),
        }
    }

    /// The gate of channel `c`: a coded channel sends no copies, and while repairs are on it
    /// leaves its lost messages to them (and to its resend timer).
    pub(super) fn channel_gate(&self, c: usize, gate: Gate) -> Gate {
        if !self.is_coded(c) {
            return gate;
        }
        self.coded_gate(gate)
    }

    /// [`Self::channel_gate`] of a coded channel. Out of line: inlined, the compiler loaded
    /// the repairs' settings (the connection's last line) ahead of the flag, once a packet,
    /// so that line was one more miss a packet out with repairs off.
    #[inline(never)]
    fn coded_gate(&self, gate: Gate) -> Gate {
        Gate { copies: 1, repaired: self.repair_plan().0 > 0.0, ..gate }
    }

    /// Tells channel `c`'s encoder of a message of `len` bytes sent for the first time. Out
    /// of line for the reason [`Self::coded_gate`] is.
    #[inline(never)]
    pub(super) fn on_fresh_coded(&mut self, c: usize, now: Instant, len: usize) {
        let plan = self.repair_plan();
        self.encoders[c].on_fresh(now, len, plan);
    }

    /// Repairs per new message and the interval after which they follow: none while the
    /// measured loss is below the threshold or a queue stands on the path (there, losses come
    /// from the queue overflowing and repairs would only feed it).
    pub(super) fn repair_plan(&self) -> (f64, Duration) {
        let Some((_, interval)) = self.repair_settings() else {
            return (0.0, Duration::ZERO);
        };
        let on = self.repairing && !self.queueing();
        // Losses in bursts take a message's repair with it more often than not: half as many
        // repairs again per message then (`rally-bench transport`, bursty-10: see
        // docs/benchmarks.md).
        let rate = if self.loss_burst >= BURSTY { 1.5 } else { 1.0 };
        (if on { rate } else { 0.0 }, interval)
    }

    /// Feeds the runs of consecutive packets in `lost` (ascending) to the burst estimate.
    pub(super) fn note_loss_runs(&mut self, lost: &[u16]) {
        let mut run = 0u32;
        for (i, seq) in lost.iter().enumerate() {
            let follows = i > 0 && lost[i - 1].wrapping_add(1) == *seq;
            if !follows && run > 0 {
                self.loss_burst += (f64::from(run) - self.loss_burst) * BURST_GAIN;
                run = 0;
            }
            run += 1;
        }
        if run > 0 {
            self.loss_burst += (f64::from(run) - self.loss_burst) * BURST_GAIN;
        }
    }

    /// The coded channel with a repair to send at `now`, if the window admits one.
    pub(super) fn repair_due(&mut self, now: Instant) -> Option<usize> {
        if !self.repairs_on() || !self.window_open() {
            return None;
        }
        for c in 0..self.encoders.len() {
            if self.is_coded(c) {
                self.encoders[c].tick(now);
                if self.encoders[c].is_due(now) {
                    return Some(c);
                }
            }
        }
        None
    }

    /// When a repair is next due, if the window admits one.
    pub(super) fn repair_timeout(&self) -> Option<Instant> {
        if !self.repairs_on() || !self.window_open() {
            return None;
        }
        let due = |c: usize| {
            let encoder = &self.encoders[c];
            if encoder.is_due(self.now) {
                Some(self.now)
            } else {
                encoder.due_at
            }
        };
        (0..self.encoders.len()).filter(|c| self.is_coded(*c)).filter_map(due).min()
    }

    /// Writes a packet holding only repair acks and a repair of channel `c`; if the channel
    /// has nothing to repair (or the budget is spent), an ordinary packet instead.
    pub(super) fn write_repair_packet(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        c: usize,
    ) -> Option<(usize, usize, ChannelSet)> {
        // Header, repair acks and the frame's overhead: what the data must leave room for.
        let room = buf.len().saturating_sub(64 + REPAIR_FRAME_OVERHEAD_MAX);
        let Some((start, count, seed)) = self.encode_repair(now, c, room) else {
            self.encoders[c].clear();
            return self.write_packet(now, buf, false, self.gate());
        };
        let header = self.data_header(now);
        let mut w = Writer::new(buf);
        write_data_header(&mut w, &header).ok()?;
        let header_len = w.len();
        self.write_repair_acks(&mut w);
        let data = std::mem::take(&mut self.encoders[c].scratch);
        // Last in its packet, so without a length, and its seed is the packet's sequence.
        let written = write_repair_last(&mut w, (c as u8, start, count, seed), &data);
        self.encoders[c].scratch = data;
        written.ok()?;
        self.stats.repairs_sent += 1;
        Some((header_len, w.len(), ChannelSet::default()))
    }

    /// Codes the window of channel `c` (from its oldest unacknowledged message to the newest
    /// sent, whole messages only) into the encoder's scratch, if it fits `room` and the
    /// budget; returns the window's start, count and seed (the sequence of the packet it
    /// goes in, which the repair frame's last-frame form implies).
    fn encode_repair(&mut self, now: Instant, c: usize, room: usize) -> Option<(u16, u8, u16)> {
        let units = &mut self.send[c].units;
        let mut count = 0;
        let mut longest = 0;
        for unit in units.iter_mut().take(WINDOW_MAX) {
            if unit.sends == 0 || unit.count != 1 {
                break;
            }
            unit.check.get_or_insert_with(|| repair::checksum(&unit.payload));
            longest = longest.max(unit.payload.len());
            count += 1;
        }
        let len = SYMBOL_HEADER + longest;
        let encoder = &mut self.encoders[c];
        if count == 0 || len > room || !encoder.within_budget(len) {
            return None;
        }
        encoder.on_sent(now, len);
        let seed = self.sent.next_seq;
        let window = units.iter().take(count).map(|u| Source {
            seq: u.seq,
            check: u.check.unwrap_or_default(),
            payload: &u.payload,
        });
        repair::encode(window, seed, &mut encoder.scratch)?;
        Some((units[0].seq, count as u8, seed))
    }

    /// Adds a repair ack for every coded channel whose peer sends repairs (the next message
    /// to deliver and the shortfall) while it says what the packet acks do not: for a round
    /// trip after a message was decoded, and while repairs are short. Its 5 bytes in every
    /// packet cost 0.002 of the mean round trip (`rally-bench transport`, bernoulli-10).
    /// Skipped when the packet has no room.
    #[inline]
    pub(super) fn write_repair_acks(&mut self, w: &mut Writer<'_>) {
        // Checked inline (once a packet, nearly always with repairs off): the writing out of
        // line.
        if self.config.repairs {
            self.write_active_repair_acks(w);
        }
    }

    /// [`Self::write_repair_acks`] with repairs on.
    #[inline(never)]
    fn write_active_repair_acks(&mut self, w: &mut Writer<'_>) {
        for c in 0..self.decoders.len() {
            if !self.decoders[c].active || !self.is_coded(c) {
                continue;
            }
            let receive = &self.receive[c];
            let next = receive.next_seq();
            let shortfall =
                self.decoders[c].shortfall(next, |seq| receive.held_message(seq).is_some());
            let fresh = self.decoders[c].report_until.is_some_and(|until| self.now < until);
            if shortfall > 0 || fresh {
                let _ = write_repair_ack(w, c as u8, next, shortfall);
            }
        }
    }

    /// Takes a repair frame: bad input is counted and dropped, decoded messages delivered.
    pub(super) fn handle_repair(&mut self, channel: u8, repair: Incoming<'_>) {
        self.stats.repairs_received += 1;
        let c = usize::from(channel);
        let symbol_max = self.config.piece_bytes() + SYMBOL_HEADER;
        if !self.is_coded(c) || repair.data.len() > symbol_max {
            self.stats.repairs_dropped += 1;
            return;
        }
        let room = self.decoder_room();
        let before = self.decoders[c].bytes();
        let receive = &self.receive[c];
        let decoder = &mut self.decoders[c];
        decoder.rebase(receive.next_seq());
        let result = decoder.receive(repair, |seq| receive.held_message(seq), room);
        self.account_decoder(c, before);
        match result {
            Ok(solved) => self.deliver_decoded(c, solved),
            // Wrong combinations were counted as the decoder found them.
            Err(Dropped::Redundant | Dropped::Inconsistent) => {}
            Err(Dropped::OutOfWindow | Dropped::TooShort | Dropped::NoRoom) => {
                self.stats.repairs_dropped += 1
            }
        }
    }

    /// Message `seq` of channel `c` arrived (or was decoded): the decoder subtracts it from
    /// what it holds, which may solve more. Inline: most messages are of channels without
    /// repairs, for which a call (two a packet) cost more than the check.
    #[inline]
    pub(super) fn learn(&mut self, c: usize, seq: u16, payload: &[u8]) {
        if self.is_coded(c) {
            self.learn_coded(c, seq, payload);
        }
    }

    /// [`Self::learn`] on a coded channel.
    #[inline(never)]
    fn learn_coded(&mut self, c: usize, seq: u16, payload: &[u8]) {
        let room = self.decoder_room();
        let before = self.decoders[c].bytes();
        let solved = self.decoders[c].learn(seq, payload, room);
        self.decoders[c].rebase(self.receive[c].next_seq());
        self.account_decoder(c, before);
        self.deliver_decoded(c, solved);
    }

    /// Hands verified decoded messages to their channel like any arriving message.
    fn deliver_decoded(&mut self, c: usize, solved: Vec<Decoded>) {
        for (seq, payload) in solved {
            let received = self.receive_piece(c as u8, (seq, 0, 1), &payload);
            if matches!(received, Received::Deliver | Received::Held) {
                self.stats.messages_repaired += 1;
                let rtt = self.rtt.smoothed_or(INITIAL_RTT);
                self.decoders[c].report_until = Some(self.now + rtt);
                // The repair ack telling the sender so rides on the acks this owes.
                self.ack_owed_since.get_or_insert(self.now);
                self.learn(c, seq, &payload);
            }
        }
    }

    /// What a decoder may newly hold: the receive limit less what is held and the ordered
    /// channels' reserve.
    fn decoder_room(&self) -> usize {
        let left = self.config.receive_bytes_max.saturating_sub(self.receive_bytes);
        left.saturating_sub(self.head_reserve)
    }

    /// Brings the connection's total in step with decoder `c`, which held `before`; sheds
    /// what the decoder holds past the limit (its reductions may lengthen an equation).
    fn account_decoder(&mut self, c: usize, before: usize) {
        self.stats.repairs_failed += self.decoders[c].take_failures();
        let others = self.receive_bytes - before;
        let allowed = self.config.receive_bytes_max.saturating_sub(others);
        self.decoders[c].shed(allowed);
        self.receive_bytes = others + self.decoders[c].bytes();
    }

    /// Takes a repair ack: the peer delivered every message before `next` (some perhaps
    /// from repairs), and lacks `shortfall` repairs.
    pub(super) fn handle_repair_ack(&mut self, channel: u8, next: u16, shortfall: u8) {
        let c = usize::from(channel);
        let unsent = self.send.get(c).is_some_and(|s| seq16_newer(next, s.next_seq()));
        if !self.is_coded(c) || unsent {
            self.stats.repairs_dropped += 1;
            return;
        }
        self.send[c].ack_before(next);
        // The report left the peer about half a round trip ago: repairs sent since could
        // not have reached it.
        let half_rtt = self.rtt.smoothed_or(INITIAL_RTT) / 2;
        let sent_ns = self.now.as_nanos().saturating_sub(half_rtt_ns(half_rtt));
        self.encoders[c].on_shortfall(shortfall, Instant::from_nanos(sent_ns));
    }
}

fn half_rtt_ns(half: Duration) -> u64 {
    u64::try_from(half.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConnectionConfig;
    use crate::connection::Event;
    use crate::packet::{DataHeader, Frame};
    use crate::DisconnectReason;

    fn coded() -> ConnectionConfig {
        ConnectionConfig { repair: Repair::adaptive(), ..ConnectionConfig::default() }
    }

    /// Feeds `frame` in a data packet numbered `seq`.
    fn take(c: &mut Connection, seq: u16, frame: Frame<'_>) -> Result<(), DisconnectReason> {
        take_at(c, Instant::ZERO, seq, frame)
    }

    fn take_at(
        c: &mut Connection,
        now: Instant,
        seq: u16,
        frame: Frame<'_>,
    ) -> Result<(), DisconnectReason> {
        let mut buf = vec![0u8; 2000];
        let len = frame.encode(&mut buf).expect("fits");
        c.handle_data(now, DataHeader { seq, narrow: false, acks: None }, &buf[..len], len)
    }

    fn message(k: u16) -> Vec<u8> {
        (0..50 + k as usize % 300).map(|i| (i as u16 ^ k) as u8).collect()
    }

    fn delivered(c: &mut Connection) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| c.poll_event())
            .filter_map(|e| match e {
                Event::Message { payload, .. } => Some(payload),
                _ => None,
            })
            .collect()
    }

    /// Goal: garbage repairs (random windows, seeds and bytes, valid framing) never deliver a
    /// message that was not sent, never close the connection, and are counted. Method:
    /// messages 0..60 on channel 0 with 20 and 41 withheld until the end, and 420 garbage
    /// repairs interleaved; what comes out must be exactly the 60 messages, in order.
    #[test]
    fn garbage_repairs_are_counted_and_never_delivered() {
        let mut c = Connection::new(coded(), Instant::ZERO);
        let mut state = 0x1234_5678_u64;
        let mut random = move || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (state >> 33) as u32
        };
        let mut packet = 0u16;
        for k in 0..60u16 {
            if k != 20 && k != 41 {
                let payload = message(k);
                take(&mut c, packet, Frame::Message { channel: 0, seq: k, payload: &payload })
                    .expect("open");
                packet += 1;
            }
            for _ in 0..7 {
                let data: Vec<u8> = (0..random() % 400).map(|_| random() as u8).collect();
                let (start, count) = (k.wrapping_sub(random() as u16 % 40), random() as u8 % 40);
                let seed = random() as u16;
                let repair = Frame::Repair { channel: 0, start, count, seed, data: &data };
                assert_eq!(take(&mut c, packet, repair), Ok(()));
                packet += 1;
            }
        }
        // The withheld messages arrive at last, as their resends would.
        for k in [20u16, 41] {
            let payload = message(k);
            let frame = Frame::Message { channel: 0, seq: k, payload: &payload };
            take(&mut c, packet, frame).expect("open");
            packet += 1;
        }
        let want: Vec<Vec<u8>> = (0..60).map(message).collect();
        assert_eq!(delivered(&mut c), want);
        let stats = c.stats();
        assert!(!c.is_closed());
        // Garbage may also have been taken for equations over the holes: what it solves
        // fails its checks, or waits for messages that refute it; nothing wrong comes out.
        assert!(stats.messages_repaired <= 2);
        assert!(stats.repairs_dropped + stats.repairs_failed > 100, "{stats:?}");
        assert!(c.receive_bytes() <= c.config.receive_bytes_max);
    }

    /// A true repair of messages `first..first + count` of channel 0 with `seed`.
    fn repair_over(first: u16, count: u8, seed: u16) -> Vec<u8> {
        let messages: Vec<(u16, Vec<u8>)> =
            (first..first + u16::from(count)).map(|k| (k, message(k))).collect();
        let window = messages.iter().map(|(seq, payload)| Source {
            seq: *seq,
            check: repair::checksum(payload),
            payload,
        });
        let mut data = Vec::new();
        repair::encode(window, seed, &mut data).expect("codes");
        data
    }

    /// Goal: a repair asks for an ack only when it delivers a message (most fill no hole, and
    /// an ack packet of their own is one more packet that may hold back data on the path),
    /// and the one that does owes the ack that tells the sender. Method: two repairs over
    /// messages 0 and 1, neither of which arrived; the first solves nothing, the second both.
    #[test]
    fn only_a_repair_that_delivers_owes_an_ack() {
        let mut c = Connection::new(coded(), Instant::ZERO);
        for (seed, packet) in [(1u16, 0u16), (2, 1)] {
            assert_eq!(c.ack_owed_since, None, "packet {packet}: no ack owed before it");
            let data = repair_over(0, 2, seed);
            let repair = Frame::Repair { channel: 0, start: 0, count: 2, seed, data: &data };
            take(&mut c, packet, repair).expect("open");
        }
        assert_eq!(delivered(&mut c), vec![message(0), message(1)]);
        assert_eq!(c.ack_owed_since, Some(Instant::ZERO), "the delivering repair owes one");
    }

    /// Whether the next packet `c` sends at `now` carries a repair ack (plaintext).
    fn sends_repair_ack(c: &mut Connection, now: Instant) -> bool {
        let mut buf = [0u8; 1500];
        let len = c.poll_transmit(now, &mut buf, &mut crate::observe::Observer::default());
        let packet = crate::packet::Packet::decode(&buf[..len.expect("a packet")]);
        let Ok(crate::packet::Packet::Data { header, frames }) = packet else {
            panic!("a data packet")
        };
        let frames = crate::packet::Frames::new(frames, header.seq);
        frames.map(|f| f.expect("valid")).any(|f| matches!(f, Frame::RepairAck { .. }))
    }

    /// Goal: a repair ack goes out only while it tells the sender what the packet acks do not
    /// (5 bytes a packet otherwise, each 0.04 ms of serialization at 1 Mbit/s): for a round
    /// trip after a message was decoded, and while repairs are short. Method: messages 0 and
    /// 1 decoded from two repairs, the acks sent, then message 2 received directly a round
    /// trip later; then a repair over 3..6 and message 6, ahead of the holes, acked at once.
    #[test]
    fn repair_acks_go_out_only_after_a_decode_or_with_a_shortfall() {
        let mut c = Connection::new(coded(), Instant::ZERO);
        for (seed, packet) in [(1u16, 0u16), (2, 1)] {
            let data = repair_over(0, 2, seed);
            let repair = Frame::Repair { channel: 0, start: 0, count: 2, seed, data: &data };
            take(&mut c, packet, repair).expect("open");
        }
        let acked = Instant::ZERO + c.config.ack_delay_max;
        assert!(sends_repair_ack(&mut c, acked), "messages 0 and 1 were decoded");
        let later = acked + INITIAL_RTT;
        let payload = message(2);
        let direct = Frame::Message { channel: 0, seq: 2, payload: &payload };
        take_at(&mut c, later, 2, direct).expect("open");
        let acked = later + c.config.ack_delay_max;
        assert!(!sends_repair_ack(&mut c, acked), "message 2 is told by the packet acks");
        let data = repair_over(3, 3, 3);
        let repair = Frame::Repair { channel: 0, start: 3, count: 3, seed: 3, data: &data };
        take_at(&mut c, acked, 3, repair).expect("open");
        let payload = message(6);
        let ahead = Frame::Message { channel: 0, seq: 6, payload: &payload };
        take_at(&mut c, acked, 4, ahead).expect("open");
        assert!(sends_repair_ack(&mut c, acked), "two repairs short of messages 3..6");
    }

    /// Goal: repairs start on, so that the first losses of a lossy path are repaired before
    /// any is measured, and a clean path switches them off soon. Method: a new connection's
    /// plan, then its plan after 60 packets acked without loss, then after losses return.
    #[test]
    fn repairs_start_on_and_a_clean_path_switches_them_off() {
        let mut c = Connection::new(coded(), Instant::ZERO);
        assert!(c.repair_plan().0 > 0.0, "on before any loss is measured");
        for _ in 0..60 {
            c.record_fate(false);
        }
        assert_eq!(c.repair_plan().0, 0.0, "off after 60 clean packets");
        for k in 0..20 {
            c.record_fate(k % 10 == 0);
        }
        assert!(c.repair_plan().0 > 0.0, "on again at 10% loss");
        let plain = Connection::new(ConnectionConfig::default(), Instant::ZERO);
        assert_eq!(plain.repair_plan().0, 0.0, "never without repairs configured");
    }

    /// Goal: a repair on a connection or channel without repairs, and a repair ack claiming
    /// messages never sent, are counted drops that leave the connection open.
    #[test]
    fn repairs_where_none_are_taken_are_counted_drops() {
        let mut plain = Connection::new(ConnectionConfig::default(), Instant::ZERO);
        let repair = Frame::Repair { channel: 0, start: 0, count: 1, seed: 1, data: &[0; 8] };
        assert_eq!(take(&mut plain, 0, repair), Ok(()));
        let mut c = Connection::new(coded(), Instant::ZERO);
        let unreliable = Frame::Repair { channel: 1, start: 0, count: 1, seed: 1, data: &[0; 8] };
        assert_eq!(take(&mut c, 0, unreliable), Ok(()));
        let unsent = Frame::RepairAck { channel: 0, next: 5, shortfall: 0 };
        assert_eq!(take(&mut c, 1, unsent), Ok(()));
        assert_eq!((plain.stats().repairs_dropped, c.stats().repairs_dropped), (1, 2));
        assert!(!plain.is_closed() && !c.is_closed());
    }
}
