//! Goal: messages larger than a packet arrive whole, through loss, on reliable channels, and
//! messages over the limit are refused at the sender. Method: 64 KiB and odd-sized messages
//! through a 10%-loss link in virtual time.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::{ConnectionConfig, EndpointConfig, SendError};
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn large_messages_arrive_whole_through_loss() {
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        loss: LossModel::Bernoulli { probability: 0.1 },
        ..LinkConfig::default()
    };
    let mut pair = Pair::new(EndpointConfig::default(), link, 3);
    let (client, _) = pair.connect(Duration::from_secs(5)).expect("connects");
    let sizes = [0, 1, 1_170, 1_171, 5_000, 65_536];
    for (i, size) in sizes.iter().enumerate() {
        pair.client().send(client, 0, &payload(*size, i as u8)).expect("fits the queue");
    }
    let deadline = pair.now() + Duration::from_secs(5);
    pair.run_until(deadline);
    let received = pair.server_messages(0);
    assert_eq!(received.len(), sizes.len());
    for (i, size) in sizes.iter().enumerate() {
        assert_eq!(received[i], payload(*size, i as u8).as_slice(), "message {i}");
    }
}

#[test]
fn oversized_messages_and_full_queues_are_refused_at_the_sender() {
    let connection = ConnectionConfig { send_queue_max: 8, ..ConnectionConfig::default() };
    let config = EndpointConfig { connection, ..EndpointConfig::default() };
    let mut pair = Pair::new(config, LinkConfig::default(), 1);
    let (client, _) = pair.connect(Duration::from_secs(1)).expect("connects");
    let too_big = vec![0; 64 * 1024 + 1];
    let err = pair.client().send(client, 0, &too_big).unwrap_err();
    assert_eq!(err, SendError::TooLarge { len: 64 * 1024 + 1, max: 64 * 1024 });
    for _ in 0..8 {
        pair.client().send(client, 0, b"x").expect("room for 8");
    }
    assert_eq!(pair.client().send(client, 0, b"x"), Err(SendError::QueueFull(0)));
    assert_eq!(pair.client().send(client, 9, b"x"), Err(SendError::UnknownChannel(9)));
    // Once acked, the queue has room again.
    let deadline = pair.now() + Duration::from_millis(100);
    pair.run_until(deadline);
    pair.client().send(client, 0, b"x").expect("acked units freed the queue");
}
