//! Arbitrary datagrams, seemingly from the peer, into a server with an established connection:
//! no panic; the connection either goes on or closes with a reason.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_netem::LinkConfig;
use rally_proto::EndpointConfig;
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let mut pair = Pair::new(EndpointConfig::default(), LinkConfig::default(), 3);
    if pair.connect(Duration::from_secs(1)).is_none() {
        return;
    }
    for datagram in data.split(|b| *b == 0xFF).take(32) {
        let (now, from) = (pair.now(), pair.client_addr());
        pair.server().handle_datagram(now, from, datagram);
        pair.drive();
    }
    let deadline = pair.now() + Duration::from_millis(300);
    pair.run_until(deadline);
});
