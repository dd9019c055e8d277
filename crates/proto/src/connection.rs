//! One connection's state machine after the handshake: packets, acks, channels, resends.
//!
//! The design goal is latency, not bandwidth. A message is sent in the first packet that has
//! room; a packet goes out as soon as there is something to send (no batching timer); a packet
//! is declared lost as soon as a later one is acked (no waiting for three duplicate acks on a
//! path that does not reorder), and its reliable contents go out again at once; the receiver
//! acks at once when a reliable message arrives ahead of a missing one or a ping arrives, and
//! otherwise holds its ack up to `ack_delay_max` for data to ride on; a resend timer (RTT, four
//! deviations and the peer's ack delay) backs off by 1.5x up to `resend_interval_max` instead
//! of doubling forever, but never fires before an ack could come.
//! When the measured loss is above a threshold and no queue stands on the path, each reliable
//! message is repeated `repeat_interval` later, and so is each repair, so that a single loss
//! costs a couple of milliseconds and a double loss about one round trip plus the time to the
//! next message. Every packet counts: on a path whose delays vary without reordering, each
//! extra packet is one more chance to hold back the data behind it, which is why a lost packet
//! whose message the copy repaired triggers no ack of its own, and why the tail-loss probe is
//! off by default. New data waits while the bytes in flight exceed a window of twice the
//! measured bandwidth-delay product, so that a sender faster than the path queues (and sheds)
//! at home instead of in the path.

use crate::acks::{ReceivedPackets, RttEstimator, SentPackets};
use crate::channel::{Queued, Ready, ReceiveChannel, Received, Room, SendChannel};
use crate::config::{ConnectionConfig, HotConfig, Redundancy, Repair};
use crate::crypto::{OpenError, PacketKeys};
use crate::observe::{Observer, Stage};
use crate::packet::{
    fragment_frame_size, message_frame_size, sealed_disconnect_header, write_data_header,
    write_fragment, write_message, write_ping, Acks, DataHeader, DisconnectReason, Frame, Frames,
    Writer, NARROW_SEQ_AHEAD_MAX, TAG_SIZE,
};
use crate::time::{Instant, Nanos};
use rally_wire::seq::seq16_newer;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

mod repairs;

/// What a connection tells its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed; messages can flow.
    Connected,
    /// A message arrived on `channel`.
    Message {
        /// The channel index.
        channel: u8,
        /// The message.
        payload: Vec<u8>,
    },
    /// The connection ended.
    Disconnected {
        /// Why.
        reason: DisconnectReason,
    },
}

/// Why a message could not be queued. Nothing is queued when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// No channel has this index.
    #[error("no channel {0}")]
    UnknownChannel(u8),
    /// The message is larger than `message_bytes_max`.
    #[error("message of {len} bytes exceeds message_bytes_max of {max}")]
    TooLarge {
        /// The message's size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The channel's queue holds `send_queue_max` units already, or its oldest unacknowledged
    /// message has waited longer than `send_delay_max`: the peer or the link is slower than
    /// the sender; shed load or wait.
    #[error("channel {0} send queue is full")]
    QueueFull(u8),
    /// The connection is closed or closing.
    #[error("the connection is closed")]
    Closed,
}

/// A connection's path as sampled by a host ([`Connection::quality`]): the same figures as
/// [`ConnectionStats`]'s fields of those names.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quality {
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Mean deviation of the round-trip time.
    pub rtt_variance: Duration,
    /// Packet loss estimate (moving average of lost over sent).
    pub loss: f64,
}

/// Counters and estimates a game shows its players and an operator graphs.
///
/// `repr(C)`: the counters every packet in or out adds to lead, so that they share a cache
/// line (a connection keeps its statistics inline); the figures [`Connection::stats`] fills in
/// come last.
#[derive(Debug, Clone, Default, PartialEq)]
#[repr(C)]
pub struct ConnectionStats {
    /// Datagrams sent.
    pub packets_sent: u64,
    /// Bytes sent, headers included.
    pub bytes_sent: u64,
    /// Datagrams received and accepted.
    pub packets_received: u64,
    /// Bytes received, headers included.
    pub bytes_received: u64,
    /// Packet loss estimate (moving average of lost over sent).
    pub loss: f64,
    /// Datagrams received twice (dropped).
    pub duplicates_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Reliable units sent again.
    pub resends: u64,
    /// Frames refused (outside a window, inconsistent fragments).
    pub frames_refused: u64,
    /// Pieces refused because the connection held `receive_bytes_max` already; their packets
    /// went unacked, so that the peer sends them again.
    pub frames_deferred: u64,
    /// Packets left unacked because they carried such a piece.
    pub packets_deferred: u64,
    /// Unreliable assemblies dropped to make room under `receive_bytes_max`.
    pub assemblies_evicted: u64,
    /// Repairs sent (coded combinations of unacknowledged messages, see [`crate::repair`]).
    pub repairs_sent: u64,
    /// Repairs received.
    pub repairs_received: u64,
    /// Messages recovered from repairs (verified before delivery).
    pub messages_repaired: u64,
    /// Repairs and repair acks set aside as bad input: malformed, on a channel without
    /// repairs, a window past the limit, shorter than a message they combine, claiming
    /// messages never sent, or finding no room under `receive_bytes_max`.
    pub repairs_dropped: u64,
    /// Repairs that decoded to a message failing its checks (a wrong combination): dropped,
    /// with every equation held, and nothing delivered.
    pub repairs_failed: u64,
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Mean deviation of the round-trip time.
    pub rtt_variance: Duration,
    /// Smallest round-trip time seen.
    pub rtt_min: Duration,
    /// What each channel holds against `receive_bytes_max` (messages in reassembly and held
    /// behind a gap, bookkeeping included).
    pub receive_bytes: Vec<usize>,
    /// Units waiting in each channel's send queue.
    pub send_queue: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connected,
    /// Sending disconnect packets (`left` more) before going quiet.
    Closing {
        reason: DisconnectReason,
        left: u8,
    },
    Closed,
}

/// What a pass over the send queues put in the packet.
#[derive(Debug, Default, Clone, Copy)]
struct Filled {
    /// The last redundant copy of some unit: a tail-loss probe may follow.
    last_copy: bool,
    /// A reliable unit sent for the first time.
    fresh_reliable: bool,
    /// The unreliable channels it took units from: those units are forgotten once the packet
    /// goes out, and only those channels need a look. A set on the stack, not a list on the
    /// connection: the list's allocation was one more line a packet.
    unreliable: ChannelSet,
}

/// What a pass over the send queues needs to know, computed once per pass.
#[derive(Debug, Clone, Copy)]
struct Gate {
    /// Whether the delivery-rate window admits new data and copies.
    open: bool,
    /// Copies a reliable unit may have before its first ack could arrive.
    copies: u8,
    /// Repairs cover this channel's losses: a unit declared lost waits for part of its resend
    /// timer (`COVERED_LOST_RESEND`) instead of going out at once.
    repaired: bool,
}

impl Gate {
    /// Whether repairs cover `unit`'s loss: a whole message (repairs combine no fragments) of
    /// a repaired channel.
    fn covers(&self, unit: &crate::channel::Unit) -> bool {
        self.repaired && unit.count == 1
    }
}

/// A set of channel indices: those below 64 by a bit each, those above (which the engine's
/// four channels never reach) by one flag for them all.
#[derive(Debug, Default, Clone, Copy)]
struct ChannelSet {
    low: u64,
    high: bool,
}

impl ChannelSet {
    fn insert(&mut self, c: usize) {
        if c < 64 {
            self.low |= 1 << c;
        } else {
            self.high = true;
        }
    }

    fn contains(&self, c: usize) -> bool {
        if c < 64 {
            self.low & 1 << c != 0
        } else {
            self.high
        }
    }

    /// Whether no channel is in the set.
    fn is_empty(&self) -> bool {
        self.low == 0 && !self.high
    }

    /// The one channel in the set, if it holds exactly one (most packets: a client's
    /// snapshot alone).
    fn only(&self) -> Option<usize> {
        (!self.high && self.low.count_ones() == 1).then(|| self.low.trailing_zeros() as usize)
    }

    /// The channels in the set, ascending, of `channels` in all.
    fn iter(self, channels: usize) -> Members {
        let high = if self.high { 64..channels } else { 0..0 };
        Members { low: self.low, high }
    }
}

/// [`ChannelSet::iter`]'s iterator: a plain loop over set bits, then the range above 64.
struct Members {
    low: u64,
    high: std::ops::Range<usize>,
}

impl Iterator for Members {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.low == 0 {
            return self.high.next();
        }
        let c = self.low.trailing_zeros() as usize;
        self.low &= self.low - 1;
        Some(c)
    }
}

/// The share of the resend timer after which a message the repairs cover, once its packet
/// is declared lost, is resent: the repairs that follow it have had their round trip by then,
/// and under bursts the full timer left it waiting on them (docs/benchmarks.md). A message
/// merely unacknowledged, as in an outage of the acks' direction, waits for the full timer.
const COVERED_LOST_RESEND: f64 = 0.6;

