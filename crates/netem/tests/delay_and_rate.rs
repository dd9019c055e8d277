//! Goal: the link delays, orders, rate-limits, queues, duplicates and drops as configured, and
//! reports what it actually did. Method: 100k packets through links with one feature each,
//! comparing the measured delays, throughput and counters with the configuration.

use rally_netem::{Link, LinkConfig, LinkProfile};
use rally_proto::Instant;
use std::time::Duration;

/// Sends `count` packets of `size` bytes `gap` apart and drains the link; returns the packets
/// in delivery order with their delivery times.
fn run(
    config: LinkConfig,
    count: u64,
    gap: Duration,
    size: usize,
) -> (Link<u64>, Vec<(u64, Instant)>) {
    let mut link = Link::new(config, 11);
    let mut delivered = Vec::new();
    let mut now = Instant::ZERO;
    for i in 0..count {
        // Deliver everything due before this send.
        while let Some(due) = link.poll_timeout().filter(|t| *t <= now) {
            while let Some(p) = link.poll_deliver(due) {
                delivered.push((p, due));
            }
        }
        link.send(now, i, size);
        now += gap;
    }
    while let Some(due) = link.poll_timeout() {
        while let Some(p) = link.poll_deliver(due) {
            delivered.push((p, due));
        }
    }
    (link, delivered)
}

#[test]
fn delay_has_the_configured_mean_and_deviation() {
    let config = LinkConfig {
        delay: Duration::from_micros(13_750),
        jitter: Duration::from_micros(6_860),
        reorder: true,
        ..LinkConfig::default()
    };
    let (link, delivered) = run(config, 100_000, Duration::from_millis(1), 100);
    assert_eq!(delivered.len(), 100_000);
    let stats = link.stats();
    // Truncating the normal at zero raises the mean by about 0.45%; allow 2%.
    let mean = stats.delay_mean().as_secs_f64();
    assert!((mean / 0.01375 - 1.0).abs() < 0.02, "mean {mean}");
    let sd = stats.delay_sd().as_secs_f64();
    assert!((sd / 0.00686 - 1.0).abs() < 0.05, "sd {sd}");
    // With reordering allowed and sends 1 ms apart, some packets overtake others.
    assert!(delivered.windows(2).any(|w| w[0].0 > w[1].0));
}

#[test]
fn jitter_without_reordering_keeps_sending_order() {
    let profile = LinkProfile::parse("delay=20ms,jitter=10ms").unwrap();
    let (_, delivered) = run(profile.config, 20_000, Duration::from_millis(1), 100);
    assert!(delivered.windows(2).all(|w| w[0].0 < w[1].0), "a packet overtook another");
}

#[test]
fn the_bottleneck_caps_throughput_and_bounds_the_queue() {
    // 2 Mbit/s offered to a 1 Mbit/s link with a 50 kB queue for 10 s.
    let config = LinkConfig {
        rate_bits_per_sec: Some(1_000_000),
        queue_bytes_max: 50_000,
        ..LinkConfig::default()
    };
    let (link, delivered) = run(config, 2_500, Duration::from_millis(4), 1_000);
    let stats = link.stats();
    let last = delivered.last().unwrap().1.as_secs_f64();
    let throughput = delivered.len() as f64 * 8_000.0 / last;
    assert!((throughput / 1e6 - 1.0).abs() < 0.02, "throughput {throughput}");
    assert!(stats.queue_dropped > 1_100, "queue drops {}", stats.queue_dropped);
    // Never more than the queue's worth of waiting: 50 kB at 1 Mbit/s is 0.4 s, plus one send.
    let worst = Duration::from_nanos(stats.delay_max_ns).as_secs_f64();
    assert!(worst <= 0.4 + 0.008 + 1e-6, "worst delay {worst}");
}

#[test]
fn oversize_packets_duplicates_and_overflow_are_counted() {
    let config = LinkConfig { mtu: 1200, duplicate: 0.05, ..LinkConfig::default() };
    let mut link = Link::new(config, 5);
    link.send(Instant::ZERO, 0u64, 1201);
    assert_eq!(link.stats().oversize_dropped, 1);
    let (link, delivered) = run(config, 100_000, Duration::from_micros(10), 1200);
    let dup = link.stats().duplicated as f64 / 100_000.0;
    assert!((dup - 0.05).abs() < 0.005, "duplication {dup}");
    assert_eq!(delivered.len() as u64, 100_000 + link.stats().duplicated);

    let tight =
        LinkConfig { delay: Duration::from_secs(1), in_flight_max: 10, ..LinkConfig::default() };
    let mut link = Link::new(tight, 5);
    for i in 0..20u64 {
        link.send(Instant::ZERO, i, 10);
    }
    assert_eq!(link.in_flight(), 10);
    assert_eq!(link.stats().overflow_dropped, 10);
}

#[test]
fn the_clean_profile_matches_the_source_link() {
    // 400-byte payloads at 60 Hz, as W1 sends them: the one-way delay is the propagation
    // (13.75 ms mean) plus 3 ms of serialization at 1.05 Mbit/s.
    let profile = LinkProfile::named("clean").unwrap();
    let (link, delivered) = run(profile.config, 20_000, Duration::from_micros(16_667), 400);
    assert_eq!(delivered.len(), 20_000);
    let mean = link.stats().delay_mean().as_secs_f64();
    let expected = 0.01375 + 400.0 * 8.0 / 1.05e6;
    assert!((mean / expected - 1.0).abs() < 0.05, "mean {mean}, expected about {expected}");
}
