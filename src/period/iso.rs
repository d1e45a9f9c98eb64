//! A quota period as ISO 8601 writes it: a whole number of one unit, from an hour to 100 years.

use std::fmt;
use std::num::NonZeroU32;

use jiff::Span;

use super::PeriodError;

/// Seconds in a Gregorian year on average (365.2425 days): 400 years hold 146,097 days.
const YEAR_SECONDS: u64 = 31_556_952;
/// The longest period: 100 average years.
const MAX_SECONDS: u64 = 100 * YEAR_SECONDS;

/// The unit a period counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// Elapsed hours (`PT1H`): always 3,600 seconds, whatever the clocks do.
    Hour,
    /// Local days (`P1D`): from one local midnight to the next, 23 or 25 hours across a
    /// daylight-saving change.
    Day,
    /// Seven local days (`P1W`); under calendar reset, ISO weeks from Monday.
    Week,
    /// Calendar months (`P1M`), never a fixed number of days.
    Month,
    /// Calendar years (`P1Y`).
    Year,
}

impl Unit {
    /// The unit's length in seconds on average: what [`Period::nominal_seconds`] multiplies.
    fn nominal_seconds(self) -> u64 {
        match self {
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => YEAR_SECONDS / 12,
            Unit::Year => YEAR_SECONDS,
        }
    }

    /// The unit in words, plural, for messages.
    fn plural(self) -> &'static str {
        match self {
            Unit::Hour => "hours",
            Unit::Day => "days",
            Unit::Week => "weeks",
            Unit::Month => "months",
            Unit::Year => "years",
        }
    }
}

/// A validated quota period: a whole, non-zero number of one [`Unit`], at most 100 years long.
///
/// Hours are elapsed time; days and longer are calendar units, so `PT24H` and `P1D` differ on
/// the day the clocks change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Period {
    count: NonZeroU32,
    unit: Unit,
}

impl Period {
    /// Parses an ISO 8601 period of one unit: `PT<n>H`, `P<n>D`, `P<n>W`, `P<n>M` or `P<n>Y`
    /// (letters in either case). Refused: several units (`P1M2D`), fractions, minutes and
    /// seconds, zero, and more than 100 years.
    pub fn parse(text: &str) -> Result<Period, PeriodError> {
        let written = text.trim();
        let malformed = || PeriodError::Malformed(written.to_string());
        let upper = written.to_ascii_uppercase();
        let body = upper.strip_prefix('P').ok_or_else(malformed)?;
        let parts = components(body).ok_or_else(malformed)?;
        let [(number, unit)] = parts[..] else {
            let mut names: Vec<&str> = parts.iter().map(|(_, unit)| unit.plural()).collect();
            names.dedup();
            let units = match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => format!("{} twice", names.concat()),
            };
            return Err(PeriodError::Mixed { text: written.to_string(), units });
        };
        if number.contains(['.', ',']) {
            return Err(PeriodError::Fraction(written.to_string()));
        }
        let count: u64 = number.parse().map_err(|_| PeriodError::TooLong(written.to_string()))?;
        let unit = match unit {
            Written::Unit(unit) => unit,
            Written::Minute | Written::Second => {
                let per_hour = if unit == Written::Minute { 60 } else { 3_600 };
                let hint = if count > 0 && count.is_multiple_of(per_hour) {
                    format!("; write PT{}H", count / per_hour)
                } else {
                    "; a window under an hour is a sliding-window or token-bucket bound".to_string()
                };
                return Err(PeriodError::BelowHour { text: written.to_string(), unit: unit.plural(), hint });
            }
        };
        let Some(count) = u32::try_from(count).ok().and_then(NonZeroU32::new) else {
            return Err(if count == 0 {
                PeriodError::Zero(written.to_string())
            } else {
                PeriodError::TooLong(written.to_string())
            });
        };
        let period = Period { count, unit };
        if period.nominal_seconds() > MAX_SECONDS {
            return Err(PeriodError::TooLong(written.to_string()));
        }
        Ok(period)
    }

    /// How many units the period counts.
    pub fn count(self) -> NonZeroU32 {
        self.count
    }

    /// The unit the period counts.
    pub fn unit(self) -> Unit {
        self.unit
    }

    /// A fixed length in seconds for what describes the policy rather than one window
    /// (`RateLimit-Policy: w=`): hours, days and weeks at their usual length, a month a twelfth
    /// of an average Gregorian year (2,629,746 s, 30.44 days) and a year 365.2425 days, so
    /// twelve `P1M` make one `P1Y`. The exact length of the current window is
    /// [`Window::nanos`](super::Window::nanos).
    pub fn nominal_seconds(self) -> u64 {
        u64::from(self.count.get()) * self.unit.nominal_seconds()
    }

    /// `times` periods as a jiff span (`P3M` twice is 6 months); `None` beyond jiff's range.
    pub(super) fn span(self, times: i64) -> Option<Span> {
        let units = times.checked_mul(i64::from(self.count.get()))?;
        let span = Span::new();
        match self.unit {
            Unit::Hour => span.try_hours(units),
            Unit::Day => span.try_days(units),
            Unit::Week => span.try_weeks(units),
            Unit::Month => span.try_months(units),
            Unit::Year => span.try_years(units),
        }
        .ok()
    }
}

