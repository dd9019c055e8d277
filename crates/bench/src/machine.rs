//! What machine a benchmark ran on, for its JSON report.

use serde::Serialize;

/// The facts that decide whether two benchmark runs are comparable.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub logical_cores: usize,
    pub os: String,
    pub kernel: String,
    pub arch: &'static str,
    pub rally_version: &'static str,
    /// "release" or "debug": a debug build's timings mean little.
    pub profile: &'static str,
}

impl Machine {
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").map(|rest| rest.trim_start_matches([' ', '\t', ':']))
            })
            .unwrap_or("unknown")
            .to_string();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Self {
            cpu,
            logical_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            os: std::env::consts::OS.into(),
            kernel,
            arch: std::env::consts::ARCH,
            rally_version: env!("CARGO_PKG_VERSION"),
            profile: if cfg!(debug_assertions) { "debug" } else { "release" },
        }
    }
}
