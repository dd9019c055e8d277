//! Goal: a client connects through the stateless handshake on a clean link and through heavy
//! loss, and gives up with a typed reason when nobody answers. Method: the pair harness on
//! emulated links, in virtual time.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::{DisconnectReason, EndpointConfig, Event};
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

#[test]
fn connects_on_a_clean_link_within_two_round_trips() {
    let link = LinkConfig { delay: Duration::from_millis(10), ..LinkConfig::default() };
    let mut pair = Pair::new(EndpointConfig::default(), link, 1);
    assert!(pair.connect(Duration::from_secs(1)).is_some());
    // Request, challenge, response, first data packet: two round trips of 20 ms.
    assert!(pair.now() <= rally_proto::Instant::from_millis(41), "connected at {}", pair.now());
}

#[test]
fn connects_through_thirty_percent_loss() {
    for seed in 0..20 {
        let link = LinkConfig {
            delay: Duration::from_millis(10),
            loss: LossModel::Bernoulli { probability: 0.3 },
            ..LinkConfig::default()
        };
        let mut pair = Pair::new(EndpointConfig::default(), link, seed);
        assert!(pair.connect(Duration::from_secs(3)).is_some(), "seed {seed}");
    }
}

#[test]
fn gives_up_with_timed_out_when_nobody_answers() {
    let link =
        LinkConfig { loss: LossModel::Bernoulli { probability: 1.0 }, ..LinkConfig::default() };
    let mut pair = Pair::new(EndpointConfig::default(), link, 1);
    assert!(pair.connect(Duration::from_secs(10)).is_none());
    let last = pair.client_events().last().map(|(_, e)| e.clone());
    assert_eq!(last, Some(Event::Disconnected { reason: DisconnectReason::TimedOut }));
    assert_eq!(pair.server().stats().malformed, 0);
}
