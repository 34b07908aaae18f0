//! What came back, summarised: every latency is kept and sorted (no histogram buckets, so
//! p99 is the 99th percentile of what was measured, not of a bucket edge), and answers are
//! counted by status code and by what kind of request earned them.

use std::collections::BTreeMap;
use std::time::Duration;

/// One request's fate.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub latency: Duration,
    /// The HTTP status, or 0 when no answer came (connection error or client timeout).
    pub status: u16,
    /// `original`, `racing_copy`, `late_copy` or `bad_signature`.
    pub kind: &'static str,
}

/// Latency percentiles in milliseconds, nearest-rank.
#[derive(Debug, Clone, Copy, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    /// Sorts `latencies` in place.
    pub fn of(latencies: &mut [Duration]) -> Percentiles {
        if latencies.is_empty() {
            return Percentiles::default();
        }
        latencies.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let rank = |p: f64| {
            let n = latencies.len();
            let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            ms(latencies[i])
        };
        let total: Duration = latencies.iter().sum();
        Percentiles {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: rank(1.0),
            mean: ms(total) / latencies.len() as f64,
        }
    }

    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "p50": round3(self.p50),
            "p90": round3(self.p90),
            "p99": round3(self.p99),
            "max": round3(self.max),
            "mean": round3(self.mean),
        })
    }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Status label for counts: the code, or `error` when no answer came.
pub fn status_label(status: u16) -> String {
    if status == 0 {
        "error".to_string()
    } else {
        status.to_string()
    }
}

/// Answers by status label.
pub type Counts = BTreeMap<String, u64>;

/// Counts by status, overall and per kind of request.
pub fn count_statuses(samples: &[Sample]) -> (Counts, BTreeMap<&'static str, Counts>) {
    let mut overall = BTreeMap::new();
    let mut by_kind: BTreeMap<&'static str, Counts> = BTreeMap::new();
    for sample in samples {
        let label = status_label(sample.status);
        *overall.entry(label.clone()).or_insert(0) += 1;
        *by_kind
            .entry(sample.kind)
            .or_default()
            .entry(label)
            .or_insert(0) += 1;
    }
    (overall, by_kind)
}

/// `200: 19800  401: 200`.
pub fn counts_line(counts: &Counts) -> String {
    counts
        .iter()
        .map(|(status, n)| format!("{status}: {n}"))
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut latencies: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let p = Percentiles::of(&mut latencies);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(p.mean, 50.5);
    }
}
