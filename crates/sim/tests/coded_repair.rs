//! Goal: streaming repair (`Repair::Adaptive`) keeps the reliable-ordered contract (every
//! message once, in order) under loss, reordering and duplication, and fills a lost message
//! from the repair that follows it, sooner than any resend could.
//! Method: sealed pairs in virtual time; the first test streams messages of mixed sizes
//! (fragmented ones included, which repairs skip) over a link that loses (independently, in
//! bursts of packets, and in outages of time), reorders and duplicates, and compares what
//! arrived with what was sent; the second places one loss by hand on a fixed 10 ms link and
//! times the delivery. The links that lose in bursts and outages run with short (12-byte)
//! tags, as the configuration recommended for lossy links does.

use rally_netem::{LinkConfig, LossModel};
use rally_proto::{ConnectionConfig, ConnectionHandle, EndpointConfig, Repair, SendError};
use rally_sim::{Pair, VirtualClock};
use std::time::Duration;

fn config(repair: Repair) -> EndpointConfig {
    config_tagged(repair, false)
}

fn config_tagged(repair: Repair, short_tag: bool) -> EndpointConfig {
    let connection = ConnectionConfig { repair, short_tag, ..ConnectionConfig::default() };
    EndpointConfig { connection, ..EndpointConfig::default() }
}

fn payload(k: usize) -> Vec<u8> {
    let len = match k % 50 {
        0 => 3000,
        7 => 0,
        _ => 1 + (k * 37) % 700,
    };
    (0..len).map(|i| (i ^ k) as u8).collect()
}

#[test]
fn coded_delivery_is_exact_under_loss_reordering_and_duplication() {
    // Outages in time take whole runs of messages, their repairs and the resends with them.
    let outages = LossModel::Outages { mean_loss: 0.1, mean_outage: Duration::from_millis(67) };
    for (seed, loss) in [
        (1, LossModel::Bernoulli { probability: 0.1 }),
        (2, LossModel::bursts(0.1, 4.0)),
        (3, outages),
    ] {
        let link = LinkConfig {
            delay: Duration::from_millis(15),
            jitter: Duration::from_millis(4),
            reorder: true,
            duplicate: 0.05,
            loss,
            ..LinkConfig::default()
        };
        let short_tag = seed != 1;
        let mut pair = Pair::secure(config_tagged(Repair::adaptive(), short_tag), link, seed);
        let (client, server) = pair.connect(Duration::from_secs(10)).expect("connects");
        let sent: Vec<Vec<u8>> = (0..900).map(payload).collect();
        for message in &sent {
            // A refused send is the back-pressure an application meets (`send_delay_max`):
            // an outage of the acks' direction (bursts of 19 ack packets lost in a row happen
            // on seed 2) leaves the oldest message unacknowledged for that long. The
            // application sends again a frame later, as this loop does.
            for refused in 0.. {
                match pair.client().send(client, 0, message) {
                    Ok(()) => break,
                    Err(SendError::QueueFull(0)) if refused < 600 => {
                        let next = pair.now() + Duration::from_micros(16_667);
                        pair.run_until(next);
                    }
                    Err(e) => panic!("seed {seed}: {e:?} after {refused} frames"),
                }
            }
            let next = pair.now() + Duration::from_micros(16_667);
            pair.run_until(next);
        }
        let end = pair.now() + Duration::from_secs(10);
        pair.run_until(end);
        let got: Vec<&[u8]> = pair.server_messages(0);
        assert_eq!(got.len(), sent.len(), "seed {seed}: every message once");
        assert!(got.iter().zip(&sent).all(|(g, s)| *g == s.as_slice()), "seed {seed}: in order");
        let client_stats = pair.client().connection(client).expect("open").stats();
        let server_stats = pair.server().connection(server).expect("open").stats();
        assert!(client_stats.repairs_sent > 100, "seed {seed}: {client_stats:?}");
        assert!(server_stats.messages_repaired > 10, "seed {seed}: {server_stats:?}");
        assert_eq!(server_stats.repairs_failed, 0, "seed {seed}");
    }
}

/// Whether the uplink loses every packet from now on.
fn uplink_loses(pair: &mut Pair, lose: bool) {
    let loss = if lose { LossModel::Bernoulli { probability: 1.0 } } else { LossModel::None };
    let config = LinkConfig { loss, ..*pair.up().config() };
    pair.up().set_config(config);
}

/// A pair on a fixed 10 ms link that has measured one loss (so that repairs are on, with a
/// threshold of zero) and settled its RTT.
fn repairing_pair() -> (Pair, ConnectionHandle, ConnectionHandle) {
    let repair = Repair::Adaptive { loss_threshold: 0.0, interval: Duration::from_millis(2) };
    let link = LinkConfig { delay: Duration::from_millis(10), ..LinkConfig::default() };
    let mut pair = Pair::secure(config(repair), link, 3);
    let (client, server) = pair.connect(Duration::from_secs(5)).expect("connects");
    for k in 0..30 {
        uplink_loses(&mut pair, k == 5);
        pair.client().send(client, 1, b"ping").expect("room");
        pair.drive();
        uplink_loses(&mut pair, false);
        let next = pair.now() + Duration::from_millis(50);
        pair.run_until(next);
    }
    let stats = pair.client().connection(client).expect("open").stats();
    assert!(stats.packets_lost >= 1, "the loss was seen: {stats:?}");
    (pair, client, server)
}

#[test]
fn a_lost_message_is_filled_by_the_repair_after_it() {
    let (mut pair, client, server) = repairing_pair();
    let start = pair.now();
    uplink_loses(&mut pair, true);
    pair.client().send(client, 0, b"lost, then repaired").expect("room");
    pair.drive();
    uplink_loses(&mut pair, false);
    let limit = start + Duration::from_secs(1);
    while pair.server_messages(0).is_empty() && pair.now() < limit {
        let next = pair.now() + Duration::from_micros(500);
        pair.run_until(next);
    }
    let delivered = pair.now() - start;
    // The repair leaves 2 ms after the message and arrives 10 ms later. A resend would need
    // the resend timer (more than the 20 ms round trip).
    assert!(delivered <= Duration::from_millis(13), "delivered after {delivered:?}");
    assert_eq!(pair.server_messages(0), [b"lost, then repaired".as_slice()]);
    let stats = pair.server().connection(server).expect("open").stats();
    assert_eq!(stats.messages_repaired, 1);
}
