//! One direction of an emulated path.

use crate::loss::{unit, LossModel, LossState};
use rally_proto::Instant;
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

/// What one direction of a path does to packets (see the crate docs for the order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Mean one-way propagation delay.
    pub delay: Duration,
    /// Standard deviation of the one-way delay (normal, truncated at zero).
    pub jitter: Duration,
    /// Whether jitter may deliver a packet before one sent earlier.
    pub reorder: bool,
    /// Which packets the wire loses.
    pub loss: LossModel,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Bottleneck rate in bits per second; `None` for no bottleneck.
    pub rate_bits_per_sec: Option<u64>,
    /// Bytes the bottleneck queue holds; a packet that would exceed it is dropped.
    pub queue_bytes_max: usize,
    /// Larger packets are dropped.
    pub mtu: usize,
    /// Packets in flight (sent, not yet delivered) at most; more are dropped and counted, so a
    /// runaway sender cannot grow the emulator's memory.
    pub in_flight_max: usize,
}

impl Default for LinkConfig {
    /// A perfect link: no delay, no loss, no bottleneck, a 1,500-byte MTU.
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            reorder: false,
            loss: LossModel::None,
            duplicate: 0.0,
            rate_bits_per_sec: None,
            queue_bytes_max: 1 << 20,
            mtu: 1500,
            in_flight_max: 1 << 16,
        }
    }
}

/// What a link did, counted since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkStats {
    /// Packets handed to [`Link::send`].
    pub sent: u64,
    /// Their bytes (what the sender put on the wire, lost or not).
    pub bytes_sent: u64,
    /// Packets handed back by [`Link::poll_deliver`], duplicates included.
    pub delivered: u64,
    /// Packets the loss model dropped.
    pub lost: u64,
    /// Packets dropped at the tail of a full bottleneck queue.
    pub queue_dropped: u64,
    /// Packets dropped for exceeding the MTU.
    pub oversize_dropped: u64,
    /// Packets dropped because `in_flight_max` packets were already in flight.
    pub overflow_dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Sum of the one-way delays of delivered packets (send to delivery), nanoseconds.
    pub delay_sum_ns: f64,
    /// Sum of their squares, for the standard deviation.
    pub delay_sq_sum_ns: f64,
    /// The largest one-way delay delivered, nanoseconds.
    pub delay_max_ns: u64,
}

impl LinkStats {
    /// Adds `other`'s counts to these, as if one link had carried both (several runs of a
    /// profile, say); the largest delay is the larger of the two.
    pub fn merge(&mut self, other: &LinkStats) {
        self.sent += other.sent;
        self.bytes_sent += other.bytes_sent;
        self.delivered += other.delivered;
        self.lost += other.lost;
        self.queue_dropped += other.queue_dropped;
        self.oversize_dropped += other.oversize_dropped;
        self.overflow_dropped += other.overflow_dropped;
        self.duplicated += other.duplicated;
        self.delay_sum_ns += other.delay_sum_ns;
        self.delay_sq_sum_ns += other.delay_sq_sum_ns;
        self.delay_max_ns = self.delay_max_ns.max(other.delay_max_ns);
    }

    /// Packets the link dropped for any reason, over packets sent.
    pub fn drop_rate(&self) -> f64 {
        let dropped =
            self.lost + self.queue_dropped + self.oversize_dropped + self.overflow_dropped;
        dropped as f64 / self.sent.max(1) as f64
    }

    /// Packets lost on the wire over packets that reached it.
    pub fn loss_rate(&self) -> f64 {
        let reached = self.sent - self.queue_dropped - self.oversize_dropped;
        self.lost as f64 / reached.max(1) as f64
    }

    /// Mean one-way delay of delivered packets.
    pub fn delay_mean(&self) -> Duration {
        Duration::from_nanos((self.delay_sum_ns / self.delivered.max(1) as f64) as u64)
    }

    /// Standard deviation of the one-way delay of delivered packets.
    pub fn delay_sd(&self) -> Duration {
        let n = self.delivered.max(1) as f64;
        let mean = self.delay_sum_ns / n;
        let variance = (self.delay_sq_sum_ns / n - mean * mean).max(0.0);
        Duration::from_nanos(variance.sqrt() as u64)
    }
}

/// A packet on its way.
#[derive(Debug)]
struct Pending<T> {
    deliver_at: Instant,
    sent_at: Instant,
    /// Ties on `deliver_at` leave in sending order.
    order: u64,
    packet: T,
}

impl<T> PartialEq for Pending<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.deliver_at, self.order) == (other.deliver_at, other.order)
    }
}
impl<T> Eq for Pending<T> {}
impl<T> PartialOrd for Pending<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Pending<T> {
    /// Reversed, so that the max-heap pops the earliest delivery first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.deliver_at, other.order).cmp(&(self.deliver_at, self.order))
    }
}

/// One direction of an emulated path, carrying packets of type `T`.
#[derive(Debug)]
pub struct Link<T> {
    config: LinkConfig,
    rng: Xoshiro256PlusPlus,
    loss: LossState,
    /// When the bottleneck finishes sending the packets it holds.
    busy_until: Instant,
    /// The latest delivery time given out, which no later packet may precede without reorder.
    last_delivery: Instant,
    in_flight: BinaryHeap<Pending<T>>,
    order: u64,
    stats: LinkStats,
}

