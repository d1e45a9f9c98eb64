//! Calendar reset: periods that start on the calendar's boundaries in a time zone.

use jiff::Timestamp;
use jiff::civil::{Date, Time};

use super::instant::{nanos, timestamp};
use super::{Period, PeriodError, Unit, Window, Zone};

/// Monday 1969-12-29, the first day of ISO week 1970-W01: blocks of days and of weeks are counted
/// from it, so `P1W` is the ISO week and `P7D` is `P1W`.
const EPOCH: Date = jiff::civil::date(1969, 12, 29);

/// How many grid points either side of the current one an hour window's edges are looked for.
/// A clock set back by up to this many periods (three hours at `PT1H`; no zone has done more
/// since 1970) still finds the right edges.
const RADIUS: i64 = 4;

/// The periods of a quota under `reset: calendar`: every caller shares them, and each starts on a
/// calendar boundary in the zone.
///
/// - `PT<n>H`, `n` dividing 24 (up to `PT12H`): blocks of the wall clock from local midnight (`PT6H`: 00:00,
///   06:00, 12:00, 18:00). A boundary is every instant at which the wall clock reaches one: an
///   hour the clocks repeat is a period of its own, and a boundary the clocks skip falls at the
///   jump. So `PT1H` periods are the elapsed hours wherever the clocks move by whole hours, and
///   `PT6H` periods are 5 or 7 hours long on the days they change.
/// - `P<n>D` and `P<n>W`: local days from local midnight (the first instant of the date, if the
///   clocks repeat or skip midnight), 23 or 25 hours across a change; `P1W` is the ISO week from
///   Monday. Blocks of several days or weeks are counted from Monday 1969-12-29, the start of
///   ISO week 1970-W01 (`P2W` starts on 2026-12-28, `P2D` on 2026-12-30).
/// - `P<n>M`, `n` dividing 12: months from the 1st, blocks from January (`P3M` is the quarter).
/// - `P<n>Y`: years from 1 January, blocks starting in years divisible by `n` (`P2Y`: even years).
///
/// Hours that do not divide a day (`PT5H`, `PT24H`) and months that do not divide a year (`P5M`)
/// have no such boundaries and are refused; `reset: first-use` takes them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Calendar {
    period: Period,
    zone: Zone,
}

impl Calendar {
    /// The calendar periods of `period` in `zone`, or why the period has none.
    pub fn new(period: Period, zone: Zone) -> Result<Calendar, PeriodError> {
        let n = period.count().get();
        let refuse = |hint| Err(PeriodError::Unanchored { period: period.to_string(), hint });
        match period.unit() {
            Unit::Hour if 24 % n != 0 || n == 24 => {
                refuse("hours must divide a day: PT1H, PT2H, PT3H, PT4H, PT6H, PT8H or PT12H (P1D is a local day)")
            }
            Unit::Month if 12 % n != 0 => refuse("months must divide a year: P1M, P2M, P3M, P4M, P6M or P12M"),
            _ => Ok(Calendar { period, zone }),
        }
    }

    /// The period this calendar cuts.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The zone whose wall clock and calendar the periods follow.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The period containing `now` (nanoseconds since the Unix epoch). A call costs a few time
    /// zone lookups, well under a microsecond: keep the window and ask again once `now` reaches
    /// its `end`.
    pub fn window(&self, now: u64) -> Window {
        let at = timestamp(now);
        let found = match self.period.unit() {
            Unit::Hour => self.hours(at),
            Unit::Day | Unit::Week | Unit::Month | Unit::Year => self.days(at),
        };
        found.unwrap_or_else(|| self.fixed(now))
    }

    /// An hour window: the last boundary at or before `now` and the first after it, among the
    /// wall-clock grid points around the one `now` shows.
    fn hours(&self, now: Timestamp) -> Option<Window> {
        let n = i64::from(self.period.count().get());
        let wall = self.zone.civil(now);
        let hour = i64::from(wall.hour());
        let grid = wall.date().at(i8::try_from(hour - hour % n).ok()?, 0, 0, 0);
        let (mut start, mut end): (Option<Timestamp>, Option<Timestamp>) = (None, None);
        for i in -RADIUS..=RADIUS {
            let point = grid.checked_add(self.period.span(i)?).ok()?;
            let (first, second) = self.zone.crossings(point)?;
            for crossing in std::iter::once(first).chain(second) {
                if crossing <= now {
                    start = Some(start.map_or(crossing, |s| s.max(crossing)));
                } else {
                    end = Some(end.map_or(crossing, |e| e.min(crossing)));
                }
            }
        }
        Some(Window { start: nanos(start?), end: nanos(end?) })
    }

    /// A window of days or longer: from the first instant of its first date to the first instant
    /// of the next period's.
    fn days(&self, now: Timestamp) -> Option<Window> {
        let mut date = self.zone.civil(now).date();
        // A clock set back over midnight shows yesterday's date after today began (and one that
        // jumps forward can skip a date): step to the neighbouring period until it holds `now`.
        for _ in 0..4 {
            let first = self.first_date(date)?;
            let next = first.checked_add(self.period.span(1)?).ok()?;
            let start = self.zone.first_instant(first.to_datetime(Time::midnight()))?;
            let end = self.zone.first_instant(next.to_datetime(Time::midnight()))?;
            if now < start {
                date = first.yesterday().ok()?;
            } else if now >= end {
                date = next;
            } else {
                return Some(Window { start: nanos(start), end: nanos(end) });
            }
        }
        None
    }

    /// The first date of the period that holds `date`.
    fn first_date(&self, date: Date) -> Option<Date> {
        let n = i64::from(self.period.count().get());
        match self.period.unit() {
            Unit::Day | Unit::Week => {
                let block = if self.period.unit() == Unit::Week { 7 * n } else { n };
                let days = date.duration_since(EPOCH).as_secs().div_euclid(86_400);
                let span = jiff::Span::new().try_days(days - days.rem_euclid(block)).ok()?;
                EPOCH.checked_add(span).ok()
            }
            Unit::Month => {
                let month = i64::from(date.month()) - 1;
                Date::new(date.year(), i8::try_from(month - month % n + 1).ok()?, 1).ok()
            }
            Unit::Year => {
                let year = i64::from(date.year());
                Date::new(i16::try_from(year - year.rem_euclid(n)).ok()?, 1, 1).ok()
            }
            Unit::Hour => None,
        }
    }

    /// Fixed-length windows from the epoch, for an instant the calendar cannot place. Every
    /// `u64` instant is in jiff's range, so this is never taken; it keeps `window` total.
    fn fixed(&self, now: u64) -> Window {
        let length = self.period.nominal_seconds().saturating_mul(1_000_000_000);
        let start = now - now % length;
        Window { start, end: start.saturating_add(length) }
    }
}

#[cfg(test)]
#[path = "calendar_tests.rs"]
mod tests;
