//! Sealing plus opening one 400-byte packet (an 8-byte header as associated data, the rest
//! encrypted, a 16-byte tag) with each AEAD Rally could seal its packets with: ChaCha20-Poly1305
//! (RFC 8439) and AES-128-GCM, each from RustCrypto (pure Rust, SIMD and AES-NI/CLMUL picked at
//! run time) and from ring (BoringSSL's assembly), interleaved in one run. Each is timed (best
//! of five) and, under `--callgrind`, counted in instructions. Packets sealed by one library
//! open with the other: the check that both compute the same construction. The last row is
//! AES-256-GCM with the 12-byte tag of a connection with short tags, as Rally seals and opens
//! it: ring seals and the tag is cut, RustCrypto's GCM with a 12-byte tag opens.

use aes_gcm::aead::consts::U12;
use aes_gcm::aes::Aes256;
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::ChaCha20Poly1305;
use ring::aead::{self, Aad, LessSafeKey, UnboundKey};
use ring::aead::{AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
use serde::Serialize;
use std::error::Error;
use std::path::Path;
use std::process::Command;

/// The packet: about a reference snapshot's size.
const PACKET: usize = 400;
/// Associated data: the packet's header.
const HEADER: usize = 8;
/// Seal-and-open rounds per timing.
const ROUNDS: u64 = 20_000;
/// Seal-and-open rounds counted under callgrind.
const COUNTED_ROUNDS: u64 = 1_000;
const KEY: [u8; 32] = [7; 32];

/// The AEADs compared, by name (what `--seal-rounds` takes).
pub(super) const AEADS: [&str; 7] = [
    "ChaCha20-Poly1305 RustCrypto",
    "ChaCha20-Poly1305 ring",
    "AES-128-GCM RustCrypto",
    "AES-128-GCM ring",
    "AES-256-GCM RustCrypto",
    "AES-256-GCM ring",
    "AES-256-GCM 12-byte tag",
];

/// One AEAD's keyed cipher (a few of them, held for one run: their sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Sealer {
    RustCrypto(ChaCha20Poly1305),
    RustCryptoAes(Box<Aes128Gcm>),
    RustCryptoAes256(Box<Aes256Gcm>),
    Ring(LessSafeKey),
    /// ring seals, RustCrypto opens the cut tag (ring verifies full tags only).
    ShortTag(LessSafeKey, Box<AesGcm<Aes256, U12, U12>>),
}

impl Sealer {
    fn new(name: &str) -> Result<Self, String> {
        let ring = |algorithm, key: &[u8]| {
            let key = UnboundKey::new(algorithm, key).map_err(|_| "a key of the wrong size")?;
            Ok(Sealer::Ring(LessSafeKey::new(key)))
        };
        match name {
            "ChaCha20-Poly1305 RustCrypto" => {
                Ok(Sealer::RustCrypto(ChaCha20Poly1305::new((&KEY).into())))
            }
            "AES-128-GCM RustCrypto" => {
                let key: &[u8; 16] = KEY[..16].try_into().expect("16 of 32 bytes");
                Ok(Sealer::RustCryptoAes(Box::new(Aes128Gcm::new(key.into()))))
            }
            "AES-256-GCM RustCrypto" => {
                Ok(Sealer::RustCryptoAes256(Box::new(Aes256Gcm::new((&KEY).into()))))
            }
            "ChaCha20-Poly1305 ring" => ring(&CHACHA20_POLY1305, &KEY),
            "AES-256-GCM ring" => ring(&AES_256_GCM, &KEY),
            "AES-128-GCM ring" => ring(&AES_128_GCM, &KEY[..16]),
            "AES-256-GCM 12-byte tag" => {
                let key = UnboundKey::new(&AES_256_GCM, &KEY).map_err(|_| "a 32-byte key")?;
                let opener = Box::new(AesGcm::new((&KEY).into()));
                Ok(Sealer::ShortTag(LessSafeKey::new(key), opener))
            }
            _ => Err(format!("no AEAD named {name:?} (one of {AEADS:?})")),
        }
    }

    /// Seals `body` in place as packet `n`, authenticating `aad`; the tag.
    fn seal(&self, n: u64, aad: &[u8], body: &mut [u8]) -> [u8; 16] {
        let nonce = nonce(n);
        let tag: Option<[u8; 16]> = match self {
            Sealer::RustCrypto(c) => {
                c.encrypt_in_place_detached((&nonce).into(), aad, body).ok().map(Into::into)
            }
            Sealer::RustCryptoAes(c) => {
                c.encrypt_in_place_detached((&nonce).into(), aad, body).ok().map(Into::into)
            }
            Sealer::RustCryptoAes256(c) => {
                c.encrypt_in_place_detached((&nonce).into(), aad, body).ok().map(Into::into)
            }
            // The 12-byte tag is the full tag's first 12 bytes; the rest goes unused.
            Sealer::Ring(key) | Sealer::ShortTag(key, _) => key
                .seal_in_place_separate_tag(ring_nonce(n), Aad::from(aad), body)
                .ok()
                .and_then(|tag| tag.as_ref().try_into().ok()),
        };
        tag.expect("a short packet seals")
    }

