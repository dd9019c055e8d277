//! # rally-wire
//!
//! The bottom layer of Rally: how every byte is laid out. It knows nothing about connections or
//! games; it turns state into as few bits as possible, fast, without allocating, and back, and
//! refuses bad input with a typed error that names the field.
//!
//! ## What is here
//!
//! - [`bits`]: a bit writer and reader on caller-owned buffers with a 64-bit accumulator,
//!   least significant bit first.
//! - [`varint`]: zigzag, LEB128 varints and the tiered prefix codes used for ids and deltas.
//! - [`quant`]: quantizers for positions, smallest-three rotations and velocities, each with a
//!   documented and tested worst-case error.
//! - [`snapshot`]: the snapshot codec, full and delta against an acknowledged baseline.
//! - [`message`]: user messages through serde (binary via bitcode, JSON for debugging).
//! - [`debug`]: the JSON form of Rally's own messages, snapshots included.
//! - [`seq`]: wrap-safe sequence comparison.
//! - [`hex`]: bytes as hex digits and back, for keys, tokens and test vectors.
//!
//! The format is specified bit by bit in `docs/wire.md`, with hex test vectors in
//! `docs/wire-vectors.json` that the tests check.
//!
//! ## A snapshot round trip
//!
//! The server quantizes its entities once per tick into a [`Snapshot`], encodes it for each
//! client (full, or delta against the last snapshot that client acknowledged), and keeps it as a
//! future baseline. Buffers belong to the caller and are reused, so the steady state allocates
//! nothing.
//!
//! ```
//! use glam::{Quat, Vec3};
//! use rally_wire::{EntityState, Snapshot, SnapshotConfig, SnapshotKind};
//!
//! let config = SnapshotConfig::default();
//! let mut baseline = Snapshot::new(100);
//! let mut current = Snapshot::new(101);
//! for id in 0..4 {
//!     let mut ball = EntityState {
//!         id,
//!         position: Vec3::new(id as f32, 1.0, 0.0),
//!         rotation: Quat::IDENTITY,
//!         linear_velocity: Vec3::ZERO,
//!         angular_velocity: Vec3::ZERO,
//!     };
//!     baseline.push(config.quantize(&ball)).unwrap();
//!     if id == 2 {
//!         ball.position.y += 0.04; // only this one moved
//!     }
//!     current.push(config.quantize(&ball)).unwrap();
//! }
//!
//! let mut datagram = [0u8; 1200];
//! let full = config.encode_full(&baseline, &mut datagram).unwrap();
//! let len = config.encode_delta(&baseline, &current, &mut datagram).unwrap();
//! assert!(len < full / 2);
//!
//! // The client decodes against the baseline the header names.
//! let header = SnapshotConfig::peek_header(&datagram[..len]).unwrap();
//! assert_eq!(header.kind, SnapshotKind::Delta { baseline_tick: 100 });
//! let mut decoded = Snapshot::default();
//! config.decode(&datagram[..len], Some(&baseline), &mut decoded).unwrap();
//! assert_eq!(decoded, current);
//! ```
//!
//! ## Keeping it fast
//!
//! `rally-bench wire` holds the codec against bitcode and serde_json; `examples/codec_loop.rs`
//! runs one path in a loop for perf or callgrind. What mattered when it was measured:
//!
//! - The writer's and reader's state must live in registers. Any call that is not inlined and
//!   takes `&mut BitWriter` or `&mut BitReader`, even on a path that never runs, makes the
//!   compiler keep them in memory, and every field then waits on a store. Rare paths are free
//!   functions that take and return values (`write_tail`, `peek_tail`, the encoder's `absolute`).
//! - No `array::map` on a per-field path (it is not inlined there; use `map3`/`map4`), and no
//!   comparison of a small array just written field by field (`widths != [0; 4]` becomes wide
//!   loads that cannot be forwarded from the narrow stores).
//! - Where each code's length decides where the next starts, the chain sets the pace. A full
//!   snapshot reads a run of consecutive ids at once; a delta has no chain at all: its updates
//!   are columns of equal-width values, packed and unpacked eight at a time at offsets fixed
//!   at compile time.
//! - Let the compiler vectorise: a loop that both scatters into entities and accumulates
//!   checks stays scalar, while the same checks in a loop of their own over a contiguous
//!   buffer become a few vector operations per row (the decoder's range checks, its undoing of
//!   the zigzag). Rare cases (an exception, an equal row) leave the common loop on one test.
//! - Work per tick, not per client: a [`SnapshotHistory`] records which entities changed at each
//!   push, so a client's delta skips unchanged entities by bit sets.
//! - A rare record must not send the common ones down the slow path: a spawn or despawn in a
//!   delta is an insert or a removal in the patched copy, and patching goes on; only past a few
//!   of them are the remaining records merged (with the fast update path too).
//!
//! The format is specified in docs/wire.md; `ports/cpp/rally_wire.hpp` is a C++ decoder
//! written from that page, and `tests/cpp_port.rs` holds it to this crate's answers. Deltas are
//! column deltas (format `0x03`); the record delta before them (format `0x02`,
//! [`SnapshotConfig::encode_delta_records`]) is still read by both decoders.
//!
//! ## Errors
//!
//! Decoding never panics. Every failure is a [`DecodeError`] naming the [`Field`] and, where a
//! bound was broken, the bound. The decoder reserves memory only for entity counts up to the
//! configured `entities_max`. Encoding fails only on a short output buffer or too many entities
//! ([`EncodeError`]). User messages have [`MessageError`], bounded by `message_bytes_max`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bits;
pub mod debug;
pub mod error;
pub mod hex;
pub mod message;
pub mod prefetch;
pub mod quant;
pub mod reference;
pub mod seq;
pub mod snapshot;
pub mod varint;

/// `[a, b, c].map(f)`, always inlined: `array::map` is not, and it sits on the per-field path.
#[inline(always)]
pub(crate) fn map3<T: Copy, U>(a: [T; 3], f: impl Fn(T) -> U) -> [U; 3] {
    [f(a[0]), f(a[1]), f(a[2])]
}

/// [`map3`] for four: an update record's fields.
#[inline(always)]
pub(crate) fn map4<T: Copy, U>(a: [T; 4], f: impl Fn(T) -> U) -> [U; 4] {
    [f(a[0]), f(a[1]), f(a[2]), f(a[3])]
}

pub use error::{
    ConfigError, DecodeError, EncodeError, Field, HexError, HistoryError, MessageError,
    SnapshotError,
};
pub use message::MessageCodec;
pub use quant::{PositionQuantizer, QuantizedRotation, RotationQuantizer, VelocityQuantizer};
pub use snapshot::{
    DeltaRecord, EntityState, NextSnapshot, QuantizedEntity, Snapshot, SnapshotConfig,
    SnapshotHeader, SnapshotHistory, SnapshotKind,
};
