//! First-use reset: each caller's periods start at its first admitted request, on anniversaries.

use jiff::{Timestamp, ZonedDateTime};

use super::instant::{nanos, timestamp};
use super::{Period, Unit, Window, Zone};

/// The periods of a quota under `reset: first-use`: a caller's first period starts at its first
/// admitted request (the anchor), and each later one where the one before ends.
///
/// The `k`-th period starts at the anchor plus `k` periods, each counted from the anchor itself:
///
/// - Hours are elapsed time: `PT24H` is always 24 hours, and any number of hours is allowed.
/// - Days and longer keep the anchor's wall-clock time in the zone: `P1D` from 10:00 starts at
///   10:00 every day, 23 or 25 hours apart across a daylight-saving change. A start whose time
///   the clocks skip moves forward by the gap (02:30 on a day that jumps from 02:00 to 03:00 is
///   03:30); one they repeat is its first pass.
/// - A day the month lacks is clamped to the month's last day, as jiff's (and Temporal's)
///   calendar arithmetic does, but only for that period: `P1M` from 31 January starts on
///   28 February (29 in a leap year), 31 March, 30 April, 31 May, never drifting to the 28th;
///   `P1Y` from 29 February starts on 28 February in common years and 29 February in leap years.
///
/// Keep the anchor for each caller, not the current period's start: later starts are computed
/// from it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FirstUse {
    period: Period,
    zone: Zone,
}

impl FirstUse {
    /// Anniversary periods of `period`, keeping wall-clock times in `zone`. Every period has
    /// anniversaries, so nothing is refused here.
    pub fn new(period: Period, zone: Zone) -> FirstUse {
        FirstUse { period, zone }
    }

    /// The period this schedule counts.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The zone whose wall clock anniversaries of days and longer keep.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The period containing `now`, for a caller whose first period started at `anchor` (both in
    /// nanoseconds since the Unix epoch). However many periods passed while nobody called, the
    /// current one is found from an estimate and a step or two, not by walking through them. A
    /// `now` before the anchor (another instance's clock running ahead) falls in the first period.
    pub fn window(&self, anchor: u64, now: u64) -> Window {
        let found = match self.period.unit() {
            Unit::Hour => Some(self.hours(anchor, now)),
            Unit::Day | Unit::Week | Unit::Month | Unit::Year => self.anniversaries(anchor, now),
        };
        found.unwrap_or_else(|| self.fixed(anchor, now))
    }

    /// Elapsed hours: plain arithmetic, no zone.
    fn hours(&self, anchor: u64, now: u64) -> Window {
        let length = self.period.nominal_seconds().saturating_mul(1_000_000_000);
        let passed = now.saturating_sub(anchor) / length;
        let start = anchor + passed * length;
        Window { start, end: start.saturating_add(length) }
    }

    /// Calendar anniversaries of the anchor in the zone.
    fn anniversaries(&self, anchor: u64, now: u64) -> Option<Window> {
        let first = timestamp(anchor).to_zoned_datetime(self.zone.time_zone().clone());
        let now = timestamp(now);
        let start = |k: i64| -> Option<Timestamp> {
            // The anchor itself, not its wall time converted back: that could be the other pass
            // through an hour the clocks repeat.
            if k == 0 {
                Some(first.timestamp())
            } else {
                Some(first.checked_add(self.period.span(k)?).ok()?.timestamp())
            }
        };
        let mut k = self.estimate(&first, now);
        while k > 0 && start(k)? > now {
            k -= 1;
        }
        while start(k + 1)? <= now {
            k += 1;
        }
        Some(Window { start: nanos(start(k)?), end: nanos(start(k + 1)?) })
    }

    /// How many whole periods lie between the anchor and `now`, give or take one: elapsed days
    /// for days and weeks (a clock change moves a start by hours, not days), calendar months for
    /// months and years.
    fn estimate(&self, first: &ZonedDateTime, now: Timestamp) -> i64 {
        let n = i64::from(self.period.count().get());
        let passed = match self.period.unit() {
            Unit::Day | Unit::Week => {
                let days = now.duration_since(first.timestamp()).as_secs().div_euclid(86_400);
                days / if self.period.unit() == Unit::Week { 7 * n } else { n }
            }
            Unit::Month | Unit::Year => {
                let wall = self.zone.civil(now);
                let months = (i64::from(wall.year()) - i64::from(first.year())) * 12
                    + (i64::from(wall.month()) - i64::from(first.month()));
                months.div_euclid(if self.period.unit() == Unit::Year { 12 * n } else { n })
            }
            Unit::Hour => 0,
        };
        passed.max(0)
    }

