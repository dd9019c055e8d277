//! # rally-netem
//!
//! A seeded, sans-IO link emulator: one [`Link`] is one direction of a network path. Packets go
//! in with the time they were sent ([`Link::send`]); they come out when the caller asks at or
//! after their delivery time ([`Link::poll_deliver`]), and [`Link::poll_timeout`] says when the
//! next one is due. There is no clock and no thread: the same seed and the same inputs give the
//! same deliveries, which is what makes Rally's simulations and benchmarks replayable.
//!
//! ```
//! use rally_netem::{Link, LinkProfile};
//! use rally_proto::Instant;
//!
//! let profile = LinkProfile::parse("clean,loss=10%").unwrap();
//! let mut link: Link<u32> = Link::new(profile.config, 7);
//! link.send(Instant::ZERO, 0, 400);
//! while let Some(due) = link.poll_timeout() {
//!     while let Some(packet) = link.poll_deliver(due) {
//!         assert_eq!(packet, 0);
//!     }
//! }
//! assert_eq!(link.stats().sent, 1);
//! ```
//!
//! ## The model, in the order a packet meets it
//!
//! 1. **MTU**: a packet larger than `mtu` is dropped and counted.
//! 2. **Bottleneck** (with a rate): the packet waits for the packets ahead of it, then takes
//!    `size * 8 / rate` to send. A packet that would make the waiting bytes exceed
//!    `queue_bytes_max` is dropped at the tail and counted, so a sender that outruns the link
//!    sees loss, not unbounded delay beyond the queue's worth.
//! 3. **Loss** on the wire: none, independent (Bernoulli), Linux netem's correlated `loss P C`
//!    (its exact generator, so "10% 25%" gives about 1.75% effective loss, as on Linux),
//!    Gilbert-Elliott bursts (a count of packets), or outages in time (the wire is out for
//!    spans of random length, and every packet leaving the bottleneck during one is lost: a
//!    sender of more, smaller packets meets the same outages, not shorter ones).
//! 4. **Delay**: a normal sample with the configured mean and standard deviation, truncated at
//!    zero. Unless `reorder` is set, a packet is never delivered before one sent earlier
//!    (jitter without reordering, as on a single path).
//! 5. **Duplication**: with the configured probability the packet is delivered twice.
//!
//! Every drop has its own counter in [`LinkStats`], beside the delays actually applied, so a
//! benchmark can print what the link did next to what was asked for.
//!
//! ## Why not str0m-netem
//!
//! Rally prefers a maintained crate to its own code, so str0m-netem was evaluated first. It is a
//! good sans-IO design, but its API takes `std::time::Instant` (a simulation cannot start its
//! clock at zero without reading the OS clock), its rate limit has no finite queue (the `choked`
//! profile needs tail drop), it has no MTU, and its correlated loss is not Linux netem's
//! generator, which the source's "10% loss, 25% correlation" figures depend on. This crate
//! borrows its shape and its Gilbert-Elliott parameterization.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod link;
mod loss;
mod profile;

pub use link::{Link, LinkConfig, LinkStats};
pub use loss::LossModel;
pub use profile::{LinkProfile, ProfileError, PROFILE_NAMES};
