//! Reading JSON log lines, shared by the JSON formats, and nginx's `escape=json` log.

use super::problems::LineError;
use serde_json::{Map, Value as Json};

use super::combined;
use super::field::{Field, Value, address, apply, arrival, cookies};
use super::time;
use crate::engine::clock::Nanos;
use crate::replay::Record;

/// A line as a JSON object.
pub(super) fn object(line: &str) -> Result<Map<String, Json>, LineError> {
    match serde_json::from_str(line) {
        Ok(Json::Object(object)) => Ok(object),
        Ok(_) => Err(LineError::NotObject),
        Err(error) => Err(LineError::NotJson(error.to_string())),
    }
}

/// A scalar as text; `null`, `""` and `-` (what servers write for "none") are absent.
pub(super) fn text(value: &Json) -> Option<String> {
    match value {
        Json::String(text) if text.is_empty() || text == "-" => None,
        Json::String(text) => Some(text.clone()),
        Json::Number(number) => Some(number.to_string()),
        Json::Bool(flag) => Some(flag.to_string()),
        Json::Null | Json::Array(_) | Json::Object(_) => None,
    }
}

/// The text of `key` in `object`, if present.
pub(super) fn get(object: &Map<String, Json>, key: &str) -> Option<String> {
    object.get(key).and_then(text)
}

/// A number of seconds or milliseconds written as a JSON number or a string of one: nginx writes
/// its numbers as strings inside the template.
fn decimal(value: &Json, read: fn(&str) -> Option<Nanos>) -> Option<Nanos> {
    match value {
        Json::String(text) => read(text),
        Json::Number(number) => match number.as_u64() {
            Some(whole) => read(&whole.to_string()),
            None => read(&time::float_text(number.as_f64()?)),
        },
        _ => None,
    }
}

/// An optional duration under `key`, read by `read` (seconds or milliseconds); absent when missing,
/// `null` or `-`, and an error when present but not a number.
pub(super) fn duration(
    object: &Map<String, Json>,
    key: &str,
    read: fn(&str) -> Option<Nanos>,
) -> Result<Option<Nanos>, LineError> {
    match object.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(text)) if text == "-" || text.is_empty() => Ok(None),
        Some(value) => decimal(value, read).map(Some).ok_or_else(|| LineError::unreadable(key, value, "a number")),
    }
}

/// Seconds as a JSON number or string.
pub(super) fn seconds(value: &Json) -> Option<Nanos> {
    decimal(value, time::seconds)
}

/// Milliseconds as a JSON number or string.
pub(super) fn millis(value: &Json) -> Option<Nanos> {
    decimal(value, time::millis)
}

/// The response status, if logged.
pub(super) fn status(object: &Map<String, Json>, key: &str) -> Result<Option<u16>, LineError> {
    match object.get(key).and_then(text) {
        None => Ok(None),
        Some(text) => match text.parse::<u16>() {
            Ok(status) if (100..=999).contains(&status) => Ok(Some(status)),
            // Envoy logs 0 when no response was sent.
            Ok(0) => Ok(None),
            _ => Err(LineError::unreadable(key, &text, "a status code")),
        },
    }
}

/// A mapped field: the key as written, else a dotted path through nested objects, each key
/// matched exactly or else ignoring case (`request.headers.x-user` finds Caddy's `X-User`).
pub(super) fn lookup(object: &Map<String, Json>, path: &str) -> Option<Value> {
    let found = match object.get(path) {
        Some(value) => value,
        None => {
            let mut current = object;
            let mut keys = path.split('.').peekable();
            loop {
                let key = keys.next()?;
                let value = current.get(key).or_else(|| {
                    current.iter().find(|(name, _)| name.eq_ignore_ascii_case(key)).map(|(_, value)| value)
                })?;
                if keys.peek().is_none() {
                    break value;
                }
                current = value.as_object()?;
            }
        }
    };
    match found {
        Json::Array(items) => Some(Value::List(items.iter().filter_map(text).collect())),
        scalar => text(scalar).map(Value::Text),
    }
}

