//! `rally server`'s logs: `tracing` events from the server and the host's workers, written
//! by `tracing-subscriber` to standard output, one event a line, as human-readable text or
//! JSON lines for a cluster's collector.
//!
//! Levels come from `RUST_LOG` when it is set (`info`, `warn,rally_driver=debug`: a default
//! level and per-target levels), else from `log.level`. Nothing is logged per packet at
//! `info`: rooms opening and closing, refusals (summed, at most one line per worker every ten
//! seconds), the drain. Fields of every JSON line: `timestamp`, `level`, `target`, `fields`
//! (`message` and the event's own fields); docs/operating.md lists the events.

use std::str::FromStr;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Text for a person: time, level, target, message, fields.
    Human,
    /// One JSON object a line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log.format = {other:?}: use \"human\" or \"json\"")),
        }
    }
}

/// The filter of `levels` (`RUST_LOG`'s syntax: `info`, `warn,rally_driver=debug`).
/// Every directive must name a level: a bare word would enable everything for a target of
/// that name, which is how a misspelled level looks.
pub fn filter(levels: &str) -> Result<Targets, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let refused = || {
        format!(
            "log level {levels:?}: use off, error, warn, info, debug or trace, optionally per \
             target: warn,rally_driver=info"
        )
    };
    for directive in levels.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit('=').next().unwrap_or(directive);
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(refused());
        }
    }
    Targets::from_str(levels).map_err(|_| refused())
}

/// Installs the process's logger: `RUST_LOG` if set, else `level`. A second call (tests that
/// run servers in one process) leaves the first logger in place.
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let levels = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = match &levels {
        Some(levels) => filter(levels).map_err(|e| format!("RUST_LOG: {e}"))?,
        None => filter(level).map_err(|e| format!("log.level: {e}"))?,
    };
    let registry = tracing_subscriber::registry().with(filter);
    let fmt = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(std::io::stdout);
    let installed = match format {
        LogFormat::Human => registry.with(fmt).try_init(),
        LogFormat::Json => registry.with(fmt.json().flatten_event(false)).try_init(),
    };
    // Already installed: keep it.
    let _ = installed;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_take_rust_log_syntax_and_refuse_garbage() {
        assert!(filter("info").is_ok());
        assert!(filter("warn,rally_driver=debug").is_ok());
        assert!(filter("loud").is_err());
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("xml".parse::<LogFormat>().is_err());
    }
}