/// Disconnect packets sent, so that one lost packet does not leave the peer waiting for the
/// idle timeout.
const DISCONNECT_COPIES: u8 = 3;
/// RTT assumed before the first sample.
const INITIAL_RTT: Duration = Duration::from_millis(100);
/// Weight of each packet's fate in the loss estimate.
const LOSS_GAIN: f64 = 1.0 / 64.0;
/// Weight of each packet's fate in the slower estimate that switches redundancy: about the
/// last few hundred packets, so that a path losing a steady 1-2% keeps its copies between
/// losses instead of dropping them after every quiet second.
const REDUNDANCY_GAIN: f64 = 1.0 / 256.0;
/// Delivery-rate samples kept; the window follows the best of them.
const RATE_SAMPLES: usize = 32;
/// Bytes in flight allowed before the first delivery-rate sample.
const WINDOW_INITIAL: usize = 64 * 1024;
/// Bytes in flight always allowed.
const WINDOW_MIN: usize = 16 * 1024;

/// One established connection. Owned by an [`crate::Endpoint`], which routes datagrams to it.
///
/// `repr(C)`: the fields lie in the order written, and the order is for the caches (the
/// struct starts a 64-byte line, so that the order decides which fields share one). A server
/// worker's rooms take turns, each room's tick finding its connections evicted by the other
/// rooms' ticks, so each distinct line a packet in or out reads is a miss (docs/benchmarks.md,
/// "Round 14"). What every packet and every deadline reads comes first, packed; then the
/// configuration's per-packet fields (`HotConfig`, one line of its own where the whole
/// config took four); the statistics' per-packet counters lead their struct, which follows,
/// on the config's last line; what only some packets read (the channel order, the repair
/// coders), the delivery-rate ring (one slot a sample), the keys (whose own hot fields lead
/// them) and the repairs' settings come last.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Connection {
    /// The latest time any input carried: what `send`, which takes no time, counts as now.
    now: Instant,
    last_received: Instant,
    last_sent: Instant,
    /// When an ack became owed for a received packet with frames, if none has gone out since.
    ack_owed_since: Option<Instant>,
    /// When to send a tail-loss probe: a tiny ack-eliciting packet after the last copy of
    /// new data, so that a loss of every copy is detected one ack later, not one message later.
    probe_at: Option<Instant>,
    received: ReceivedPackets,
    sent: SentPackets,
    /// The window those samples and the RTT give, recomputed when acks change them (it is
    /// read several times per packet sent).
    window_bytes: usize,
    rate_next: usize,
    /// The largest of `rate_samples` (0 before any): kept as they change, since the window
    /// is recomputed on every ack and a scan of the ring each time cost more than the ack.
    rate_max: f64,
    /// The slower loss estimate that switches adaptive redundancy (see `record_fate`).
    redundancy_loss: f64,
    /// Mean length of runs of consecutive lost packets, a moving average: how bursty the
    /// losses are, which sets the repairs per message.
    loss_burst: f64,
    /// What the receive channels and the repair decoders hold against `receive_bytes_max`.
    receive_bytes: usize,
    /// Room within `receive_bytes_max` kept for the next message of each ordered channel.
    head_reserve: usize,
    /// The send channels that may hold units: added when a message is queued, taken out once
    /// the channel is found empty after a packet. The passes over the send queues of each
    /// packet (whether a unit is due, the filling, the deadline) look at these alone: most
    /// packets find one channel holding anything, or none, of the engine's four.
    queued: ChannelSet,
    send: Vec<SendChannel>,
    receive: Vec<ReceiveChannel>,
    events: VecDeque<Queued>,
    /// Reused to collect the packets declared lost by an ack.
    lost: Vec<u16>,
    /// Reused to collect the reliable units of the packet being built.
    units: Vec<(u8, u16, u8)>,
    rtt: RttEstimator,
    /// The ack field of the packet being built, recorded with it when it goes out.
    header_ack: Option<u16>,
    state: State,
    /// Ack at once: a reliable message arrived ahead of one still missing (a hole the sender
    /// must learn of now, as TCP's duplicate acks), or a ping asked for it. A gap in packet
    /// numbers alone is no reason: with copies on, most lost packets had their messages
    /// repaired by the copy, and every extra packet on a path that does not reorder may hold
    /// back the data behind it.
    ack_now: bool,
    /// Whether adaptive redundancy is on.
    copying: bool,
    /// Send a packet at the next chance even with nothing to say (the server's first packet,
    /// which completes the client's handshake).
    prompted: bool,
    /// Whether the measured loss calls for repairs (the slow estimate, with the margin of
    /// copies).
    repairing: bool,
    /// The channel the last piece received came on: the one the next most likely comes on,
    /// whose lines `prefetch_receive` asks for.
    last_channel: u8,
    /// The configuration's per-packet fields (the channel list is in `send`), after the
    /// fields above so that its first line is shared with them and its last with the
    /// statistics' per-packet counters.
    config: HotConfig,
    stats: ConnectionStats,
    /// Channel indices, highest priority first (stable among equals): the order packets are
    /// filled in. Read only when more than one channel holds units (`fill`), so it lies
    /// out of the hot lines.
    channel_order: Vec<usize>,
    /// Per channel: repairs to send (used on reliable-ordered channels with repairs on; not
    /// read with repairs off, so out of the hot lines).
    encoders: Vec<crate::repair::Encoder>,
    /// Per channel: repairs received.
    decoders: Vec<crate::repair::Decoder>,
    /// Recent delivery-rate samples, bytes per second, a ring.
    rate_samples: [f64; RATE_SAMPLES],
    /// The connection's keys, when it was opened with a connect token: every packet is sealed.
    keys: Option<PacketKeys>,
    /// The configured repairs: read only when they are on (`config.repairs`).
    repair: Repair,
}

impl Connection {
    pub(crate) fn new(config: ConnectionConfig, now: Instant) -> Self {
        let send = config.channels.iter().map(|c| SendChannel::new(*c)).collect();
        let (window, piece, message_max) =
            (config.receive_window, config.piece_bytes(), config.message_bytes_max);
        let receive = config
            .channels
            .iter()
            .map(|c| ReceiveChannel::new(c.kind, window, piece, message_max))
            .collect();
        let head_reserve = config.head_reserve_bytes();
        let channels = config.channels.len();
        let mut channel_order: Vec<usize> = (0..config.channels.len()).collect();
        channel_order.sort_by_key(|i| std::cmp::Reverse(config.channels[*i].priority));
        let mut events = VecDeque::new();
        events.push_back(Queued(Event::Connected));
        let repair_start = config.repair.start_loss();
        Self {
            channel_order,
            head_reserve,
            receive_bytes: 0,
            config: HotConfig::new(&config),
            repair: config.repair,
            state: State::Connected,
            sent: SentPackets::new(),
            received: ReceivedPackets::default(),
            rtt: RttEstimator::default(),
            send,
            queued: ChannelSet::default(),
            receive,
            events,
            last_received: now,
            last_sent: now,
            ack_owed_since: None,
            ack_now: false,
            stats: ConnectionStats::default(),
            redundancy_loss: repair_start,
            copying: false,
            lost: Vec::new(),
            units: Vec::new(),
            prompted: false,
            now,
            probe_at: None,
            rate_samples: [0.0; RATE_SAMPLES],
            rate_next: 0,
            rate_max: 0.0,
            window_bytes: WINDOW_INITIAL,
            keys: None,
            encoders: (0..channels).map(|_| Default::default()).collect(),
            decoders: (0..channels).map(|_| Default::default()).collect(),
            repairing: repair_start > 0.0,
            last_channel: 0,
            loss_burst: 1.0,
            header_ack: None,
        }
    }

    /// Asks the core for the lines a received data packet reads first: the hot lines, the
    /// opening key's, and three guesses read from those lines: the newest packet sent (what
    /// a steady flow's ack names), the next delivery-rate sample's slot, and the channel the
    /// last piece came on. See [`crate::Endpoint::prefetch`].
    pub(crate) fn prefetch_receive(&self) {
        self.prefetch_hot_lines();
        if let Some(keys) = &self.keys {
            keys.prefetch_open();
        }
        rally_wire::prefetch::prefetch(self.sent.newest());
        // An ack's delivery-rate sample goes here (off the hot lines: 4 lines of samples).
        rally_wire::prefetch::prefetch(&self.rate_samples[self.rate_next % RATE_SAMPLES]);
        if let Some(channel) = self.receive.get(usize::from(self.last_channel)) {
            channel.prefetch();
        }
    }

    /// Asks the core for the lines a message queued to this connection reads first: the hot
    /// lines and the keys' first. Nothing is read, so nothing waits: a room asks for its
    /// clients' before it builds their snapshots ([`crate::Endpoint::prefetch_connection`]),
    /// and [`Self::prefetch_queue`] then reads these lines to reach the ones behind them.
    pub(crate) fn prefetch_lines(&self) {
        self.prefetch_hot_lines();
        rally_wire::prefetch::prefetch(&self.keys);
    }

