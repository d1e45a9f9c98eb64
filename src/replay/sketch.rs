//! Summaries in fixed memory, whatever the number of callers: distinct counts (HyperLogLog),
//! the heaviest callers (Space-Saving), and when something happened (a timeline that widens
//! its buckets instead of growing).

use crate::engine::clock::{Nanos, SECOND};

/// Distinct values counted in 2^10 one-byte registers (HyperLogLog, about 3 % standard error;
/// exact-looking below a few hundred through linear counting). Fed hashes that are already
/// uniform (the limiter's keyed SipHash).
#[derive(Clone)]
pub struct Distinct {
    registers: Box<[u8; REGISTERS]>,
}

const BITS: u32 = 10;
const REGISTERS: usize = 1 << BITS;

impl Default for Distinct {
    fn default() -> Distinct {
        Distinct { registers: Box::new([0; REGISTERS]) }
    }
}

impl std::fmt::Debug for Distinct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Distinct(~{})", self.estimate())
    }
}

impl Distinct {
    /// Counts a hash.
    pub fn insert(&mut self, hash: u64) {
        // Mixed once more: the register index and the rank must not share structure.
        let h = mix(hash);
        let index = (h >> (64 - BITS)) as usize;
        let rank = ((h << BITS) | (1 << (BITS - 1))).leading_zeros() as u8 + 1;
        if rank > self.registers[index] {
            self.registers[index] = rank;
        }
    }

    /// About how many distinct hashes were inserted.
    pub fn estimate(&self) -> u64 {
        let m = REGISTERS as f64;
        let zeros = self.registers.iter().filter(|r| **r == 0).count();
        if zeros == REGISTERS {
            return 0;
        }
        let sum: f64 = self.registers.iter().map(|r| 2f64.powi(-i32::from(*r))).sum();
        let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        let estimate = if raw <= 2.5 * m && zeros > 0 { m * (m / zeros as f64).ln() } else { raw };
        estimate.round() as u64
    }
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The callers seen most, in at most `capacity` entries (Space-Saving): any caller with more
/// than `total / capacity` is certainly kept, and each kept count is exact within its `error`.
#[derive(Clone, Debug)]
pub struct Heaviest {
    capacity: usize,
    entries: Vec<Heavy>,
}

/// One caller kept by [`Heaviest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heavy {
    /// The caller's hashed key.
    pub key: u64,
    /// How many times it was counted (an over-estimate by at most `error`).
    pub count: u64,
    /// How much of `count` may belong to callers it replaced.
    pub error: u64,
    /// The caller's key as the log held it, when asked for (`--show-keys`).
    pub label: Option<String>,
}

impl Heaviest {
    /// Keeps at most `capacity` callers.
    pub fn new(capacity: usize) -> Heaviest {
        Heaviest { capacity: capacity.max(1), entries: Vec::new() }
    }

    /// Counts `key` once; `label` is asked for only when the key enters the summary.
    pub fn insert(&mut self, key: u64, label: impl FnOnce() -> Option<String>) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.count += 1;
            return;
        }
        if self.entries.len() < self.capacity {
            self.entries.push(Heavy { key, count: 1, error: 0, label: label() });
            return;
        }
        // Replace the least counted (the first of them, so the result is deterministic).
        let least = (0..self.entries.len()).min_by_key(|&i| (self.entries[i].count, i)).unwrap_or(0);
        let min = self.entries[least].count;
        self.entries[least] = Heavy { key, count: min + 1, error: min, label: label() };
    }

    /// The heaviest `n`, most counted first (ties by key).
    pub fn top(&self, n: usize) -> Vec<Heavy> {
        let mut sorted = self.entries.clone();
        sorted.sort_by(|a, b| b.count.cmp(&a.count).then(a.key.cmp(&b.key)));
        sorted.truncate(n);
        sorted
    }
}

/// Counts over time in at most `MAX_BUCKETS` buckets: a minute each at first, twice as wide
/// (neighbours merged) each time the log outgrows them.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    start: Option<Nanos>,
    width: Nanos,
    buckets: Vec<u64>,
}

const MAX_BUCKETS: usize = 1440;

impl Timeline {
    /// Counts one event at `at`; events must not come before the first one.
    pub fn insert(&mut self, at: Nanos) {
        let start = *self.start.get_or_insert_with(|| at - at % (60 * SECOND));
        if self.width == 0 {
            self.width = 60 * SECOND;
        }
        let mut index = (at.saturating_sub(start) / self.width) as usize;
        while index >= MAX_BUCKETS {
            self.buckets = self.buckets.chunks(2).map(|pair| pair.iter().sum()).collect();
            self.width *= 2;
            index = (at.saturating_sub(start) / self.width) as usize;
        }
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, 0);
        }
        self.buckets[index] += 1;
    }

    /// How wide a bucket is.
    pub fn width(&self) -> Nanos {
        self.width
    }

    /// Every non-empty bucket: its start and its count.
    pub fn buckets(&self) -> impl Iterator<Item = (Nanos, u64)> + '_ {
        let start = self.start.unwrap_or(0);
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(move |(i, c)| (start + i as Nanos * self.width, *c))
    }

    /// The `n` fullest buckets, fullest first (ties: earliest first).
    pub fn busiest(&self, n: usize) -> Vec<(Nanos, u64)> {
        let mut all: Vec<(Nanos, u64)> = self.buckets().collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_counts_are_within_a_few_percent() {
        for n in [0u64, 1, 10, 100, 1_000, 10_000, 200_000] {
            let mut d = Distinct::default();
            for i in 0..n {
                // Each twice: repeats do not count.
                d.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                d.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            }
            let e = d.estimate() as f64;
            let tolerance = (n as f64 * 0.08).max(1.0);
            assert!((e - n as f64).abs() <= tolerance, "{n} distinct estimated as {e}");
        }
    }

    #[test]
    fn the_heaviest_callers_are_kept_exactly_when_they_stand_out() {
        let mut h = Heaviest::new(64);
        // Three heavy callers among ten thousand light ones, interleaved.
        for i in 0..10_000u64 {
            h.insert(1_000_000 + i, || None);
            if i % 10 == 0 {
                h.insert(1, || Some("one".into()));
            }
            if i % 20 == 0 {
                h.insert(2, || None);
            }
            if i % 40 == 0 {
                h.insert(3, || None);
            }
        }
        let top = h.top(3);
        assert_eq!(top.iter().map(|t| t.key).collect::<Vec<_>>(), vec![1, 2, 3]);
        // Counts are over-estimates bounded by their error.
        for (t, exact) in top.iter().zip([1000, 500, 250]) {
            assert!(t.count >= exact && t.count - t.error <= exact, "{t:?} vs {exact}");
        }
        assert_eq!(top[0].label.as_deref(), Some("one"));
    }

    #[test]
    fn a_timeline_widens_its_buckets_instead_of_growing() {
        let mut t = Timeline::default();
        let day = 86_400 * SECOND;
        for minute in 0..(3 * 1440) {
            t.insert(day + minute * 60 * SECOND);
        }
        t.insert(day + 5 * 60 * SECOND);
        assert!(t.buckets().count() <= MAX_BUCKETS);
        assert_eq!(t.width(), 240 * SECOND);
        assert_eq!(t.buckets().map(|(_, c)| c).sum::<u64>(), 3 * 1440 + 1);
        // Minutes 4 to 7 share a bucket now: the extra event at minute 5 makes it the busiest.
        assert_eq!(t.busiest(1), vec![(day + 240 * SECOND, 5)]);
    }
}
