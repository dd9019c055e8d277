//! Connection and endpoint configuration: every limit has a name and a default.

use crate::packet::{DATA_HEADER_SIZE, FRAGMENT_FRAME_OVERHEAD_MAX, TAG_SIZE};
use crate::time::Nanos;
use std::time::Duration;

/// The smallest MTU a connection accepts.
pub const MTU_MIN: usize = 200;
/// The largest MTU a connection accepts (a UDP payload fits 65,507 bytes).
pub const MTU_MAX: usize = 65_000;
// A fragment of the smallest MTU still carries payload after its header, frame and tag.
const _: () = assert!(MTU_MIN > DATA_HEADER_SIZE + FRAGMENT_FRAME_OVERHEAD_MAX + TAG_SIZE + 100);

/// How a channel delivers its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChannelKind {
    /// Sent once; may be lost, duplicated by the network or arrive out of order.
    Unreliable,
    /// Sent once; never delivers a message older than one already delivered.
    UnreliableSequenced,
    /// Resent until acknowledged; delivered exactly once, in sending order.
    ReliableOrdered,
    /// Resent until acknowledged; delivered exactly once, as soon as it arrives.
    ReliableUnordered,
}

impl ChannelKind {
    /// Whether messages are resent until acknowledged.
    pub fn is_reliable(self) -> bool {
        matches!(self, ChannelKind::ReliableOrdered | ChannelKind::ReliableUnordered)
    }
}

/// One channel: how it delivers and how it ranks against the others when a packet has room for
/// only some of what is waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Delivery guarantees.
    pub kind: ChannelKind,
    /// Higher goes first.
    pub priority: u8,
}

/// The limits and timers of one connection. Both ends should use the same channel list.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionConfig {
    /// The channels, by index (at most 255).
    pub channels: Vec<ChannelConfig>,
    /// The largest datagram sent, bytes.
    pub mtu: usize,
    /// The largest message accepted, bytes; larger ones are fragmented up to this size.
    pub message_bytes_max: usize,
    /// Messages waiting (unsent or unacknowledged) per channel at most; more is an error to
    /// the caller, never growth.
    pub send_queue_max: usize,
    /// The longest a channel's oldest unacknowledged message may wait before new messages are
    /// refused: on a link slower than the sender, latency stays bounded and the excess is
    /// refused (and counted by the caller) instead of queued.
    pub send_delay_max: Duration,
    /// Messages received ahead of a gap (reliable-ordered) or messages in reassembly, per
    /// channel, at most; the sender's window cannot exceed it.
    pub receive_window: usize,
    /// Bytes the connection holds for its peer at most, over all channels: messages in
    /// reassembly (each reserving what its announced piece count allows when its first piece
    /// arrives) and messages held behind a gap, bookkeeping included. Past it a reliable piece
    /// is refused without acking its packet, so that the sender resends it later (nothing is
    /// lost), and unreliable assemblies are dropped first. Each reliable-ordered channel keeps
    /// room for one largest message aside, for the next message it must deliver.
    pub receive_bytes_max: usize,
    /// Shortest time before an unacknowledged message is resent.
    pub resend_interval_min: Duration,
    /// Longest time before an unacknowledged message is resent: backoff stops here instead of
    /// doubling forever, because a game would rather pay bandwidth than seconds.
    pub resend_interval_max: Duration,
    /// How long an ack may wait for outgoing data to ride on before it is sent alone.
    pub ack_delay_max: Duration,
    /// A packet is sent at least this often, so that acks and RTT stay fresh.
    pub keepalive_interval: Duration,
    /// Silence after which the connection is closed as timed out.
    pub idle_timeout: Duration,
    /// Copies of each reliable message to send before its first ack can arrive, once the
    /// measured loss says copies are worth their bytes (see [`Redundancy`]).
    pub redundancy: Redundancy,
    /// How long after a send its copy follows, in a packet of its own. Short, because a loss
    /// repaired by the copy costs exactly this much latency.
    pub repeat_interval: Duration,
    /// After the last copy of a reliable message, send a ping (half a round trip later, unless
    /// new reliable data goes first) so that the peer's ack reveals a loss of every copy
    /// without waiting for the resend timer. Off by default: for a sender of steady messages
    /// the next message reveals such a loss anyway, and the probe and the ack it elicits cost
    /// more than they save (`rally bench transport --quick`, bernoulli-10: 1.18x with it, 1.155x
    /// without). Worth it for sparse reliable traffic on a lossy path.
    pub tail_probe: bool,
    /// Streaming repair of reliable-ordered channels ([`crate::repair`]) in place of copies.
    /// Both ends must share it: a peer without it closes the connection on the first repair.
    pub repair: Repair,
    /// Seal data packets with a 12-byte (96-bit) AES-GCM tag instead of 16 when both ends
    /// allow it: 4 bytes off every packet of a sealed connection. A client with it proposes
    /// short tags in its handshake; a server with it accepts a proposal, one without it (or an
    /// older one) keeps 16, so neither end can be forced into them. Handshake packets and
    /// sealed disconnects keep 16 bytes. A forgery then succeeds with probability about 2^-91
    /// per attempt on a 400-byte packet (2^-123 with 16 bytes), and every failed one is a
    /// counted drop (`EndpointStats::unauthenticated`). Off by default; docs/security.md
    /// gives the argument, docs/protocol.md section 12 the wire.
    pub short_tag: bool,
}