impl<T: Clone> Link<T> {
    /// A link with `config` whose random choices all come from `seed`.
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        Self {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            loss: LossState::default(),
            busy_until: Instant::ZERO,
            last_delivery: Instant::ZERO,
            in_flight: BinaryHeap::new(),
            order: 0,
            stats: LinkStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Changes the conditions from now on (a blackout, a heal); packets in flight keep the fate
    /// they were given.
    pub fn set_config(&mut self, config: LinkConfig) {
        self.config = config;
    }

    /// What the link has done so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// When the bottleneck will have sent everything queued at it so far.
    pub fn drained_at(&self) -> Instant {
        self.busy_until
    }

    /// Packets in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Sends `packet` of `size` bytes at `now`. Whether and when it arrives is decided here.
    pub fn send(&mut self, now: Instant, packet: T, size: usize) {
        self.stats.sent += 1;
        self.stats.bytes_sent += size as u64;
        if size > self.config.mtu {
            self.stats.oversize_dropped += 1;
            return;
        }
        let Some(departed) = self.through_bottleneck(now, size) else {
            self.stats.queue_dropped += 1;
            return;
        };
        // An outage in time hits the packets that cross the wire during it.
        if self.loss.lose(&self.config.loss, departed, &mut self.rng) {
            self.stats.lost += 1;
            return;
        }
        let mut deliver_at = departed + self.sample_delay();
        if !self.config.reorder {
            deliver_at = deliver_at.max(self.last_delivery);
        }
        self.last_delivery = self.last_delivery.max(deliver_at);
        let copies = if unit(&mut self.rng) < self.config.duplicate { 2 } else { 1 };
        for copy in 0..copies {
            if self.in_flight.len() >= self.config.in_flight_max {
                self.stats.overflow_dropped += 1;
                return;
            }
            self.stats.duplicated += u64::from(copy > 0);
            self.order += 1;
            let packet = packet.clone();
            let order = self.order;
            self.in_flight.push(Pending { deliver_at, sent_at: now, order, packet });
        }
    }

    /// When the packet leaves the bottleneck, or `None` if its queue is full.
    fn through_bottleneck(&mut self, now: Instant, size: usize) -> Option<Instant> {
        let Some(rate) = self.config.rate_bits_per_sec.filter(|r| *r > 0) else {
            return Some(now);
        };
        let start = self.busy_until.max(now);
        let waiting_ns = (start - now).as_nanos();
        let waiting_bytes = waiting_ns * u128::from(rate) / 8 / 1_000_000_000;
        if waiting_bytes as usize + size > self.config.queue_bytes_max {
            return None;
        }
        let send_ns = size as u128 * 8 * 1_000_000_000 / u128::from(rate);
        self.busy_until = start + Duration::from_nanos(send_ns as u64);
        Some(self.busy_until)
    }

    /// A normal sample (Box-Muller) with the configured mean and deviation, at least zero.
    fn sample_delay(&mut self) -> Duration {
        let mean = self.config.delay.as_secs_f64();
        let sd = self.config.jitter.as_secs_f64();
        if sd == 0.0 {
            return self.config.delay;
        }
        let u1 = unit(&mut self.rng).max(f64::MIN_POSITIVE);
        let u2 = unit(&mut self.rng);
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        Duration::from_secs_f64((mean + sd * z).max(0.0))
    }

    /// When the next packet is due, if any is in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.in_flight.peek().map(|p| p.deliver_at)
    }

    /// The next packet due at or before `now`, if any.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<T> {
        if self.in_flight.peek()?.deliver_at > now {
            return None;
        }
        let pending = self.in_flight.pop()?;
        let delay = (pending.deliver_at - pending.sent_at).as_nanos() as u64;
        self.stats.delivered += 1;
        self.stats.delay_sum_ns += delay as f64;
        self.stats.delay_sq_sum_ns += (delay as f64) * (delay as f64);
        self.stats.delay_max_ns = self.stats.delay_max_ns.max(delay);
        Some(pending.packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::LossModel;

    /// Sends `count` packets of 100 bytes through `config` and delivers them all.
    fn stats_after(config: LinkConfig, count: u64, seed: u64) -> LinkStats {
        let mut link = Link::new(config, seed);
        for k in 0..count {
            link.send(Instant::from_millis(k), k, if k % 10 == 0 { 2000 } else { 100 });
        }
        while link.poll_deliver(Instant::from_millis(count + 1000)).is_some() {}
        *link.stats()
    }

    #[test]
    fn merged_stats_count_as_one_link_that_carried_both() {
        let lossy = LinkConfig {
            delay: Duration::from_millis(5),
            loss: LossModel::Bernoulli { probability: 0.3 },
            ..LinkConfig::default()
        };
        let (a, b) = (stats_after(lossy, 200, 1), stats_after(lossy, 300, 2));
        let mut merged = a;
        merged.merge(&b);
        assert_eq!(merged.sent, 500);
        assert_eq!(merged.bytes_sent, a.bytes_sent + b.bytes_sent);
        // Every tenth packet exceeds the MTU: those never reach the wire, in both runs.
        assert_eq!(merged.oversize_dropped, 50);
        let reached = 500 - 50;
        assert_eq!(merged.lost + merged.delivered, reached);
        let expected = (a.lost + b.lost) as f64 / reached as f64;
        assert!((merged.loss_rate() - expected).abs() < 1e-12);
        assert_eq!(merged.delay_mean(), Duration::from_millis(5));
    }
}
