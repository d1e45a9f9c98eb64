//! Caddy's JSON access log (`http.log.access`).

use serde_json::Value as Json;

use super::field::{Field, address, apply, arrival, cookies};
use super::json::{self, get};
use super::problems::{LineError, Problems};
use super::time;
use crate::replay::Record;

/// What Caddy writes for the values of headers it hides (`Authorization`, `Cookie`,
/// `Set-Cookie` and `Proxy-Authorization` unless told to log them).
const REDACTED: &str = "REDACTED";

/// One line. `ts` is when the request ended: Unix seconds by default, or what `time_format`
/// chose (an ISO 8601 string, or Unix milliseconds or nanoseconds, told apart by size).
/// `duration` is seconds by default, a Go duration string with `duration_format string`, or
/// whole nanoseconds with `duration_format nano`.
pub(super) fn parse(line: &str, fields: &[Field], problems: &mut Problems) -> Result<Record, LineError> {
    let object = json::object(line)?;
    let request = object.get("request").and_then(Json::as_object).ok_or(LineError::Missing("request object"))?;
    let duration = match object.get("duration") {
        Some(Json::String(text)) => Some(
            time::go_duration(text)
                .or_else(|| time::seconds(text))
                .ok_or_else(|| LineError::unreadable("duration", &text, "a duration"))?,
        ),
        // A whole number this large is nanoseconds: no request takes a thousand seconds.
        Some(Json::Number(number)) if number.as_u64().is_some_and(|whole| whole >= 1_000) => number.as_u64(),
        _ => json::duration(&object, "duration", time::seconds)?,
    };
    let end = match object.get("ts") {
        Some(Json::String(text)) => {
            time::rfc3339(text).ok_or_else(|| LineError::unreadable("ts", &text, "ISO 8601"))?
        }
        Some(Json::Number(number)) => match number.as_f64() {
            Some(ts) if ts >= 1e17 => number.as_u64(),
            Some(ts) if ts >= 1e11 => json::millis(&Json::Number(number.clone())),
            _ => json::seconds(&Json::Number(number.clone())),
        }
        .ok_or_else(|| LineError::unreadable("ts", &number, "a Unix time"))?,
        _ => return Err(LineError::Missing("ts")),
    };
    let mut record = Record {
        time: arrival(end, duration),
        method: get(request, "method").ok_or(LineError::Missing("request.method"))?,
        target: get(request, "uri").ok_or(LineError::Missing("request.uri"))?,
        // client_ip is remote_ip unless a trusted proxy said who its client was.
        client: get(request, "client_ip").or_else(|| get(request, "remote_ip")).and_then(|ip| address(&ip)),
        status: json::status(&object, "status")?,
        duration,
        user: get(&object, "user_id"),
        ..Record::default()
    };
    if let Some(headers) = request.get("headers").and_then(Json::as_object) {
        for (name, values) in headers {
            let name = name.to_ascii_lowercase();
            let values = match values {
                Json::Array(values) => values.iter().filter_map(json::text).collect(),
                value => json::text(value).into_iter().collect::<Vec<_>>(),
            };
            for value in values {
                if value == REDACTED {
                    problems.lack(&format!("header:{name}"));
                    if name == "cookie" {
                        problems.lack("cookies");
                    }
                    continue;
                }
                if name == "cookie" {
                    record.cookies.extend(cookies(&value));
                }
                record.headers.push((name.clone(), value));
            }
        }
    }
    // Go moves Host out of the header map; bounds may still count per it.
    if let Some(host) = get(request, "host").filter(|_| !record.headers.iter().any(|(name, _)| name == "host")) {
        record.headers.push(("host".to_owned(), host));
    }
    apply(fields, &mut record, |path| json::lookup(&object, path))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::{Nanos, SECOND};
    use crate::replay::logs::{Format, Mapping, Options, tests::read_fixture};

    const END: Nanos = 1_796_074_200 * SECOND;

    fn one(line: &str) -> Result<(Record, Vec<String>), LineError> {
        let mut problems = Problems::default();
        parse(line, &[], &mut problems).map(|record| (record, problems.lacks))
    }

    #[test]
    fn a_caddy_line() {
        let line = r#"{"level":"info","ts":1796074200.123,"logger":"http.log.access","msg":"handled request","request":{"remote_ip":"10.0.0.9","remote_port":"5000","client_ip":"203.0.113.5","proto":"HTTP/1.1","method":"GET","host":"api.example.com","uri":"/pets?limit=2","headers":{"User-Agent":["curl/8"],"X-Api-Key":["k1"],"Authorization":["REDACTED"],"Accept":["a","b"]}},"bytes_read":0,"user_id":"alice","duration":0.0012,"size":2,"status":200,"resp_headers":{"Server":["Caddy"]}}"#;
        let (record, lacks) = one(line).unwrap();
        assert_eq!(
            record,
            Record {
                time: END + 123_000_000 - 1_200_000,
                method: "GET".into(),
                target: "/pets?limit=2".into(),
                client: Some("203.0.113.5".parse().unwrap()),
                status: Some(200),
                duration: Some(1_200_000),
                user: Some("alice".into()),
                headers: vec![
                    ("user-agent".into(), "curl/8".into()),
                    ("x-api-key".into(), "k1".into()),
                    ("accept".into(), "a".into()),
                    ("accept".into(), "b".into()),
                    ("host".into(), "api.example.com".into()),
                ],
                ..Record::default()
            }
        );
        assert_eq!(lacks, ["header:authorization"]);
    }

    #[test]
    fn times_and_durations_in_each_spelling() {
        let cases: &[(&str, Nanos, Option<Nanos>)] = &[
            (
                r#"{"ts":"2026-11-30T21:30:00.500Z","duration":"1.5ms","request":{"method":"GET","uri":"/"}}"#,
                END + 498_500_000,
                Some(1_500_000),
            ),
            (
                r#"{"ts":"2026-11-30T22:30:00.5+0100","duration":0.5,"request":{"method":"GET","uri":"/"}}"#,
                END,
                Some(500_000_000),
            ),
            (r#"{"ts":1796074200,"request":{"method":"GET","uri":"/","remote_ip":"::1"}}"#, END, None),
            (
                r#"{"ts":1796074200500.25,"duration":250000,"request":{"method":"GET","uri":"/"}}"#,
                END + 500_000_000,
                Some(250_000),
            ),
            (r#"{"ts":1796074200000000001,"duration":0,"request":{"method":"GET","uri":"/"}}"#, END + 1, Some(0)),
        ];
        for &(line, time, duration) in cases {
            let (record, _) = one(line).unwrap();
            assert_eq!((record.time, record.duration), (time, duration), "{line}");
        }
    }

    #[test]
    fn cookies_are_split_unless_redacted() {
        let line =
            r#"{"ts":1796074200,"request":{"method":"GET","uri":"/","headers":{"Cookie":["session=s1; theme=dark"]}}}"#;
        let (record, _) = one(line).unwrap();
        assert_eq!(record.cookies, [("session".to_owned(), "s1".to_owned()), ("theme".to_owned(), "dark".to_owned())]);
        let line = r#"{"ts":1796074200,"request":{"method":"GET","uri":"/","headers":{"Cookie":["REDACTED"]}}}"#;
        let (record, lacks) = one(line).unwrap();
        assert!(record.cookies.is_empty() && record.headers.is_empty());
        assert_eq!(lacks, ["cookies", "header:cookie"]);
    }

    #[test]
    fn mapping_reads_nested_header_arrays_and_overrides_user_id() {
        let line = r#"{"ts":1796074200,"user_id":"alice","request":{"method":"GET","uri":"/","headers":{"X-User":["bob","eve"],"X-Org":["acme"]}}}"#;
        let mapping = Mapping {
            fields: vec![
                ("user".into(), "request.headers.x-user".into()),
                ("org".into(), "request.headers.X-Org".into()),
            ],
        };
        let record = parse(line, &mapping.compile().unwrap(), &mut Problems::default()).unwrap();
        assert_eq!((record.user.as_deref(), record.org.as_deref()), (Some("bob"), Some("acme")));
    }

    #[test]
    fn lines_caddy_cannot_have_written() {
        let cases: &[(&str, &str)] = &[
            (r#"{"ts":1796074200,"msg":"handled request"}"#, "no request object"),
            (r#"{"request":{"method":"GET","uri":"/"}}"#, "no ts"),
            (r#"{"ts":"noon","request":{"method":"GET","uri":"/"}}"#, "ts `noon` is not ISO 8601"),
            (
                r#"{"ts":1796074200,"duration":"long","request":{"method":"GET","uri":"/"}}"#,
                "duration `long` is not a duration",
            ),
            (r#"{"ts":1796074200,"request":{"uri":"/"}}"#, "no request.method"),
        ];
        for &(line, why) in cases {
            assert_eq!(one(line).unwrap_err().to_string(), why, "{line}");
        }
    }

    #[test]
    fn the_sample_log() {
        let (records, problems) = read_fixture("caddy.json.log", Options::default());
        assert_eq!(problems.formats[0].1, Format::Caddy);
        let bad: Vec<u64> = problems.examples.iter().map(|(source, _)| source.line).collect();
        assert_eq!(bad, [7, 19]);
        assert_eq!(records.len(), 28);
        assert_eq!(problems.lacks, ["cookies", "header:authorization", "header:cookie", "org", "roles", "token"]);
        assert!(records.windows(2).all(|pair| pair[0].time <= pair[1].time));
    }
}