/// Whether reliable-ordered channels send repairs (coded combinations of the messages not yet
/// acknowledged) after their messages; see [`crate::repair`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Repair {
    /// No repairs: copies ([`Redundancy`]) and resends, as a peer without repairs expects.
    Off,
    /// A repair `interval` after each new message while the measured loss exceeds
    /// `loss_threshold` and the path shows no standing queue, and more when the receiver
    /// reports holes its repairs do not cover. Reliable-ordered channels then send no copies,
    /// and resend a message lost only when its resend timer expires.
    Adaptive {
        /// Measured packet loss above which repairs are sent.
        loss_threshold: f64,
        /// How long after a new message its repair follows.
        interval: Duration,
    },
}

/// How many times a reliable message is sent before its ack could have arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Redundancy {
    /// Once; resend only on a detected loss or a timeout.
    Off,
    /// Up to `copies` sends, `repeat_interval` apart (and riding in any packet with room in
    /// between), when the measured loss exceeds `loss_threshold` and the path shows no standing
    /// queue.
    Adaptive {
        /// Sends per message at most, the first included.
        copies: u8,
        /// Measured packet loss above which copies are sent.
        loss_threshold: f64,
    },
    /// Always up to `copies` sends.
    Always(u8),
}

impl Repair {
    /// Repairs with the measured defaults: on above 0.5% loss (the threshold of copies), each
    /// `2 ms` after its message (`rally-bench transport`, see docs/benchmarks.md).
    pub fn adaptive() -> Self {
        Repair::Adaptive { loss_threshold: 0.005, interval: Duration::from_millis(2) }
    }

    /// The slow loss estimate a new connection starts from: repairs start on, and a clean
    /// path switches them off after about 50 acked packets (below half the threshold,
    /// `record_fate`). Starting off would leave the first losses of a lossy path to the
    /// resend timer, before any round trip is measured: they set the p99 of a minute's run
    /// (`rally-bench transport`, bernoulli-10 p99 69.3 ms to 65.6; docs/benchmarks.md).
    pub(crate) fn start_loss(&self) -> f64 {
        match self {
            Repair::Off => 0.0,
            Repair::Adaptive { loss_threshold, .. } => loss_threshold * 0.6,
        }
    }
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            channels: vec![
                ChannelConfig { kind: ChannelKind::ReliableOrdered, priority: 2 },
                ChannelConfig { kind: ChannelKind::Unreliable, priority: 1 },
            ],
            mtu: 1200,
            message_bytes_max: 64 * 1024,
            send_queue_max: 1024,
            send_delay_max: Duration::from_millis(500),
            receive_window: 1024,
            receive_bytes_max: 1024 * 1024,
            resend_interval_min: Duration::from_millis(5),
            resend_interval_max: Duration::from_millis(250),
            // Long enough for an ack to ride on the peer's next message at 60 Hz: on a path
            // whose delays vary without reordering, every extra packet may hold back the data
            // behind it (measured in `rally bench transport`: clean 1.02x -> 1.01x, choked
            // 307 -> 113 ms). The delay rides in the ack, so RTT samples exclude it, and resend
            // timers add it.
            ack_delay_max: Duration::from_millis(16),
            keepalive_interval: Duration::from_millis(100),
            idle_timeout: Duration::from_secs(5),
            redundancy: Redundancy::Adaptive { copies: 2, loss_threshold: 0.005 },
            repeat_interval: Duration::from_millis(2),
            tail_probe: false,
            repair: Repair::Off,
            short_tag: false,
        }
    }
}

