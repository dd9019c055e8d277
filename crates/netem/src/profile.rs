//! Named link profiles (the W1 conditions of docs/design.md) and the command-line spec
//! language for any other.
//!
//! A spec is a comma-separated list: an optional profile name first, then `key=value` changes.
//! `clean,loss=5%` is the clean profile with 5% independent loss. Keys:
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `delay` | `13.75ms`, `2s`, `500us` | mean one-way delay |
//! | `jitter` | a duration | standard deviation of the one-way delay |
//! | `reorder` | `yes` / `no` (or the bare key) | whether jitter may reorder |
//! | `loss` | `10%` | independent loss |
//! | `loss` | `10%/25%` | Linux netem's correlated loss `loss 10% 25%` |
//! | `burst` | `10%/4` | Gilbert-Elliott: mean loss / mean burst length in packets |
//! | `burst` | `10%/33ms` | outages in time: fraction of time out / mean outage length |
//! | `dup` | `1%` | duplication |
//! | `rate` | `1.05mbit`, `200kbit`, `5000000` (bit/s), `none` | bottleneck rate |
//! | `queue` | `64kb`, `25000` (bytes) | bottleneck queue |
//! | `mtu` | `1200` | largest packet, bytes |

use crate::link::LinkConfig;
use crate::loss::LossModel;
use std::time::Duration;

/// The W1 profile names, in the order benchmarks report them.
pub const PROFILE_NAMES: [&str; 5] =
    ["clean", "netem-10-25", "bernoulli-10", "bursty-10", "choked"];

/// A named link condition, applied to each direction of a path.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkProfile {
    /// The name it was given or parsed from.
    pub name: String,
    /// What each direction does.
    pub config: LinkConfig,
}

/// Why a profile spec did not parse; each names the part at fault and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The spec names no profile Rally knows.
    #[error("unknown profile `{0}`; known: clean, netem-10-25, bernoulli-10, bursty-10, choked")]
    UnknownProfile(String),
    /// A key is not one of the spec language's.
    #[error("unknown key `{0}`; keys: delay, jitter, reorder, loss, burst, dup, rate, queue, mtu")]
    UnknownKey(String),
    /// A value does not parse for its key.
    #[error("bad value `{value}` for `{key}`: expected {expected}")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What the key takes.
        expected: &'static str,
    },
}

impl LinkProfile {
    /// The W1 profile `name`, or any profile from a spec string (see the module docs).
    pub fn parse(spec: &str) -> Result<Self, ProfileError> {
        let mut parts = spec.split(',').map(str::trim).filter(|p| !p.is_empty()).peekable();
        let mut profile = match parts.peek() {
            Some(first) if !first.contains('=') && *first != "reorder" => {
                let name = parts.next().expect("peeked");
                Self::named(name).ok_or_else(|| ProfileError::UnknownProfile(name.into()))?
            }
            _ => LinkProfile { name: String::new(), config: LinkConfig::default() },
        };
        for part in parts {
            let (key, value) = part.split_once('=').unwrap_or((part, "yes"));
            apply(&mut profile.config, key.trim(), value.trim())?;
        }
        profile.name = spec.trim().to_string();
        Ok(profile)
    }

    /// One of the W1 profiles of docs/design.md.
    pub fn named(name: &str) -> Option<Self> {
        let clean = clean();
        let config = match name {
            "clean" => clean,
            "netem-10-25" => LinkConfig {
                loss: LossModel::NetemCorrelated { probability: 0.10, correlation: 0.25 },
                ..clean
            },
            "bernoulli-10" => {
                LinkConfig { loss: LossModel::Bernoulli { probability: 0.10 }, ..clean }
            }
            "bursty-10" => LinkConfig { loss: LossModel::bursts(0.10, 4.0), ..clean },
            "choked" => LinkConfig {
                rate_bits_per_sec: Some(200_000),
                // One second of queue at 200 kbit/s: a sender that outruns the link waits up to
                // a second, then loses packets at the tail.
                queue_bytes_max: 25_000,
                ..clean
            },
            _ => return None,
        };
        Some(LinkProfile { name: name.into(), config })
    }
}

/// The source's normal link: 1.05 Mbit/s, RTT 27.5 ms mean with 9.7 ms standard deviation,
/// split evenly between the directions (13.75 ms and 9.7 / sqrt(2) ms each), no reordering.
fn clean() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_micros(13_750),
        jitter: Duration::from_secs_f64(0.0097 / std::f64::consts::SQRT_2),
        reorder: false,
        rate_bits_per_sec: Some(1_050_000),
        // Half a second of queue at 1.05 Mbit/s.
        queue_bytes_max: 65_625,
        ..LinkConfig::default()
    }
}

