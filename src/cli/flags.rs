//! Values of the server flags that need more than clap's own parsing: durations with a unit,
//! durations and counts that may not be zero, each refusal saying what the value would do.

use std::time::Duration;

/// Why a flag's value is refused; each says what the value would do, or how to write it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum FlagError {
    /// Not a whole number.
    #[error("{0:?} is not a whole number")]
    NotANumber(String),
    /// No worker, which would serve nothing.
    #[error("0 workers would serve nothing; give at least 1")]
    NoWorkers,
    /// More workers than a machine could have cores for.
    #[error("{0} workers is more than {max}; give one per CPU", max = MAX_WORKERS)]
    TooManyWorkers(usize),
    /// Not an HTTP header name.
    #[error("{0:?} is not an HTTP header name")]
    NotAHeaderName(String),
    /// A count of 0, which would refuse every one of these.
    #[error("0 would refuse every {0}; give at least 1")]
    Zero(&'static str),
    /// More streams than HTTP/2 can advertise.
    #[error("{0} is more than HTTP/2 can advertise ({max})", max = i32::MAX)]
    TooManyStreams(u32),
    /// Not a number followed by a unit.
    #[error("{0:?} is not a duration like 250ms, 10s or 2m")]
    NotADuration(String),
    /// Longer than a `Duration` holds.
    #[error("{0} is longer than opbound can wait")]
    TooLong(String),
    /// A number without its unit.
    #[error("{0} has no unit; write {0}ms or {0}s (units: ms, s, m, h)")]
    NoUnit(String),
    /// A unit that is not ms, s, m or h.
    #[error("{0:?} has an unknown unit; use ms, s, m or h")]
    UnknownUnit(String),
    /// A zero duration where zero means nothing: the value, and what it would do.
    #[error("{0} {1}")]
    ZeroDuration(String, &'static str),
    /// Not bytes, KiB or MiB.
    #[error("{0:?} is not a size; write bytes, KiB or MiB, e.g. 64KiB")]
    NotASize(String),
    /// More than a body read ahead may hold.
    #[error("{0:?} is above 64MiB, which each such request would hold in memory")]
    TooLarge(String),
}

/// A count that must allow something: 0 connections would refuse everybody.
pub(super) fn at_least_one(s: &str) -> Result<usize, FlagError> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(FlagError::Zero("connection")),
        Ok(n) => Ok(n),
        Err(_) => Err(FlagError::NotANumber(s.to_string())),
    }
}

/// `250ms`, `10s`, `2m`, `1h`. The unit is required: a bare `50` once meant 50 seconds to a
/// reader who meant 50 ms.
pub(super) fn parse_duration(s: &str) -> Result<Duration, FlagError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| FlagError::NotADuration(s.to_string()))?;
    let seconds =
        |factor: u64| n.checked_mul(factor).map(Duration::from_secs).ok_or_else(|| FlagError::TooLong(s.to_string()));
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        "" => Err(FlagError::NoUnit(s.to_string())),
        _ => Err(FlagError::UnknownUnit(s.to_string())),
    }
}

/// A duration for a flag where zero means nothing; `why` says what zero would do.
fn nonzero(s: &str, why: &'static str) -> Result<Duration, FlagError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(FlagError::ZeroDuration(s.trim().to_string(), why));
    }
    Ok(d)
}

/// `--store-timeout`: not zero.
pub(super) fn store_timeout(s: &str) -> Result<Duration, FlagError> {
    nonzero(
        s,
        "would leave every store call no time to answer, so every bound would follow its on-store-error; e.g. 50ms",
    )
}

/// `--state-sync`: not zero.
pub(super) fn state_sync(s: &str) -> Result<Duration, FlagError> {
    nonzero(s, "would write quota state continuously; e.g. 1s (a hard kill loses at most this much)")
}

/// `--lease-ttl`: not zero.
pub(super) fn lease_ttl(s: &str) -> Result<Duration, FlagError> {
    nonzero(
        s,
        "would let a concurrency lease lapse as soon as it is taken, so requests in flight would count for nothing; e.g. 5m",
    )
}

/// `--header-read-timeout`: not zero.
pub(super) fn header_read_timeout(s: &str) -> Result<Duration, FlagError> {
    nonzero(s, "would close every connection before its client could send a header; e.g. 10s")
}

