//! The numbers every algorithm works on: a caller's 16-byte [`Counter`] on one bound, and the
//! [`Verdict`] a bound gives a request. Below the algorithms (`rate.rs`, `quota.rs`), which all
//! read and write them.

use super::clock::Nanos;

/// One caller's state for one bound, 16 bytes whatever the algorithm:
/// sliding window `(window index, previous count, current count)`, token bucket
/// `(theoretical arrival time, -, -)`, concurrency `(-, in flight, -)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    /// Sliding window: the current window's index (`now / window`). Token bucket: the
    /// theoretical arrival time, in nanoseconds. Concurrency: unused.
    pub a: u64,
    /// Sliding window: the previous window's count. Concurrency: cost in flight. Token bucket:
    /// unused.
    pub b: u32,
    /// Sliding window: the current window's count. Otherwise unused.
    pub c: u32,
}

/// What a bound says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the bound has room for the request now.
    pub admitted: bool,
    /// The counter to store if the request is committed (meaningless when refused).
    pub next: Counter,
    /// Budget left after this request (if admitted) or now (if refused).
    pub remaining: u32,
    /// What `RateLimit-Reset` reports, in nanoseconds. Sliding window: until the current window
    /// ends (at most the window). Token bucket: until the bucket is full again (at most
    /// `burst × window / limit`). Concurrency: 0, since nothing comes back with time.
    pub reset: Nanos,
    /// Nanoseconds until this request could pass, when refused; 0 when admitted.
    pub retry: Nanos,
    /// A quota's period end (Unix nanoseconds); None for the other algorithms.
    pub period_end: Option<Nanos>,
}

impl Verdict {
    /// A verdict to write over: refused, nothing left, nothing to wait for.
    pub(crate) const BLANK: Verdict = Verdict {
        admitted: false,
        next: Counter { a: 0, b: 0, c: 0 },
        remaining: 0,
        reset: 0,
        retry: 0,
        period_end: None,
    };
}