fn apply(config: &mut LinkConfig, key: &str, value: &str) -> Result<(), ProfileError> {
    let bad = |expected| ProfileError::BadValue { key: key.into(), value: value.into(), expected };
    match key {
        "delay" => config.delay = duration(value).ok_or_else(|| bad("a duration like 13.75ms"))?,
        "jitter" => config.jitter = duration(value).ok_or_else(|| bad("a duration like 5ms"))?,
        "reorder" => {
            config.reorder = match value {
                "yes" | "true" | "on" => true,
                "no" | "false" | "off" => false,
                _ => return Err(bad("yes or no")),
            }
        }
        "loss" => {
            config.loss = loss(value).ok_or_else(|| bad("a percentage like 10% or 10%/25%"))?
        }
        "burst" => {
            let expected = "loss/length like 10%/4 (packets) or 10%/33ms (time)";
            let (mean, length) = value.split_once('/').ok_or_else(|| bad(expected))?;
            let mean = percent(mean).ok_or_else(|| bad(expected))?;
            if length.ends_with('s') {
                let mean_outage =
                    duration(length).filter(|d| !d.is_zero()).ok_or_else(|| bad(expected))?;
                let mean_loss = Some(mean).filter(|m| *m < 1.0).ok_or_else(|| bad(expected))?;
                config.loss = LossModel::Outages { mean_loss, mean_outage };
                return Ok(());
            }
            let length: f64 = length
                .parse()
                .ok()
                .filter(|l| *l >= 1.0)
                .ok_or_else(|| bad("a burst length of at least 1"))?;
            config.loss = LossModel::bursts(mean, length);
        }
        "dup" => config.duplicate = percent(value).ok_or_else(|| bad("a percentage like 1%"))?,
        "rate" => {
            config.rate_bits_per_sec =
                rate(value).ok_or_else(|| bad("a rate like 1.05mbit or none"))?
        }
        "queue" => config.queue_bytes_max = bytes(value).ok_or_else(|| bad("a size like 64kb"))?,
        "mtu" => {
            config.mtu =
                value.parse().ok().filter(|m| *m > 0).ok_or_else(|| bad("bytes above 0"))?
        }
        other => return Err(ProfileError::UnknownKey(other.into())),
    }
    Ok(())
}

fn number_with_suffix<'a>(value: &'a str, suffixes: &[&'a str]) -> Option<(f64, &'a str)> {
    let suffix = suffixes.iter().find(|s| value.ends_with(**s)).copied().unwrap_or("");
    let number: f64 = value[..value.len() - suffix.len()].trim().parse().ok()?;
    (number.is_finite() && number >= 0.0).then_some((number, suffix))
}

fn duration(value: &str) -> Option<Duration> {
    let (number, unit) = number_with_suffix(value, &["ms", "us", "ns", "s"])?;
    let seconds = match unit {
        "ms" => number / 1e3,
        "us" => number / 1e6,
        "ns" => number / 1e9,
        "s" => number,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

fn percent(value: &str) -> Option<f64> {
    let (number, _) = number_with_suffix(value.strip_suffix('%')?, &[])?;
    (number <= 100.0).then_some(number / 100.0)
}

fn loss(value: &str) -> Option<LossModel> {
    match value.split_once('/') {
        Some((p, c)) => {
            Some(LossModel::NetemCorrelated { probability: percent(p)?, correlation: percent(c)? })
        }
        None => Some(LossModel::Bernoulli { probability: percent(value)? }),
    }
}

fn rate(value: &str) -> Option<Option<u64>> {
    if value == "none" {
        return Some(None);
    }
    let (number, unit) = number_with_suffix(value, &["gbit", "mbit", "kbit", "bit"])?;
    let scale = match unit {
        "gbit" => 1e9,
        "mbit" => 1e6,
        "kbit" => 1e3,
        _ => 1.0,
    };
    let bits = (number * scale).round() as u64;
    (bits > 0).then_some(Some(bits))
}

fn bytes(value: &str) -> Option<usize> {
    let (number, unit) = number_with_suffix(value, &["kib", "mib", "kb", "mb", "b"])?;
    let scale = match unit {
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        _ => 1.0,
    };
    Some((number * scale).round() as usize)
}
