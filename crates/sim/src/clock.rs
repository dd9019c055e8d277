//! The virtual clock every harness shares: jump to the next scheduled instant, handle what is
//! due there, repeat.

use rally_proto::Instant;
use std::time::Duration;

/// A simulated world on one virtual clock. Implementors say what time it is, when the next
/// thing is scheduled, and how to handle everything due now; stepping comes with the trait.
pub trait VirtualClock {
    /// The current virtual time.
    fn now(&self) -> Instant;

    /// Sets the virtual time (only ever forward).
    fn set_now(&mut self, now: Instant);

    /// The next time anything is scheduled (a timer or a delivery), if anything is.
    fn next_event_time(&self) -> Option<Instant>;

    /// Handles everything due at the current time.
    fn drive(&mut self);

    /// Jumps the clock to the next scheduled time (never past `deadline`) and drives; false if
    /// nothing is scheduled before it.
    fn step_until(&mut self, deadline: Instant) -> bool {
        let Some(next) = self.next_event_time() else { return false };
        // A timer in the past or now still moves the clock by at least a nanosecond, so that a
        // timer that keeps reporting the same instant cannot stall the simulation.
        let next = next.max(self.now() + Duration::from_nanos(1));
        if next > deadline {
            self.set_now(deadline);
            self.drive();
            return false;
        }
        self.set_now(next);
        self.drive();
        true
    }

    /// Steps until `deadline`, then drives at it.
    fn run_until(&mut self, deadline: Instant) {
        while self.now() < deadline && self.step_until(deadline) {}
        if self.now() < deadline {
            self.set_now(deadline);
            self.drive();
        }
    }
}
