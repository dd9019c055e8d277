//! The real-time test bed: what puts an emulated link (rally-netem) between processes and
//! libraries that run on the OS clock and cannot be driven in virtual time.
//!
//! - [`LinkRelay`]: a UDP relay on loopback, one [`rally_netem::Link`] per direction, for
//!   real-time benchmarks and unmodified peers (ENet, KCP, QUIC, `rally-bench peer`);
//! - [`netns::TunLink`]: the same between two network namespaces, for peers that are not UDP
//!   (the kernel's TCP). Linux only, as root;
//! - [`command`]: `rally-bench relay`, the relay as a process for programs that are not Rust
//!   (the conformance client under `tests/conformance/` runs through it).
//!
//! The driver (rally-driver) carries the product's traffic; this module only exists to measure
//! it, which is why it lives in the bench crate and not in the driver's public API.

pub mod command;
#[cfg(target_os = "linux")]
pub mod netns;
mod relay;

pub use relay::{LinkRelay, RelayStats};