impl fmt::Display for Period {
    /// The canonical spelling: `PT6H`, `P1D`, `P2W`, `P3M`, `P1Y`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.count;
        match self.unit {
            Unit::Hour => write!(f, "PT{n}H"),
            Unit::Day => write!(f, "P{n}D"),
            Unit::Week => write!(f, "P{n}W"),
            Unit::Month => write!(f, "P{n}M"),
            Unit::Year => write!(f, "P{n}Y"),
        }
    }
}

/// A unit as written, including the two a quota period refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    Unit(Unit),
    Minute,
    Second,
}

impl Written {
    fn plural(self) -> &'static str {
        match self {
            Written::Unit(unit) => unit.plural(),
            Written::Minute => "minutes",
            Written::Second => "seconds",
        }
    }
}

/// Splits what follows the `P` into numbers and their units, in the order written; `None` when it
/// is not `[n unit]* [T [n unit]+]` with a number before every unit.
fn components(body: &str) -> Option<Vec<(&str, Written)>> {
    let (date, time) = match body.split_once('T') {
        Some((_, "")) => return None,
        Some((date, time)) => (date, Some(time)),
        None => (body, None),
    };
    let mut parts = Vec::new();
    read(date, false, &mut parts)?;
    if let Some(time) = time {
        read(time, true, &mut parts)?;
    }
    (!parts.is_empty()).then_some(parts)
}

