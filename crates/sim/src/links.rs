//! The link conditions the room tests share, so that "hostile" means the same thing in every
//! crate's tests. Both are 15 ms one way; neither has a rate limit (netem's named W1 profiles,
//! `rally_netem::LinkProfile`, are the benchmarks' conditions, and its `clean` is another link).

use rally_netem::{LinkConfig, LossModel};
use std::time::Duration;

/// 15 ms one way with 5 ms of jitter that reorders, 10% independent loss, 2% duplicates: what
/// a room must converge through.
pub fn hostile() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(15),
        jitter: Duration::from_millis(5),
        reorder: true,
        loss: LossModel::Bernoulli { probability: 0.1 },
        duplicate: 0.02,
        ..LinkConfig::default()
    }
}

/// 15 ms one way and nothing else: the healed link after a hostile stretch.
pub fn calm() -> LinkConfig {
    LinkConfig { delay: Duration::from_millis(15), ..LinkConfig::default() }
}
