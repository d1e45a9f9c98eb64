//! A latency histogram in twelve fixed buckets, from atomics (prometheus-client's histogram takes a lock).
//! A leaf: the server times decisions with it and the store times its calls, and neither owns it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Durations counted into twelve buckets from 1 µs to 10 ms, with their count and sum.
#[derive(Debug)]
pub struct Latency {
    bounds: [f64; 12],
    buckets: [AtomicU64; 12],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// What a histogram held at one moment, as Prometheus encodes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Upper bounds in seconds with the cumulative count at or below each, ending with +Inf.
    pub buckets: Vec<(f64, u64)>,
    /// How many durations were observed.
    pub count: u64,
    /// Seconds.
    pub sum: f64,
}

impl Default for Latency {
    fn default() -> Latency {
        Latency {
            bounds: [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2],
            buckets: Default::default(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl Latency {
    /// A histogram with its own twelve upper bounds in seconds, ascending (the default suits
    /// decisions; a disk write wants longer ones).
    pub fn with_bounds(bounds: [f64; 12]) -> Latency {
        Latency { bounds, ..Latency::default() }
    }

    /// Counts one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The buckets as they are now, cumulative.
    pub fn snapshot(&self) -> Snapshot {
        let mut cumulative = 0;
        let mut buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(&self.buckets)
            .map(|(b, c)| {
                cumulative += c.load(Ordering::Relaxed);
                (*b, cumulative)
            })
            .collect();
        let count = self.count.load(Ordering::Relaxed);
        buckets.push((f64::INFINITY, count));
        Snapshot { buckets, count, sum: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9 }
    }
}
