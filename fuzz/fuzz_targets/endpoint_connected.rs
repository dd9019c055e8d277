//! Arbitrary datagrams, seemingly from the peer, into a server with an established connection:
//! no panic; the connection either goes on or closes with a reason. An odd first byte turns
//! streaming repair on, so that repair and repair ack frames reach their decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_netem::LinkConfig;
use rally_proto::{ConnectionConfig, EndpointConfig, Repair};
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let repair =
        if data.first().is_some_and(|b| b % 2 == 1) { Repair::adaptive() } else { Repair::Off };
    let connection = ConnectionConfig { repair, ..ConnectionConfig::default() };
    let config = EndpointConfig { connection, ..EndpointConfig::default() };
    let mut pair = Pair::new(config, LinkConfig::default(), 3);
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
