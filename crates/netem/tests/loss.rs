//! Goal: each loss model loses what it claims over 100k packets, and a seed replays exactly.
//! Method: send 100,000 packets through a link with only loss configured and compare the
//! effective loss (and Gilbert-Elliott's burst lengths) with the model, within stated
//! tolerances (several standard errors wide, so the tests are deterministic, not flaky).

use rally_netem::{Link, LinkConfig, LossModel};
use rally_proto::Instant;
use std::time::Duration;

const PACKETS: u64 = 100_000;

/// Sends PACKETS one microsecond apart and returns, per packet, whether it arrived.
fn arrivals(loss: LossModel, seed: u64) -> Vec<bool> {
    let mut link = Link::new(LinkConfig { loss, ..LinkConfig::default() }, seed);
    let mut arrived = vec![false; PACKETS as usize];
    for i in 0..PACKETS {
        let now = Instant::ZERO + Duration::from_micros(i);
        link.send(now, i, 100);
        while let Some(n) = link.poll_deliver(now) {
            arrived[n as usize] = true;
        }
    }
    assert_eq!(link.stats().sent, PACKETS);
    assert_eq!(link.stats().delivered + link.stats().lost, PACKETS);
    arrived
}

fn loss_rate(arrived: &[bool]) -> f64 {
    arrived.iter().filter(|a| !**a).count() as f64 / arrived.len() as f64
}

#[test]
fn bernoulli_loses_its_probability() {
    // Standard error at 10% over 100k packets is 0.095%; the tolerance is five of them.
    let rate = loss_rate(&arrivals(LossModel::Bernoulli { probability: 0.10 }, 1));
    assert!((rate - 0.10).abs() < 0.005, "effective loss {rate}");
}

#[test]
fn netem_correlated_loss_is_far_below_its_nominal_probability() {
    // Linux netem's generator: "loss 10% 25%" loses about 1.75% (an independent model of the
    // generator gives 1.76% over 2M packets).
    let model = LossModel::NetemCorrelated { probability: 0.10, correlation: 0.25 };
    let rate = loss_rate(&arrivals(model, 2));
    assert!((0.0160..0.0192).contains(&rate), "effective loss {rate}");
    // Without correlation it is plain Bernoulli.
    let plain = LossModel::NetemCorrelated { probability: 0.10, correlation: 0.0 };
    let rate = loss_rate(&arrivals(plain, 2));
    assert!((rate - 0.10).abs() < 0.005, "effective loss {rate}");
}

#[test]
fn gilbert_elliott_bursts_have_the_configured_mean_and_length() {
    let arrived = arrivals(LossModel::bursts(0.10, 4.0), 3);
    let rate = loss_rate(&arrived);
    assert!((rate - 0.10).abs() < 0.01, "effective loss {rate}");
    let mut bursts = Vec::new();
    let mut run = 0;
    for a in &arrived {
        if *a {
            if run > 0 {
                bursts.push(run);
            }
            run = 0;
        } else {
            run += 1;
        }
    }
    let mean = bursts.iter().sum::<u32>() as f64 / bursts.len() as f64;
    assert!((mean - 4.0).abs() < 0.3, "mean burst length {mean}");
    // Independent loss at the same rate would give bursts of about 1.1.
    let independent = arrivals(LossModel::Bernoulli { probability: 0.10 }, 3);
    assert_ne!(arrived, independent);
}

#[test]
fn a_seed_replays_exactly_and_another_differs() {
    let model = LossModel::bursts(0.10, 4.0);
    assert_eq!(arrivals(model, 9), arrivals(model, 9));
    assert_ne!(arrivals(model, 9), arrivals(model, 10));
}

#[test]
fn no_loss_model_loses_nothing() {
    assert_eq!(loss_rate(&arrivals(LossModel::None, 4)), 0.0);
    assert_eq!(LossModel::None.expected_loss(), Some(0.0));
    let bursts = LossModel::bursts(0.10, 4.0).expected_loss().unwrap();
    assert!((bursts - 0.10).abs() < 1e-9);
}
