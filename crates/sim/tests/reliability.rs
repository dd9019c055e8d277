//! Goal: each channel keeps its promise through loss, duplication and reordering: reliable
//! ordered delivers every message exactly once in order, reliable unordered exactly once,
//! sequenced never goes backwards, unreliable never delivers twice what was sent once.
//! Method: 1,000 messages each way through links with 10% loss (random and bursty),
//! duplication and reordering, over several seeds, in virtual time.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::{ChannelConfig, ChannelKind, ConnectionConfig, EndpointConfig, Instant};
use rally_sim::{Pair, VirtualClock};
use std::collections::HashSet;
use std::time::Duration;

const ORDERED: u8 = 0;
const UNORDERED: u8 = 1;
const SEQUENCED: u8 = 2;
const UNRELIABLE: u8 = 3;

fn config() -> EndpointConfig {
    let channel = |kind| ChannelConfig { kind, priority: 1 };
    let connection = ConnectionConfig {
        channels: vec![
            channel(ChannelKind::ReliableOrdered),
            channel(ChannelKind::ReliableUnordered),
            channel(ChannelKind::UnreliableSequenced),
            channel(ChannelKind::Unreliable),
        ],
        ..ConnectionConfig::default()
    };
    EndpointConfig { connection, ..EndpointConfig::default() }
}

fn hostile(loss: LossModel) -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(15),
        jitter: Duration::from_millis(5),
        reorder: true,
        loss,
        duplicate: 0.02,
        ..LinkConfig::default()
    }
}

/// Sends `count` numbered messages on every channel from client to server, one per 5 ms, then
/// lets the link settle; returns the pair.
fn exchange(link: LinkConfig, seed: u64, count: u32) -> Pair {
    let mut pair = Pair::new(config(), link, seed);
    let (client, _) = pair.connect(Duration::from_secs(5)).expect("connects");
    for i in 0..count {
        for channel in [ORDERED, UNORDERED, SEQUENCED, UNRELIABLE] {
            pair.client().send(client, channel, &i.to_le_bytes()).expect("queue has room");
        }
        pair.drive();
        let next = pair.now() + Duration::from_millis(5);
        pair.run_until(next);
    }
    let settle = pair.now() + Duration::from_secs(3);
    pair.run_until(settle);
    pair
}

fn numbers(messages: Vec<&[u8]>) -> Vec<u32> {
    messages.iter().map(|m| u32::from_le_bytes((*m).try_into().expect("4 bytes"))).collect()
}

#[test]
fn every_channel_keeps_its_promise_through_loss_duplication_and_reordering() {
    for seed in 0..4 {
        for loss in [LossModel::Bernoulli { probability: 0.1 }, LossModel::bursts(0.1, 4.0)] {
            let pair = exchange(hostile(loss), seed, 1000);
            let ordered = numbers(pair.server_messages(ORDERED));
            assert_eq!(ordered, (0..1000).collect::<Vec<_>>(), "seed {seed} {loss:?}");

            let mut unordered = numbers(pair.server_messages(UNORDERED));
            let distinct: HashSet<_> = unordered.iter().collect();
            assert_eq!(distinct.len(), unordered.len(), "unordered delivered a duplicate");
            unordered.sort();
            assert_eq!(unordered, (0..1000).collect::<Vec<_>>(), "seed {seed}");

            let sequenced = numbers(pair.server_messages(SEQUENCED));
            assert!(sequenced.windows(2).all(|w| w[0] < w[1]), "sequenced went backwards");
            // Loss and reordering (jitter as large as the send interval) drop some; a channel
            // that delivers at all delivers most.
            assert!(sequenced.len() > 500, "sequenced delivered only {}", sequenced.len());

            let unreliable = numbers(pair.server_messages(UNRELIABLE));
            let distinct: HashSet<_> = unreliable.iter().collect();
            assert_eq!(distinct.len(), unreliable.len(), "unreliable delivered a duplicate");
        }
    }
}

#[test]
fn acks_flow_and_rtt_is_measured() {
    let link = LinkConfig { delay: Duration::from_millis(20), ..LinkConfig::default() };
    let mut pair = exchange(link, 1, 200);
    let (client, _) = pair.client_events()[0];
    let stats = pair.client().connection(client).expect("open").stats();
    let rtt = stats.rtt.as_secs_f64();
    assert!((0.039..0.045).contains(&rtt), "rtt {rtt}");
    assert_eq!(stats.send_queue.iter().sum::<usize>(), 0, "everything was acked");
    assert_eq!(stats.packets_lost, 0);
    assert!(pair.now() > Instant::from_millis(1000));
}
