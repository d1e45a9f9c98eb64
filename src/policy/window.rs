//! Windows written as ISO-8601 durations (`PT1M`, `P1D`), limited to PT1S..P1D.

use std::fmt;
use std::time::Duration;

/// The shortest window a bound may have.
pub(crate) const MIN: Duration = Duration::from_secs(1);
/// The longest window a bound may have.
pub(crate) const MAX: Duration = Duration::from_secs(86_400);

/// A validated window: from one second to one day, whole milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window(Duration);

/// Why a window was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Not a duration of the form `P[nW][nD][T[nH][nM][n[.f]S]]`, units in that order; holds the
    /// text as written.
    #[error("window {0:?} is not an ISO-8601 duration; write it like PT1M (one minute), PT30S or P1D")]
    Malformed(String),
    /// Written in months or years, which vary in length; holds the text and the unit in words
    /// (`months`, `years`).
    #[error(
        "window {0} uses {1}, which have no fixed length; write it in weeks, days, hours, minutes or seconds, or count a budget per calendar period with algorithm: quota and period: {0}"
    )]
    Calendar(String, &'static str),
    /// Shorter than `MIN` (one second); holds the text as written.
    #[error("window {0} is below the minimum PT1S")]
    TooShort(String),
    /// Longer than `MAX` (one day); holds the text as written.
    #[error("window {0} is above the maximum P1D; for a budget over longer, use algorithm: quota with period: {0}")]
    TooLong(String),
}

impl Window {
    /// Parses and range-checks a window.
    pub fn parse(text: &str) -> Result<Window, WindowError> {
        let d = parse_duration(text)?;
        if d < MIN {
            return Err(WindowError::TooShort(text.to_string()));
        }
        if d > MAX {
            return Err(WindowError::TooLong(text.to_string()));
        }
        Ok(Window(d))
    }

    /// A window of whole seconds, for tests and programmatic construction.
    pub fn from_secs(secs: u64) -> Option<Window> {
        let d = Duration::from_secs(secs);
        (MIN..=MAX).contains(&d).then_some(Window(d))
    }

    /// The window as a duration.
    pub fn duration(self) -> Duration {
        self.0
    }

    /// The window in nanoseconds, as the engine counts time.
    pub fn nanos(self) -> u64 {
        self.0.as_nanos() as u64
    }

    /// Whole seconds, rounded up (what `RateLimit-Policy: w=` reports).
    pub fn secs_ceil(self) -> u64 {
        self.0.as_millis().div_ceil(1000) as u64
    }
}

impl fmt::Display for Window {
    /// The canonical spelling: `PT1M`, `PT1H30M`, `P1D`, `PT1.5S`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis() as u64;
        let (days, rest) = (ms / 86_400_000, ms % 86_400_000);
        let (h, rest) = (rest / 3_600_000, rest % 3_600_000);
        let (m, rest) = (rest / 60_000, rest % 60_000);
        let (s, frac) = (rest / 1000, rest % 1000);
        f.write_str("P")?;
        if days > 0 {
            write!(f, "{days}D")?;
        }
        if h + m + s + frac > 0 {
            f.write_str("T")?;
            if h > 0 {
                write!(f, "{h}H")?;
            }
            if m > 0 {
                write!(f, "{m}M")?;
            }
            if frac > 0 {
                let text = format!("{s}.{frac:03}");
                write!(f, "{}S", text.trim_end_matches('0'))?;
            } else if s > 0 {
                write!(f, "{s}S")?;
            }
        }
        Ok(())
    }
}