/// Reads `n unit` pairs from one side of the `T`; `M` is months before it and minutes after.
fn read<'a>(mut rest: &'a str, time: bool, parts: &mut Vec<(&'a str, Written)>) -> Option<()> {
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))?;
        let (number, letter) = (&rest[..end], rest[end..].chars().next()?);
        if number.is_empty() || !number.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let unit = match (time, letter) {
            (false, 'Y') => Written::Unit(Unit::Year),
            (false, 'M') => Written::Unit(Unit::Month),
            (false, 'W') => Written::Unit(Unit::Week),
            (false, 'D') => Written::Unit(Unit::Day),
            (true, 'H') => Written::Unit(Unit::Hour),
            (true, 'M') => Written::Minute,
            (true, 'S') => Written::Second,
            _ => return None,
        };
        parts.push((number, unit));
        rest = &rest[end + letter.len_utf8()..];
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each accepted spelling, its canonical form and its nominal length in seconds.
    #[test]
    fn accepted() {
        let table: &[(&str, &str, u64)] = &[
            ("PT1H", "PT1H", 3_600),
            ("pt6h", "PT6H", 21_600),
            (" PT36H ", "PT36H", 129_600),
            ("P1D", "P1D", 86_400),
            ("P2D", "P2D", 172_800),
            ("P30D", "P30D", 2_592_000),
            ("P1W", "P1W", 604_800),
            ("P2W", "P2W", 1_209_600),
            ("P1M", "P1M", 2_629_746),
            ("P3M", "P3M", 7_889_238),
            ("P12M", "P12M", 31_556_952),
            ("P1Y", "P1Y", 31_556_952),
            ("P2Y", "P2Y", 63_113_904),
            ("P100Y", "P100Y", 3_155_695_200),
            ("P1200M", "P1200M", 3_155_695_200),
            ("P007D", "P7D", 604_800),
        ];
        for &(text, canonical, seconds) in table {
            let period = Period::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(period.to_string(), canonical, "{text}");
            assert_eq!(period.nominal_seconds(), seconds, "{text}");
        }
    }

    /// Each refused spelling and the whole message it gets.
    #[test]
    fn refused() {
        let table: &[(&str, &str)] = &[
            (
                "",
                r#"period "" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "1D",
                r#"period "1D" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "P",
                r#"period "P" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "PT",
                r#"period "PT" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "P1DT",
                r#"period "P1DT" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "P1H",
                r#"period "P1H" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "PT1D",
                r#"period "PT1D" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "P-1D",
                r#"period "P-1D" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "PD",
                r#"period "PD" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "P.5D",
                r#"period "P.5D" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "1 month",
                r#"period "1 month" is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"#,
            ),
            (
                "P1M2D",
                "period P1M2D mixes months and days; a quota period is a whole number of one unit, such as P1M, P5W or PT36H",
            ),
            (
                "P1DT12H",
                "period P1DT12H mixes days and hours; a quota period is a whole number of one unit, such as P1M, P5W or PT36H",
            ),
            (
                "PT1H30M",
                "period PT1H30M mixes hours and minutes; a quota period is a whole number of one unit, such as P1M, P5W or PT36H",
            ),
            (
                "P1Y2M3D",
                "period P1Y2M3D mixes years, months and days; a quota period is a whole number of one unit, such as P1M, P5W or PT36H",
            ),
            (
                "P1D1D",
                "period P1D1D mixes days twice; a quota period is a whole number of one unit, such as P1M, P5W or PT36H",
            ),
            ("PT1.5H", "period PT1.5H has a fraction; a quota period is a whole number of one unit (PT1H, P1D, P1M)"),
            ("P0,5Y", "period P0,5Y has a fraction; a quota period is a whole number of one unit (PT1H, P1D, P1M)"),
            (
                "PT90M",
                "period PT90M counts minutes; a quota period counts hours, days, weeks, months or years; a window under an hour is a sliding-window or token-bucket bound",
            ),
            (
                "PT120M",
                "period PT120M counts minutes; a quota period counts hours, days, weeks, months or years; write PT2H",
            ),
            (
                "PT3600S",
                "period PT3600S counts seconds; a quota period counts hours, days, weeks, months or years; write PT1H",
            ),
            (
                "PT0M",
                "period PT0M counts minutes; a quota period counts hours, days, weeks, months or years; a window under an hour is a sliding-window or token-bucket bound",
            ),
            ("P0D", "period P0D is zero; a quota period is at least PT1H"),
            ("PT0H", "period PT0H is zero; a quota period is at least PT1H"),
            ("P101Y", "period P101Y is longer than 100 years"),
            ("P1201M", "period P1201M is longer than 100 years"),
            ("P36525D", "period P36525D is longer than 100 years"),
            ("P99999999999999999999D", "period P99999999999999999999D is longer than 100 years"),
        ];
        for &(text, message) in table {
            match Period::parse(text) {
                Ok(period) => panic!("{text:?} was accepted as {period}"),
                Err(e) => assert_eq!(e.to_string(), message, "{text:?}"),
            }
        }
    }
}
