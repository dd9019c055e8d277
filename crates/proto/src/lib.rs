//! # rally-proto
//!
//! Rally's transport layer, sans-IO: it never opens a socket, reads a clock or spawns a
//! thread. Time comes in as an argument ([`Instant`]), randomness from a seed. This crate is
//! being built up; today it holds the time model that every sans-IO layer shares.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod acks;
mod channel;
pub mod config;
pub mod connection;
pub mod endpoint;
pub mod packet;
pub mod time;

pub use config::{ChannelConfig, ChannelKind, ConnectionConfig, Redundancy};
pub use connection::{Connection, ConnectionStats, Event, SendError};
pub use endpoint::{ConnectionHandle, Endpoint, EndpointConfig, EndpointStats, Transmit};
pub use packet::DisconnectReason;
pub use time::Instant;