/// The largest piece of a message in a packet of `mtu` bytes.
fn piece_bytes(mtu: usize) -> usize {
    let overhead = DATA_HEADER_SIZE + FRAGMENT_FRAME_OVERHEAD_MAX + TAG_SIZE;
    mtu.saturating_sub(overhead).max(1)
}

/// The fields of a [`ConnectionConfig`] that a connection reads on every packet in or out and
/// on every deadline, copied out of it when the connection is made (the config never changes
/// after). The config spans four cache lines, each a miss when a server worker's rooms take
/// turns and evict each other's connections (docs/benchmarks.md, "The config's lines"); these
/// take 112 bytes (the timers as 64-bit nanoseconds, half a `Duration`), one line of their
/// own, the lines at either end being shared with other hot fields. The channel list and the
/// rest are read only when the connection is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HotConfig {
    pub(crate) idle_timeout: Nanos,
    pub(crate) keepalive_interval: Nanos,
    pub(crate) ack_delay_max: Nanos,
    pub(crate) resend_interval_min: Nanos,
    pub(crate) resend_interval_max: Nanos,
    pub(crate) repeat_interval: Nanos,
    pub(crate) send_delay_max: Nanos,
    pub(crate) mtu: usize,
    pub(crate) message_bytes_max: usize,
    pub(crate) send_queue_max: usize,
    pub(crate) receive_bytes_max: usize,
    pub(crate) redundancy: Redundancy,
    /// Whether repairs are configured ([`Repair::Adaptive`]): the connection keeps the
    /// repairs' own fields apart, read only when they are on.
    pub(crate) repairs: bool,
    pub(crate) tail_probe: bool,
}

impl HotConfig {
    pub(crate) fn new(config: &ConnectionConfig) -> Self {
        Self {
            idle_timeout: Nanos::new(config.idle_timeout),
            keepalive_interval: Nanos::new(config.keepalive_interval),
            ack_delay_max: Nanos::new(config.ack_delay_max),
            resend_interval_min: Nanos::new(config.resend_interval_min),
            resend_interval_max: Nanos::new(config.resend_interval_max),
            repeat_interval: Nanos::new(config.repeat_interval),
            send_delay_max: Nanos::new(config.send_delay_max),
            mtu: config.mtu,
            message_bytes_max: config.message_bytes_max,
            send_queue_max: config.send_queue_max,
            receive_bytes_max: config.receive_bytes_max,
            redundancy: config.redundancy,
            repairs: matches!(config.repair, Repair::Adaptive { .. }),
            tail_probe: config.tail_probe,
        }
    }

    /// [`ConnectionConfig::piece_bytes`].
    pub(crate) fn piece_bytes(&self) -> usize {
        piece_bytes(self.mtu)
    }
}

/// Why a configuration cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `field` is outside `min..=max`.
    #[error("{field} = {value} is outside {min}..={max}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The smallest allowed.
        min: u64,
        /// The largest allowed.
        max: u64,
    },
    /// The duration `field` is outside `min..=max`.
    #[error("{field} = {value:?} is outside {min:?}..={max:?}")]
    DurationOutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The number `field` is outside `min..=max` (or not a number).
    #[error("{field} = {value} is outside {min}..={max}")]
    RateOutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: f64,
        /// The smallest allowed.
        min: f64,
        /// The largest allowed.
        max: f64,
    },
}

/// Checks that `value` of `field` lies in `min..=max`.
pub(crate) fn check_count(
    field: &'static str,
    value: usize,
    min: usize,
    max: usize,
) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    let (value, min, max) = (value as u64, min as u64, max as u64);
    Err(ConfigError::OutOfRange { field, value, min, max })
}

