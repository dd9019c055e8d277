//! The gateway's self-signed certificate and its renewal while the gateway runs.
//!
//! Browsers trust a certificate by its hash only while it is valid, and for at most 14 days, so
//! a gateway that runs longer makes a new one before the old one ends: every
//! [`RENEW_AFTER`] (checked every [`RENEW_CHECK`]), well inside [`CERTIFICATE_DAYS`]. Sessions
//! already open keep theirs (TLS is done); new ones get the new certificate. The hash a page
//! needs is read from [`CurrentCertificate`] when its token is handed out, and written again to
//! the file [`CurrentCertificate::write_to`] names, for a game's backend. A page handed the old
//! hash in the moment before a renewal finds it refused and falls back to the WebSocket.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};
use wtransport::Identity;

/// Days the self-signed certificate is valid from its making: under the 14 browsers allow for
/// a certificate trusted by its hash.
pub const CERTIFICATE_DAYS: u32 = 13;

/// A certificate's age at which the gateway makes the next one: about half its validity, so a
/// clock that jumps or a renewal that fails and is retried still leaves days to spare.
pub const RENEW_AFTER: Duration = Duration::from_secs(6 * 86_400);

/// How often the gateway asks whether its certificate is due.
pub const RENEW_CHECK: Duration = Duration::from_secs(60);

/// Whether a certificate made at `made` is due for renewal at `now` (time as an argument, so
/// that the schedule is tested without waiting days). A clock that went back is not a reason.
pub fn renewal_due(made: SystemTime, now: SystemTime) -> bool {
    now.duration_since(made).is_ok_and(|age| age >= RENEW_AFTER)
}

/// The certificate the gateway serves now: its hash, when it was made, and where to write the
/// hash at each renewal. Cloning shares it.
#[derive(Debug, Clone)]
pub struct CurrentCertificate(Arc<Mutex<State>>);

#[derive(Debug)]
struct State {
    hash: [u8; 32],
    made: SystemTime,
    renewals: u64,
    failures: u64,
    file: Option<PathBuf>,
}

impl CurrentCertificate {
    /// A certificate with this SHA-256, made at `made`.
    pub fn new(hash: [u8; 32], made: SystemTime) -> Self {
        Self(Arc::new(Mutex::new(State { hash, made, renewals: 0, failures: 0, file: None })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a few plain fields, whole after any panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The SHA-256 of the certificate's DER, which the page passes as
    /// `serverCertificateHashes`.
    pub fn hash(&self) -> [u8; 32] {
        self.state().hash
    }

    /// [`Self::hash`] in lowercase hex, as the page receives it.
    pub fn hash_hex(&self) -> String {
        hex(&self.hash())
    }

    /// When the certificate served now was made.
    pub fn made(&self) -> SystemTime {
        self.state().made
    }

    /// Renewals since the gateway started.
    pub fn renewals(&self) -> u64 {
        self.state().renewals
    }

    /// Renewals that failed (no new certificate, or its hash not written to the file): the
    /// old certificate serves on, and a failed making is tried again at the next check.
    pub fn failures(&self) -> u64 {
        self.state().failures
    }

    pub(crate) fn failed(&self) {
        self.state().failures += 1;
    }

    /// Writes the hash (hex, a line) to `path` now and again at every renewal.
    pub fn write_to(&self, path: impl Into<PathBuf>) -> io::Result<()> {
        let mut state = self.state();
        let path = path.into();
        std::fs::write(&path, hex(&state.hash) + "\n")?;
        state.file = Some(path);
        Ok(())
    }

    /// The gateway now serves a certificate with `hash`, made at `made`.
    pub(crate) fn renewed(&self, hash: [u8; 32], made: SystemTime) -> io::Result<()> {
        let mut state = self.state();
        (state.hash, state.made) = (hash, made);
        state.renewals += 1;
        match &state.file {
            Some(path) => std::fs::write(path, hex(&hash) + "\n"),
            None => Ok(()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new self-signed identity: ECDSA P-256 (wtransport's), valid from now for
/// [`CERTIFICATE_DAYS`], named for loopback and the listening address; and its hash.
pub(crate) fn identity(listen: SocketAddr) -> io::Result<(Identity, [u8; 32])> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
        names.push(listen.ip().to_string());
    }
    let identity = Identity::self_signed_builder()
        .subject_alt_names(names)
        .from_now_utc()
        .validity_days(CERTIFICATE_DAYS)
        .build()
        .map_err(io::Error::other)?;
    let hash = *identity.certificate_chain().as_slice()[0].hash().as_ref();
    Ok((identity, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_certificate_is_renewed_days_before_browsers_stop_trusting_it() {
        let made = SystemTime::UNIX_EPOCH + 1000 * DAY;
        assert!(!renewal_due(made, made));
        assert!(!renewal_due(made, made + RENEW_AFTER - Duration::from_secs(1)));
        assert!(renewal_due(made, made + RENEW_AFTER));
        // Due from then on, and checked often enough to be renewed with days to spare.
        assert!(renewal_due(made, made + 12 * DAY));
        assert!(RENEW_AFTER + RENEW_CHECK + DAY < CERTIFICATE_DAYS * DAY);
        // A clock set back is no reason to renew.
        assert!(!renewal_due(made, made - DAY));
    }

    #[test]
    fn a_renewal_changes_the_hash_pages_get_and_rewrites_the_file() {
        let dir = std::env::temp_dir().join(format!("rally-cert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hash");
        let made = SystemTime::UNIX_EPOCH;
        let current = CurrentCertificate::new([0xab; 32], made);
        let shared = current.clone();
        current.write_to(&file).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "ab".repeat(32) + "\n");
        current.renewed([0x01; 32], made + RENEW_AFTER).unwrap();
        assert_eq!((shared.hash_hex(), shared.renewals()), ("01".repeat(32), 1));
        assert_eq!(shared.made(), made + RENEW_AFTER);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "01".repeat(32) + "\n");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
