//! Every algorithm against the exact model (`model_tests.rs`) over random arrivals, costs, clock
//! steps, refunds, settles and releases: admission, `remaining`, `reset` and `retry` must be the
//! model's to the nanosecond, and a request sent at the retry instant (or just before it) is
//! decided as the model decides it.

use proptest::prelude::*;

use super::clock::{Nanos, SECOND};
use super::counter::Counter;
use super::model_tests::{Model, Said};
use super::rate::Rate;
use crate::period::Window;

/// What happens next to one caller.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// The clock moves on by this share of the window, in thousandths (0 often: a burst).
    Wait(u32),
    /// A request of this cost.
    Request(u32),
    /// A charge after the fact (`settle`, a committed reservation), negative for a refund.
    Charge(i64),
    /// A concurrency request's permits come back.
    Release(u32),
    /// The clock moves to the last refusal's retry instant, less this many units (0 or 1).
    ToRetry(u64),
    /// The request just admitted is taken back (a store's `undo`: another slot refused it).
    Undo,
}

/// A bound's numbers, in thousandths of a window where they are times.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// 0 sliding window, 1 token bucket, 2 concurrency, 3 calendar quota.
    pub algorithm: u8,
    pub limit: u32,
    /// Whole milliseconds, as windows are written.
    pub window_ms: u64,
    pub burst: u32,
}

pub(crate) fn shapes() -> impl Strategy<Value = Shape> {
    // Mostly small bounds, where one request is a large share; now and then large ones, whose
    // products outgrow 64 bits (and, on Redis, a double's 53).
    let limit = prop_oneof![4 => 1u32..=12, 1 => 1u32..=2_000_000];
    (0u8..4, limit, prop_oneof![3 => 1u64..=120_000, 1 => 1u64..=86_400_000], 1u32..=3).prop_map(
        |(algorithm, limit, window_ms, burst_share)| Shape {
            algorithm,
            limit,
            window_ms,
            burst: limit.saturating_mul(burst_share) / 2 + 1,
        },
    )
}

pub(crate) fn ops(limit: u32) -> impl Strategy<Value = Vec<Op>> {
    let cost = prop_oneof![4 => Just(1u32), 3 => 1..=limit.saturating_add(1), 1 => Just(limit)];
    let delta = prop_oneof![(-(i64::from(limit)) - 2)..=i64::from(limit) + 2];
    let op = prop_oneof![
        6 => cost.clone().prop_map(Op::Request),
        2 => Just(Op::Wait(0)),
        4 => (0u32..=2_200).prop_map(Op::Wait),
        2 => (0u32..=50).prop_map(Op::Wait),
        1 => delta.prop_map(Op::Charge),
        1 => cost.prop_map(Op::Release),
        2 => (0u64..=1).prop_map(Op::ToRetry),
        1 => Just(Op::Undo),
    ];
    proptest::collection::vec(op, 1..80)
}

impl Shape {
    /// The model of this bound, in units of `unit` per second (10^9 in the engine, 10^6 on Redis).
    pub(crate) fn model(&self, unit: u64) -> Model {
        let (limit, window) = (i128::from(self.limit), i128::from(self.window(unit)));
        match self.algorithm {
            0 => Model::Sliding { limit, window, counts: Default::default() },
            1 => Model::Bucket { limit, window, burst: i128::from(self.burst), tat_l: 0 },
            2 => Model::Concurrency { limit, in_flight: 0 },
            _ => Model::Quota { limit, period: window, origin: 0, used: Default::default() },
        }
    }

    pub(crate) fn window(&self, unit: u64) -> u64 {
        self.window_ms * unit / 1000
    }

    /// A time step of `thousandths` of the window, at least one unit when not zero.
    pub(crate) fn step(&self, unit: u64, thousandths: u32) -> u64 {
        let w = self.window(unit);
        if thousandths == 0 { 0 } else { (w * u64::from(thousandths) / 1000).max(1) + u64::from(thousandths % 7) }
    }
}

/// The engine's rate for a shape at `now` (a quota's period is the one `now` falls in).
fn rate(shape: &Shape, now: Nanos) -> Rate {
    let window = shape.window(SECOND);
    match shape.algorithm {
        0 => Rate::SlidingWindow { limit: shape.limit, window },
        1 => Rate::TokenBucket { limit: shape.limit, window, burst: shape.burst },
        2 => Rate::Concurrency { limit: shape.limit },
        _ => {
            let start = now / window * window;
            Rate::Quota { limit: shape.limit, window: Window { start, end: start + window }, first_use: false }
        }
    }
}

/// Compares one decision with the model's, and says what the next `ToRetry` aims at.
pub(crate) fn agree(
    shape: &Shape,
    got: (bool, u64, u64, u64),
    want: Said,
    at: u64,
    step: usize,
) -> Result<Option<u64>, TestCaseError> {
    let (admitted, remaining, reset, retry) = got;
    prop_assert_eq!(admitted, want.admitted, "step {}: admitted at {}", step, at);
    prop_assert_eq!(remaining, want.remaining, "step {}: remaining at {}", step, at);
    prop_assert_eq!(reset, want.reset, "step {}: reset at {}", step, at);
    if admitted {
        prop_assert_eq!(retry, 0, "step {}", step);
        return Ok(None);
    }
    // Nothing says when a concurrency permit comes back: the engine's wait is a polite guess.
    if shape.algorithm == 2 {
        return Ok(None);
    }
    match want.retry {
        Some(least) => {
            prop_assert_eq!(retry, least, "step {}: retry at {}", step, at);
            Ok(Some(at + least))
        }
        // A cost no wait lets through: any wait will do, as long as there is one.
        None => {
            prop_assert!(retry > 0, "step {}", step);
            Ok(None)
        }
    }
}

/// Runs one caller's ops through `Rate` and the model side by side.
fn run(shape: Shape, ops: &[Op]) -> Result<(), TestCaseError> {
    let window = shape.window(SECOND);
    let mut model = shape.model(SECOND);
    let mut counter = Counter::default();
    // Far from zero, off a window boundary.
    let mut now: Nanos = 1_000 * window + window / 3;
    let mut aim = None;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Wait(t) => now += shape.step(SECOND, t),
            Op::ToRetry(early) => {
                if let Some(at) = aim {
                    now = now.max(at - early);
                }
            }
            Op::Request(cost) => {
                let v = rate(&shape, now).evaluate(counter, now, cost);
                if v.admitted {
                    counter = v.next;
                }
                let want = model.decide(now, cost);
                let got = (v.admitted, u64::from(v.remaining), v.reset, v.retry);
                aim = agree(&shape, got, want, now, step)?.or(aim);
            }
            Op::Charge(delta) if shape.algorithm != 2 => {
                counter = rate(&shape, now).charge(counter, now, delta);
                model.charge(now, delta);
            }
            Op::Release(cost) if shape.algorithm == 2 => {
                counter = rate(&shape, now).release(counter, cost);
                model.release(cost);
            }
            // The engine commits every bound of a decision at once: there is nothing to take back.
            Op::Charge(_) | Op::Release(_) | Op::Undo => {}
        }
    }
    Ok(())
}

proptest! {
    // A few hundred cases of up to 80 steps: well under a second.
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_algorithm_decides_as_the_exact_model((shape, ops) in shapes().prop_flat_map(|s| (Just(s), ops(s.limit)))) {
        run(shape, &ops)?;
    }
}
