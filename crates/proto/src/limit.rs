//! Per-address rate limits: a token bucket per source, in a table of bounded size, checked
//! before a datagram is even decoded, so that a flood costs a hash lookup per packet.

use crate::time::Instant;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// A rate and the burst it allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Packets per second, sustained.
    pub per_second: f64,
    /// Packets at once after a quiet spell.
    pub burst: f64,
}

/// Token buckets by key (an address), at most `max` of them.
#[derive(Debug, Clone)]
pub(crate) struct RateLimiter<K> {
    rate: Rate,
    max: usize,
    buckets: HashMap<K, (f64, Instant)>,
}

/// What a limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pass,
    /// Over its rate.
    Limited,
    /// The table is full of sources that are all busy: a flood from many addresses.
    TableFull,
}

impl<K: Hash + Eq + Copy> RateLimiter<K> {
    /// A limiter of `rate` for at most `max` sources. The endpoint's configuration was
    /// validated: a positive, finite rate, a burst of at least one, a table of at least one.
    pub(crate) fn new(rate: Rate, max: usize) -> Self {
        debug_assert!(max >= 1 && rate.burst >= 1.0 && rate.per_second > 0.0, "{rate:?}, {max}");
        Self { rate, max, buckets: HashMap::new() }
    }

    /// Takes one packet from `key` at `now`.
    pub(crate) fn check(&mut self, key: K, now: Instant) -> Verdict {
        let Rate { per_second, burst } = self.rate;
        if let Some((tokens, last)) = self.buckets.get_mut(&key) {
            let refill = now.saturating_duration_since(*last).as_secs_f64() * per_second;
            *tokens = (*tokens + refill).min(burst);
            *last = now;
            if *tokens < 1.0 {
                return Verdict::Limited;
            }
            *tokens -= 1.0;
            return Verdict::Pass;
        }
        if self.buckets.len() >= self.max {
            // A bucket that has refilled is as good as none: forget those.
            let full = Duration::from_secs_f64(burst / per_second.max(1e-9));
            self.buckets.retain(|_, (_, last)| now.saturating_duration_since(*last) < full);
            if self.buckets.len() >= self.max {
                return Verdict::TableFull;
            }
        }
        self.buckets.insert(key, (burst - 1.0, now));
        Verdict::Pass
    }

    /// Sources tracked.
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let mut limiter = RateLimiter::new(Rate { per_second: 10.0, burst: 5.0 }, 100);
        let t0 = Instant::ZERO;
        let passed = (0..20).filter(|_| limiter.check(1, t0) == Verdict::Pass).count();
        assert_eq!(passed, 5);
        // A tenth of a second later: one more.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(limiter.check(1, t1), Verdict::Pass);
        assert_eq!(limiter.check(1, t1), Verdict::Limited);
        // Another source is not affected.
        assert_eq!(limiter.check(2, t1), Verdict::Pass);
    }

    /// Goal: a quiet spell refills a source's bucket up to its burst and no further, and the
    /// rate holds after it. Method: drain the burst, wait ten seconds (a hundred packets' worth
    /// of refill at 10 per second), count what passes at once, then a tenth of a second later.
    #[test]
    fn a_quiet_spell_refills_the_burst_and_no_more() {
        let mut limiter = RateLimiter::new(Rate { per_second: 10.0, burst: 5.0 }, 100);
        let t0 = Instant::ZERO;
        let drained = (0..20).filter(|_| limiter.check(1, t0) == Verdict::Pass).count();
        assert_eq!(drained, 5);
        let quiet = t0 + Duration::from_secs(10);
        let passed = (0..200).filter(|_| limiter.check(1, quiet) == Verdict::Pass).count();
        assert_eq!(passed, 5, "the burst caps the refill");
        let later = quiet + Duration::from_millis(300);
        let passed = (0..200).filter(|_| limiter.check(1, later) == Verdict::Pass).count();
        assert_eq!(passed, 3, "three tenths of a second at 10 per second");
    }

    #[test]
    fn the_table_stays_bounded_under_a_flood_of_sources() {
        let mut limiter = RateLimiter::new(Rate { per_second: 10.0, burst: 5.0 }, 1000);
        let t0 = Instant::ZERO;
        let verdicts: Vec<Verdict> = (0..5000u32).map(|k| limiter.check(k, t0)).collect();
        assert_eq!(limiter.len(), 1000);
        assert_eq!(verdicts.iter().filter(|v| **v == Verdict::TableFull).count(), 4000);
        // Once the buckets have refilled, new sources get in again.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(limiter.check(99_999, later), Verdict::Pass);
        assert!(limiter.len() <= 1000);
    }
}