    /// Asks the core for the lines behind [`Self::prefetch_lines`]' that a message queued on
    /// `channel` reads and writes on its way out: the channel's send queue and its oldest
    /// unit, the sealing key and the sent ring's next slot. It reads the lines
    /// that hold their addresses, so it comes after those have arrived: a room calls it for
    /// every queued message before it queues the first ([`crate::Endpoint::prefetch_queue`]).
    /// Queued one by one, each client's message waited on its connection's lines in turn (the
    /// load run's profile put the queueing's samples on the first reads of the connection
    /// and of its send queue). A hint: it changes nothing.
    pub(crate) fn prefetch_queue(&self, channel: u8) {
        self.prefetch_packet();
        if let Some(queue) = self.send.get(usize::from(channel)) {
            queue.prefetch();
        }
    }

    /// One field on each of the hot lines (0 to 8 in the order above;
    /// `hot_lines_are_prefetched` holds the fields to them).
    fn prefetch_hot_lines(&self) {
        use rally_wire::prefetch::prefetch;
        prefetch(&self.now);
        prefetch(&self.sent);
        prefetch(&self.window_bytes);
        prefetch(&self.queued);
        prefetch(&self.events);
        prefetch(&self.rtt);
        prefetch(&self.state);
        prefetch(&self.config.resend_interval_min);
        prefetch(&self.stats);
    }

    /// Seals every packet from now on with `keys` (set before the first packet).
    pub(crate) fn set_keys(&mut self, keys: PacketKeys) {
        self.keys = Some(keys);
    }

    /// Whether packets are sealed.
    pub fn is_encrypted(&self) -> bool {
        self.keys.is_some()
    }

    /// Opens a sealed data packet: `bytes` is the datagram, the first `header` bytes of which
    /// are its clear header with sequence `seq` (8 or 16 bits); the frames go to `out`.
    /// Returns the packet's full 16-bit sequence, restored from its number.
    pub(crate) fn open_packet(
        &mut self,
        bytes: &[u8],
        header: usize,
        seq: u16,
        out: &mut Vec<u8>,
    ) -> Result<u16, OpenError> {
        let keys = self.keys.as_mut().ok_or(OpenError::Unauthenticated)?;
        let (clear, sealed) = bytes.split_at(header.min(bytes.len()));
        // The sequence is the number's low 16 bits.
        keys.open(seq, clear, sealed, out).map(|number| number as u16)
    }

    /// A sealed disconnect: closes the connection if it authenticates.
    pub(crate) fn handle_sealed_disconnect(
        &mut self,
        reason: DisconnectReason,
        seq: u16,
        bytes: &[u8],
    ) -> Result<(), OpenError> {
        let mut scratch = Vec::new();
        let keys = self.keys.as_mut().ok_or(OpenError::Unauthenticated)?;
        let header = sealed_disconnect_header(reason, seq);
        let sealed = bytes.get(header.len()..).unwrap_or_default();
        keys.open_full(seq, &header, sealed, &mut scratch)?;
        self.handle_disconnect(reason);
        Ok(())
    }

    /// Makes the next `poll_transmit` send a packet even if nothing is due.
    pub(crate) fn prompt(&mut self) {
        self.prompted = true;
    }

    /// Queues a message on `channel`; it goes out in the next packet with room.
    pub fn send(&mut self, channel: u8, payload: &[u8]) -> Result<(), SendError> {
        self.queue(channel, payload.len(), |queue, piece, now, limits| {
            queue.push(payload, piece, now, limits)
        })
    }

    /// [`Connection::send`] of the message in `buffer`, without copying it when it fits one
    /// piece: the queue keeps the buffer, and `buffer` is left empty (a spare buffer for the
    /// next message). On an error, `buffer` is left as it was.
    pub fn send_buffer(&mut self, channel: u8, buffer: &mut Vec<u8>) -> Result<(), SendError> {
        self.queue(channel, buffer.len(), |queue, piece, now, limits| {
            queue.push_buffer(buffer, piece, now, limits)
        })
    }

    /// [`Connection::send_buffer`] of the message `head` followed by `body`, if any: `body` is
    /// kept shared, not copied, until it is copied into the packet that carries the message,
    /// so that bytes sent to many peers (a room's snapshot encoding) are copied once for each
    /// instead of twice. Where the message takes more than one piece, or the channel's repairs
    /// combine whole payloads, `body` is copied after `head` instead. The peer receives the
    /// two as one message. `head` is left empty once queued, and as it was on an error.
    pub fn send_parts(
        &mut self,
        channel: u8,
        head: &mut Vec<u8>,
        body: Option<Arc<Vec<u8>>>,
    ) -> Result<(), SendError> {
        let Some(body) = body else { return self.send_buffer(channel, head) };
        let whole = usize::from(channel) < self.send.len() && self.is_coded(channel.into());
        self.queue(channel, head.len() + body.len(), |queue, piece, now, limits| {
            queue.push_parts((head, body), piece, now, (limits, whole))
        })
    }

    /// Queues a message of `len` bytes on `channel` with `push`, given the channel's send
    /// queue, the piece size, the time and the queue's limits (false: the queue is full); an
    /// error if the connection or the channel cannot take it.
    fn queue(
        &mut self,
        channel: u8,
        len: usize,
        push: impl FnOnce(&mut SendChannel, usize, Instant, (usize, Nanos)) -> bool,
    ) -> Result<(), SendError> {
        if self.state != State::Connected {
            return Err(SendError::Closed);
        }
        let max = self.config.message_bytes_max;
        if len > max {
            return Err(SendError::TooLarge { len, max });
        }
        let piece = self.piece_size();
        let limits = (self.config.send_queue_max, self.config.send_delay_max);
        let now = self.now;
        let queue =
            self.send.get_mut(usize::from(channel)).ok_or(SendError::UnknownChannel(channel))?;
        if !push(queue, piece, now, limits) {
            return Err(SendError::QueueFull(channel));
        }
        self.queued.insert(usize::from(channel));
        self.prefetch_send();
        Ok(())
    }

    /// Asks the core for two lines that sending a queued message reads first and that
    /// queueing it did not touch: the sent ring's (its next slot's address) and the keys'
    /// first. Messages queued in a row (a room's, each to another client) have the others'
    /// queueing to arrive in; `poll_transmit` then asks for the lines behind them
    /// ([`Self::prefetch_packet`]). A room asks for all of them earlier
    /// ([`Self::prefetch_lines`]); these are for a host that does not. A hint: it changes
    /// nothing.
    fn prefetch_send(&self) {
        rally_wire::prefetch::prefetch(&self.sent);
        rally_wire::prefetch::prefetch(&self.keys);
    }

    /// Asks for the lines a packet reads and writes after it is built: the sealing key and
    /// the sent ring's next slot. Asked for before the packet is written, they arrive while
    /// it is (a room's transmit asked for them already, [`Self::prefetch_queue`]; this is for
    /// the messages no one asked ahead for).
    fn prefetch_packet(&self) {
        if let Some(keys) = &self.keys {
            keys.prefetch_seal();
        }
        rally_wire::prefetch::prefetch(self.sent.next_slot());
    }

    /// The largest piece of a message one packet carries; a sealed packet keeps room for its
    /// tag, or a full piece would never fit and the packet would go out empty, again and again.
    fn piece_size(&self) -> usize {
        self.config.piece_bytes()
    }

    /// What the receive channels hold against `receive_bytes_max`.
    pub fn receive_bytes(&self) -> usize {
        self.receive_bytes
    }

    /// Starts closing: the peer is told `reason` several times, then the connection goes quiet.
    pub fn disconnect(&mut self, reason: DisconnectReason) {
        if self.state == State::Connected {
            self.state = State::Closing { reason, left: DISCONNECT_COPIES };
            self.events.push_back(Queued(Event::Disconnected { reason }));
        }
    }

    /// Whether the connection has ended (closing or closed).
    pub fn is_closed(&self) -> bool {
        self.state != State::Connected
    }

    /// Whether the endpoint may forget this connection.
    pub(crate) fn is_drained(&self) -> bool {
        self.state == State::Closed && self.events.is_empty()
    }

    /// The peer closed the connection.
    pub(crate) fn handle_disconnect(&mut self, reason: DisconnectReason) {
        if self.state == State::Connected {
            self.events.push_back(Queued(Event::Disconnected { reason }));
        }
        self.state = State::Closed;
    }

