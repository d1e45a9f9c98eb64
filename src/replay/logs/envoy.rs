//! Envoy's `json_format` access log, keyed by the lower-cased names of its command operators.

use super::field::{Field, address, apply};
use super::json::{self, get};
use super::problems::LineError;
use super::time;
use crate::replay::Record;

/// One line. `start_time` is when the request arrived, so no duration is subtracted; `duration`
/// is whole milliseconds. The client is the downstream peer: `x_forwarded_for` only when mapped
/// (`--field address=x_forwarded_for`), since any client can write that header.
pub(super) fn parse(line: &str, fields: &[Field]) -> Result<Record, LineError> {
    let object = json::object(line)?;
    let start = get(&object, "start_time").ok_or(LineError::Missing("start_time"))?;
    let time = time::rfc3339(&start).ok_or_else(|| LineError::unreadable("start_time", &start, "RFC 3339"))?;
    // A route that rewrote the path logs the one the client sent here.
    let target =
        get(&object, "x_envoy_original_path").or_else(|| get(&object, "path")).ok_or(LineError::Missing("path"))?;
    let mut record = Record {
        time,
        method: get(&object, "method").ok_or(LineError::Missing("method"))?,
        target,
        client: get(&object, "downstream_remote_address").and_then(|remote| address(&remote)),
        status: json::status(&object, "response_code")?,
        duration: json::duration(&object, "duration", time::millis)?,
        ..Record::default()
    };
    for (key, header) in [("user_agent", "user-agent"), ("authority", "host")] {
        if let Some(value) = get(&object, key) {
            record.headers.push((header.to_owned(), value));
        }
    }
    apply(fields, &mut record, |path| json::lookup(&object, path))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::engine::clock::{Nanos, SECOND};
    use crate::replay::logs::{Format, Mapping, Options, tests::read_fixture};

    const START: Nanos = 1_796_074_200 * SECOND;

    #[test]
    fn an_envoy_line() {
        let line = r#"{"start_time":"2026-11-30T21:30:00.123Z","method":"POST","path":"/v2/pets","x_envoy_original_path":"/pets","protocol":"HTTP/1.1","response_code":201,"response_flags":"-","bytes_received":57,"bytes_sent":88,"duration":14,"upstream_service_time":"12","x_forwarded_for":"198.51.100.4, 203.0.113.8","user_agent":"okhttp/4.12.0","request_id":"8c1d","authority":"api.example.com","upstream_host":"10.1.0.4:8080","downstream_remote_address":"[2001:db8::7]:51234"}"#;
        assert_eq!(
            parse(line, &[]).unwrap(),
            Record {
                time: START + 123_000_000,
                method: "POST".into(),
                target: "/pets".into(),
                client: Some("2001:db8::7".parse().unwrap()),
                status: Some(201),
                duration: Some(14_000_000),
                headers: vec![("user-agent".into(), "okhttp/4.12.0".into()), ("host".into(), "api.example.com".into())],
                ..Record::default()
            }
        );
        let mapping = Mapping { fields: vec![("address".into(), "x_forwarded_for".into())] };
        let record = parse(line, &mapping.compile().unwrap()).unwrap();
        assert_eq!(record.client, Some(IpAddr::from([203, 0, 113, 8])));
    }

    #[test]
    fn missing_values_are_null_or_dash() {
        let line = r#"{"start_time":"2026-11-30T21:30:00.000Z","method":"GET","path":"/","x_envoy_original_path":null,"response_code":0,"duration":"-","user_agent":"-","downstream_remote_address":"10.0.0.3:4000"}"#;
        let record = parse(line, &[]).unwrap();
        assert_eq!(
            (record.target.as_str(), record.status, record.duration, record.headers.len()),
            ("/", None, None, 0)
        );
        assert_eq!(record.client, Some(IpAddr::from([10, 0, 0, 3])));
    }

    #[test]
    fn lines_envoy_cannot_have_written() {
        let cases: &[(&str, &str)] = &[
            (r#"{"method":"GET","path":"/"}"#, "no start_time"),
            (
                r#"{"start_time":"30/Nov/2026:21:30:00 +0000","method":"GET","path":"/"}"#,
                "start_time `30/Nov/2026:21:30:00 +0000` is not RFC 3339",
            ),
            (r#"{"start_time":"2026-11-30T21:30:00.000Z","method":"GET","path":null}"#, "no path"),
            (r#"{"start_time":"2026-11-30T21:30:00.000Z","path":"/"}"#, "no method"),
            (
                r#"{"start_time":"2026-11-30T21:30:00.000Z","method":"GET","path":"/","duration":"slow"}"#,
                "duration `\"slow\"` is not a number",
            ),
        ];
        for &(line, why) in cases {
            assert_eq!(parse(line, &[]).unwrap_err().to_string(), why, "{line}");
        }
    }

    #[test]
    fn the_sample_log() {
        let (records, problems) = read_fixture("envoy.json.log", Options::default());
        assert_eq!(problems.formats[0].1, Format::Envoy);
        let bad: Vec<u64> = problems.examples.iter().map(|(source, _)| source.line).collect();
        assert_eq!(bad, [8, 22]);
        assert_eq!(records.len(), 28);
        assert!(records.windows(2).all(|pair| pair[0].time <= pair[1].time));
    }
}