    /// Opens `body` in place as packet `n`; whether it authenticated.
    fn open(&self, n: u64, aad: &[u8], body: &mut [u8], tag: &[u8; 16]) -> bool {
        let nonce = nonce(n);
        match self {
            Sealer::RustCrypto(c) => {
                c.decrypt_in_place_detached((&nonce).into(), aad, body, tag.into()).is_ok()
            }
            Sealer::RustCryptoAes(c) => {
                c.decrypt_in_place_detached((&nonce).into(), aad, body, tag.into()).is_ok()
            }
            Sealer::RustCryptoAes256(c) => {
                c.decrypt_in_place_detached((&nonce).into(), aad, body, tag.into()).is_ok()
            }
            Sealer::ShortTag(_, c) => {
                let tag: &[u8; 12] = tag[..12].try_into().expect("12 of 16 bytes");
                c.decrypt_in_place_detached((&nonce).into(), aad, body, tag.into()).is_ok()
            }
            Sealer::Ring(key) => {
                let tag = aead::Tag::from(*tag);
                let opened =
                    key.open_in_place_separate_tag(ring_nonce(n), Aad::from(aad), tag, body, 0..);
                opened.is_ok()
            }
        }
    }

    fn round(&self, n: u64, packet: &mut [u8; PACKET]) {
        let (aad, body) = packet.split_at_mut(HEADER);
        let tag = self.seal(n, aad, body);
        assert!(self.open(n, aad, body, &tag), "its own packet opens");
    }
}

/// One AEAD's cost to seal and open one packet.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SealCost {
    pub(super) aead: &'static str,
    pub(super) packet_bytes: usize,
    /// Nanoseconds, the best of five timings.
    pub(super) ns: f64,
    /// Instructions (callgrind), when counted.
    pub(super) instructions: Option<f64>,
}

/// Times every AEAD, interleaved, after checking that the libraries open each other's packets.
pub(super) fn measure() -> Result<Vec<SealCost>, String> {
    agree()?;
    let sealers = AEADS.iter().map(|name| Sealer::new(name)).collect::<Result<Vec<_>, _>>()?;
    let mut best = [f64::MAX; AEADS.len()];
    for _ in 0..5 {
        for (best, sealer) in best.iter_mut().zip(&sealers) {
            *best = best.min(time(sealer));
        }
    }
    let costs = AEADS.iter().zip(best);
    Ok(costs
        .map(|(aead, ns)| SealCost { aead, packet_bytes: PACKET, ns, instructions: None })
        .collect())
}

/// Counts each AEAD's instructions per seal and open under callgrind (`count --seal-rounds`).
pub(super) fn count(costs: &mut [SealCost], out: &Path) -> Result<(), Box<dyn Error>> {
    for cost in costs {
        let file = out.join(format!("callgrind.seal-{}.out", cost.aead.replace(' ', "-")));
        let status = Command::new("valgrind")
            .args(["--tool=callgrind", "--collect-atstart=no"])
            .arg("--toggle-collect=*count_seal::rounds*")
            .arg(format!("--callgrind-out-file={}", file.display()))
            .arg(std::env::current_exe()?)
            .args(["count", "--seal-rounds", cost.aead])
            .output()?;
        if !status.status.success() {
            let stderr = String::from_utf8_lossy(&status.stderr);
            return Err(format!("{} under callgrind failed:\n{stderr}", cost.aead).into());
        }
        let text = std::fs::read_to_string(&file)?;
        let totals = text.lines().find_map(|l| l.strip_prefix("totals: "));
        let total: u64 = totals.ok_or("callgrind wrote no totals")?.trim().parse()?;
        cost.instructions = Some(total as f64 / COUNTED_ROUNDS as f64);
    }
    Ok(())
}

/// What `--seal-rounds NAME` runs under callgrind: the counted rounds of one AEAD.
pub(super) fn run_rounds(name: &str) -> Result<(), String> {
    let sealer = Sealer::new(name)?;
    let mut packet = [0u8; PACKET];
    // One round first: what a first call sets up (CPU detection) is not a packet's cost.
    sealer.round(0, &mut packet);
    rounds(&sealer, &mut packet);
    std::hint::black_box(&packet);
    Ok(())
}

/// The counted rounds: callgrind collects inside this function only.
#[inline(never)]
fn rounds(sealer: &Sealer, packet: &mut [u8; PACKET]) {
    for n in 1..=COUNTED_ROUNDS {
        sealer.round(n, packet);
    }
}

fn nonce(n: u64) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&n.to_le_bytes());
    nonce
}

fn ring_nonce(n: u64) -> aead::Nonce {
    aead::Nonce::assume_unique_for_key(nonce(n))
}

/// Nanoseconds per seal-and-open round.
#[allow(clippy::disallowed_methods)] // a benchmark reads the clock
fn time(sealer: &Sealer) -> f64 {
    let mut packet = [0u8; PACKET];
    let started = std::time::Instant::now();
    for n in 0..ROUNDS {
        sealer.round(n, &mut packet);
    }
    std::hint::black_box(&packet);
    started.elapsed().as_nanos() as f64 / ROUNDS as f64
}

/// For each construction, ring and RustCrypto open each other's packets and refuse them with a
/// flipped bit.
fn agree() -> Result<(), String> {
    let pairs = [(AEADS[0], AEADS[1]), (AEADS[2], AEADS[3]), (AEADS[4], AEADS[5])];
    // The short tag's opener takes what ring's full AES-256-GCM sealed.
    for (rust_crypto, ring) in pairs.into_iter().chain([(AEADS[6], AEADS[5])]) {
        let (a, b) = (Sealer::new(rust_crypto)?, Sealer::new(ring)?);
        for (sealer, opener) in [(&a, &b), (&b, &a)] {
            let mut packet = [0u8; PACKET];
            packet.iter_mut().enumerate().for_each(|(k, b)| *b = k as u8);
            let (aad, body) = packet.split_at_mut(HEADER);
            let tag = sealer.seal(3, aad, body);
            let mut flipped = body.to_vec();
            flipped[0] ^= 1;
            if opener.open(3, aad, &mut flipped, &tag) || !opener.open(3, aad, body, &tag) {
                return Err(format!("{rust_crypto} and {ring} disagree on a sealed packet"));
            }
        }
    }
    Ok(())
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
