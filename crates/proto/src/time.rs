//! Rally's own monotonic time.
//!
//! Sans-IO code never reads a clock: every input carries `now`. [`Instant`] is a count of
//! nanoseconds from an arbitrary origin: 0 at the start of a simulation, the process start in
//! the driver, which alone converts from the OS clock. Because it is a plain number, a test can
//! build any instant it needs, and a simulation replays exactly.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds from the run's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The run's origin.
    pub const ZERO: Instant = Instant(0);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// The instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis * 1_000_000)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since `earlier`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// [`Instant::saturating_duration_since`] as 64-bit nanoseconds: compared with a timer kept
    /// as [`Nanos`], without the division by 10^9 a `Duration` is built with.
    pub(crate) fn saturating_nanos_since(self, earlier: Instant) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }

    /// Seconds since the origin, for reports and plots.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        // Saturates rather than wraps: u64 nanoseconds last 584 years, so saturation only
        // happens for "never" timers built from Duration::MAX.
        Instant(self.0.saturating_add(u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX)))
    }
}

/// A duration as 64-bit nanoseconds, saturating at 584 years: half a `Duration`'s 16 bytes,
/// for the timers a connection keeps among its hot fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Nanos(u64);

impl Nanos {
    pub(crate) fn new(duration: Duration) -> Self {
        Nanos(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn get(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// The nanoseconds.
    pub(crate) const fn as_u64(self) -> u64 {
        self.0
    }
}

impl Add<Nanos> for Instant {
    type Output = Instant;
    fn add(self, rhs: Nanos) -> Instant {
        Instant(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// The time from `rhs` to `self`, zero if `rhs` is later.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(2), Instant::from_millis(7));
        assert_eq!(Instant::from_millis(7) - t, Duration::from_millis(2));
        assert_eq!(t - Instant::from_millis(7), Duration::ZERO);
        assert_eq!((t + Duration::MAX).as_nanos(), u64::MAX);
    }

    #[test]
    fn a_timer_in_nanoseconds_adds_as_its_duration_does() {
        let t = Instant::from_millis(5);
        for d in [Duration::ZERO, Duration::from_micros(16_001), Duration::from_secs(5)] {
            assert_eq!(t + Nanos::new(d), t + d);
            assert_eq!(Nanos::new(d).get(), d);
        }
        // "Never" stays never: saturated, not wrapped.
        assert_eq!(t + Nanos::new(Duration::MAX), t + Duration::MAX);
    }

    /// Goal: a time since, in nanoseconds, orders against a timer as the `Duration`s did.
    /// Method: instants either side of each other, against timers on and around the gap.
    #[test]
    fn a_time_since_in_nanoseconds_compares_as_its_duration_does() {
        let times = [0, 1, 999, 1_000_000_007, u64::MAX].map(Instant::from_nanos);
        let timers = [0, 1, 998, 999, 1_000, 1_000_000_007, u64::MAX].map(Duration::from_nanos);
        for (now, earlier) in times.iter().flat_map(|a| times.iter().map(move |b| (*a, *b))) {
            let since = now.saturating_nanos_since(earlier);
            assert_eq!(since.get(), now - earlier);
            for timer in timers {
                assert_eq!(since >= Nanos::new(timer), now - earlier >= timer);
                assert_eq!(since <= Nanos::new(timer), now - earlier <= timer);
            }
        }
    }
}
