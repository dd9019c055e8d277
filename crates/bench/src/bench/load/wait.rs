//! The workers' sleep policies `rally-bench load --waits` compares: how a worker with rooms
//! sleeps toward its next deadline (`HostConfig::sleep_step` and `HostConfig::spin`).

use rally_driver::{HostConfig, STEPPED_STRETCH};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The longest spin `--waits spinN` takes, microseconds (the host's own limit on `spin`).
const SPIN_US_MAX: u64 = 10_000;

/// One sleep policy; in JSON, as written on the command line (`"200"`, `"none"`, `"spin50"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Sleep in one go to 2 ms before the wake-up, then in steps of this many microseconds
    /// (`--waits 200`).
    Steps(u64),
    /// One sleep straight to the wake-up, no steps (`--waits none`; the host's default).
    None,
    /// One sleep to this many microseconds before a tick's deadline, then poll without
    /// sleeping until it (`--waits spin50`).
    Spin(u64),
}

impl Wait {
    /// `config` with this policy's `sleep_step` and `spin`.
    pub fn apply(self, config: HostConfig) -> HostConfig {
        let (sleep_step, spin) = match self {
            Wait::Steps(us) => (Duration::from_micros(us), Duration::ZERO),
            Wait::None => (STEPPED_STRETCH, Duration::ZERO),
            Wait::Spin(us) => (STEPPED_STRETCH, Duration::from_micros(us)),
        };
        HostConfig { sleep_step, spin, ..config }
    }
}

impl Serialize for Wait {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Steps(us) => write!(f, "{us}"),
            Wait::None => write!(f, "none"),
            Wait::Spin(us) => write!(f, "spin{us}"),
        }
    }
}

/// Why a `--waits` entry was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// Neither `none`, a number of microseconds, nor `spin` and one.
    Unknown(String),
    /// A step outside 1 to 1999 microseconds.
    StepOutOfRange(u64),
    /// A spin outside 1 to 10,000 microseconds.
    SpinOutOfRange(u64),
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::Unknown(text) => write!(
                f,
                "{text:?} is not a sleep policy: write a step in microseconds (200), none (one \
                 sleep to the deadline) or spinN (spin the last N microseconds, spin50)"
            ),
            WaitError::StepOutOfRange(us) => write!(
                f,
                "a sleep step of {us} us is out of range: give 1 to 1999 (a step of 2000 us or \
                 more is no step at all: write none)"
            ),
            WaitError::SpinOutOfRange(us) => write!(
                f,
                "a spin of {us} us is out of range: give spin1 to spin{SPIN_US_MAX} (or none)"
            ),
        }
    }
}

impl std::error::Error for WaitError {}

impl FromStr for Wait {
    type Err = WaitError;

    fn from_str(text: &str) -> Result<Self, WaitError> {
        let text = text.trim();
        let unknown = || WaitError::Unknown(text.to_string());
        let number = |digits: &str| {
            let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            if all_digits {
                // Too many digits for a u64 is out of any range: say so as the largest.
                Ok(digits.parse::<u64>().unwrap_or(u64::MAX))
            } else {
                Err(unknown())
            }
        };
        if text.eq_ignore_ascii_case("none") {
            return Ok(Wait::None);
        }
        if let Some(digits) = text.strip_prefix("spin") {
            let us = number(digits)?;
            return match us {
                1..=SPIN_US_MAX => Ok(Wait::Spin(us)),
                _ => Err(WaitError::SpinOutOfRange(us)),
            };
        }
        let us = number(text)?;
        let stretch = STEPPED_STRETCH.as_micros() as u64;
        if us == 0 || us >= stretch {
            return Err(WaitError::StepOutOfRange(us));
        }
        Ok(Wait::Steps(us))
    }
}

/// Checks a `--waits` list: at least one policy, none twice.
pub fn check(waits: &[Wait]) -> Result<(), String> {
    if waits.is_empty() {
        return Err("--waits needs at least one sleep policy".into());
    }
    for (k, wait) in waits.iter().enumerate() {
        if waits[..k].contains(wait) {
            return Err(format!("--waits lists {wait} twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_policies_parse_and_bad_ones_are_refused_with_the_fix() {
        // Goal: every policy the docs name parses to what the host is given, and every bad
        // entry is refused with a message that says what to write instead (never a panic).
        let parse = |s: &str| s.parse::<Wait>();
        assert_eq!(parse("200"), Ok(Wait::Steps(200)));
        assert_eq!(parse(" 1999 "), Ok(Wait::Steps(1999)));
        assert_eq!(parse("none"), Ok(Wait::None));
        assert_eq!(parse("NONE"), Ok(Wait::None));
        assert_eq!(parse("spin50"), Ok(Wait::Spin(50)));
        assert_eq!(parse("0"), Err(WaitError::StepOutOfRange(0)));
        assert_eq!(parse("2000"), Err(WaitError::StepOutOfRange(2000)));
        assert_eq!(parse("spin0"), Err(WaitError::SpinOutOfRange(0)));
        assert_eq!(parse("spin10001"), Err(WaitError::SpinOutOfRange(10_001)));
        let huge = parse("99999999999999999999999");
        assert_eq!(huge, Err(WaitError::StepOutOfRange(u64::MAX)));
        for bad in ["", "spin", "-5", "2ms", "spin-1", "spin 5", "sleep", "1e3"] {
            let error = parse(bad).expect_err(bad);
            assert!(matches!(error, WaitError::Unknown(_)), "{bad}: {error}");
            assert!(error.to_string().contains("spinN"), "{bad}: the message gives the forms");
        }
        assert!(parse("2000").unwrap_err().to_string().contains("write none"));
        // What each policy sets.
        let base = HostConfig::default();
        let steps = Wait::Steps(200).apply(base.clone());
        assert_eq!((steps.sleep_step, steps.spin), (Duration::from_micros(200), Duration::ZERO));
        let none = Wait::None.apply(base.clone());
        assert_eq!((none.sleep_step, none.spin), (STEPPED_STRETCH, Duration::ZERO));
        let spin = Wait::Spin(50).apply(base);
        assert_eq!((spin.sleep_step, spin.spin), (STEPPED_STRETCH, Duration::from_micros(50)));
        for wait in [Wait::Steps(200), Wait::None, Wait::Spin(50)] {
            assert_eq!(parse(&wait.to_string()), Ok(wait), "{wait} reads back");
            let json = serde_json::to_string(&wait).expect("a string");
            assert_eq!(json, format!("\"{wait}\""), "JSON as on the command line");
            assert!(wait.apply(HostConfig::default()).validate().is_ok(), "{wait} is valid");
        }
        assert!(check(&[]).is_err());
        assert!(check(&[Wait::None, Wait::Steps(200), Wait::None]).unwrap_err().contains("twice"));
        assert!(check(&[Wait::None, Wait::Steps(200)]).is_ok());
    }
}
