//! Distribution summaries: the benchmarks' reports, `rally echo`'s and the demo's figures.

use serde::Serialize;

/// Mean, standard deviation and quantiles of a sample, in its own unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// The arithmetic mean.
    pub mean: f64,
    /// The population standard deviation.
    pub sd: f64,
    /// The median (nearest rank).
    pub p50: f64,
    /// The 99th percentile (nearest rank).
    pub p99: f64,
    /// The largest sample.
    pub max: f64,
}

/// Summarizes `samples`; all zero for an empty sample.
pub fn summary(samples: &[f64]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let variance = samples.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / n;
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    Summary {
        mean,
        sd: variance.sqrt(),
        p50: quantile(&sorted, 0.50),
        p99: quantile(&sorted, 0.99),
        max: sorted[sorted.len() - 1],
    }
}

/// The `q` quantile of sorted samples (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summary(&samples);
        assert_eq!((s.p50, s.p99, s.max), (50.0, 99.0, 100.0));
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert_eq!(summary(&[]), Summary::default());
    }
}