    /// The next thing the application should know.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front();
        if event.is_none() {
            // Told everything: the next events start the buffer again, on its first line,
            // rather than wherever the ring had come round to.
            self.events.clear();
        }
        event.map(|Queued(event)| event)
    }

    /// Gives back the payload of a message of `channel` once read, for the channel's next
    /// message (see [`Endpoint::recycle`](crate::Endpoint::recycle)).
    #[inline]
    pub fn recycle(&mut self, channel: u8, payload: Vec<u8>) {
        if let Some(receive) = self.receive.get_mut(usize::from(channel)) {
            receive.recycle(payload);
        }
    }

    /// Reliable units sent again so far ([`ConnectionStats::resends`]), without the copy and the
    /// per-channel figures [`Connection::stats`] builds: a host reads it for every connection
    /// at each report.
    pub fn resends(&self) -> u64 {
        self.stats.resends
    }

    /// The round-trip time, its deviation and the loss estimate, as [`Connection::stats`]
    /// gives them, without its copy of every counter and its per-channel `Vec`s: a host
    /// samples them from every connection once a second.
    pub fn quality(&self) -> Quality {
        Quality {
            rtt: self.rtt.smoothed_or(Duration::ZERO),
            rtt_variance: self.rtt.variance(),
            loss: self.stats.loss,
        }
    }

    /// Statistics and estimates.
    pub fn stats(&self) -> ConnectionStats {
        let mut stats = self.stats.clone();
        stats.rtt = self.rtt.smoothed_or(Duration::ZERO);
        stats.rtt_variance = self.rtt.variance();
        stats.rtt_min = self.rtt.min().unwrap_or_default();
        stats.send_queue = self.send.iter().map(SendChannel::pending).collect();
        stats.receive_bytes = self.receive.iter().map(ReceiveChannel::held_bytes).collect();
        stats
    }

    /// Takes a data packet: its acks, then its frames. `Err` means the peer broke the protocol
    /// and the connection was closed.
    pub(crate) fn handle_data(
        &mut self,
        now: Instant,
        header: DataHeader,
        frames: &[u8],
        size: usize,
    ) -> Result<(), DisconnectReason> {
        self.now = self.now.max(now);
        if self.state != State::Connected {
            // Closing or closed: the application was told; nothing more is delivered.
            return Ok(());
        }
        if !self.received.is_new(header.seq) {
            self.stats.duplicates_received += 1;
            return Ok(());
        }
        self.last_received = now;
        self.stats.packets_received += 1;
        self.stats.bytes_received += size as u64;
        if let Some(acks) = header.acks {
            self.handle_acks(now, &acks);
        }
        let mut deferred = false;
        let mut frames = Frames::new(frames, header.seq);
        while let Some(frame) = frames.next_inline() {
            let Ok(frame) = frame else {
                self.disconnect(DisconnectReason::PeerMisbehaved);
                return Err(DisconnectReason::PeerMisbehaved);
            };
            // A repair ack rides on acks and asks for none, or two repairing peers would
            // ack each other's acks forever. Nor does a repair: most fill no hole, and an ack
            // packet of its own is one more packet that may hold back the data behind it; one
            // that delivers a message owes the ack itself (`deliver_decoded`).
            let eliciting = !matches!(frame, Frame::RepairAck { .. } | Frame::Repair { .. });
            if eliciting && self.ack_owed_since.is_none() {
                self.ack_owed_since = Some(now);
            }
            deferred |= self.handle_frame(frame)?;
        }
        // A packet with a reliable piece refused for want of room goes unacked: the sender
        // declares it lost and resends its reliable contents, which are duplicates here except
        // for what was refused. Acking it would lose that piece for good.
        if deferred {
            self.stats.packets_deferred += 1;
        } else {
            self.received.record(header.seq, now);
        }
        debug_assert!(self.receive_bytes <= self.config.receive_bytes_max, "receive limit");
        Ok(())
    }

    /// Takes one frame; `Ok(true)` if it was a reliable piece refused for want of room.
    fn handle_frame(&mut self, frame: Frame<'_>) -> Result<bool, DisconnectReason> {
        let (channel, seq, index, count, payload) = match frame {
            // A ping asks for its ack at once (a tail-loss probe waits on it).
            Frame::Ping => {
                self.ack_now = true;
                return Ok(false);
            }
            Frame::Message { channel, seq, payload } => (channel, seq, 0, 1, payload),
            Frame::Fragment { channel, seq, index, count, payload } => {
                (channel, seq, index, count, payload)
            }
            Frame::Repair { channel, start, count, seed, data } => {
                let repair = crate::repair::Incoming { start, count, seed, data };
                self.handle_repair(channel, repair);
                return Ok(false);
            }
            Frame::RepairAck { channel, next, shortfall } => {
                self.handle_repair_ack(channel, next, shortfall);
                return Ok(false);
            }
        };
        self.last_channel = channel;
        let too_big = payload.len() > self.piece_size() && count > 1;
        let Some(receive) = self.receive.get_mut(usize::from(channel)).filter(|_| !too_big) else {
            self.disconnect(DisconnectReason::PeerMisbehaved);
            return Err(DisconnectReason::PeerMisbehaved);
        };
        let ahead = receive.is_ahead(seq);
        let reliable = !receive.is_evictable();
        let mut received = self.receive_piece(channel, (seq, index, count), payload);
        if received == Received::NoRoom && self.evict_unreliable() {
            received = self.receive_piece(channel, (seq, index, count), payload);
        }
        self.ack_now |= ahead && matches!(received, Received::Deliver | Received::Held);
        if count == 1 && matches!(received, Received::Deliver | Received::Held) {
            // From the frame's bytes: the message's event holds a copy of its own.
            self.learn(usize::from(channel), seq, payload);
        }
        match received {
            Received::Refused => self.stats.frames_refused += 1,
            Received::NoRoom => {
                self.stats.frames_deferred += 1;
                return Ok(reliable);
            }
            Received::Oversized => {
                // The peer shares this configuration, so it never announces a message larger
                // than `message_bytes_max`: this one is out to make the server hold memory.
                self.disconnect(DisconnectReason::PeerMisbehaved);
                return Err(DisconnectReason::PeerMisbehaved);
            }
            Received::Deliver | Received::Held | Received::Duplicate => {}
        }
        Ok(false)
    }

    /// Hands a piece to its channel with the room the receive limit leaves, and keeps the
    /// connection's total in step with the channel's; the messages it delivers become events.
    fn receive_piece(&mut self, channel: u8, piece: (u16, u8, u8), payload: &[u8]) -> Received {
        let limit = self.config.receive_bytes_max;
        let head = limit.saturating_sub(self.receive_bytes);
        let room = Room { ahead: head.saturating_sub(self.head_reserve), head };
        let receive = &mut self.receive[usize::from(channel)];
        let before = receive.held_bytes();
        let mut ready = Ready { events: &mut self.events, channel };
        let received = receive.receive(piece, payload, room, &mut ready);
        self.receive_bytes = self.receive_bytes - before + receive.held_bytes();
        debug_assert!(self.receive_bytes <= limit, "{} held past {limit}", self.receive_bytes);
        received
    }

    /// Drops every unreliable assembly to make room for a piece that did not fit; returns
    /// whether anything was freed. Unreliable messages may be lost by definition, and an
    /// assembly missing a lost piece would otherwise hold its room until evicted by newer ones.
    fn evict_unreliable(&mut self) -> bool {
        let mut freed = 0;
        for receive in self.receive.iter_mut().filter(|r| r.is_evictable()) {
            loop {
                let bytes = receive.evict_oldest();
                if bytes == 0 {
                    break;
                }
                freed += bytes;
                self.stats.assemblies_evicted += 1;
            }
        }
        self.receive_bytes -= freed;
        freed > 0
    }

    /// Applies the acks of a received packet: acked packets free their units and give an RTT
    /// sample; packets in flight sent before the newest acked one are lost.
    fn handle_acks(&mut self, now: Instant, acks: &Acks) {
        let ack_delay = Duration::from_micros(u64::from(acks.delay) * 8);
        // Bit `i` names packet `ack - 1 - i`; only those that may still be in flight are
        // looked at, in that order (a steady flow's acks repeat 32 packets acked long ago).
        let mut bits = self.sent.bits_maybe_in_flight(acks.ack, acks.bits);
        let named = std::iter::from_fn(move || {
            let i = (bits != 0).then(|| bits.trailing_zeros() as u16)?;
            bits &= bits - 1;
            Some(acks.ack.wrapping_sub(1 + i))
        });
        let acked = std::iter::once(acks.ack).chain(named);
        for seq in acked {
            let Some(packet) = self.sent.take_in_flight(seq, true) else { continue };
            let (sent_at, delivered_before) = (packet.sent_at, packet.delivered_at_send);
            let carried = packet.ack;
            if let Some(units) = self.sent.take_units(seq) {
                for (channel, message, index) in units {
                    self.send[usize::from(channel)].ack(message, index);
                }
            }
            self.record_fate(false);
            if seq == acks.ack {
                self.rtt.update(now - sent_at, ack_delay);
            }
            self.sample_rate(now - sent_at, self.sent.delivered - delivered_before);
            if self.sent.newest_acked.is_none_or(|n| seq16_newer(seq, n)) {
                self.sent.newest_acked = Some(seq);
                // The acks in the newest packet of ours the peer has are the most it knows.
                self.sent.peer_acks_known = carried.or(self.sent.peer_acks_known);
            }
        }
        self.update_window();
        self.detect_losses();
    }

    fn detect_losses(&mut self) {
        let Some(newest) = self.sent.newest_acked else { return };
        let mut lost = std::mem::take(&mut self.lost);
        self.sent.in_flight_before(newest, &mut lost);
        if lost.is_empty() {
            // The steady flow's case, every ack of every packet: nothing sent before the newest
            // acked is still out, and nothing to judge.
            self.lost = lost;
            return;
        }
        let newest_sent_at = self.sent.slot(newest).sent_at;
        // A path that reorders can deliver a packet a little after a later one; wait this long
        // past the later one's send time before calling it lost.
        let reorder_window = (self.rtt.variance() / 4).max(Duration::from_millis(1));
        lost.retain(|seq| {
            let slot_sent_at = self.sent.slot(*seq).sent_at;
            newest_sent_at - slot_sent_at >= reorder_window || newest.wrapping_sub(*seq) >= 3
        });
        self.note_loss_runs(&lost);
        for &seq in &lost {
            if self.sent.take_in_flight(seq, false).is_none() {
                continue;
            }
            if let Some(units) = self.sent.take_units(seq) {
                for (channel, message, index) in units {
                    self.send[usize::from(channel)].lose(message, index);
                }
            }
            self.stats.packets_lost += 1;
            self.record_fate(true);
        }
        lost.clear();
        self.lost = lost;
    }

    /// Feeds a packet's fate (acked or declared lost) to the loss estimates, and switches
    /// adaptive redundancy on above its threshold and off below half of it: without the margin
    /// a path near the threshold would flip copies on and off with every loss.
    fn record_fate(&mut self, lost: bool) {
        let sample = if lost { 1.0 } else { 0.0 };
        self.stats.loss += (sample - self.stats.loss) * LOSS_GAIN;
        self.redundancy_loss += (sample - self.redundancy_loss) * REDUNDANCY_GAIN;
        if let Redundancy::Adaptive { loss_threshold, .. } = self.config.redundancy {
            if self.redundancy_loss > loss_threshold {
                self.copying = true;
            } else if self.redundancy_loss < loss_threshold / 2.0 {
                self.copying = false;
            }
        }
        if let Some((loss_threshold, _)) = self.repair_settings() {
            if self.redundancy_loss > loss_threshold {
                self.repairing = true;
            } else if self.redundancy_loss < loss_threshold / 2.0 {
                self.repairing = false;
            }
        }
    }

    /// Closes the connection if the peer has been silent for the idle timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.state == State::Connected
            && now.saturating_nanos_since(self.last_received) >= self.config.idle_timeout
        {
            self.disconnect(DisconnectReason::TimedOut);
        }
    }

    /// When [`Connection::handle_timeout`] or the endpoint's `poll_transmit` next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Closed => return None,
            State::Closing { .. } => return Some(self.last_sent),
            State::Connected => {}
        }
        let mut next = self.last_received + self.config.idle_timeout;
        next = next.min(self.last_sent + self.config.keepalive_interval);
        if let Some(owed) = self.ack_owed_since {
            next = next.min(owed + self.config.ack_delay_max);
        }
        if self.prompted || self.ack_now {
            return Some(self.last_sent.min(next));
        }
        if let Some(probe) = self.probe_at {
            next = next.min(probe);
        }
        if let Some(at) = self.repair_timeout() {
            next = next.min(at);
        }
        // Most calls find no channel queued (unreliable units go when sent): they leave before
        // the walk, whose setup the compiler hoists out of the loop (the unit fields' and the
        // gate's loads, about 25 instructions a call, after each packet and at each settle).
        if self.queued.is_empty() {
            return Some(next);
        }
        // The gates weigh the window and the RTT: worked out only once a channel holds units.
        let mut all = None;
        for c in self.queued.iter(self.send.len()) {
            let channel = &self.send[c];
            if channel.units.is_empty() {
                continue;
            }
            let gate = self.channel_gate(c, *all.get_or_insert_with(|| self.gate()));
            for unit in channel.units.iter().filter(|u| !u.acked) {
                let due = match unit.last_sent() {
                    None if gate.open => return Some(self.last_sent.min(next)),
                    None => continue,
                    Some(_) if unit.lost && !gate.covers(unit) => {
                        return Some(self.last_sent.min(next))
                    }
                    Some(_) if unit.round_sends < gate.copies && !gate.open => continue,
                    Some(at) if channel.config.kind.is_reliable() => {
                        at + self.next_send_gap(unit, gate)
                    }
                    Some(_) => continue,
                };
                next = next.min(due);
            }
        }
        Some(next)
    }

    /// The resend timer of a unit sent `sends` times: RTT plus four deviations, backed off by
    /// 1.5x per resend, within the configured bounds, and never shorter than the smoothed RTT
    /// itself: when queues build up the RTT grows past `resend_interval_max`, and resending
    /// before an ack could possibly arrive would only fill the queue with copies.
    fn resend_interval(&self, sends: u8) -> Duration {
        let rtt = self.rtt.smoothed_or(INITIAL_RTT);
        // The peer may hold its ack this long, hoping to send it with data.
        let base = rtt + self.rtt.variance() * 4 + self.config.ack_delay_max.get();
        let backoff = 1.5f64.powi(i32::from(sends.saturating_sub(1)).min(16));
        let bounded = base
            .mul_f64(backoff)
            .clamp(self.config.resend_interval_min.get(), self.config.resend_interval_max.get());
        bounded.max(rtt.mul_f64(1.25))
    }

    /// Whether the RTT shows a standing queue on the path: the smoothed RTT sits far above the
    /// minimum, further than jitter (four mean deviations) explains. Losses then come from the
    /// queue overflowing, and copies would only make it worse.
    fn queueing(&self) -> bool {
        let Some(min) = self.rtt.min() else { return false };
        let jitter = self.rtt.variance() * 4 + Duration::from_millis(20);
        self.rtt.smoothed_or(min) > min + jitter
    }

    /// Adds a delivery-rate sample: bytes acknowledged between a packet's send and its ack,
    /// over that time.
    fn sample_rate(&mut self, elapsed: Duration, bytes: u64) {
        if elapsed.is_zero() || bytes == 0 {
            return;
        }
        let rate = bytes as f64 / elapsed.as_secs_f64();
        let old = std::mem::replace(&mut self.rate_samples[self.rate_next % RATE_SAMPLES], rate);
        self.rate_next += 1;
        if rate >= self.rate_max {
            self.rate_max = rate;
        } else if old >= self.rate_max {
            // The largest sample left the ring: scan for the next (rare on a steady path).
            self.rate_max = self.rate_samples.iter().copied().fold(0.0, f64::max);
        }
    }

    /// Recomputes the bytes that may be in flight: twice what the path delivered per round
    /// trip at its best recent rate (a bandwidth-delay product), never below a floor, so that a
    /// sender faster than the path fills its own queue, where `send_delay_max` sheds it, rather
    /// than the path's, where it would only add delay. The round trip is the recent minimum: a
    /// low draw from a jittery spell long past would size the window below what the path now
    /// needs in flight, and a window-limited sender's rate samples would shrink it further.
    fn update_window(&mut self) {
        let rate = self.rate_max;
        let Some(min_rtt) = self.rtt.recent_min().filter(|_| rate > 0.0) else {
            self.window_bytes = WINDOW_INITIAL;
            return;
        };
        let bdp = rate * min_rtt.as_secs_f64();
        self.window_bytes = ((2.0 * bdp) as usize).max(WINDOW_MIN);
    }

    /// Whether new data and copies may go out now.
    fn window_open(&self) -> bool {
        self.sent.bytes_in_flight < self.window_bytes
    }

    /// Copies a reliable unit may have before its first ack could arrive.
    fn copies(&self) -> u8 {
        match self.config.redundancy {
            Redundancy::Off => 1,
            Redundancy::Always(copies) => copies.max(1),
            Redundancy::Adaptive { copies, .. } => {
                if self.copying && !self.queueing() {
                    copies.max(1)
                } else {
                    1
                }
            }
        }
    }

    /// Writes the next datagram into `buf` if one is due, and returns its length.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        observer: &mut Observer,
    ) -> Option<usize> {
        self.now = self.now.max(now);
        if self.keys.as_ref().is_some_and(PacketKeys::worn_out) {
            // The send key has sealed what it safely can (crypto.rs): close while the packets
            // kept aside for the disconnects remain.
            self.disconnect(DisconnectReason::Closed);
        }
        match self.state {
            State::Closed => return None,
            State::Closing { reason, left } => {
                return self.transmit_disconnect(now, reason, left, buf)
            }
            State::Connected => {}
        }
        // The window and the copies stay as they are until the packet is recorded: worked out
        // once for it, not in each pass over the queues.
        let gate = self.gate();
        let urgent = self.has_urgent(now, gate);
        let ack_due = self.ack_owed_since.is_some_and(|at| now >= at + self.config.ack_delay_max);
        let keepalive_due = now >= self.last_sent + self.config.keepalive_interval;
        let probe_due = self.probe_at.is_some_and(|at| now >= at);
        let ack_due = ack_due || self.ack_now;
        // Messages first: a repair goes in a packet of its own, after them.
        let repair = if urgent { None } else { self.repair_due(now) };
        if !(urgent || ack_due || keepalive_due || self.prompted || probe_due || repair.is_some()) {
            return None;
        }
        self.prompted = false;
        self.prefetch_packet();
        // A sealed packet keeps room for its tag within the MTU.
        let tag = self.keys.as_ref().map_or(0, PacketKeys::tag_len);
        let size = self.config.mtu.min(buf.len());
        observer.enter(Stage::Encode);
        let room = &mut buf[..size.saturating_sub(tag)];
        let written = match repair {
            Some(c) => self.write_repair_packet(now, room, c),
            None => self.write_packet(now, room, probe_due, gate),
        };
        observer.exit(Stage::Encode);
        let (header_len, mut len, unreliable) = written?;
        if let Some(keys) = &mut self.keys {
            // The room for the tag was kept aside above, so sealing cannot fail.
            let sealed =
                observer.scope(Stage::Encrypt, || keys.seal(&mut buf[..size], header_len, len));
            len = sealed?;
        }
        // Two fields of the connection, borrowed apart: no take and put back of the vector.
        let seq = self.sent.record(now, len, &mut self.units);
        self.sent.slot(seq).ack = self.header_ack.take();
        // Unreliable units are sent once, then forgotten: only the channels this packet
        // took units from can hold any (a packet went through every channel before, most of
        // them empty).
        for c in unreliable.iter(self.send.len()) {
            if !self.send[c].config.kind.is_reliable() {
                self.send[c].forget_sent();
            }
        }
        self.forget_empty_queues();
        self.last_sent = now;
        self.ack_owed_since = None;
        self.ack_now = false;
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        Some(len)
    }

    /// Writes a data packet's header and frames into `buf`, with `gate` the connection's
    /// [`Connection::gate`] as the packet starts; returns the header's length, the packet's,
    /// and the unreliable channels it took units from.
    fn write_packet(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        probe_due: bool,
        gate: Gate,
    ) -> Option<(usize, usize, ChannelSet)> {
        let header = self.data_header(now);
        debug_assert!(self.keys.as_ref().is_none_or(|k| k.next_seq() == header.seq));
        let mut w = Writer::new(buf);
        write_data_header(&mut w, &header).ok()?;
        let header_len = w.len();
        self.write_repair_acks(&mut w);
        let due = self.fill(now, &mut w, gate, false);
        // A copy goes only below `copies` sends a round, and no channel's gate has more copies
        // than `gate`: without redundancy the second pass has nothing to write.
        let copies =
            if gate.copies > 1 { self.fill(now, &mut w, gate, true) } else { Filled::default() };
        if probe_due {
            self.probe_at = None;
            // A header-only packet already elicits nothing; the ping makes the peer ack it.
            let _ = write_ping(&mut w);
        }
        // A message frame that ended up last needs no length.
        w.finish();
        if due.fresh_reliable {
            // New reliable data reveals a lost predecessor by itself: the peer acks at once
            // when a message arrives ahead of a missing one.
            self.probe_at = None;
        }
        if (due.last_copy || copies.last_copy) && self.config.tail_probe {
            // Late enough that a steady sender's next message, not the probe, reveals the
            // loss (a probe elicits an ack of its own, one more packet on the path).
            let wait = self.config.repeat_interval.get().max(self.rtt.smoothed_or(INITIAL_RTT) / 2);
            self.probe_at = Some(now + wait);
        }
        Some((header_len, w.len(), due.unreliable))
    }

    /// The header of the next data packet: its sequence and the acks. The ack bits above 15
    /// are cleared (so that the short header carries them) when the peer knows them already:
    /// it acknowledged a packet of ours whose own ack was at most 16 below this one, and so
    /// learned the fate of every packet up to that ack then.
    fn data_header(&mut self, now: Instant) -> DataHeader {
        let mut acks = self.received.ack_fields(now);
        if let (Some(acks), Some(known)) = (acks.as_mut(), self.sent.peer_acks_known) {
            if acks.ack.wrapping_sub(known) <= 16 {
                acks.bits &= 0xFFFF;
            }
        }
        self.header_ack = acks.map(|a| a.ack);
        let seq = self.sent.next_seq;
        // The peer restores a narrow sequence from the largest number it authenticated, at
        // least the newest packet of ours it acknowledged: within half the 8-bit span of this
        // one, the sequence restores right on arrival. Only a sealed packet may be narrow.
        let near = |acked: u16| seq.wrapping_sub(acked) < NARROW_SEQ_AHEAD_MAX;
        let narrow = self.keys.is_some() && self.sent.newest_acked.is_some_and(near);
        DataHeader { seq, narrow, acks }
    }

    /// Takes the channels found empty out of `queued`.
    fn forget_empty_queues(&mut self) {
        // The bits below 64 (`iter` of an empty range above them): each one's own.
        for c in self.queued.iter(0) {
            if self.send[c].units.is_empty() {
                self.queued.low &= !(1 << c);
            }
        }
        if self.queued.high {
            self.queued.high = self.send.iter().skip(64).any(|s| !s.units.is_empty());
        }
    }

    /// Whether any unit must go out now: never sent, lost, or past its resend time.
    fn has_urgent(&self, now: Instant, gate: Gate) -> bool {
        self.queued.iter(self.send.len()).any(|c| {
            let channel = &self.send[c];
            let reliable = channel.config.kind.is_reliable();
            let gate = self.channel_gate(c, gate);
            channel.units.iter().any(|u| self.is_due(u, reliable, now, gate))
        })
    }

    /// The window and the copies, once for a pass over the queues (a long queue would
    /// otherwise recompute them per unit).
    fn gate(&self) -> Gate {
        Gate { open: self.window_open(), copies: self.copies(), repaired: false }
    }

    fn is_due(
        &self,
        unit: &crate::channel::Unit,
        reliable: bool,
        now: Instant,
        gate: Gate,
    ) -> bool {
        match unit.last_sent() {
            _ if unit.acked => false,
            // New data waits while the window is full; acks reopen it.
            None => gate.open,
            Some(_) if unit.lost && !gate.covers(unit) => true,
            Some(_) if reliable && unit.round_sends < gate.copies && !gate.open => false,
            Some(at) => reliable && now >= at + self.next_send_gap(unit, gate),
        }
    }

    /// How long after its last send an unacknowledged unit goes out again: soon, as a copy,
    /// while redundancy calls for more copies; otherwise when its resend timer expires, or
    /// sooner for a message the repairs cover once a packet of it was declared lost.
    /// In nanoseconds, as the copy gap is kept: a `Duration` here was built from it and taken
    /// apart again for the sum with a unit's send time, on every pass over a queue.
    fn next_send_gap(&self, unit: &crate::channel::Unit, gate: Gate) -> Nanos {
        if unit.round_sends < gate.copies && !gate.covers(unit) {
            self.config.repeat_interval
        } else if unit.lost {
            // Declared lost under repairs: the repairs had their chance by now.
            Nanos::new(self.resend_interval(unit.sends).mul_f64(COVERED_LOST_RESEND))
        } else {
            Nanos::new(self.resend_interval(unit.sends))
        }
    }

    /// Adds units to the packet, channels by priority: first those that are due, then (with
    /// `redundant`) unacknowledged reliable units that may ride again.
    /// `all` is the connection's gate ([`Connection::gate`]).
    fn fill(&mut self, now: Instant, w: &mut Writer<'_>, all: Gate, redundant: bool) -> Filled {
        let mut filled = Filled::default();
        // One channel queued needs no order: the order's own line (a heap allocation) is one
        // more miss a packet when the connection's lines went cold since its last tick.
        let only = self.queued.only();
        let passes = if only.is_some() { 1 } else { self.channel_order.len() };
        for k in 0..passes {
            let c = only.unwrap_or_else(|| self.channel_order[k]);
            if !self.queued.contains(c) || self.send[c].units.is_empty() {
                continue;
            }
            let gate = self.channel_gate(c, all);
            let coded = self.is_coded(c);
            let copies = gate.copies;
            let reliable = self.send[c].config.kind.is_reliable();
            for u in 0..self.send[c].units.len() {
                let unit = &self.send[c].units[u];
                let wanted = if redundant {
                    reliable
                        && !unit.acked
                        && unit.round_sends > 0
                        && unit.round_sends < copies
                        && unit.last_sent() != Some(now)
                } else {
                    self.is_due(unit, reliable, now, gate)
                };
                if !wanted {
                    continue;
                }
                let size = if unit.count == 1 {
                    message_frame_size(unit.len())
                } else {
                    fragment_frame_size(unit.payload.len())
                };
                if size > w.remaining() {
                    continue;
                }
                let written = if unit.count == 1 {
                    write_message(w, c as u8, unit.seq, [&unit.payload, unit.body()])
                } else {
                    write_fragment(w, (c as u8, unit.seq, unit.index, unit.count), &unit.payload)
                };
                if written.is_err() {
                    continue;
                }
                let unit = &mut self.send[c].units[u];
                if unit.sends > 0 {
                    self.stats.resends += 1;
                }
                unit.sends = unit.sends.saturating_add(1);
                unit.round_sends = unit.round_sends.saturating_add(1);
                unit.sent_at = now;
                unit.lost = false;
                if !reliable {
                    filled.unreliable.insert(c);
                }
                if reliable {
                    filled.last_copy |= copies > 1 && unit.round_sends == copies;
                    filled.fresh_reliable |= unit.sends == 1;
                    self.units.push((c as u8, unit.seq, unit.index));
                    if unit.sends == 1 && coded {
                        let len = unit.len();
                        self.on_fresh_coded(c, now, len);
                    }
                }
            }
        }
        filled
    }

    fn transmit_disconnect(
        &mut self,
        now: Instant,
        reason: DisconnectReason,
        left: u8,
        buf: &mut [u8],
    ) -> Option<usize> {
        if left == 0 {
            self.state = State::Closed;
            return None;
        }
        self.state = State::Closing { reason, left: left - 1 };
        self.last_sent = now;
        let Some(keys) = &mut self.keys else {
            return crate::packet::Packet::Disconnect { reason }.encode(buf).ok();
        };
        // Sealed, so that only this end can close the connection.
        let header = sealed_disconnect_header(reason, keys.next_seq());
        let packet = buf.get_mut(..header.len() + TAG_SIZE)?;
        packet[..header.len()].copy_from_slice(&header);
        keys.seal_full(packet, header.len(), header.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ChannelConfig, ChannelKind};
    use std::time::Duration;

    fn config() -> ConnectionConfig {
        ConnectionConfig::default()
    }

    /// Frames encoded one after another, as a packet's payload.
    fn frames(list: &[Frame<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for frame in list {
            let mut buf = vec![0u8; 70_000];
            let len = frame.encode(&mut buf).unwrap();
            out.extend_from_slice(&buf[..len]);
        }
        out
    }

    /// `prefetch_receive` names one field on each hot line: a field moved to another line, or
    /// a hot line grown past the ninth, leaves a line the hint no longer asks for.
    #[test]
    fn hot_lines_are_prefetched() {
        use std::mem::offset_of;
        let asked = [
            offset_of!(Connection, now),
            offset_of!(Connection, sent),
            offset_of!(Connection, window_bytes),
            offset_of!(Connection, queued),
            offset_of!(Connection, events),
            offset_of!(Connection, rtt),
            offset_of!(Connection, state),
            offset_of!(Connection, config) + offset_of!(HotConfig, resend_interval_min),
            offset_of!(Connection, stats),
        ];
        let lines: Vec<usize> = asked.iter().map(|at| at / 64).collect();
        assert_eq!(lines, (0..9).collect::<Vec<_>>(), "fields at {asked:?}");
        // The hot fields end on line 8: the statistics' per-packet counters lead their struct.
        let counters_end = offset_of!(Connection, stats)
            + offset_of!(ConnectionStats, bytes_received)
            + std::mem::size_of::<u64>();
        assert!(counters_end <= 9 * 64, "the per-packet counters end at {counters_end}");
    }

    fn take(
        connection: &mut Connection,
        seq: u16,
        list: &[Frame<'_>],
    ) -> Result<(), DisconnectReason> {
        let header = DataHeader { seq, narrow: false, acks: None };
        let payload = frames(list);
        connection.handle_data(Instant::ZERO, header, &payload, payload.len())
    }

    fn acked(connection: &Connection, seq: u16) -> bool {
        let Some(acks) = connection.received.ack_fields(Instant::ZERO) else { return false };
        let back = acks.ack.wrapping_sub(seq);
        back == 0 || (1..=32).contains(&back) && acks.bits & (1 << (back - 1)) != 0
    }

    /// Goal: the window is sized from the largest rate sample still in the ring, whether the
    /// samples rise, fall or the largest leaves the ring (the kept maximum against a scan).
    #[test]
    fn the_window_follows_the_largest_rate_sample_in_the_ring() {
        let mut connection = Connection::new(config(), Instant::ZERO);
        let mut state = 7u64;
        for i in 0..400u64 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Rising, then falling, then noisy rates: the largest leaves the ring often.
            let bytes = match i {
                0..=99 => 1000 + i * 10,
                100..=199 => 3000 - (i - 100) * 10,
                _ => 500 + (state >> 54),
            };
            connection.sample_rate(Duration::from_millis(10), bytes);
            let scanned = connection.rate_samples.iter().copied().fold(0.0, f64::max);
            assert_eq!(connection.rate_max, scanned, "sample {i}");
        }
    }

    /// Goal: a connection whose send key has sealed nearly `PACKETS_PER_KEY_MAX` packets
    /// closes itself, and the packets kept aside are enough for its sealed disconnects.
    /// Method: keys whose numbering starts at the worn-out mark; poll until quiet.
    #[test]
    fn a_worn_out_key_closes_the_connection() {
        let mut connection = Connection::new(config(), Instant::ZERO);
        let mut keys = PacketKeys::new(&[1; 32], &[2; 32]);
        keys.danger_number_from(crate::crypto::PACKETS_PER_KEY_MAX - 16);
        connection.set_keys(keys);
        let mut buf = [0u8; 1500];
        let mut observer = Observer::default();
        let mut sealed = Vec::new();
        while let Some(len) = connection.poll_transmit(Instant::ZERO, &mut buf, &mut observer) {
            sealed.push(buf[..len].to_vec());
        }
        assert!(connection.is_closed());
        assert_eq!(sealed.len(), usize::from(DISCONNECT_COPIES));
        assert!(sealed.iter().all(|p| p[0] == 0x16), "sealed disconnects");
        let reason = DisconnectReason::Closed;
        let events: Vec<Event> = std::iter::from_fn(|| connection.poll_event()).collect();
        assert!(events.contains(&Event::Disconnected { reason }), "{events:?}");
    }

    /// Goal: with redundancy on, a packet going out anyway carries a copy of a reliable
    /// message sent before it (before `repeat_interval`, and before an ack could come);
    /// without it, the packet carries only its own. Method: a reliable message, then an
    /// unreliable one 1 ms later; the frames of the second packet, with and without copies.
    #[test]
    fn a_later_packet_carries_a_copy_of_a_reliable_message_only_with_redundancy() {
        for (redundancy, expected) in [
            (Redundancy::Always(2), vec![(1, &b"later"[..]), (0, b"first")]),
            (Redundancy::Off, vec![(1, b"later")]),
        ] {
            let config = ConnectionConfig { redundancy, ..config() };
            let mut connection = Connection::new(config, Instant::ZERO);
            let mut buf = [0u8; 1500];
            let mut observer = Observer::default();
            connection.send(0, b"first").unwrap();
            assert!(connection.poll_transmit(Instant::ZERO, &mut buf, &mut observer).is_some());
            let later = Instant::ZERO + Duration::from_millis(1);
            connection.send(1, b"later").unwrap();
            let len = connection.poll_transmit(later, &mut buf, &mut observer).unwrap();
            let Ok(crate::packet::Packet::Data { frames, .. }) =
                crate::packet::Packet::decode(&buf[..len])
            else {
                panic!("a data packet");
            };
            let mut carried: Vec<(u8, &[u8])> = Vec::new();
            for frame in Frames::new(frames, 1) {
                if let Ok(Frame::Message { channel, payload, .. }) = frame {
                    carried.push((channel, payload));
                }
            }
            assert_eq!(carried, expected, "{redundancy:?}");
        }
    }

    /// Goal: a reliable message left unacknowledged keeps its connection's deadline and is
    /// resent, while an unreliable one sent beside it is gone: the send queues a packet looks
    /// at must still include the reliable one once the unreliable one is done with. Method:
    /// one of each in a packet, no acks; the deadline, then the packet at that deadline.
    #[test]
    fn an_unacknowledged_message_keeps_its_timer_after_an_unreliable_one_went() {
        // Keepalives later than the first resend timer (about 125 ms before an RTT sample).
        let config = ConnectionConfig { keepalive_interval: Duration::from_secs(1), ..config() };
        let mut connection = Connection::new(config.clone(), Instant::ZERO);
        let (mut buf, mut observer) = ([0u8; 1500], Observer::default());
        connection.send(1, b"once").unwrap();
        connection.send(0, b"until acked").unwrap();
        assert!(connection.poll_transmit(Instant::ZERO, &mut buf, &mut observer).is_some());
        assert!(connection.poll_transmit(Instant::ZERO, &mut buf, &mut observer).is_none());
        let resend = connection.poll_timeout().expect("a deadline");
        assert!(resend < Instant::ZERO + config.keepalive_interval, "the resend timer's");
        let len = connection.poll_transmit(resend, &mut buf, &mut observer).expect("a resend");
        let Ok(crate::packet::Packet::Data { frames, .. }) =
            crate::packet::Packet::decode(&buf[..len])
        else {
            panic!("a data packet");
        };
        let carried: Vec<(u8, &[u8])> = Frames::new(frames, 1)
            .filter_map(|frame| match frame {
                Ok(Frame::Message { channel, payload, .. }) => Some((channel, payload)),
                _ => None,
            })
            .collect();
        assert_eq!(carried, [(0, &b"until acked"[..])]);
        assert_eq!(connection.resends(), 1);
    }

    /// Goal: a fragment announcing more than `message_bytes_max`, or pieces adding up to more
    /// than their count allows, close the connection as misbehaved. Method: each sent to a
    /// fresh connection; the result, the state and the event.
    #[test]
    fn oversized_announcements_close_the_connection() {
        let piece = vec![0u8; config().piece_bytes()];
        let count = config().message_bytes_max.div_ceil(piece.len()) as u8;
        let too_many =
            Frame::Fragment { channel: 0, seq: 0, index: 0, count: count + 1, payload: &piece };
        let whole = vec![0u8; config().message_bytes_max + 1];
        let too_big = Frame::Message { channel: 1, seq: 0, payload: &whole };
        for frame in [too_many, too_big] {
            let mut connection = Connection::new(config(), Instant::ZERO);
            assert_eq!(take(&mut connection, 0, &[frame]), Err(DisconnectReason::PeerMisbehaved));
            assert!(connection.is_closed());
            assert_eq!(connection.receive_bytes(), 0);
        }
        let mut connection = Connection::new(config(), Instant::ZERO);
        let fits = Frame::Fragment { channel: 0, seq: 0, index: 0, count, payload: &piece };
        assert_eq!(take(&mut connection, 0, &[fits]), Ok(()));
        assert!(connection.receive_bytes() > config().message_bytes_max, "reserved in full");
        // Full pieces of the largest count add up past `message_bytes_max`: the last one that
        // would cross it closes the connection.
        let full = |index| Frame::Fragment { channel: 0, seq: 0, index, count, payload: &piece };
        let results: Vec<_> =
            (1..count).map(|i| take(&mut connection, u16::from(i), &[full(i)])).collect();
        assert_eq!(results.last(), Some(&Err(DisconnectReason::PeerMisbehaved)));
        assert!(results[..results.len() - 1].iter().all(Result::is_ok));
    }

    /// Goal: a reliable piece refused for want of room leaves its packet unacked (so the
    /// sender resends it), while an accepted one is acked; the limit is never exceeded.
    /// Method: the least valid receive limit, message 0 withheld, then largest messages
    /// 1, 2, ... each in one packet of its first piece, until one is refused.
    #[test]
    fn a_piece_refused_for_room_is_not_acked() {
        let least = config().head_reserve_bytes() + config().message_cost_max();
        let limited = ConnectionConfig { receive_bytes_max: least, ..config() };
        let mut connection = Connection::new(limited.clone(), Instant::ZERO);
        let piece = vec![0u8; limited.piece_bytes()];
        let count = limited.message_bytes_max.div_ceil(piece.len()) as u8;
        let fragment = |seq| Frame::Fragment { channel: 0, seq, index: 1, count, payload: &piece };
        assert_eq!(take(&mut connection, 0, &[fragment(1)]), Ok(()));
        assert!(acked(&connection, 0), "the first message ahead fits");
        assert_eq!(take(&mut connection, 1, &[fragment(2)]), Ok(()));
        assert!(!acked(&connection, 1), "the second does not: its packet goes unacked");
        let stats = connection.stats();
        assert_eq!((stats.frames_deferred, stats.packets_deferred), (1, 1));
        assert!(connection.receive_bytes() <= least);
        // The next message in order always finds room: the ordered channel's reserve.
        assert_eq!(take(&mut connection, 2, &[fragment(0)]), Ok(()));
        assert!(acked(&connection, 2));
        assert!(connection.receive_bytes() <= least);
    }

    /// Goal: unreliable assemblies make way for reliable pieces instead of starving them.
    /// Method: fill the room with incomplete unreliable messages, then send a reliable piece.
    #[test]
    fn unreliable_assemblies_make_way_for_reliable_ones() {
        let channels = vec![
            ChannelConfig { kind: ChannelKind::ReliableUnordered, priority: 0 },
            ChannelConfig { kind: ChannelKind::Unreliable, priority: 0 },
        ];
        let least = ConnectionConfig { channels: channels.clone(), ..config() }.message_cost_max();
        let limited = ConnectionConfig { channels, receive_bytes_max: least, ..config() };
        let mut connection = Connection::new(limited.clone(), Instant::ZERO);
        let piece = vec![0u8; limited.piece_bytes()];
        let count = limited.message_bytes_max.div_ceil(piece.len()) as u8;
        let frame =
            |channel, seq| Frame::Fragment { channel, seq, index: 1, count, payload: &piece };
        assert_eq!(take(&mut connection, 0, &[frame(1, 0)]), Ok(()));
        assert!(connection.receive_bytes() > 0);
        assert_eq!(take(&mut connection, 1, &[frame(0, 0)]), Ok(()));
        assert!(acked(&connection, 1), "the reliable piece got the room");
        assert_eq!(connection.stats().assemblies_evicted, 1);
        assert_eq!(connection.stats().receive_bytes[1], 0);
    }

    /// Goal: `receive_window` bounds what a receive channel holds: an ordered message that far
    /// ahead, or one more assembly on an unordered channel, is refused and counted.
    /// Method: a window of 4; ordered message 4 (with 0 missing), then fragments of five
    /// different unordered messages.
    #[test]
    fn receive_window_refuses_what_lies_past_it() {
        let channels = vec![
            ChannelConfig { kind: ChannelKind::ReliableOrdered, priority: 0 },
            ChannelConfig { kind: ChannelKind::ReliableUnordered, priority: 0 },
        ];
        let windowed = ConnectionConfig { channels, receive_window: 4, ..config() };
        let mut connection = Connection::new(windowed, Instant::ZERO);
        let far = Frame::Message { channel: 0, seq: 4, payload: b"far" };
        assert_eq!(take(&mut connection, 0, &[far]), Ok(()));
        assert_eq!(connection.stats().frames_refused, 1);
        assert_eq!(connection.receive_bytes(), 0);
        let near = Frame::Message { channel: 0, seq: 3, payload: b"near" };
        assert_eq!(take(&mut connection, 1, &[near]), Ok(()));
        assert_eq!(connection.stats().frames_refused, 1, "inside the window: held");
        for seq in 0..5u16 {
            let piece = Frame::Fragment { channel: 1, seq, index: 0, count: 2, payload: b"p" };
            assert_eq!(take(&mut connection, 2 + seq, &[piece]), Ok(()));
        }
        assert_eq!(connection.stats().frames_refused, 2, "the fifth assembly");
    }

    /// Goal: a message sent in two parts (a head and a shared body) puts the same bytes on the
    /// wire as the joined message sent whole, whether its body stays shared (one piece), is
    /// copied after its head (more than a piece, or a channel whose repairs combine whole
    /// payloads), or the message rides behind another. Method: two connections alike, one
    /// sending parts and one the joined message; their packets compared.
    #[test]
    fn a_message_in_two_parts_goes_out_as_the_joined_message_would() {
        let repaired = ConnectionConfig {
            repair: Repair::Adaptive { loss_threshold: 0.0, interval: Duration::ZERO },
            ..config()
        };
        let big = vec![7u8; config().piece_bytes() + 100];
        let cases: [(&ConnectionConfig, u8, &[u8], &[u8]); 5] = [
            (&config(), 1, b"head", b"shared body"),
            (&config(), 1, b"", b"all body"),
            (&config(), 1, b"head", &big),
            (&repaired, 0, b"head", b"shared body"),
            (&config(), 0, b"head", b"after another"),
        ];
        for (k, (config, channel, head, body)) in cases.into_iter().enumerate() {
            let mut packets = Vec::new();
            for parts in [true, false] {
                let mut connection = Connection::new(config.clone(), Instant::ZERO);
                if k == 4 {
                    connection.send(1, b"before").unwrap();
                }
                if parts {
                    let mut head = head.to_vec();
                    connection
                        .send_parts(channel, &mut head, Some(Arc::new(body.to_vec())))
                        .unwrap();
                    assert!(head.is_empty());
                } else {
                    connection.send(channel, &[head, body].concat()).unwrap();
                }
                let (mut buf, mut observer) = ([0u8; 1500], Observer::default());
                let mut sent = Vec::new();
                while let Some(len) =
                    connection.poll_transmit(Instant::ZERO, &mut buf, &mut observer)
                {
                    sent.push(buf[..len].to_vec());
                }
                packets.push(sent);
            }
            assert!(!packets[0].is_empty(), "case {k}");
            assert_eq!(packets[0], packets[1], "case {k}");
        }
    }

    /// Goal: once the oldest unacknowledged message has waited `send_delay_max`, new messages
    /// are refused (latency stays bounded on a slow link). Method: one message, no acks, time
    /// past the limit, another message.
    #[test]
    fn sends_past_send_delay_max_are_refused() {
        let mut connection = Connection::new(config(), Instant::ZERO);
        assert_eq!(connection.send(0, b"first"), Ok(()));
        connection.handle_timeout(Instant::ZERO + config().send_delay_max);
        assert_eq!(connection.send(0, b"in time"), Ok(()));
        connection
            .handle_timeout(Instant::ZERO + config().send_delay_max + Duration::from_millis(1));
        assert_eq!(connection.send(0, b"late"), Err(SendError::QueueFull(0)));
    }
}
