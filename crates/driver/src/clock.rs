//! The OS clock, converted to Rally's [`Instant`].

use rally_proto::Instant;

/// Monotonic time since the clock was created, as Rally's [`Instant`].
///
/// A worker reads it per tick, wake-up and read of its socket (a message takes its read's
/// time, not a reading of its own), and telemetry per timed phase and sampled run: it reads
/// `CLOCK_MONOTONIC` (the clock `std::time::Instant` reads on Linux) straight into
/// nanoseconds, without the checked `timespec` subtraction and the 128-bit
/// `Duration::as_nanos` that `Instant::elapsed` costs.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// The monotonic clock's reading at the start, nanoseconds.
    origin: u64,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Self { origin: monotonic_nanos() }
    }

    /// The current time.
    #[inline]
    pub fn now(&self) -> Instant {
        Instant::from_nanos(monotonic_nanos().saturating_sub(self.origin))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (584 years of them fit in a `u64`).
#[cfg(unix)]
#[allow(unsafe_code)]
#[inline]
fn monotonic_nanos() -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one `timespec` into the pointer it is given, which points
    // to a live, initialized value of that type; it reads nothing else.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    // It fails only for an unknown clock or a bad pointer, neither possible here; std's
    // `Instant::now`, which this replaces, panics then too.
    assert_eq!(status, 0, "CLOCK_MONOTONIC unreadable");
    (time.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(time.tv_nsec as u64)
}

#[cfg(not(unix))]
fn monotonic_nanos() -> u64 {
    std_nanos()
}

/// The standard library's monotonic clock, nanoseconds since the first call.
#[cfg(not(unix))]
#[allow(clippy::disallowed_methods)] // The driver is where the OS clock is read.
fn std_nanos() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let nanos = ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_starts_near_zero_and_never_goes_back() {
        let clock = Clock::start();
        let mut last = clock.now();
        assert!(last.as_nanos() < 1_000_000_000, "a clock starts at its zero: {last:?}");
        for _ in 0..1_000 {
            let now = clock.now();
            assert!(now >= last, "{now:?} after {last:?}");
            last = now;
        }
        let slept = std::time::Duration::from_millis(2);
        std::thread::sleep(slept);
        assert!(clock.now().as_nanos() >= last.as_nanos() + slept.as_nanos() as u64);
    }
}
