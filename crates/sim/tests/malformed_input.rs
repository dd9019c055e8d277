//! Goal: garbage never panics an endpoint, never grows its memory, is counted, and a peer that
//! sends broken frames is disconnected with `PeerMisbehaved` while other traffic is unharmed.
//! Method: random datagrams into a fresh and a connected endpoint (property test), and
//! hand-made bad frames.

use proptest::prelude::*;
use rally_netem::LinkConfig;
use rally_proto::{DisconnectReason, Endpoint, EndpointConfig, EndpointRandomness, Event, Instant};
use rally_sim::{Pair, VirtualClock};
use std::net::SocketAddr;
use std::time::Duration;

fn stranger() -> SocketAddr {
    "10.9.9.9:1234".parse().expect("valid")
}

proptest! {
    #[test]
    fn random_datagrams_never_panic_a_fresh_endpoint(
        bytes in prop::collection::vec(any::<u8>(), 0..1300),
    ) {
        let randomness = EndpointRandomness::danger_from_seed(1);
        let config = EndpointConfig::default();
        let mut endpoint = Endpoint::new(config, randomness).expect("the default config is valid");
        endpoint.handle_datagram(Instant::ZERO, stranger(), &bytes);
        let mut buf = [0u8; 1500];
        // At most a challenge goes back, and it is never larger than what came in.
        while let Some(t) = endpoint.poll_transmit(Instant::ZERO, &mut buf) {
            prop_assert!(t.len <= bytes.len());
        }
        prop_assert!(endpoint.poll_event().is_none());
    }

    #[test]
    fn random_datagrams_never_panic_a_connected_endpoint(
        datagrams in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..20),
    ) {
        let mut pair = Pair::new(EndpointConfig::default(), LinkConfig::default(), 2);
        pair.connect(Duration::from_secs(1)).expect("connects");
        for bytes in &datagrams {
            // From the client's own address: garbage that looks like it comes from the peer.
            let (now, from) = (pair.now(), pair.client_addr());
            pair.server().handle_datagram(now, from, bytes);
            pair.server().handle_datagram(now, stranger(), bytes);
        }
        pair.drive();
        let deadline = pair.now() + Duration::from_millis(200);
        pair.run_until(deadline);
    }
}

#[test]
fn broken_frames_disconnect_the_peer_with_a_reason() {
    let mut pair = Pair::new(EndpointConfig::default(), LinkConfig::default(), 3);
    let (_, server) = pair.connect(Duration::from_secs(1)).expect("connects");
    // A data packet (sequence 900) whose frame names channel 200, which does not exist.
    let mut bad = vec![0x13, 0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0];
    bad.extend_from_slice(&[0x01, 200, 0, 0, 1, 42]);
    let (now, from) = (pair.now(), pair.client_addr());
    pair.server().handle_datagram(now, from, &bad);
    pair.drive();
    let reason = DisconnectReason::PeerMisbehaved;
    assert!(pair.server_events().contains(&(server, Event::Disconnected { reason })));
    // The client is told, not left to time out.
    assert!(pair.client_events().iter().any(|(_, e)| *e == Event::Disconnected { reason }));
}

#[test]
fn strangers_cost_the_server_no_state() {
    let mut endpoint =
        Endpoint::new(EndpointConfig::default(), EndpointRandomness::danger_from_seed(4))
            .expect("the default config is valid");
    let mut request = vec![0u8; rally_proto::packet::CLIENT_HANDSHAKE_SIZE];
    request[0] = 0x10;
    request[1..5].copy_from_slice(&0x3159_4C52u32.to_le_bytes());
    for port in 0..10_000u16 {
        let from = SocketAddr::from(([10, 1, (port >> 8) as u8, port as u8], port));
        endpoint.handle_datagram(Instant::ZERO, from, &request);
        let mut buf = [0u8; 1500];
        while endpoint.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    }
    assert!(endpoint.poll_timeout().is_none(), "no timers means no per-stranger state");
    // A forged response is refused and counted.
    let mut forged = vec![0u8; rally_proto::packet::CLIENT_HANDSHAKE_SIZE];
    forged[0] = 0x12;
    forged[1..5].copy_from_slice(&0x3159_4C52u32.to_le_bytes());
    endpoint.handle_datagram(Instant::ZERO, stranger(), &forged);
    assert_eq!(endpoint.stats().bad_cookie, 1);
}
