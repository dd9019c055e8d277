//! The OS clock, converted to Rally's [`Instant`].

use rally_proto::Instant;

/// Monotonic time since the clock was created, as Rally's [`Instant`].
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    /// A clock whose zero is now.
    #[allow(clippy::disallowed_methods)] // The driver is where the OS clock is read.
    pub fn start() -> Self {
        Self { origin: std::time::Instant::now() }
    }

    /// The current time.
    #[allow(clippy::disallowed_methods)] // The driver is where the OS clock is read.
    pub fn now(&self) -> Instant {
        let nanos = self.origin.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}
