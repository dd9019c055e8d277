//! Arbitrary datagrams from several addresses into a fresh endpoint: it must never panic, never
//! answer with more bytes than it received, and never keep state for strangers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_proto::{Endpoint, EndpointConfig, EndpointRandomness, Instant};
use std::net::SocketAddr;

fuzz_target!(|data: &[u8]| {
    let randomness = EndpointRandomness::danger_from_seed(7);
    let mut endpoint =
        Endpoint::new(EndpointConfig::default(), randomness).expect("the default config is valid");
    let mut buf = [0u8; 1500];
    for (i, datagram) in data.split(|b| *b == 0xFF).enumerate().take(32) {
        let from = SocketAddr::from(([10, 0, 0, (i % 4) as u8], 4000));
        let now = Instant::from_millis(i as u64);
        endpoint.handle_datagram(now, from, datagram);
        while let Some(t) = endpoint.poll_transmit(now, &mut buf) {
            assert!(t.len <= datagram.len().max(2), "amplification");
        }
        while endpoint.poll_event().is_some() {}
    }
});
