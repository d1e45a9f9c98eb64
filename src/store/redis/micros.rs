//! Microseconds, the unit the scripts count in, and the one place they meet the engine's
//! nanoseconds and the flags' durations.

use std::time::Duration;

use crate::engine::Nanos;

/// A time or span in microseconds, as the scripts take and answer it: Redis's `TIME` gives no
/// finer, and Lua's doubles hold microseconds exactly for some 285 years (2^53).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Micros(u64);

impl Micros {
    /// Nanoseconds rounded down to whole microseconds. Windows are whole milliseconds, so a
    /// window loses nothing.
    pub(super) fn from_nanos(nanos: Nanos) -> Micros {
        Micros(nanos / 1000)
    }

    /// A duration rounded down to whole microseconds (past 2^64 of them, the most there are).
    pub(super) fn from_duration(duration: Duration) -> Micros {
        Micros(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
    }

    /// A number a script answered; a negative one (which a script never sends) reads as 0.
    pub(super) fn from_answer(value: i64) -> Micros {
        Micros(u64::try_from(value).unwrap_or(0))
    }

    /// The plain number of microseconds, for a script argument that is sometimes a time and
    /// sometimes a count (a quota's period end where other bounds pass their burst).
    pub(super) fn get(self) -> u64 {
        self.0
    }

    /// The same span in the engine's nanoseconds (past 2^64 of them, the most there are).
    pub(super) fn nanos(self) -> Nanos {
        self.0.saturating_mul(1000)
    }
}

/// A script argument: the plain number of microseconds.
impl redis::ToRedisArgs for Micros {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        self.0.write_redis_args(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_down_and_never_wrap() {
        assert_eq!(Micros::from_nanos(1_999), Micros(1));
        assert_eq!(Micros::from_nanos(60_000_000_000).nanos(), 60_000_000_000, "a window is exact");
        assert_eq!(Micros::from_duration(Duration::from_nanos(2_500)), Micros(2));
        assert_eq!(Micros::from_duration(Duration::from_secs(u64::MAX)), Micros(u64::MAX));
        assert_eq!(Micros::from_answer(-5), Micros(0));
        assert_eq!(Micros::from_answer(7).nanos(), 7_000);
        assert_eq!(Micros(u64::MAX).nanos(), u64::MAX);
    }
}
