//! Medians and spread.

use serde_json::{Value, json};

/// Summary of one side's samples of one figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    /// `None` for no samples. Percentiles are nearest-rank on the sorted
    /// samples (the median of an even count is the mean of the two middle
    /// ones), so with few samples p10/p90 are simply the extremes.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut xs = samples.to_vec();
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        let rank = |p: f64| {
            let r = (p * n as f64).ceil() as usize;
            xs[r.clamp(1, n) - 1]
        };
        let median = if n % 2 == 1 {
            xs[n / 2]
        } else {
            (xs[n / 2 - 1] + xs[n / 2]) / 2.0
        };
        Some(Stats {
            n,
            median,
            p10: rank(0.10),
            p90: rank(0.90),
            min: xs[0],
            max: xs[n - 1],
        })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "n": self.n,
            "median": self.median,
            "p10": self.p10,
            "p90": self.p90,
            "min": self.min,
            "max": self.max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_counts() {
        let s = Stats::of(&[3.0, 1.0, 2.0]).expect("stats");
        assert_eq!((s.median, s.p10, s.p90, s.n), (2.0, 1.0, 3.0, 3));
        let s = Stats::of(&[4.0, 1.0, 3.0, 2.0]).expect("stats");
        assert_eq!(s.median, 2.5);
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Stats::of(&xs).expect("stats");
        assert_eq!((s.p10, s.p90, s.median), (10.0, 90.0, 50.5));
        assert!(Stats::of(&[]).is_none());
    }
}
