//! Sealing plus opening one 400-byte packet (an 8-byte header as associated data, the rest
//! encrypted, a 16-byte tag), with Rally's AEAD (RustCrypto's ChaCha20-Poly1305 as rally-proto
//! builds it: ChaCha20 on AVX2 when the CPU has it, Poly1305 on the portable backend) and with
//! ring's (BoringSSL's assembly, SIMD Poly1305), the same construction (RFC 8439), interleaved
//! in one run. Packets sealed by one open with the other: the check that they compute the
//! same thing.

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce, Tag};
use ring::aead::{self, Aad, LessSafeKey, UnboundKey, CHACHA20_POLY1305};
use serde::Serialize;

/// The packet: about a reference snapshot's size.
const PACKET: usize = 400;
/// Associated data: the packet's header.
const HEADER: usize = 8;
/// Seal-and-open rounds per timing.
const ROUNDS: u64 = 20_000;
const KEY: [u8; 32] = [7; 32];

/// Nanoseconds to seal and open one packet, the best of five timings each.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SealCost {
    pub(super) packet_bytes: usize,
    pub(super) rustcrypto_ns: f64,
    pub(super) ring_ns: f64,
}

/// Times both, interleaved, after checking that each opens what the other sealed.
pub(super) fn measure() -> Result<SealCost, String> {
    agree()?;
    let rust_crypto = ChaCha20Poly1305::new(Key::from_slice(&KEY));
    let ring = ring_key();
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        best.0 = best.0.min(time(|n, buf| seal_open_rustcrypto(&rust_crypto, n, buf)));
        best.1 = best.1.min(time(|n, buf| seal_open_ring(&ring, n, buf)));
    }
    Ok(SealCost { packet_bytes: PACKET, rustcrypto_ns: best.0, ring_ns: best.1 })
}

fn ring_key() -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &KEY).expect("a 32-byte key"))
}

fn nonce(n: u64) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&n.to_le_bytes());
    nonce
}

/// Nanoseconds per round of `round(n, packet)`.
#[allow(clippy::disallowed_methods)] // a benchmark reads the clock
fn time(mut round: impl FnMut(u64, &mut [u8; PACKET])) -> f64 {
    let mut packet = [0u8; PACKET];
    let started = std::time::Instant::now();
    for n in 0..ROUNDS {
        round(n, &mut packet);
    }
    std::hint::black_box(&packet);
    started.elapsed().as_nanos() as f64 / ROUNDS as f64
}

fn seal_open_rustcrypto(cipher: &ChaCha20Poly1305, n: u64, packet: &mut [u8; PACKET]) {
    let nonce = nonce(n);
    let (aad, body) = packet.split_at_mut(HEADER);
    let nonce = Nonce::from_slice(&nonce);
    let tag = cipher.encrypt_in_place_detached(nonce, aad, body).expect("a short packet seals");
    cipher.decrypt_in_place_detached(nonce, aad, body, &tag).expect("its own packet opens");
}

fn seal_open_ring(key: &LessSafeKey, n: u64, packet: &mut [u8; PACKET]) {
    let (aad, body) = packet.split_at_mut(HEADER);
    let sealing = aead::Nonce::assume_unique_for_key(nonce(n));
    let tag = key
        .seal_in_place_separate_tag(sealing, Aad::from(&*aad), body)
        .expect("a short packet seals");
    let opening = aead::Nonce::assume_unique_for_key(nonce(n));
    key.open_in_place_separate_tag(opening, Aad::from(&*aad), tag, body, 0..)
        .expect("its own packet opens");
}

/// Each opens what the other sealed, and refuses it with a flipped bit.
fn agree() -> Result<(), String> {
    let rust_crypto = ChaCha20Poly1305::new(Key::from_slice(&KEY));
    let ring = ring_key();
    let mut packet = [0u8; PACKET];
    packet.iter_mut().enumerate().for_each(|(k, b)| *b = k as u8);
    let (aad, body) = packet.split_at_mut(HEADER);
    let nonce = nonce(3);
    let tag = rust_crypto
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), aad, body)
        .map_err(|_| "RustCrypto refused to seal")?;
    let ring_tag = aead::Tag::try_from(tag.as_slice()).map_err(|_| "a 16-byte tag")?;
    let mut flipped = body.to_vec();
    flipped[0] ^= 1;
    let open = |body: &mut [u8]| {
        let nonce = aead::Nonce::assume_unique_for_key(nonce);
        ring.open_in_place_separate_tag(nonce, Aad::from(&*aad), ring_tag, body, 0..).is_ok()
    };
    if open(&mut flipped) || !open(body) {
        return Err("ring and RustCrypto disagree on a sealed packet".into());
    }
    let tag = ring
        .seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            Aad::from(&*aad),
            body,
        )
        .map_err(|_| "ring refused to seal")?;
    let tag = Tag::from_slice(tag.as_ref());
    rust_crypto
        .decrypt_in_place_detached(Nonce::from_slice(&nonce), aad, body, tag)
        .map_err(|_| "RustCrypto did not open ring's packet".to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ring_and_rustcrypto_open_each_others_packets() {
        // Goal: the comparison times the same construction on both sides (a swapped nonce
        // layout or key would make one of them a different, cheaper or dearer, computation).
        super::agree().expect("they agree");
    }
}
