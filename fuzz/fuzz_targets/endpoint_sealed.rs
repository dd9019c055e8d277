//! Arbitrary datagrams, seemingly from the peer, into both ends of a connection opened with a
//! connect token: no panic, and the connection goes on (nothing unsealed can close it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_netem::LinkConfig;
use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::{EndpointConfig, Event, Security, TokenKey};
use rally_sim::{Net, VirtualClock};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let server = "10.0.0.2:7777".parse().unwrap();
    let key = TokenKey([3; 32]);
    let security =
        Security::Tokens { key: key.clone(), protocol_id: 1, address: server, unix_at_zero: 1000 };
    let mut net = Net::new(
        EndpointConfig { security, ..EndpointConfig::default() },
        LinkConfig::default(),
        1,
        3,
    );
    let grant = Grant {
        client_id: 1,
        room_id: 1,
        user_data: [0; USER_DATA_LEN],
        server_addresses: vec![server],
        timeout_s: 5,
    };
    let random = TokenRandomness {
        nonce: [1; 24],
        client_to_server_key: [2; 32],
        server_to_client_key: [3; 32],
    };
    let token = token::issue(&key, 1, &grant, 1000, 60, &random).unwrap();
    if !net.connect_all_with_tokens(Duration::from_secs(1), |_| token.clone()) {
        return;
    }
    for (i, datagram) in data.split(|b| *b == 0xFF).take(32).enumerate() {
        let now = net.now();
        if i % 2 == 0 {
            let from = net.clients[0].addr;
            net.server.handle_datagram(now, from, datagram);
        } else {
            net.clients[0].endpoint.handle_datagram(now, server, datagram);
        }
        net.drive();
    }
    let deadline = net.now() + Duration::from_millis(300);
    net.run_until(deadline);
    let closed = |events: &[(rally_proto::ConnectionHandle, Event)]| {
        events.iter().any(|(_, e)| matches!(e, Event::Disconnected { .. }))
    };
    assert!(!closed(&net.server_events) && !closed(&net.clients[0].events));
});
