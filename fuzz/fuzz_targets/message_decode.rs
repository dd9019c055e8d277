//! Arbitrary bytes as a user message of a nested type, binary and JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_wire::MessageCodec;
use std::collections::BTreeMap;

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
enum Effect {
    Sound { clip: String, volume: f32 },
    Haptic(u8, u16),
    None,
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Rpc {
    target: Option<u32>,
    effects: Vec<Effect>,
    metadata: BTreeMap<String, i64>,
}

fuzz_target!(|data: &[u8]| {
    let codec = MessageCodec { message_bytes_max: 4096 };
    let _ = codec.decode::<Rpc>(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = codec.from_json::<Rpc>(text);
    }
});
