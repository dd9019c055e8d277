//! What streaming repair costs in CPU per 400-byte payload: the sender's checksum and repair
//! (one per payload, over a window of the three messages a W1 sender typically has in
//! flight) and the receiver's work (keeping each message, taking each repair, decoding the
//! holes), on a stream that loses 10% of its messages and of its repairs. One thread, the
//! fastest of several passes on this shared machine.

use super::PAYLOAD_BYTES;
use rally_proto::repair::{self, Decoder, Incoming, Source};
use serde::Serialize;
use std::error::Error;

/// Messages coded per pass.
const PAYLOADS: usize = 20_000;
/// Messages a W1 repair combines: about one round trip of 60 Hz messages.
const WINDOW: usize = 3;
/// Passes; the fastest counts.
const PASSES: usize = 5;

/// The measured cost.
#[derive(Debug, Clone, Serialize)]
pub struct RepairCost {
    /// Microseconds of CPU to encode and decode, per payload.
    pub us_per_payload: f64,
    /// Payloads per pass.
    pub payloads: usize,
    /// Messages each repair combined.
    pub window: usize,
    /// Messages recovered from repairs per pass.
    pub decoded: usize,
}

/// Runs the passes. Never inlined: callgrind counts its instructions by its name
/// (`--toggle-collect='*repair_cost::measure*'`, docs/benchmarks.md).
#[allow(clippy::disallowed_methods)] // a benchmark times itself
#[inline(never)]
pub fn measure() -> Result<RepairCost, Box<dyn Error>> {
    let payloads: Vec<Vec<u8>> =
        (0..PAYLOADS).map(|k| (0..PAYLOAD_BYTES).map(|i| (i * 7 + k) as u8).collect()).collect();
    let mut best = f64::INFINITY;
    let mut decoded = 0;
    for _ in 0..PASSES {
        let start = std::time::Instant::now();
        decoded = pass(&payloads)?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(RepairCost {
        us_per_payload: best * 1e6 / PAYLOADS as f64,
        payloads: PAYLOADS,
        window: WINDOW,
        decoded,
    })
}

/// Whether packet `k` of `stream` is lost: 10%, from a fixed hash.
fn lost(k: usize, stream: u64) -> bool {
    let x = (k as u64 ^ stream).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) % 10 == 0
}

/// One pass over the stream; returns the messages decoded.
fn pass(payloads: &[Vec<u8>]) -> Result<usize, Box<dyn Error>> {
    let checks: Vec<u32> = payloads.iter().map(|p| repair::checksum(p)).collect();
    let mut decoder = Decoder::default();
    let mut have = vec![false; payloads.len()];
    let mut next = 0usize;
    let mut data = Vec::new();
    let mut decoded = 0;
    for k in 0..payloads.len() {
        if !lost(k, 1) {
            arrive(&mut decoder, &mut have, k as u16, &payloads[k]);
        }
        let first = k.saturating_sub(WINDOW - 1);
        let window =
            (first..=k).map(|i| Source { seq: i as u16, check: checks[i], payload: &payloads[i] });
        repair::encode(window, k as u16, &mut data).ok_or("a window within the limit")?;
        if !lost(k, 2) {
            let count = (k - first + 1) as u8;
            let incoming = Incoming { start: first as u16, count, seed: k as u16, data: &data };
            for (seq, payload) in
                decoder.receive(incoming, |_| None, usize::MAX).unwrap_or_default()
            {
                decoded += arrive(&mut decoder, &mut have, seq, &payload);
            }
        }
        // A message leaving the window unrepaired arrives by resend.
        if k >= WINDOW - 1 && !have[first] {
            arrive(&mut decoder, &mut have, first as u16, &payloads[first]);
        }
        while next < payloads.len() && have[next] {
            next += 1;
        }
        decoder.rebase(next as u16);
    }
    Ok(decoded)
}

/// A message arrives (or was decoded) as a connection would take it: the decoder learns it,
/// and whatever that solves arrives too. Returns the messages it brought.
fn arrive(decoder: &mut Decoder, have: &mut [bool], seq: u16, payload: &[u8]) -> usize {
    have[usize::from(seq)] = true;
    let mut count = 1;
    for (seq, payload) in decoder.learn(seq, payload, usize::MAX) {
        count += arrive(decoder, have, seq, &payload);
    }
    count
}