/// Checks that the duration `value` of `field` lies in `min..=max`.
pub(crate) fn check_duration(
    field: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(ConfigError::DurationOutOfRange { field, value, min, max })
}

/// Checks that `value` of `field` is a number in `min..=max`.
pub(crate) fn check_number(
    field: &'static str,
    value: f64,
    min: f64,
    max: f64,
) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(ConfigError::RateOutOfRange { field, value, min, max })
}

/// The longest any timer may be: an hour, far past any game's need, and far from overflow.
const TIMER_MAX: Duration = Duration::from_secs(3600);
/// The longest ack delay the wire carries (16 bits of 8 microseconds).
pub const ACK_DELAY_MAX: Duration = Duration::from_micros(8 * u16::MAX as u64);

impl ConnectionConfig {
    /// Checks every field: limits against what the wire format can carry, timers against
    /// each other. Each error names its field and the range it must lie in.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_count("channels", self.channels.len(), 1, 255)?;
        check_count("mtu", self.mtu, MTU_MIN, MTU_MAX)?;
        // 255 fragments of what fits one packet.
        let fragment_max = self.piece_bytes();
        check_count("message_bytes_max", self.message_bytes_max, 1, 255 * fragment_max)?;
        check_count("send_queue_max", self.send_queue_max, 1, 16_384)?;
        // Sequence numbers are 16 bits; the window must stay well inside half their range.
        check_count("receive_window", self.receive_window, 1, 16_384)?;
        // The ordered channels' reserve and one more largest message, so that every channel
        // can always make progress.
        let least = self.head_reserve_bytes() + self.message_cost_max();
        check_count("receive_bytes_max", self.receive_bytes_max, least, 1 << 30)?;
        self.validate_timers()?;
        if let Repair::Adaptive { loss_threshold, interval } = self.repair {
            check_number("repair loss_threshold", loss_threshold, 0.0, 1.0)?;
            check_duration("repair interval", interval, Duration::ZERO, self.resend_interval_max)?;
        }
        match self.redundancy {
            Redundancy::Off => Ok(()),
            Redundancy::Always(copies) => check_count("redundancy copies", copies.into(), 1, 8),
            Redundancy::Adaptive { copies, loss_threshold } => {
                check_count("redundancy copies", copies.into(), 1, 8)?;
                check_number("redundancy loss_threshold", loss_threshold, 0.0, 1.0)
            }
        }
    }

    fn validate_timers(&self) -> Result<(), ConfigError> {
        let (ms, zero) = (Duration::from_millis(1), Duration::ZERO);
        check_duration("idle_timeout", self.idle_timeout, ms, TIMER_MAX)?;
        // Keepalives must come before the peer's idle timeout gives up on them.
        check_duration("keepalive_interval", self.keepalive_interval, ms, self.idle_timeout)?;
        check_duration("send_delay_max", self.send_delay_max, ms, TIMER_MAX)?;
        check_duration("resend_interval_max", self.resend_interval_max, ms, self.idle_timeout)?;
        let resend_max = self.resend_interval_max;
        check_duration("resend_interval_min", self.resend_interval_min, zero, resend_max)?;
        check_duration("ack_delay_max", self.ack_delay_max, zero, ACK_DELAY_MAX)?;
        check_duration("repeat_interval", self.repeat_interval, zero, resend_max)
    }

    /// The largest piece of a fragmented message: what a sealed packet of `mtu` bytes has room
    /// for after its header, the fragment frame's overhead and the tag. Both ends compute it
    /// from the shared configuration; a receiver bounds a message's size by it.
    pub fn piece_bytes(&self) -> usize {
        piece_bytes(self.mtu)
    }

    /// What one largest message counts against `receive_bytes_max` while held.
    pub(crate) fn message_cost_max(&self) -> usize {
        let pieces = (self.message_bytes_max.max(1) - 1) / self.piece_bytes() + 1;
        let pieces = u8::try_from(pieces).unwrap_or(u8::MAX);
        crate::channel::held_cost(self.message_bytes_max, pieces)
    }

    /// The room kept aside within `receive_bytes_max` for the next message of each
    /// reliable-ordered channel.
    pub(crate) fn head_reserve_bytes(&self) -> usize {
        let ordered =
            self.channels.iter().filter(|c| c.kind == ChannelKind::ReliableOrdered).count();
        ordered * self.message_cost_max()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The field a validation error names, if any.
    pub(crate) fn field_of(result: Result<(), ConfigError>) -> Option<&'static str> {
        match result {
            Ok(()) => None,
            Err(ConfigError::OutOfRange { field, .. })
            | Err(ConfigError::DurationOutOfRange { field, .. })
            | Err(ConfigError::RateOutOfRange { field, .. }) => Some(field),
        }
    }

    /// Goal: every field of a connection's configuration is checked, and the error names it.
    /// Method: the default with one field out of its range at a time.
    #[test]
    fn every_field_out_of_range_is_refused_by_name() {
        let d = ConnectionConfig::default;
        let (zero, long) = (Duration::ZERO, Duration::from_secs(10));
        let cases = [
            ("channels", ConnectionConfig { channels: Vec::new(), ..d() }),
            ("mtu", ConnectionConfig { mtu: MTU_MIN - 1, ..d() }),
            ("message_bytes_max", ConnectionConfig { message_bytes_max: 0, ..d() }),
            ("send_queue_max", ConnectionConfig { send_queue_max: 0, ..d() }),
            ("receive_window", ConnectionConfig { receive_window: 0, ..d() }),
            ("receive_bytes_max", ConnectionConfig { receive_bytes_max: 100_000, ..d() }),
            ("idle_timeout", ConnectionConfig { idle_timeout: zero, ..d() }),
            ("keepalive_interval", ConnectionConfig { keepalive_interval: long, ..d() }),
            ("send_delay_max", ConnectionConfig { send_delay_max: zero, ..d() }),
            ("resend_interval_max", ConnectionConfig { resend_interval_max: long, ..d() }),
            ("resend_interval_min", ConnectionConfig { resend_interval_min: long / 20, ..d() }),
            ("ack_delay_max", ConnectionConfig { ack_delay_max: long, ..d() }),
            ("repeat_interval", ConnectionConfig { repeat_interval: long / 20, ..d() }),
            ("redundancy copies", ConnectionConfig { redundancy: Redundancy::Always(0), ..d() }),
            (
                "repair loss_threshold",
                ConnectionConfig {
                    repair: Repair::Adaptive { loss_threshold: -1.0, interval: long / 100 },
                    ..d()
                },
            ),
            (
                "repair interval",
                ConnectionConfig {
                    repair: Repair::Adaptive { loss_threshold: 0.0, interval: long },
                    ..d()
                },
            ),
            (
                "redundancy loss_threshold",
                ConnectionConfig {
                    redundancy: Redundancy::Adaptive { copies: 2, loss_threshold: f64::NAN },
                    ..d()
                },
            ),
        ];
        for (field, config) in cases {
            assert_eq!(field_of(config.validate()), Some(field));
        }
        // The least valid receive limit holds the ordered channel's reserve and one message.
        let least = d().head_reserve_bytes() + d().message_cost_max();
        assert_eq!(ConnectionConfig { receive_bytes_max: least, ..d() }.validate(), Ok(()));
        let below = ConnectionConfig { receive_bytes_max: least - 1, ..d() };
        assert_eq!(field_of(below.validate()), Some("receive_bytes_max"));
    }

    #[test]
    fn limits_the_wire_cannot_carry_are_refused() {
        assert_eq!(ConnectionConfig::default().validate(), Ok(()));
        let no_channels = ConnectionConfig { channels: Vec::new(), ..ConnectionConfig::default() };
        assert!(matches!(
            no_channels.validate(),
            Err(ConfigError::OutOfRange { field: "channels", .. })
        ));
        let huge =
            ConnectionConfig { message_bytes_max: 10_000_000, ..ConnectionConfig::default() };
        assert!(matches!(
            huge.validate(),
            Err(ConfigError::OutOfRange { field: "message_bytes_max", .. })
        ));
        let window = ConnectionConfig { receive_window: 40_000, ..ConnectionConfig::default() };
        assert!(window.validate().is_err());
    }
}
