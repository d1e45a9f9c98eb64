//! opbound's own request log (`serve --request-log`).

use super::problems::LineError;
use serde_json::Value as Json;

use super::field::{Field, address, apply};
use super::json::{self, get};
use super::time;
use crate::replay::Record;

/// One line. `time` is when the request arrived, to the nanosecond, so replay reproduces each
/// decision exactly; identity values are as logged (hashed by default), which replays alike.
/// Keys this reader does not know (`operation`, `outcome`, `bound`) are ignored.
pub(super) fn parse(line: &str, fields: &[Field]) -> Result<Record, LineError> {
    let object = json::object(line)?;
    let at = get(&object, "time").ok_or(LineError::Missing("time"))?;
    let mut record = Record {
        time: time::rfc3339(&at).ok_or_else(|| LineError::unreadable("time", &at, "RFC 3339"))?,
        method: get(&object, "method").ok_or(LineError::Missing("method"))?,
        target: get(&object, "target").ok_or(LineError::Missing("target"))?,
        client: get(&object, "client").and_then(|client| address(&client)),
        status: json::status(&object, "status")?,
        duration: json::duration(&object, "duration_ms", time::millis)?,
        user: get(&object, "user"),
        org: get(&object, "org"),
        token: get(&object, "token"),
        ..Record::default()
    };
    if let Some(roles) = object.get("roles").and_then(Json::as_array) {
        record.roles = roles.iter().filter_map(json::text).collect();
    }
    for (key, list) in [("headers", &mut record.headers), ("cookies", &mut record.cookies)] {
        if let Some(entries) = object.get(key).and_then(Json::as_object) {
            for (name, value) in entries {
                let name = if key == "headers" { name.to_ascii_lowercase() } else { name.clone() };
                // A header sent more than once is logged as its values in order, so replay sees
                // it as unclear exactly when serve did.
                match value.as_array() {
                    Some(values) => list.extend(values.iter().filter_map(json::text).map(|v| (name.clone(), v))),
                    None => list.extend(json::text(value).map(|value| (name, value))),
                }
            }
        }
    }
    apply(fields, &mut record, |path| json::lookup(&object, path))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::{Nanos, SECOND};
    use crate::replay::logs::{Format, Options, tests::read_fixture};

    const ARRIVED: Nanos = 1_796_074_200 * SECOND;

    #[test]
    fn an_opbound_line_to_the_nanosecond() {
        let line = r#"{"time":"2026-11-30T21:30:00.123456789Z","method":"GET","target":"/pets?limit=3","client":"10.0.0.1","status":200,"duration_ms":1.234,"operation":"listPets","outcome":"allowed","bound":null,"user":"h:1f2e","org":"h:77aa","roles":["partner","beta"],"token":"h:9c0d","headers":{"X-Api-Key":"h:5b5b","x-count":["1","2"]},"cookies":{"session":"h:0e0e"}}"#;
        assert_eq!(
            parse(line, &[]).unwrap(),
            Record {
                time: ARRIVED + 123_456_789,
                method: "GET".into(),
                target: "/pets?limit=3".into(),
                client: Some("10.0.0.1".parse().unwrap()),
                status: Some(200),
                duration: Some(1_234_000),
                user: Some("h:1f2e".into()),
                org: Some("h:77aa".into()),
                roles: vec!["partner".into(), "beta".into()],
                token: Some("h:9c0d".into()),
                headers: vec![
                    ("x-api-key".into(), "h:5b5b".into()),
                    ("x-count".into(), "1".into()),
                    ("x-count".into(), "2".into()),
                ],
                cookies: vec![("session".into(), "h:0e0e".into())],
                ..Record::default()
            }
        );
    }

    #[test]
    fn identity_is_optional_but_time_method_and_target_are_not() {
        let record =
            parse(r#"{"time":"2026-11-30T21:30:00Z","method":"GET","target":"/","client":null,"user":null}"#, &[])
                .unwrap();
        assert_eq!((record.client, record.user, record.status, record.duration), (None, None, None, None));
        let cases: &[(&str, &str)] = &[
            (r#"{"method":"GET","target":"/"}"#, "no time"),
            (r#"{"time":"2026-11-30 21:30","method":"GET","target":"/"}"#, "time `2026-11-30 21:30` is not RFC 3339"),
            (r#"{"time":"2026-11-30T21:30:00Z","target":"/"}"#, "no method"),
            (r#"{"time":"2026-11-30T21:30:00Z","method":"GET"}"#, "no target"),
            (
                r#"{"time":"2026-11-30T21:30:00Z","method":"GET","target":"/","status":"teapot"}"#,
                "status `teapot` is not a status code",
            ),
            (
                r#"{"time":"2026-11-30T21:30:00Z","method":"GET","target":"/","duration_ms":"x"}"#,
                "duration_ms `\"x\"` is not a number",
            ),
            (
                r#"{"time":"2026-11-30T21:30:00Z","method":"GET","target":"/""#,
                "not JSON (EOF while parsing an object at line 1 column 58)",
            ),
        ];
        for &(line, why) in cases {
            assert_eq!(parse(line, &[]).unwrap_err().to_string(), why, "{line}");
        }
    }

    #[test]
    fn the_sample_log() {
        let (records, problems) = read_fixture("opbound.json.log", Options::default());
        assert_eq!(problems.formats[0].1, Format::Opbound);
        let bad: Vec<u64> = problems.examples.iter().map(|(source, _)| source.line).collect();
        assert_eq!(bad, [11, 26]);
        assert_eq!(records.len(), 28);
        assert!(problems.lacks.is_empty());
        assert!(records.windows(2).all(|pair| pair[0].time <= pair[1].time));
    }
}
