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
    arrivals_every(loss, seed, Duration::from_micros(1))
}

/// Sends PACKETS `gap` apart and returns, per packet, whether it arrived.
fn arrivals_every(loss: LossModel, seed: u64, gap: Duration) -> Vec<bool> {
    let mut link = Link::new(LinkConfig { loss, ..LinkConfig::default() }, seed);
    let mut arrived = vec![false; PACKETS as usize];
    for i in 0..PACKETS {
        let now = Instant::ZERO + gap * i as u32;
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
    let mean = mean_burst(&arrived);
    assert!((mean - 4.0).abs() < 0.3, "mean burst length {mean}");
    // Independent loss at the same rate would give bursts of about 1.1.
    let independent = arrivals(LossModel::Bernoulli { probability: 0.10 }, 3);
    assert_ne!(arrived, independent);
}

/// The mean run of consecutive lost packets.
fn mean_burst(arrived: &[bool]) -> f64 {
    let mut bursts = Vec::new();
    let mut run = 0;
    for a in arrived {
        if *a {
            if run > 0 {
                bursts.push(run);
            }
            run = 0;
        } else {
            run += 1;
        }
    }
    bursts.iter().sum::<u32>() as f64 / bursts.len() as f64
}

/// Outages are spans of time: a sender eight times as dense loses the same share of its
/// packets, in runs about eight times as long (a count-of-packets model would give both the
/// same runs). With 20 ms outages, packets 1 ms apart see runs of 1 / (1 - e^(-1/20)) = 20.5
/// on average, packets 8 ms apart 1 / (1 - e^(-8/20)) = 3.0.
#[test]
fn outages_take_a_share_of_time_whatever_the_packet_rate() {
    let model = LossModel::Outages { mean_loss: 0.10, mean_outage: Duration::from_millis(20) };
    let dense = arrivals_every(model, 5, Duration::from_millis(1));
    let sparse = arrivals_every(model, 5, Duration::from_millis(8));
    for arrived in [&dense, &sparse] {
        // 100 s of 20 ms outages is about 500 of them: the share moves by a few percent.
        let rate = loss_rate(arrived);
        assert!((rate - 0.10).abs() < 0.02, "effective loss {rate}");
    }
    let (dense_run, sparse_run) = (mean_burst(&dense), mean_burst(&sparse));
    assert!((16.0..25.0).contains(&dense_run), "1 ms apart: mean run {dense_run}");
    assert!((2.5..3.6).contains(&sparse_run), "8 ms apart: mean run {sparse_run}");
    assert_eq!(model.expected_loss(), Some(0.10));
    assert_eq!(arrivals_every(model, 5, Duration::from_millis(8)), sparse, "replays");
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