/// One line of an nginx `log_format ... escape=json` log keyed by nginx variable names.
pub(super) fn parse_nginx(line: &str, fields: &[Field]) -> Result<Record, LineError> {
    let object = object(line)?;
    let duration = duration(&object, "request_time", time::seconds)?;
    // Every nginx time is when the request ended.
    let end = if let Some(msec) = get(&object, "msec") {
        time::seconds(&msec).ok_or_else(|| LineError::unreadable("msec", &msec, "seconds"))?
    } else if let Some(iso) = get(&object, "time_iso8601") {
        time::rfc3339(&iso).ok_or_else(|| LineError::unreadable("time_iso8601", &iso, "ISO 8601"))?
    } else if let Some(local) = get(&object, "time_local") {
        time::time_local(&local)
            .ok_or_else(|| LineError::unreadable("time_local", &local, "like 30/Nov/2026:21:30:00 +0000"))?
    } else {
        return Err(LineError::Missing("time (msec, time_iso8601 or time_local)"));
    };
    let (method, target) = match (get(&object, "request_method"), get(&object, "request_uri")) {
        (Some(method), Some(target)) => (method, target),
        _ => match get(&object, "request") {
            Some(request) => combined::request_line(&request)?,
            None => return Err(LineError::Missing("request (request, or request_method and request_uri)")),
        },
    };
    let mut record = Record {
        time: arrival(end, duration),
        method,
        target,
        client: get(&object, "remote_addr").and_then(|remote| address(&remote)),
        status: status(&object, "status")?,
        duration,
        ..Record::default()
    };
    for (key, value) in &object {
        let Some(value) = text(value) else { continue };
        if let Some(name) = key.strip_prefix("http_") {
            record.headers.push((name.replace('_', "-").to_ascii_lowercase(), value));
        } else if let Some(name) = key.strip_prefix("cookie_") {
            record.cookies.push((name.to_owned(), value));
        }
    }
    // `$http_cookie` holds every cookie; `$cookie_NAME` only those named.
    let header: Option<String> =
        record.headers.iter().find(|(name, _)| name == "cookie").map(|(_, value)| value.clone());
    for (name, value) in header.iter().flat_map(|header| cookies(header)) {
        if !record.cookies.iter().any(|(cookie, _)| *cookie == name) {
            record.cookies.push((name, value));
        }
    }
    apply(fields, &mut record, |path| lookup(&object, path))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::engine::clock::SECOND;
    use crate::replay::logs::{Mapping, Options, tests::read_fixture};

    const END: Nanos = 1_796_074_200 * SECOND;

    fn one(line: &str) -> Result<Record, LineError> {
        parse_nginx(line, &[])
    }

    #[test]
    fn the_end_time_moves_back_by_request_time() {
        let record = one(
            r#"{"msec":"1796074200.250","remote_addr":"10.0.0.7","request":"GET /pets?limit=2 HTTP/1.1","status":"200","request_time":"0.050","http_user_agent":"curl/8.5.0","http_x_api_key":"k-1","cookie_session":"s1"}"#,
        )
        .unwrap();
        assert_eq!(
            record,
            Record {
                time: END + 200_000_000,
                method: "GET".into(),
                target: "/pets?limit=2".into(),
                client: Some("10.0.0.7".parse().unwrap()),
                status: Some(200),
                duration: Some(50_000_000),
                headers: vec![("user-agent".into(), "curl/8.5.0".into()), ("x-api-key".into(), "k-1".into())],
                cookies: vec![("session".into(), "s1".into())],
                ..Record::default()
            }
        );
    }

    #[test]
    fn times_methods_and_numbers_in_each_spelling() {
        let cases: &[(&str, Nanos, &str, Option<u16>)] = &[
            (
                r#"{"time_iso8601":"2026-11-30T21:30:01+00:00","request":"POST /pets HTTP/2.0","status":201}"#,
                END + SECOND,
                "/pets",
                Some(201),
            ),
            (
                r#"{"time_local":"30/Nov/2026:21:30:02 +0000","request_method":"DELETE","request_uri":"/pets/1","status":"-"}"#,
                END + 2 * SECOND,
                "/pets/1",
                None,
            ),
            (r#"{"msec":1796074200.5,"request":"GET / HTTP/1.1","request_time":0.5}"#, END, "/", None),
        ];
        for &(line, time, target, status) in cases {
            let record = one(line).unwrap();
            assert_eq!((record.time, record.target.as_str(), record.status), (time, target, status), "{line}");
        }
    }

    #[test]
    fn lines_nginx_cannot_have_written() {
        let cases: &[(&str, &str)] = &[
            (r#"{"request":"GET / HTTP/1.1"}"#, "no time (msec, time_iso8601 or time_local)"),
            (r#"{"msec":"1796074200.000"}"#, "no request (request, or request_method and request_uri)"),
            (r#"{"msec":"yesterday","request":"GET / HTTP/1.1"}"#, "msec `yesterday` is not seconds"),
            (r#"{"msec":"1796074200.000","request":"-"}"#, "no request (request, or request_method and request_uri)"),
            (r#"{"msec":"1796074200.000","request":"\u0016\u0003\u0001"}"#, "no request line"),
            (
                r#"{"msec":"1796074200.000","request":"GET / HTTP/1.1","status":"OK"}"#,
                "status `OK` is not a status code",
            ),
            (
                r#"{"msec":"1796074200.000","request":"GET / HTTP/1.1","request_time":"soon"}"#,
                "request_time `\"soon\"` is not a number",
            ),
            (r#"["msec"]"#, "not a JSON object"),
        ];
        for &(line, why) in cases {
            assert_eq!(one(line).unwrap_err().to_string(), why, "{line}");
        }
    }

    #[test]
    fn mapped_fields_fill_every_fact() {
        let line = r#"{"msec":"1796074200.000","request":"GET / HTTP/1.1","remote_addr":"10.0.0.1","remote_user":"alice","org":"acme","roles":"partner, admin","http_authorization":"Bearer t1","http_x_forwarded_for":"203.0.113.9, 10.0.0.1","jwt":{"sub":"bob","groups":["a","b"]},"http_x_user":"carol","sid":"z9","groups":"[\"x\",\"y\"]"}"#;
        type Check = dyn Fn(&Record) -> bool;
        let cases: &[(&str, &Check)] = &[
            ("user=remote_user", &|r| r.user.as_deref() == Some("alice")),
            ("user=jwt.sub", &|r| r.user.as_deref() == Some("bob")),
            ("org=org", &|r| r.org.as_deref() == Some("acme")),
            ("roles=roles", &|r| r.roles == ["partner", "admin"]),
            ("roles=jwt.groups", &|r| r.roles == ["a", "b"]),
            ("roles=groups", &|r| r.roles == ["x", "y"]),
            ("token=http_authorization", &|r| r.token.as_deref() == Some("Bearer t1")),
            ("address=http_x_forwarded_for", &|r| r.client == Some(IpAddr::from([10, 0, 0, 1]))),
            ("address=nowhere", &|r| r.client.is_none()),
            ("header:X-Tenant=org", &|r| r.headers.contains(&("x-tenant".into(), "acme".into()))),
            ("header:x-user=remote_user", &|r| {
                r.headers.contains(&("x-user".into(), "alice".into())) && r.headers.len() == 3
            }),
            ("cookie:sid=sid", &|r| r.cookies == [("sid".to_owned(), "z9".to_owned())]),
            ("user=missing", &|r| r.user.is_none()),
        ];
        for &(mapping, check) in cases {
            let (fact, field) = Mapping::parse(mapping).unwrap();
            let fields = Mapping { fields: vec![(fact, field)] }.compile().unwrap();
            let record = parse_nginx(line, &fields).unwrap();
            assert!(check(&record), "{mapping}: {record:?}");
        }
    }

    #[test]
    fn the_sample_log() {
        let (records, problems) = read_fixture("nginx.json.log", Options::default());
        assert_eq!(problems.formats[0].1, crate::replay::logs::Format::NginxJson);
        let bad: Vec<u64> = problems.examples.iter().map(|(source, _)| source.line).collect();
        assert_eq!(bad, [9, 17, 24]);
        assert_eq!(problems.malformed, 3);
        assert_eq!(records.len(), 27);
        let first = &records[0];
        assert_eq!(first.source.line, 1);
        assert_eq!(first.time, END - 12_000_000 + 104_000_000);
        assert_eq!(first.headers[0], ("user-agent".to_owned(), "python-requests/2.32.3".to_owned()));
        assert!(records.windows(2).all(|pair| pair[0].time <= pair[1].time));
    }
}
