//! Goal: every W1 profile exists under its name in docs/design.md, any other condition can be
//! written on the command line, and a bad spec gets an error naming the part to fix. Method:
//! parse names, specs and broken specs.

use rally_netem::{LinkProfile, LossModel, ProfileError, PROFILE_NAMES};
use std::time::Duration;

#[test]
fn every_w1_profile_parses_by_name() {
    for name in PROFILE_NAMES {
        let profile = LinkProfile::parse(name).unwrap();
        assert_eq!(profile.name, name);
        assert_eq!(profile.config.delay, Duration::from_micros(13_750));
    }
    let choked = LinkProfile::named("choked").unwrap().config;
    assert_eq!(choked.rate_bits_per_sec, Some(200_000));
    let netem = LinkProfile::named("netem-10-25").unwrap().config;
    assert_eq!(netem.loss, LossModel::NetemCorrelated { probability: 0.10, correlation: 0.25 });
}

#[test]
fn specs_change_a_profile_or_build_one() {
    let p = LinkProfile::parse("clean, loss=5%, dup=1%, mtu=1200").unwrap();
    assert_eq!(p.config.loss, LossModel::Bernoulli { probability: 0.05 });
    assert_eq!(p.config.mtu, 1200);
    assert!((p.config.duplicate - 0.01).abs() < 1e-12);
    assert_eq!(p.config.rate_bits_per_sec, Some(1_050_000));
    let p = LinkProfile::parse("delay=2ms,jitter=500us,reorder,rate=none,queue=64kb").unwrap();
    assert_eq!(p.config.delay, Duration::from_millis(2));
    assert_eq!(p.config.jitter, Duration::from_micros(500));
    assert!(p.config.reorder);
    assert_eq!(p.config.rate_bits_per_sec, None);
    assert_eq!(p.config.queue_bytes_max, 64_000);
    let p = LinkProfile::parse("burst=20%/3,rate=200kbit").unwrap();
    assert!((p.config.loss.expected_loss().unwrap() - 0.20).abs() < 1e-9);
    assert_eq!(p.config.rate_bits_per_sec, Some(200_000));
    // A length with a unit is a span of time.
    let p = LinkProfile::parse("clean,burst=10%/33ms").unwrap();
    let outages = LossModel::Outages { mean_loss: 0.10, mean_outage: Duration::from_millis(33) };
    assert_eq!(p.config.loss, outages);
}

#[test]
fn bad_specs_name_what_to_fix() {
    assert_eq!(LinkProfile::parse("wifi"), Err(ProfileError::UnknownProfile("wifi".into())));
    assert_eq!(LinkProfile::parse("clean,lag=5ms"), Err(ProfileError::UnknownKey("lag".into())));
    let err = LinkProfile::parse("clean,loss=ten").unwrap_err();
    assert!(matches!(err, ProfileError::BadValue { ref key, .. } if key == "loss"), "{err}");
    assert!(err.to_string().contains("10%"), "{err}");
    assert!(LinkProfile::parse("delay=-1ms").is_err());
    assert!(LinkProfile::parse("loss=150%").is_err());
    assert!(LinkProfile::parse("burst=10%/0").is_err());
    assert!(LinkProfile::parse("burst=10%/0ms").is_err());
    assert!(LinkProfile::parse("burst=100%/30ms").is_err());
    assert!(LinkProfile::parse("burst=10%/30 parsecs").is_err());
}
