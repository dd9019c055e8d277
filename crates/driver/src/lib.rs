//! # rally-driver
//!
//! The only layer that touches the operating system: it owns a UDP socket and reads the clock,
//! and moves datagrams, time and events between them and a sans-IO
//! [`Endpoint`](rally_proto::Endpoint). Protocol
//! logic stays in `rally-proto`; this crate is a loop.
//!
//! - [`UdpDriver`]: one socket and its endpoint, with waits that start ticks and frames on time;
//! - [`Host`]: many rooms on worker threads, each with a socket, connections routed by the room
//!   their connect token names, telemetry per scope against budgets, a room whose game panics
//!   closed alone, a graceful drain (see [`host`]);
//! - [`backend`]: what a game's backend calls to issue connect tokens;
//! - [`cpu`]: CPU time from the OS, and pinning threads to cores;
//! - [`batch`]: many datagrams per syscall (`recvmmsg`, `sendmmsg`), for loops of their own;
//! - [`gateway`]: the limits and counters every browser gateway in front of a host shares.
//!
//! The real-time link emulation that benchmarks put between processes (a loopback relay,
//! network namespaces) is test bed, not product: it lives in rally-bench's `testbed` module.
//!
//! A server for one room:
//!
//! ```no_run
//! use rally_driver::UdpDriver;
//! use rally_proto::{EndpointConfig, Event, TokenKey};
//! use std::time::Duration;
//!
//! // Lets in holders of connect tokens the game's backend sealed with this key.
//! let key = TokenKey(*b"32 secret bytes from your store!");
//! let mut server =
//!     UdpDriver::bind_secure("127.0.0.1:7777", EndpointConfig::default(), key, 42).unwrap();
//! loop {
//!     // Echo every message back on the channel it came in on.
//!     server
//!         .run_for(Duration::from_millis(100), |endpoint, handle, event| {
//!             if let Event::Message { channel, payload } = event {
//!                 let _ = endpoint.send(handle, channel, &payload);
//!             }
//!         })
//!         .unwrap();
//! }
//! ```

#![deny(missing_docs)]

pub mod backend;
pub mod batch;
mod clock;
pub mod cpu;
pub mod gateway;
pub mod host;
mod udp;
mod wait;

pub use clock::Clock;
pub use host::{Host, HostConfig};
pub use udp::{Sleep, Traffic, UdpDriver, STEPPED_STRETCH};
#[cfg(target_os = "linux")]
pub use wait::readable_fds;
pub use wait::{precise_timers, readable};
