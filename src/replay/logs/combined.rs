//! nginx's and Apache's `combined` log, optionally followed by `name=value` fields.

use super::field::{Field, Value, address, apply, arrival};
use super::problems::LineError;
use super::time;
use crate::replay::Record;

/// One line: `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
/// "$http_referer" "$http_user_agent"` then any `name=value` or `name="value"` fields (`rt=`
/// or `request_time=` gives the duration). Referer and user agent may be missing (`common`).
pub(super) fn parse(line: &str, fields: &[Field]) -> Result<Record, LineError> {
    let mut cursor = Cursor { rest: line };
    let remote_addr = cursor.word().ok_or(LineError::Missing("remote address"))?;
    let _ident = cursor.word().ok_or(LineError::Missing("ident field"))?;
    let remote_user = cursor.word().ok_or(LineError::Missing("remote user field"))?;
    let time_local = cursor.bracketed().ok_or(LineError::Missing("[time]"))?;
    let end = time::time_local(time_local)
        .ok_or_else(|| LineError::unreadable("time", &time_local, "like 30/Nov/2026:21:30:00 +0000"))?;
    let request = cursor.quoted().ok_or(LineError::Missing("quoted request"))?;
    let (method, target) = request_line(&request)?;
    let status = cursor.word().ok_or(LineError::Missing("status"))?;
    let status = match status.parse::<u16>() {
        Ok(status) if (100..=999).contains(&status) => status,
        _ => return Err(LineError::unreadable("status", &status, "a status code")),
    };
    let _bytes = cursor.word().ok_or(LineError::Missing("size"))?;
    let referer = cursor.quoted();
    let user_agent = referer.as_ref().and_then(|_| cursor.quoted());
    let mut extra: Vec<(&str, String)> = Vec::new();
    while !cursor.rest.trim_start().is_empty() {
        match cursor.pair() {
            Some(pair) => extra.push(pair),
            // Anything else nginx's `main` format adds, such as "$http_x_forwarded_for".
            None => cursor.skip(),
        }
    }
    if remote_user != "-" {
        extra.push(("remote_user", remote_user.to_owned()));
    }
    let duration = match extra.iter().find(|(name, _)| *name == "rt" || *name == "request_time") {
        None => None,
        Some((_, value)) if value == "-" => None,
        Some((name, value)) => {
            Some(time::seconds(value).ok_or_else(|| LineError::unreadable(*name, value, "seconds"))?)
        }
    };
    let mut record = Record {
        time: arrival(end, duration),
        method,
        target,
        client: address(remote_addr),
        status: Some(status),
        duration,
        ..Record::default()
    };
    for (name, value) in [("referer", referer), ("user-agent", user_agent)] {
        if let Some(value) = value.filter(|value| !value.is_empty() && value != "-") {
            record.headers.push((name.to_owned(), value));
        }
    }
    apply(fields, &mut record, |path| {
        let (_, value) = extra.iter().find(|(name, _)| *name == path)?;
        (!value.is_empty() && value != "-").then(|| Value::Text(value.clone()))
    })?;
    Ok(record)
}

/// nginx's `$request`, `GET /pets?limit=2 HTTP/1.1`, as method and target. Anything else (`-`
/// for a connection that sent no request, bytes of a TLS handshake on a plain port) is not a
/// request.
pub(super) fn request_line(request: &str) -> Result<(String, String), LineError> {
    let mut parts = request.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version), None)
            if !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
                && !target.is_empty()
                && version.starts_with("HTTP/") =>
        {
            Ok((method.to_owned(), target.to_owned()))
        }
        _ => Err(LineError::Missing("request line")),
    }
}

/// The unread rest of a line.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    /// The next run of non-space characters.
    fn word(&mut self) -> Option<&'a str> {
        let rest = self.rest.trim_start();
        let end = rest.find(' ').unwrap_or(rest.len());
        let (word, rest) = rest.split_at(end);
        self.rest = rest;
        (!word.is_empty()).then_some(word)
    }

    /// `[...]`.
    fn bracketed(&mut self) -> Option<&'a str> {
        let rest = self.rest.trim_start().strip_prefix('[')?;
        let (inside, rest) = rest.split_once(']')?;
        self.rest = rest;
        Some(inside)
    }

    /// `"..."`, unescaped.
    fn quoted(&mut self) -> Option<String> {
        let rest = self.rest.trim_start().strip_prefix('"')?;
        let (inside, rest) = quoted_body(rest)?;
        self.rest = rest;
        Some(inside)
    }

    /// `name=value` or `name="value"`.
    fn pair(&mut self) -> Option<(&'a str, String)> {
        let rest = self.rest.trim_start();
        let (name, after) = rest.split_once('=')?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return None;
        }
        if let Some(after) = after.strip_prefix('"') {
            let (value, rest) = quoted_body(after)?;
            self.rest = rest;
            Some((name, value))
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let (value, rest) = after.split_at(end);
            self.rest = rest;
            Some((name, value.to_owned()))
        }
    }

    /// Passes over one field this reader does not use.
    fn skip(&mut self) {
        if self.quoted().is_none() {
            self.word();
        }
    }
}

