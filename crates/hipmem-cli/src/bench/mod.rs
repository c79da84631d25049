//! `hipmem bench ...`: hipmem and its peers measured side by side, in one run.
//!
//! Every bench prints a readable table and, with `--json`, one object
//! `{"bench", "backend", "device", "results": [{"case", "allocator",
//! "size_bytes", "metric", "value", "unit"}, ...]}`. Absolute times are only
//! meaningful on the GPU machine; the ratios are the point.

pub mod alloc;
pub mod c_abi;
pub mod copy;
pub mod managed;
pub mod peer;
pub mod trace;
pub mod vmm;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde::Serialize;

/// One measured number.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What was measured (e.g. `pair_latency`).
    pub case: String,
    /// Which path (e.g. `hipmem-pool`, `driver-pool`, `direct`).
    pub allocator: String,
    /// Allocation size, where it applies.
    pub size_bytes: Option<u64>,
    /// Which statistic (e.g. `median`, `p99`, `ratio_vs_hipmem`).
    pub metric: String,
    /// The number.
    pub value: f64,
    /// Its unit (`ns`, `us`, `ms`, `pairs/s`, `x`).
    pub unit: String,
}

/// A whole bench run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Bench name.
    pub bench: String,
    /// Backend kind.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// The numbers.
    pub results: Vec<Row>,
}

impl Report {
    /// An empty report.
    pub fn new(bench: &str, rt: &hipmem::Runtime, device: usize) -> hipmem::Result<Report> {
        Ok(Report {
            bench: bench.into(),
            backend: rt.backend_kind().to_string(),
            device: rt.device_properties(device)?.name.clone(),
            results: Vec::new(),
        })
    }

    /// Adds a number.
    pub fn push(
        &mut self,
        case: &str,
        allocator: &str,
        size: Option<u64>,
        metric: &str,
        value: f64,
        unit: &str,
    ) {
        self.results.push(Row {
            case: case.into(),
            allocator: allocator.into(),
            size_bytes: size,
            metric: metric.into(),
            value,
            unit: unit.into(),
        });
    }

    /// Prints the table or the JSON object.
    pub fn print(&self, json: bool) -> hipmem::Result<()> {
        if json {
            let text = serde_json::to_string_pretty(self)
                .map_err(|e| hipmem::Error::Unknown(format!("cannot write JSON: {e}")))?;
            println!("{text}");
            return Ok(());
        }
        println!("bench {}  backend {}  device {}", self.bench, self.backend, self.device);
        println!(
            "{:<26} {:<20} {:>10} {:<26} {:>14} {:<8}",
            "case", "allocator", "size", "metric", "value", "unit"
        );
        for r in &self.results {
            let size = r.size_bytes.map(crate::report::bytes).unwrap_or_default();
            println!(
                "{:<26} {:<20} {:>10} {:<26} {:>14} {:<8}",
                r.case,
                r.allocator,
                size,
                r.metric,
                format_value(r.value),
                r.unit
            );
        }
        Ok(())
    }
}

fn format_value(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e6 {
        format!("{v:.4e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// Progress lines on stderr, only when it is a terminal.
pub struct Progress {
    on: bool,
    total: usize,
    done: usize,
}

impl Progress {
    /// Progress over `total` steps.
    pub fn new(total: usize) -> Progress {
        Progress { on: std::io::stderr().is_terminal(), total, done: 0 }
    }

    /// Announces the next step.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        if self.on {
            let mut e = std::io::stderr();
            let _ = write!(e, "\r\x1b[2K[{}/{}] {what}", self.done, self.total);
            let _ = e.flush();
        }
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.on {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

/// Median and 99th percentile of samples (sorted in place).
pub fn median_p99(samples: &mut [f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Nanoseconds in a duration, as a float.
pub fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

/// A small deterministic generator (xorshift64*), so every allocator sees
/// the same sequence.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.range(0, i as u64) as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_are_permutations_and_vary() {
        let mut rng = Rng::new(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let mut v: Vec<usize> = (0..6).collect();
            rng.shuffle(&mut v);
            let mut sorted = v.clone();
            sorted.sort();
            assert_eq!(sorted, (0..6).collect::<Vec<_>>());
            seen.insert(v);
        }
        assert!(seen.len() > 10, "only {} distinct orders in 50 shuffles", seen.len());
    }

    #[test]
    fn percentiles_pick_the_right_samples() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let (m, p) = median_p99(&mut v);
        assert_eq!(m, 51.0);
        assert_eq!(p, 99.0);
    }

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            let x = a.range(1, 10);
            assert_eq!(x, b.range(1, 10));
            assert!((1..=10).contains(&x));
        }
    }
}
