//! How close the two-window estimate comes to an exact sliding log on bursty traffic.
//!
//! A seeded trace of 10^6 requests from 10^4 callers (heavy-tailed volumes, in bursts) is decided
//! by both, each keeping its own state; every decision that differs is counted, by kind.

use std::collections::VecDeque;

use opbound::engine::{Counter, Rate};

const SECOND: u64 = 1_000_000_000;

/// SplitMix64: small, seeded, good enough to shape a trace.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// `(time, caller)` in time order.
fn bursty_trace(
    seed: u64,
    callers: usize,
    requests: usize,
    duration: u64,
    skew: f64,
    burst: u64,
    gap: f64,
) -> Vec<(u64, u32)> {
    let mut rng = Rng(seed);
    // Heavy-tailed volumes: caller k gets a share proportional to 1 / (k + 1)^1.1.
    let weights: Vec<f64> = (0..callers).map(|k| 1.0 / ((k + 1) as f64).powf(skew)).collect();
    let total: f64 = weights.iter().sum();
    let mut trace = Vec::with_capacity(requests + callers);
    for (caller, w) in weights.iter().enumerate() {
        let mut left = ((w / total) * requests as f64).ceil() as usize;
        while left > 0 {
            // A burst: up to 40 requests about a quarter of a second apart, from a random start.
            let size = (1 + (rng.next() % burst) as usize).min(left);
            let mut t = rng.unit() * duration as f64;
            for _ in 0..size {
                trace.push((t as u64, caller as u32));
                t += rng.exponential(gap * SECOND as f64);
            }
            left -= size;
        }
    }
    trace.sort_unstable();
    trace
}

/// Decisions of both algorithms over a trace, by kind.
#[derive(Debug, Default)]
struct Tally {
    both_admit: u64,
    both_refuse: u64,
    wrongly_admitted: u64,
    wrongly_refused: u64,
}

impl Tally {
    fn total(&self) -> f64 {
        (self.both_admit + self.both_refuse + self.wrongly_admitted + self.wrongly_refused) as f64
    }

    fn differing(&self) -> f64 {
        (self.wrongly_admitted + self.wrongly_refused) as f64 / self.total()
    }

    fn refused(&self) -> f64 {
        self.both_refuse as f64 / self.total()
    }
}

fn replay(trace: &[(u64, u32)], callers: usize, limit: u32, window: u64) -> Tally {
    let rate = Rate::SlidingWindow { limit, window };
    let mut estimate = vec![Counter::default(); callers];
    let mut log: Vec<VecDeque<u64>> = vec![VecDeque::new(); callers];
    let mut tally = Tally::default();
    // Shift the trace off zero so window arithmetic sees ordinary times.
    let base = 1_000_000 * SECOND;
    for &(t, caller) in trace {
        let now = base + t;
        let c = caller as usize;
        let v = rate.evaluate(estimate[c], now, 1);
        if v.admitted {
            estimate[c] = v.next;
        }
        let l = &mut log[c];
        while l.front().is_some_and(|&first| first + window <= now) {
            l.pop_front();
        }
        let exact = l.len() < limit as usize;
        if exact {
            l.push_back(now);
        }
        match (v.admitted, exact) {
            (true, true) => tally.both_admit += 1,
            (false, false) => tally.both_refuse += 1,
            (true, false) => tally.wrongly_admitted += 1,
            (false, true) => tally.wrongly_refused += 1,
        }
    }
    let n = tally.total();
    eprintln!(
        "{n} requests: {} admitted by both, {} refused by both ({:.2}%), {} wrongly admitted ({:.3}%), {} wrongly refused ({:.3}%); {:.3}% differ",
        tally.both_admit,
        tally.both_refuse,
        100.0 * tally.refused(),
        tally.wrongly_admitted,
        100.0 * tally.wrongly_admitted as f64 / n,
        tally.wrongly_refused,
        100.0 * tally.wrongly_refused as f64 / n,
        100.0 * tally.differing()
    );
    tally
}

/// Bursty traffic: volumes skewed across callers (share ∝ 1/(k+1)^0.5), each caller's requests
/// in bursts of 1 to 300 about 50 ms apart, over an hour; 100 per minute per caller.
#[test]
fn two_window_estimate_matches_an_exact_sliding_log_on_bursty_traffic() {
    let (callers, requests) = (10_000, 1_000_000);
    let trace = bursty_trace(0x006f_7062_6f75_6e64, callers, requests, 3600 * SECOND, 0.5, 300, 0.05);
    assert!(trace.len() >= requests, "trace of {}", trace.len());
    let tally = replay(&trace, callers, 100, 60 * SECOND);
    // The trace must be one where the limit matters, or agreement would prove nothing.
    assert!(
        tally.refused() > 0.05,
        "only {:.2}% refused: the trace does not exercise the limit",
        100.0 * tally.refused()
    );
    assert!(
        tally.differing() < 0.01,
        "{:.3}% of decisions differ from the exact sliding log",
        100.0 * tally.differing()
    );
}

/// Callers that stay saturated for many windows (share ∝ 1/(k+1)^1.1: the heaviest sends 60 times
/// its limit). Both algorithms then admit about the limit per window, at different instants, so
/// single decisions differ far more often; what each admits in total still agrees.
#[test]
fn under_sustained_saturation_both_admit_the_same_volume() {
    let (callers, requests) = (10_000, 1_000_000);
    let trace = bursty_trace(0x006f_7062_6f75_6e64, callers, requests, 1800 * SECOND, 1.1, 40, 0.25);
    let tally = replay(&trace, callers, 60, 60 * SECOND);
    assert!(tally.refused() > 0.4, "the trace saturates");
    let estimated = (tally.both_admit + tally.wrongly_admitted) as f64;
    let exact = (tally.both_admit + tally.wrongly_refused) as f64;
    assert!((estimated / exact - 1.0).abs() < 0.03, "estimate admits {estimated}, exact log {exact}");
    assert!(tally.differing() < 0.12, "{:.3}% differ", 100.0 * tally.differing());
}
