//! Times and durations as access logs write them, read exactly into Unix nanoseconds.

use crate::engine::clock::{Nanos, SECOND};

/// An RFC 3339 time (`2026-11-30T21:30:00.123456789Z`), every fractional digit kept: replay must
/// reproduce decisions to the nanosecond.
pub(super) fn rfc3339(text: &str) -> Option<Nanos> {
    let timestamp: jiff::Timestamp = text.parse().ok()?;
    Nanos::try_from(timestamp.as_nanosecond()).ok()
}

/// nginx's and Apache's `$time_local`: `30/Nov/2026:21:30:00 +0000`.
pub(super) fn time_local(text: &str) -> Option<Nanos> {
    // Every line of a busy second carries the same text: parse it once (the parse was the
    // costliest part of reading a combined line).
    thread_local! {
        static LAST: std::cell::RefCell<(String, Option<Nanos>)> = const { std::cell::RefCell::new((String::new(), None)) };
    }
    LAST.with_borrow_mut(|(last, at)| {
        if last != text {
            let timestamp =
                jiff::fmt::strtime::parse("%d/%b/%Y:%H:%M:%S %z", text).ok().and_then(|t| t.to_timestamp().ok());
            *at = timestamp.and_then(|t| Nanos::try_from(t.as_nanosecond()).ok());
            last.clear();
            last.push_str(text);
        }
        *at
    })
}

/// A decimal number of seconds (`1764538200.123`, `0.012`), read digit by digit so that no float
/// rounding moves it: `1764538200.123` is exactly `1764538200123000000`.
pub(super) fn seconds(text: &str) -> Option<Nanos> {
    decimal(text, SECOND)
}

/// A decimal number of milliseconds (`1.234`).
pub(super) fn millis(text: &str) -> Option<Nanos> {
    decimal(text, 1_000_000)
}

/// A float written by a JSON encoder, as the shortest decimal that reads back to it: that is what
/// the writer meant, where `f64 * 1e9` would be off by a few hundred nanoseconds.
pub(super) fn float_text(value: f64) -> String {
    // Rust's `Display` for f64 never uses an exponent, which `decimal` does not read.
    format!("{value}")
}

/// A Go duration as Caddy writes with `duration_format string`: `1.2ms`, `850µs`, `1m2.5s`.
pub(super) fn go_duration(text: &str) -> Option<Nanos> {
    if text == "0" {
        return Some(0);
    }
    let mut rest = text;
    let mut total: Nanos = 0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).filter(|&end| end > 0)?;
        let (number, after) = rest.split_at(number_end);
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let scale = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => SECOND,
            "m" => 60 * SECOND,
            "h" => 3_600 * SECOND,
            _ => return None,
        };
        total = total.checked_add(decimal(number, scale)?)?;
        rest = after;
    }
    (!text.is_empty()).then_some(total)
}

/// `whole.fraction` of units of `scale` nanoseconds; digits below a nanosecond are dropped.
fn decimal(text: &str, scale: Nanos) -> Option<Nanos> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: Nanos = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut nanos = whole.checked_mul(scale)?;
    let mut unit = scale;
    for digit in fraction.bytes() {
        unit /= 10;
        if unit == 0 {
            break;
        }
        nanos = nanos.checked_add(Nanos::from(digit - b'0') * unit)?;
    }
    Some(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_exactly() {
        let cases: &[(&str, Option<Nanos>)] = &[
            ("2026-11-30T21:30:00Z", Some(1_796_074_200 * SECOND)),
            ("2026-11-30T21:30:00.123456789Z", Some(1_796_074_200 * SECOND + 123_456_789)),
            ("2026-11-30T22:30:00.5+01:00", Some(1_796_074_200 * SECOND + 500_000_000)),
            ("30/Nov/2026:21:30:00", None),
            ("1969-12-31T23:59:59Z", None),
        ];
        for &(text, want) in cases {
            assert_eq!(rfc3339(text), want, "{text}");
        }
        assert_eq!(time_local("30/Nov/2026:21:30:00 +0000"), Some(1_796_074_200 * SECOND));
        assert_eq!(time_local("30/Nov/2026:22:30:00 +0100"), Some(1_796_074_200 * SECOND));
        assert_eq!(time_local("2026-11-30T21:30:00Z"), None);
    }

    #[test]
    fn decimals_read_without_float_rounding() {
        let cases: &[(&str, Option<Nanos>)] = &[
            ("1764538200.123", Some(1_764_538_200_123_000_000)),
            ("0.012", Some(12_000_000)),
            ("3", Some(3 * SECOND)),
            (".5", Some(500_000_000)),
            ("0.0000000019", Some(1)),
            ("", None),
            (".", None),
            ("-1", None),
            ("1e3", None),
        ];
        for &(text, want) in cases {
            assert_eq!(seconds(text), want, "{text}");
        }
        assert_eq!(millis("1.234"), Some(1_234_000));
        assert_eq!(seconds(&float_text(1764538200.123)), Some(1_764_538_200_123_000_000));
        assert_eq!(seconds(&float_text(0.000012)), Some(12_000));
    }

    #[test]
    fn go_durations() {
        let cases: &[(&str, Option<Nanos>)] = &[
            ("1.2ms", Some(1_200_000)),
            ("850µs", Some(850_000)),
            ("850us", Some(850_000)),
            ("42ns", Some(42)),
            ("1m2.5s", Some(62_500_000_000)),
            ("0", Some(0)),
            ("", None),
            ("ms", None),
            ("12", None),
            ("3 days", None),
        ];
        for &(text, want) in cases {
            assert_eq!(go_duration(text), want, "{text}");
        }
    }
}
