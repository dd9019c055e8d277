//! # rally-sim
//!
//! Deterministic simulation: Rally endpoints talking through emulated links on one virtual
//! clock. Nothing reads the OS clock or the network, so a seed replays a run exactly, and a
//! second of simulated traffic takes milliseconds.
//!
//! [`Pair`] is the test harness: a client and a server endpoint, a link each way, and
//! [`VirtualClock::step_until`], which jumps the clock to the next thing that happens. The
//! [`scenario`] module builds whole runs from a seed and checks them; `rally sim` runs batches.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod clock;
pub mod links;
mod net;
mod pair;
mod room;
pub mod room_scenario;
pub mod sandbox;
pub mod scenario;
pub mod secure;

pub use clock::VirtualClock;
pub use net::{Client, Net, DRIVE_STEPS_MAX, TAP_MAX};
pub use pair::Pair;
pub use room::{RoomNet, Session};