/// A quoted field's text up to its closing quote, and what follows. nginx escapes `"` and
/// non-printable bytes as `\x22`, Apache as `\"`; both are undone so the target is as sent.
fn quoted_body(text: &str) -> Option<(String, &str)> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => return Some((String::from_utf8_lossy(&out).into_owned(), &text[at + 1..])),
            b'\\' if at + 1 < bytes.len() => {
                let hex = bytes.get(at + 2..at + 4).and_then(|hex| std::str::from_utf8(hex).ok());
                match (bytes[at + 1], hex.and_then(|hex| u8::from_str_radix(hex, 16).ok())) {
                    (b'x', Some(byte)) => {
                        out.push(byte);
                        at += 4;
                    }
                    (b'"' | b'\\', _) => {
                        out.push(bytes[at + 1]);
                        at += 2;
                    }
                    _ => {
                        out.push(b'\\');
                        at += 1;
                    }
                }
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::{Nanos, SECOND};
    use crate::replay::logs::{Format, Mapping, Options, tests::read_fixture};

    const END: Nanos = 1_796_074_200 * SECOND;

    /// Method and target, or why the line is malformed.
    type Parsed = Result<(&'static str, &'static str), &'static str>;

    #[test]
    fn a_combined_line_with_trailing_fields() {
        let line = r#"203.0.113.7 - alice [30/Nov/2026:21:30:00 +0000] "GET /pets?limit=2 HTTP/1.1" 200 512 "https://example.com/" "curl/8.5.0" rt=0.012 uid="alice smith""#;
        assert_eq!(
            parse(line, &[]).unwrap(),
            Record {
                time: END - 12_000_000,
                method: "GET".into(),
                target: "/pets?limit=2".into(),
                client: Some("203.0.113.7".parse().unwrap()),
                status: Some(200),
                duration: Some(12_000_000),
                headers: vec![
                    ("referer".into(), "https://example.com/".into()),
                    ("user-agent".into(), "curl/8.5.0".into())
                ],
                ..Record::default()
            }
        );
        let fields = Mapping { fields: vec![("user".into(), "uid".into()), ("org".into(), "remote_user".into())] };
        let record = parse(line, &fields.compile().unwrap()).unwrap();
        assert_eq!((record.user.as_deref(), record.org.as_deref()), (Some("alice smith"), Some("alice")));
    }

    #[test]
    fn lines_that_are_and_are_not_combined() {
        let cases: &[(&str, Parsed)] = &[
            (r#"::1 - - [30/Nov/2026:21:30:00 +0000] "GET / HTTP/1.1" 200 5"#, Ok(("GET", "/"))),
            (
                r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "GET /a\x22b HTTP/1.1" 404 0 "-" "x\"y" "198.51.100.1""#,
                Ok(("GET", "/a\"b")),
            ),
            (r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "-" 400 0 "-" "-""#, Err("no request line")),
            (
                r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "\x16\x03\x01\x00\xF4\x01" 400 157 "-" "-""#,
                Err("no request line"),
            ),
            (
                r#"10.0.0.1 - - [30/Nov/2026 21:30:00] "GET / HTTP/1.1" 200 5"#,
                Err("time `30/Nov/2026 21:30:00` is not like 30/Nov/2026:21:30:00 +0000"),
            ),
            (r#"10.0.0.1 - - 30/Nov/2026:21:30:00 "GET / HTTP/1.1" 200 5"#, Err("no [time]")),
            (
                r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "GET / HTTP/1.1" OK 5"#,
                Err("status `OK` is not a status code"),
            ),
            (r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "GET / HTTP/1.1 200 5"#, Err("no quoted request")),
            (
                r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "GET / HTTP/1.1" 200 5 "-" "-" rt=fast"#,
                Err("rt `fast` is not seconds"),
            ),
            ("", Err("no remote address")),
        ];
        for &(line, want) in cases {
            let got = parse(line, &[]);
            let got = got
                .as_ref()
                .map(|record| (record.method.as_str(), record.target.as_str()))
                .map_err(ToString::to_string);
            assert_eq!(got.as_ref().map(|p| *p).map_err(String::as_str), want, "{line}");
        }
    }

    #[test]
    fn the_sample_log() {
        let (records, problems) = read_fixture("combined.log", Options::default());
        assert_eq!(problems.formats[0].1, Format::Combined);
        let bad: Vec<(u64, &str)> = problems.examples.iter().map(|(source, why)| (source.line, why.as_str())).collect();
        assert_eq!(bad, [(6, "no request line"), (14, "no request line"), (21, "no [time]")]);
        assert_eq!(problems.malformed, 3);
        assert_eq!(records.len(), 27);
        assert_eq!(
            problems.lacks,
            ["cookies", "headers", "org", "roles", "sub-second time", "token", "user"],
            "rt= is logged, so duration is not lacking"
        );
        // Both first lines were logged at 21:30:00 when they ended; line 2 took longer, so it
        // arrived first.
        let first: Vec<(u64, Nanos, &str)> =
            records[..2].iter().map(|record| (record.source.line, record.time, record.method.as_str())).collect();
        assert_eq!(first, [(2, END - 40_000_000, "DELETE"), (1, END - 3_000_000, "POST")]);
        assert!(records.windows(2).all(|pair| pair[0].time <= pair[1].time));
    }
}
