//! Instants as the engine counts them (`u64` nanoseconds since the Unix epoch) and as jiff does
//! (`Timestamp`), converted in one place for the zone, the calendar and first use.

use jiff::Timestamp;

/// An engine instant as a jiff timestamp. Every `u64` of nanoseconds (up to the year 2554) is in
/// jiff's range, so the fallback is never taken.
pub(super) fn timestamp(instant: u64) -> Timestamp {
    Timestamp::from_nanosecond(i128::from(instant)).unwrap_or(Timestamp::MAX)
}

/// A jiff timestamp as an engine instant, clamped to what a `u64` of nanoseconds can hold.
pub(super) fn nanos(at: Timestamp) -> u64 {
    let n = at.as_nanosecond();
    u64::try_from(n).unwrap_or(if n < 0 { 0 } else { u64::MAX })
}

/// The instant an RFC 3339 string names, so each assertion of the period tests reads as a date.
#[cfg(test)]
pub(super) fn at(rfc3339: &str) -> u64 {
    let at: Timestamp = rfc3339.parse().unwrap_or_else(|e| panic!("{rfc3339}: {e}"));
    nanos(at)
}
