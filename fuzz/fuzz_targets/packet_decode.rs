//! Arbitrary bytes as a datagram and, for data packets, its frames.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_proto::packet::{Frames, Packet};

fuzz_target!(|data: &[u8]| {
    if let Ok(Packet::Data { header, frames }) = Packet::decode(data) {
        for frame in Frames::new(frames, header.seq) {
            if frame.is_err() {
                break;
            }
        }
    }
});
