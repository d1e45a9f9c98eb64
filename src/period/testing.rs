//! Instants written as RFC 3339 in the period tests, so each assertion reads as a date.

use super::{Window, Zone};

/// The instant an RFC 3339 string names, in engine nanoseconds.
pub(super) fn at(rfc3339: &str) -> u64 {
    let at: jiff::Timestamp = rfc3339.parse().unwrap_or_else(|e| panic!("{rfc3339}: {e}"));
    super::zone::nanos(at)
}

/// A zone the test names; it must exist.
pub(super) fn zone(name: &str) -> Zone {
    Zone::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A window's edges in RFC 3339, in the zone's offsets.
pub(super) fn shown(zone: &Zone, window: Window) -> [String; 2] {
    [zone.rfc3339(window.start), zone.rfc3339(window.end)]
}
