//! What the period tests share: instants written as RFC 3339 (`at`), so each assertion reads as a
//! date, zones by name, and windows shown in their zone's offsets.

pub(super) use super::instant::at;
use super::{Window, Zone};

/// A zone the test names; it must exist.
pub(super) fn zone(name: &str) -> Zone {
    Zone::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A window's edges in RFC 3339, in the zone's offsets.
pub(super) fn shown(zone: &Zone, window: Window) -> [String; 2] {
    [zone.rfc3339(window.start), zone.rfc3339(window.end)]
}