/// Parses `P[nW][nD][T[nH][nM][n[.f]S]]` into a duration, with millisecond precision.
fn parse_duration(text: &str) -> Result<Duration, WindowError> {
    let malformed = || WindowError::Malformed(text.to_string());
    let upper = text.trim().to_ascii_uppercase();
    let body = upper.strip_prefix('P').ok_or_else(malformed)?;
    if body.is_empty() {
        return Err(malformed());
    }
    let (date, time) = match body.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return Err(malformed()),
        None => (body, None),
    };
    let mut millis: u128 = 0;
    let mut any = false;
    // Units must come in order, each at most once.
    let mut read = |part: &str, units: &[(char, u128)], calendar: &[(char, &'static str)]| -> Result<(), WindowError> {
        let mut rest = part;
        let mut next_unit = 0;
        while !rest.is_empty() {
            let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ',')).ok_or_else(malformed)?;
            let (number, unit) = (&rest[..end], rest[end..].chars().next().ok_or_else(malformed)?);
            if let Some((_, what)) = calendar.iter().find(|(c, _)| *c == unit) {
                return Err(WindowError::Calendar(text.to_string(), what));
            }
            let pos = units.iter().position(|(c, _)| *c == unit).ok_or_else(malformed)?;
            if pos < next_unit || number.is_empty() {
                return Err(malformed());
            }
            next_unit = pos + 1;
            let scale = units[pos].1;
            let number = number.replace(',', ".");
            let (whole, frac) = number.split_once('.').unwrap_or((&number, ""));
            if whole.is_empty() && frac.is_empty() {
                return Err(malformed());
            }
            // Only the last unit may carry a fraction, and only seconds are allowed one here.
            if !frac.is_empty() && unit != 'S' {
                return Err(malformed());
            }
            let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| malformed())? };
            let mut frac_ms: u128 = 0;
            for (i, d) in frac.chars().take(3).enumerate() {
                frac_ms += u128::from(d.to_digit(10).ok_or_else(malformed)?) * [100, 10, 1][i];
            }
            millis = millis.saturating_add(whole.saturating_mul(scale)).saturating_add(frac_ms);
            any = true;
            rest = &rest[end + unit.len_utf8()..];
        }
        Ok(())
    };
    read(date, &[('W', 604_800_000), ('D', 86_400_000)], &[('Y', "years"), ('M', "months")])?;
    if let Some(time) = time {
        read(time, &[('H', 3_600_000), ('M', 60_000), ('S', 1000)], &[])?;
    }
    if !any {
        return Err(malformed());
    }
    let millis = u64::try_from(millis).unwrap_or(u64::MAX);
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_canonically() {
        for (text, secs_ms, canonical) in [
            ("PT1S", 1000, "PT1S"),
            ("PT1M", 60_000, "PT1M"),
            ("PT60S", 60_000, "PT1M"),
            ("pt90s", 90_000, "PT1M30S"),
            ("PT1H", 3_600_000, "PT1H"),
            ("P1D", 86_400_000, "P1D"),
            ("PT24H", 86_400_000, "P1D"),
            ("PT1.5S", 1500, "PT1.5S"),
            ("PT1,25S", 1250, "PT1.25S"),
            ("P0DT2M", 120_000, "PT2M"),
        ] {
            let w = Window::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(w.duration().as_millis(), secs_ms, "{text}");
            assert_eq!(w.to_string(), canonical, "{text}");
        }
    }

    #[test]
    fn refuses_bad_windows_with_reasons() {
        use WindowError::*;
        for (text, want) in [
            ("PT0.5S", TooShort("PT0.5S".into())),
            ("PT0S", TooShort("PT0S".into())),
            ("P2D", TooLong("P2D".into())),
            ("P1W", TooLong("P1W".into())),
            ("P1M", Calendar("P1M".into(), "months")),
            ("P1Y", Calendar("P1Y".into(), "years")),
            ("1m", Malformed("1m".into())),
            ("P", Malformed("P".into())),
            ("PT", Malformed("PT".into())),
            ("PT1M1H", Malformed("PT1M1H".into())),
            ("PT1.5M", Malformed("PT1.5M".into())),
            ("PTS", Malformed("PTS".into())),
            ("P1DT", Malformed("P1DT".into())),
        ] {
            assert_eq!(Window::parse(text), Err(want), "{text}");
        }
    }
}
