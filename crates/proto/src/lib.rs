//! # rally-proto
//!
//! Rally's transport layer, sans-IO: it never opens a socket, reads a clock or spawns a
//! thread. Time comes in as an argument ([`Instant`]), randomness from a seed. This crate is
//! being built up; today it holds the time model that every sans-IO layer shares.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod time;

pub use time::Instant;
