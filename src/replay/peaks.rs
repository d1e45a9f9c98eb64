//! Each caller's busiest window and busiest second, kept for a uniform sample of callers (by
//! hash) so memory stays fixed however many callers a log holds.

use std::collections::HashMap;

use super::sketch::Distinct;
use crate::engine::clock::{Nanos, SECOND};

/// One sampled caller's counts.
#[derive(Clone, Copy, Debug, Default)]
struct Caller {
    /// The window being counted, and its count so far.
    window: u64,
    count: u32,
    /// The most in any window.
    peak: u32,
    /// The second being counted, and its count so far.
    second: u64,
    per_second: u32,
    /// The most in any second.
    burst: u32,
}

/// Per-caller peaks over a sample of callers: a caller is kept when its mixed hash falls below
/// a threshold, halved (and the sample thinned to match) whenever the sample outgrows its
/// capacity. The kept callers are a uniform sample of all of them, so their peaks' percentiles
/// estimate everyone's.
#[derive(Clone, Debug)]
pub struct Peaks {
    window: Nanos,
    capacity: usize,
    threshold: u64,
    callers: HashMap<u64, Caller>,
    /// Every caller seen, sampled or not.
    pub distinct: Distinct,
    /// Every request seen.
    pub requests: u64,
}

impl Peaks {
    /// Peaks per `window`, for at most `capacity` sampled callers.
    pub fn new(window: Nanos, capacity: usize) -> Peaks {
        Peaks {
            window: window.max(1),
            capacity: capacity.max(16),
            threshold: u64::MAX,
            callers: HashMap::new(),
            distinct: Distinct::default(),
            requests: 0,
        }
    }

    /// Counts a request by the caller `key` at `at` (times never go back).
    pub fn insert(&mut self, key: u64, at: Nanos) {
        self.requests += 1;
        self.distinct.insert(key);
        let sampled = mix(key);
        if sampled > self.threshold {
            return;
        }
        let (window, second) = (at / self.window, at / SECOND);
        let c = self.callers.entry(key).or_insert(Caller { window, second, ..Caller::default() });
        if c.window != window {
            (c.window, c.count) = (window, 0);
        }
        if c.second != second {
            (c.second, c.per_second) = (second, 0);
        }
        c.count += 1;
        c.per_second += 1;
        c.peak = c.peak.max(c.count);
        c.burst = c.burst.max(c.per_second);
        while self.callers.len() > self.capacity {
            self.threshold /= 2;
            let threshold = self.threshold;
            self.callers.retain(|k, _| mix(*k) <= threshold);
        }
    }

    /// The sampled callers' busiest windows, ascending.
    pub fn peaks(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.callers.values().map(|c| c.peak).collect();
        v.sort_unstable();
        v
    }

    /// The sampled callers' busiest seconds, ascending.
    pub fn bursts(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.callers.values().map(|c| c.burst).collect();
        v.sort_unstable();
        v
    }

    /// How many callers are in the sample.
    pub fn sampled(&self) -> usize {
        self.callers.len()
    }
}

/// The value at percentile `p` (0 to 100) of ascending values, nearest rank; 0 when empty.
pub(crate) fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// splitmix64's finaliser: sampling must not follow the table's own use of the hash bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_each_callers_busiest_window_and_second() {
        let mut p = Peaks::new(60 * SECOND, 100);
        // Caller 1: 3 in its first minute (2 in one second), 5 in the next.
        for at in [0, 10, 10, 60, 61, 62, 63, 64].map(|s| s * SECOND) {
            p.insert(1, at);
        }
        p.insert(2, 5 * SECOND);
        assert_eq!(p.peaks(), vec![1, 5]);
        assert_eq!(p.bursts(), vec![1, 2]);
        assert_eq!(p.requests, 9);
    }

    #[test]
    fn the_sample_stays_within_its_capacity_and_keeps_the_distribution() {
        let mut p = Peaks::new(60 * SECOND, 1000);
        // 100,000 callers; caller k makes k % 10 + 1 requests in one minute.
        for k in 0..100_000u64 {
            for i in 0..(k % 10 + 1) {
                p.insert(k, i * SECOND);
            }
        }
        assert!(p.sampled() <= 1000 && p.sampled() >= 250, "{}", p.sampled());
        let peaks = p.peaks();
        // Uniform over 1..=10: the median is about 5, the 90th percentile about 9.
        assert!((4..=6).contains(&percentile(&peaks, 50.0)), "{}", percentile(&peaks, 50.0));
        assert!((8..=10).contains(&percentile(&peaks, 90.0)));
        let callers = p.distinct.estimate();
        assert!((92_000..=108_000).contains(&callers), "{callers}");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
