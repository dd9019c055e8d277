//! Arbitrary bytes as a connect token, decoded and opened as a server would: never a panic,
//! and never a grant (nothing but a key's holder can seal one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_proto::token::{self, ConnectToken, TokenKey};

fuzz_target!(|data: &[u8]| {
    let Ok(token) = ConnectToken::decode(data) else { return };
    let server = "127.0.0.1:7777".parse().unwrap();
    let key = TokenKey([7; 32]);
    let opened = token::open(
        &key,
        token.protocol_id,
        token.expires_at,
        &token.nonce,
        &token.sealed,
        0,
        server,
    );
    assert!(opened.is_err(), "a token nobody sealed opened");
    let _ = token.encode();
});