    /// Fixed-length periods from the anchor, for instants jiff cannot place. Every `u64` instant
    /// plus 100 years is in jiff's range, so this is never taken; it keeps `window` total.
    fn fixed(&self, anchor: u64, now: u64) -> Window {
        let length = self.period.nominal_seconds().saturating_mul(1_000_000_000);
        let start = anchor + now.saturating_sub(anchor) / length * length;
        Window { start, end: start.saturating_add(length) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::testing::{at, shown, zone};

    /// Period, zone, the anchor, an instant, and the window that holds it.
    type Row = (&'static str, &'static str, &'static str, &'static str, [&'static str; 2]);

    fn run(table: &[Row]) {
        for &(period, zone_name, anchor, now, expected) in table {
            let zone = zone(zone_name);
            let schedule = FirstUse::new(Period::parse(period).unwrap(), zone.clone());
            let window = schedule.window(at(anchor), at(now));
            assert_eq!(shown(&zone, window), expected, "{period} in {zone_name} from {anchor} at {now}");
        }
    }

    #[test]
    fn months_from_the_31st_clamp_each_period_and_never_drift() {
        let jan31 = "2026-01-31T10:00:00Z";
        run(&[
            ("P1M", "UTC", jan31, jan31, ["2026-01-31T10:00:00+00:00", "2026-02-28T10:00:00+00:00"]),
            ("P1M", "UTC", jan31, "2026-02-28T09:59:59Z", ["2026-01-31T10:00:00+00:00", "2026-02-28T10:00:00+00:00"]),
            ("P1M", "UTC", jan31, "2026-02-28T10:00:00Z", ["2026-02-28T10:00:00+00:00", "2026-03-31T10:00:00+00:00"]),
            ("P1M", "UTC", jan31, "2026-04-30T10:00:00Z", ["2026-04-30T10:00:00+00:00", "2026-05-31T10:00:00+00:00"]),
            // In a leap year February has its 29th.
            (
                "P1M",
                "UTC",
                "2028-01-31T10:00:00Z",
                "2028-03-01T00:00:00Z",
                ["2028-02-29T10:00:00+00:00", "2028-03-31T10:00:00+00:00"],
            ),
            // Quarters from 30 November: 28 February, then 30 May.
            (
                "P3M",
                "UTC",
                "2026-11-30T08:00:00Z",
                "2027-03-15T00:00:00Z",
                ["2027-02-28T08:00:00+00:00", "2027-05-30T08:00:00+00:00"],
            ),
            // From 31 December, across the year: 31 January, then 28 February.
            (
                "P1M",
                "Europe/Berlin",
                "2026-12-31T23:30:00+01:00",
                "2027-02-01T00:00:00+01:00",
                ["2027-01-31T23:30:00+01:00", "2027-02-28T23:30:00+01:00"],
            ),
        ]);
    }

    #[test]
    fn years_from_29_february_fall_on_28_february_in_common_years() {
        let feb29 = "2028-02-29T12:00:00Z";
        run(&[
            ("P1Y", "UTC", feb29, "2029-02-28T11:59:59Z", ["2028-02-29T12:00:00+00:00", "2029-02-28T12:00:00+00:00"]),
            ("P1Y", "UTC", feb29, "2029-03-01T00:00:00Z", ["2029-02-28T12:00:00+00:00", "2030-02-28T12:00:00+00:00"]),
            ("P1Y", "UTC", feb29, "2032-02-29T11:59:59Z", ["2031-02-28T12:00:00+00:00", "2032-02-29T12:00:00+00:00"]),
            ("P1Y", "UTC", feb29, "2032-02-29T12:00:00Z", ["2032-02-29T12:00:00+00:00", "2033-02-28T12:00:00+00:00"]),
        ]);
    }

    #[test]
    fn days_keep_the_wall_clock_across_daylight_saving() {
        run(&[
            // The day from 10:00 on 28 March ends at 10:00 on the 29th: 23 hours.
            (
                "P1D",
                "Europe/Berlin",
                "2026-03-28T10:00:00+01:00",
                "2026-03-29T09:59:59+02:00",
                ["2026-03-28T10:00:00+01:00", "2026-03-29T10:00:00+02:00"],
            ),
            // ...and the one from 10:00 on 24 October ends at 10:00 on the 25th: 25 hours.
            (
                "P1D",
                "Europe/Berlin",
                "2026-10-24T10:00:00+02:00",
                "2026-10-25T09:30:00+01:00",
                ["2026-10-24T10:00:00+02:00", "2026-10-25T10:00:00+01:00"],
            ),
            // PT24H is elapsed time: the next period starts at 11:00 after the spring change.
            (
                "PT24H",
                "Europe/Berlin",
                "2026-03-28T10:00:00+01:00",
                "2026-03-29T10:30:00+02:00",
                ["2026-03-28T10:00:00+01:00", "2026-03-29T11:00:00+02:00"],
            ),
            // A start whose time is skipped moves forward by the gap, that day only.
            (
                "P1D",
                "Europe/Berlin",
                "2026-03-28T02:30:00+01:00",
                "2026-03-29T12:00:00+02:00",
                ["2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"],
            ),
            // An anchor in the second pass of a repeated hour is kept as it is.
            (
                "P1D",
                "Europe/Berlin",
                "2026-10-25T02:30:00+01:00",
                "2026-10-25T12:00:00+01:00",
                ["2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"],
            ),
            // Six elapsed hours from local midnight end at 05:00 after the autumn change.
            (
                "PT6H",
                "Europe/Berlin",
                "2026-10-25T00:00:00+02:00",
                "2026-10-25T04:59:59+01:00",
                ["2026-10-25T00:00:00+02:00", "2026-10-25T05:00:00+01:00"],
            ),
            (
                "PT36H",
                "UTC",
                "2026-06-01T00:00:00Z",
                "2026-06-02T13:00:00Z",
                ["2026-06-02T12:00:00+00:00", "2026-06-04T00:00:00+00:00"],
            ),
            (
                "P1W",
                "America/New_York",
                "2026-10-28T09:00:00-04:00",
                "2026-11-04T08:59:59-05:00",
                ["2026-10-28T09:00:00-04:00", "2026-11-04T09:00:00-05:00"],
            ),
        ]);
    }

    #[test]
    fn periods_that_ended_while_nobody_called_are_skipped_at_once() {
        run(&[
            (
                "PT1H",
                "UTC",
                "2020-01-01T00:20:00Z",
                "2026-07-04T12:34:56Z",
                ["2026-07-04T12:20:00+00:00", "2026-07-04T13:20:00+00:00"],
            ),
            (
                "P1D",
                "Europe/Berlin",
                "2001-03-24T23:30:00+01:00",
                "2026-10-25T23:29:59+01:00",
                ["2026-10-24T23:30:00+02:00", "2026-10-25T23:30:00+01:00"],
            ),
            (
                "P1M",
                "UTC",
                "1999-01-31T00:00:00Z",
                "2026-06-15T00:00:00Z",
                ["2026-05-31T00:00:00+00:00", "2026-06-30T00:00:00+00:00"],
            ),
            (
                "P2W",
                "UTC",
                "2000-01-03T00:00:00Z",
                "2026-12-31T00:00:00Z",
                ["2026-12-28T00:00:00+00:00", "2027-01-11T00:00:00+00:00"],
            ),
            (
                "P1Y",
                "UTC",
                "1972-02-29T00:00:00Z",
                "2548-12-31T00:00:00Z",
                ["2548-02-29T00:00:00+00:00", "2549-02-28T00:00:00+00:00"],
            ),
        ]);
    }

    #[test]
    fn a_now_before_the_anchor_is_in_the_first_period() {
        run(&[
            (
                "P1D",
                "UTC",
                "2026-06-01T12:00:00Z",
                "2026-06-01T11:59:59Z",
                ["2026-06-01T12:00:00+00:00", "2026-06-02T12:00:00+00:00"],
            ),
            (
                "PT1H",
                "UTC",
                "2026-06-01T12:00:00Z",
                "2026-06-01T11:59:59Z",
                ["2026-06-01T12:00:00+00:00", "2026-06-01T13:00:00+00:00"],
            ),
        ]);
    }

    /// Each instant is in its period, and a period's neighbours meet it: swept in 400 steps from
    /// anchors on awkward days, every 7 hours for periods up to a week and every 79 (three and a
    /// half years) for months and years.
    #[test]
    fn anniversaries_tile_time() {
        let anchors: &[(&str, &str)] = &[
            ("UTC", "2028-02-29T12:00:00Z"),
            ("Europe/Berlin", "2026-01-31T02:30:00+01:00"),
            ("Europe/Berlin", "2026-10-25T02:30:00+01:00"),
            ("America/New_York", "2026-03-08T03:30:00-04:00"),
            ("Australia/Lord_Howe", "2026-10-04T02:45:00+11:00"),
        ];
        for &(zone_name, anchor) in anchors {
            for period in ["PT1H", "PT7H", "P1D", "P3D", "P1W", "P1M", "P5M", "P1Y"] {
                let schedule = FirstUse::new(Period::parse(period).unwrap(), zone(zone_name));
                let anchor = at(anchor);
                assert_eq!(schedule.window(anchor, anchor).start, anchor, "{period} in {zone_name}");
                let hours = if period.ends_with(['M', 'Y']) { 79 } else { 7 };
                let mut now = anchor;
                for _ in 0..400 {
                    let window = schedule.window(anchor, now);
                    let context = format!("{period} in {zone_name} at {}", Zone::utc().rfc3339(now));
                    assert!(window.contains(now), "{context}: {window:?}");
                    assert_eq!(schedule.window(anchor, window.start), window, "{context}");
                    assert_eq!(schedule.window(anchor, window.end - 1), window, "{context}");
                    assert_eq!(schedule.window(anchor, window.end).start, window.end, "{context}");
                    now += hours * 3_600_000_000_000;
                }
            }
        }
    }
}
