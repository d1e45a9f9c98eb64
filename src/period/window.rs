//! One period's span of time.

/// One period: from `start` (included) to `end` (excluded), in nanoseconds since the Unix epoch.
/// Consecutive windows of one schedule meet: the next starts at this one's `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// The first instant of the period.
    pub start: u64,
    /// The first instant of the next period.
    pub end: u64,
}

impl Window {
    /// Whether `instant` falls in this period.
    pub fn contains(self, instant: u64) -> bool {
        (self.start..self.end).contains(&instant)
    }

    /// The period's exact length in nanoseconds: a `P1D` window is 23 hours on the day clocks go
    /// forward, a `P1M` window 28 to 31 days.
    pub fn nanos(self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}
