//! The workspace's lock file keeps the WebTransport stack's build lean: `url` (through
//! wtransport) takes its IDNA back end from whichever `idna_adapter` the lock names, and 1.0.0
//! is the stub without Unicode tables. A `cargo update` would bring back 1.2 and with it ICU4X's
//! 20 crates, some 12 s of CPU in the first `cargo demo` (docs/web.md) for URLs the gateway
//! never needs: internationalized domain names.

#[test]
fn the_lock_keeps_idna_without_its_unicode_back_end() {
    let lock = include_str!("../../../Cargo.lock");
    let adapter = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"idna_adapter\"\n"))
        .expect("url depends on idna_adapter");
    assert!(
        adapter.contains("\nversion = \"1.0.0\"\n"),
        "Cargo.lock must pin idna_adapter at 1.0.0 (`cargo update -p idna_adapter --precise \
         1.0.0`), not:{adapter}"
    );
    assert!(!lock.contains("\nname = \"icu_normalizer\"\n"), "ICU4X is back in Cargo.lock");
}
