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

/// What a histogram held at one moment, in the shape prometheus-client's `encode_histogram`
/// takes: it adds the buckets up itself as it writes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Upper bounds in seconds with the count of durations in each bucket alone (above the
    /// bound before it, at or below its own), ending with +Inf for those above every bound.
    pub buckets: Vec<(f64, u64)>,
    /// How many durations were observed: the buckets' total.
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

    /// The buckets as they are now, each on its own (not cumulative).
    pub fn snapshot(&self) -> Snapshot {
        let mut buckets: Vec<(f64, u64)> =
            self.bounds.iter().zip(&self.buckets).map(|(b, c)| (*b, c.load(Ordering::Relaxed))).collect();
        let counted: u64 = buckets.iter().map(|(_, c)| c).sum();
        // `observe` adds to its bucket before the count, so a scrape between the two sees one
        // more in the buckets than in the count: the count is never less than the buckets'.
        let count = self.count.load(Ordering::Relaxed).max(counted);
        buckets.push((f64::INFINITY, count - counted));
        Snapshot { buckets, count, sum: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    /// The cumulative lines `/metrics` writes for these durations, through the encoder
    /// `scrape.rs` uses.
    fn encoded(durations: &[Duration]) -> Vec<(String, u64)> {
        let l = Latency::default();
        for d in durations {
            l.observe(*d);
        }
        #[derive(Debug)]
        struct One(Snapshot);
        impl prometheus_client::collector::Collector for One {
            fn encode(&self, mut e: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
                let Snapshot { buckets, count, sum } = &self.0;
                let mut h = e.encode_descriptor("t", "h", None, prometheus_client::metrics::MetricType::Histogram)?;
                h.encode_histogram::<prometheus_client::encoding::NoLabelSet>(*sum, *count, buckets, None)
            }
        }
        let mut r = Registry::default();
        r.register_collector(Box::new(One(l.snapshot())));
        let mut text = String::new();
        encode(&mut text, &r).unwrap();
        text.lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("t_bucket{le=\"")?;
                let (le, n) = rest.split_once("\"} ")?;
                Some((le.to_string(), n.parse().unwrap()))
            })
            .collect()
    }

    #[test]
    fn the_encoded_buckets_count_each_duration_once() {
        let us = Duration::from_micros;
        let lines = encoded(&[us(3), us(3), us(3), us(40), us(2_000), us(50_000)]);
        let at = |le: f64| lines.iter().find(|(l, _)| l.parse::<f64>().ok() == Some(le)).map(|(_, n)| *n);
        assert_eq!(at(2.5e-6), Some(0), "{lines:?}");
        assert_eq!(at(5e-6), Some(3), "{lines:?}");
        assert_eq!(at(1e-5), Some(3), "{lines:?}");
        assert_eq!(at(5e-5), Some(4), "{lines:?}");
        assert_eq!(at(1e-3), Some(4), "{lines:?}");
        assert_eq!(at(5e-3), Some(5), "{lines:?}");
        assert_eq!(at(1e-2), Some(5), "{lines:?}");
        assert_eq!(lines.last(), Some(&("+Inf".to_string(), 6)), "+Inf is the count: {lines:?}");
        assert!(lines.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative: {lines:?}");
    }

    #[test]
    fn it_encodes_as_prometheus_clients_own_histogram_does() {
        let us = Duration::from_micros;
        let durations = [us(1), us(7), us(7), us(300), us(9_000), us(20_000), us(20_000)];
        let theirs = Histogram::new(Latency::default().bounds);
        for d in &durations {
            theirs.observe(d.as_secs_f64());
        }
        let mut r = Registry::default();
        r.register("t", "h", theirs);
        let mut text = String::new();
        encode(&mut text, &r).unwrap();
        let expected: Vec<(String, u64)> = text
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("t_bucket{le=\"")?;
                let (le, n) = rest.split_once("\"} ")?;
                Some((le.to_string(), n.parse().unwrap()))
            })
            .collect();
        assert_eq!(encoded(&durations), expected);
    }
}