/// `serve --client-body-timeout`: not zero.
pub(super) fn client_body_timeout(s: &str) -> Result<Duration, FlagError> {
    nonzero(s, "would cut every request body that does not arrive with its head; e.g. 60s")
}

/// `--max-streams-per-connection`: at least one, and what HTTP/2 can advertise.
pub(super) fn max_streams(s: &str) -> Result<u32, FlagError> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err(FlagError::Zero("HTTP/2 request")),
        Ok(n) if n > i32::MAX as u32 => Err(FlagError::TooManyStreams(n)),
        Ok(n) => Ok(n),
        Err(_) => Err(FlagError::NotANumber(s.to_string())),
    }
}

/// `serve --connect-timeout`: not zero.
pub(super) fn connect_timeout(s: &str) -> Result<Duration, FlagError> {
    nonzero(s, "would give up on every connection to the upstream before it is made; e.g. 5s")
}

/// `serve --upstream-timeout`: not zero.
pub(super) fn upstream_timeout(s: &str) -> Result<Duration, FlagError> {
    nonzero(s, "would answer every request with a 504 before the upstream could start its response; e.g. 60s")
}

/// `serve --max-key-body`: bytes, with an optional KiB or MiB (`64KiB`, `1MiB`, `4096`); at
/// most 64 MiB, since the body is held in memory until it is decided.
pub(super) fn body_size(s: &str) -> Result<usize, FlagError> {
    let t = s.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let scale = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        _ => return Err(FlagError::NotASize(s.to_string())),
    };
    let bytes = digits.parse::<usize>().ok().and_then(|n| n.checked_mul(scale));
    match bytes {
        Some(n) if n <= 64 << 20 => Ok(n),
        _ => Err(FlagError::TooLarge(s.to_string())),
    }
}

/// `--workers`: at least one, and not more than a machine could have cores for.
pub(super) fn workers(s: &str) -> Result<usize, FlagError> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(FlagError::NoWorkers),
        Ok(n) if n > MAX_WORKERS => Err(FlagError::TooManyWorkers(n)),
        Ok(n) => Ok(n),
        Err(_) => Err(FlagError::NotANumber(s.to_string())),
    }
}

/// The most `--workers`: each is a thread with a runtime; more than the CPUs only adds switching.
const MAX_WORKERS: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn connection_caps_allow_at_least_one() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").unwrap_err().to_string().contains("refuse every connection"));
        assert!(at_least_one("many").is_err());
    }

    #[test]
    fn durations_need_a_unit() {
        let ok = [("250ms", 250), ("10s", 10_000), ("2m", 120_000), ("1h", 3_600_000), (" 0s ", 0), ("0ms", 0)];
        for (text, ms) in ok {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)), "{text}");
        }
        // (text, what the refusal says)
        let refused = [
            ("50", "50 has no unit; write 50ms or 50s"),
            ("7", "7 has no unit"),
            ("ten", "is not a duration like 250ms"),
            ("", "is not a duration"),
            ("5d", "has an unknown unit; use ms, s, m or h"),
            ("1.5s", "has an unknown unit"),
            ("-1s", "is not a duration"),
            ("99999999999999999h", "is longer than opbound can wait"),
        ];
        for (text, says) in refused {
            let e = parse_duration(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    /// Each flag where zero means nothing refuses it, saying what zero would do.
    #[test]
    fn zero_is_refused_where_it_means_nothing() {
        type Parser = fn(&str) -> Result<Duration, FlagError>;
        let flags: [(&str, Parser, &str); 5] = [
            ("--store-timeout", store_timeout, "every bound would follow its on-store-error"),
            ("--lease-ttl", lease_ttl, "lapse as soon as it is taken"),
            ("--header-read-timeout", header_read_timeout, "before its client could send a header"),
            ("--connect-timeout", connect_timeout, "before it is made"),
            ("--upstream-timeout", upstream_timeout, "504"),
        ];
        for (flag, parse, says) in flags {
            for zero in ["0s", "0ms", "0h"] {
                let e = parse(zero).expect_err(flag).to_string();
                assert!(e.starts_with(zero) && e.contains(says), "{flag} {zero}: {e}");
            }
            assert_eq!(parse("1ms"), Ok(Duration::from_millis(1)), "{flag}");
            assert!(parse("50").unwrap_err().to_string().contains("has no unit"), "{flag}");
        }
    }
}
