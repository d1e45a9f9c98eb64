use std::path::Path;

use http::{HeaderMap, HeaderValue};

use siphasher::sip128::SipHasher13;

use super::line::*;
use super::settings::*;
use super::*;
use crate::engine::Outcome;
use crate::policy::BoundIndex;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {name: perAddress, per: address, limit: 100, window: PT1M}
components:
  securitySchemes:
    bearer: {type: http, scheme: bearer}
    key: {type: apiKey, in: query, name: key}
    session: {type: apiKey, in: cookie, name: session}
paths:
  /pets:
    get:
      operationId: listPets
      security: [{bearer: []}]
      x-rate-limit:
        - {per: header:X-Tenant, limit: 10, window: PT1M}
        - {per: user, limit: 10, window: PT1M}
        - {per: token, limit: 10, window: PT1M}
        - {per: route, limit: 10, window: PT1M, cost-from: header:X-Count, max-cost: 5}
  /search:
    get:
      operationId: search
      security: [{key: []}, {session: []}]
      x-rate-limit: {per: query:q, limit: 10, window: PT1M}
"#;

fn policy(yaml: &str) -> Arc<Policy> {
    let source = crate::spec::Source::from_text(Path::new("spec.yaml"), yaml.to_string());
    Arc::new(crate::policy::load_source(source, &crate::policy::Options::default()).expect("valid").policy)
}

fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_bytes(value).unwrap());
    }
    map
}

/// The whole line of a request, as sent with status 200 after 1.5 ms.
fn line(keys: &Keys, policy: &Arc<Policy>, target: &str, headers: &HeaderMap, judged: Option<&Judged<'_>>) -> String {
    let request = Request {
        time: 1_796_074_200_123_456_789,
        method: "GET",
        target,
        client: "10.0.0.1".parse().unwrap(),
        headers: headers.into(),
    };
    let resolve = || Identity { user: Some("ann".into()), org: None, roles: vec!["partner".into()] };
    let (head, tail) = render(keys, &Reads::of(policy), &request, judged, &resolve);
    format!("{head},\"status\":200,\"duration_ms\":1.500{tail}")
}

fn hash(secret: Secret, value: &str) -> String {
    format!("h:{:032x}", SipHasher13::new_with_key(&secret).hash(value.as_bytes()).as_u128())
}

const SECRET: Secret = *b"0123456789abcdef";

#[test]
fn a_judged_request_is_one_line_of_every_fact_its_bounds_read_in_order() {
    let policy = policy(SPEC);
    let op = policy.operations.iter().position(|o| o.id == "listPets");
    let limited = Outcome::Limited { bound: BoundIndex::new(0) };
    let judged = Judged { operation: op, outcome: &limited, identity: None };
    let request_headers = headers(&[
        ("authorization", b"Bearer abc"),
        ("x-tenant", b"acme"),
        ("x-count", b"3"),
        ("cookie", b"session=s1; other=x"),
        ("x-unread", b"never logged"),
    ]);
    let plain = line(&Keys::Plain, &policy, "/pets?limit=3&key=k1", &request_headers, Some(&judged));
    assert_eq!(
        plain,
        r#"{"time":"2026-11-30T21:30:00.123456789Z","method":"GET","target":"/pets?limit=3&key=k1","client":"10.0.0.1","status":200,"duration_ms":1.500,"operation":"listPets","outcome":"limited","bound":"route:perAddress","user":"ann","roles":["partner"],"token":"abc","headers":{"x-tenant":"acme","x-count":"3"},"cookies":{"session":"s1"}}"#
    );
    let hashed =
        line(&Keys::new(KeyMode::Hashed, SECRET), &policy, "/pets?limit=3&key=k1", &request_headers, Some(&judged));
    let h = |v| hash(SECRET, v);
    assert_eq!(
        hashed,
        format!(
            r#"{{"time":"2026-11-30T21:30:00.123456789Z","method":"GET","target":"/pets?limit=3&key={}","client":"10.0.0.1","status":200,"duration_ms":1.500,"operation":"listPets","outcome":"limited","bound":"route:perAddress","user":"{}","roles":["partner"],"token":"{}","headers":{{"x-tenant":"{}","x-count":"3"}},"cookies":{{"session":"{}"}}}}"#,
            h("k1"),
            h("ann"),
            h("abc"),
            h("acme"),
            h("s1")
        )
    );
    serde_json::from_str::<serde_json::Value>(&hashed).expect("valid JSON");
}

#[test]
fn hashes_are_keyed_sip13_128_in_32_hex_digits_pinned_for_a_secret() {
    // Pinned: a secret file must give the same hashes in every build, or logs of two
    // versions of opbound would not match.
    let keys = Keys::new(KeyMode::Hashed, secret_from(b"a secret of 16 bytes or more\n").unwrap());
    let mut out = String::new();
    keys.value(&mut out, b"abc");
    assert_eq!(out, "\"h:ac5b76bfd092e2b0c99d0b9eea520b82\"");
}

#[test]
fn a_credential_or_keyed_query_parameter_is_hashed_as_the_bound_reads_it() {
    let policy = policy(SPEC);
    let op = policy.operations.iter().position(|o| o.id == "search");
    let judged = Judged { operation: op, outcome: &Outcome::Allowed, identity: None };
    let keys = Keys::new(KeyMode::Hashed, SECRET);
    let line = line(&keys, &policy, "/search?q=a+b&page=2&key=k%31&q=a%20b&flag", &HeaderMap::new(), Some(&judged));
    let (q, k) = (hash(SECRET, "a b"), hash(SECRET, "k1"));
    assert!(line.contains(&format!(r#""target":"/search?q={q}&page=2&key={k}&q={q}&flag""#)), "{line}");
    // The credential a bound counts `per: token` under, from the query here.
    assert!(line.contains(&format!(r#""token":"{k}""#)), "{line}");
    assert!(line.contains(r#""operation":"search","outcome":"allowed","user""#), "{line}");
}

#[test]
fn odd_bytes_in_targets_and_header_values_are_escaped_or_replaced() {
    let policy = policy(SPEC);
    let op = policy.operations.iter().position(|o| o.id == "listPets");
    let judged = Judged { operation: op, outcome: &Outcome::Allowed, identity: None };
    let request_headers = headers(&[("x-tenant", b"a\"b\\c\td\xff"), ("x-count", b"1"), ("x-count", b"2")]);
    let line = line(&Keys::Plain, &policy, "/pets?q=\"x\\", &request_headers, Some(&judged));
    assert!(line.contains(r#""target":"/pets?q=\"x\\""#), "{line}");
    assert!(line.contains(r#""headers":{"x-tenant":"a\"b\\c\td\u{fffd}","x-count":["1","2"]}"#.replace("\\u{fffd}", "\u{fffd}").as_str()), "{line}");
    let v: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
    assert_eq!(v["headers"]["x-tenant"], "a\"b\\c\td\u{fffd}");
    let mut out = String::new();
    json_str(&mut out, "\u{1}\u{7f}\r\n");
    assert_eq!(out, r#""\u0001\u007f\r\n""#);
}

#[test]
fn a_malformed_request_has_no_judgement_and_no_identity() {
    let policy = policy(SPEC);
    let line = line(&Keys::Plain, &policy, "/a%2Fb", &HeaderMap::new(), None);
    assert_eq!(
        line,
        r#"{"time":"2026-11-30T21:30:00.123456789Z","method":"GET","target":"/a%2Fb","client":"10.0.0.1","status":200,"duration_ms":1.500,"outcome":"malformed"}"#
    );
}

#[test]
fn without_bounds_that_read_identity_or_headers_a_line_has_none() {
    let policy = policy(
        "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    get:\n      operationId: x\n      x-rate-limit: {per: address, limit: 1, window: PT1M}\n",
    );
    let judged = Judged { operation: Some(0), outcome: &Outcome::Allowed, identity: None };
    let line = line(&Keys::Plain, &policy, "/x", &headers(&[("x-user", b"ann")]), Some(&judged));
    assert!(line.ends_with(r#""operation":"x","outcome":"allowed"}"#), "{line}");
}

#[test]
fn secrets_are_at_least_16_bytes_and_a_newline_is_not_one() {
    assert_eq!(secret_from(b"0123456789abcde\n"), Err(ShortSecret(15)));
    assert!(ShortSecret(15).to_string().contains("15 bytes"));
    assert_eq!(secret_from(b"0123456789abcdef\n"), secret_from(b"0123456789abcdef"));
    assert_ne!(secret_from(b"0123456789abcdef"), secret_from(b"0123456789abcdeg"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn lines_are_written_in_order_reopened_when_asked_and_flushed_at_the_stop() {
    let dir = std::env::temp_dir().join(format!("opbound-request-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("requests.log");
    let log = RequestLog::with_file(path.clone(), open(&path).unwrap(), Keys::Plain);
    let policy = policy(SPEC);
    let none = HeaderMap::new();
    let entry = |target: &str| {
        let request =
            Request { time: 0, method: "GET", target, client: "::1".parse().unwrap(), headers: (&none).into() };
        log.entry(Instant::now(), &policy, &request, None, &Identity::default)
    };
    drop(entry("/1"));
    let mut second = entry("/2");
    second.status(404);
    drop(second);
    // Once the writer has reopened, the rotated file is complete.
    let rotated = dir.join("requests.log.1");
    let deadline = Instant::now() + Duration::from_secs(5);
    std::fs::rename(&path, &rotated).unwrap();
    log.reopen();
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(entry("/3"));
    log.finish().await;
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let old = read(&rotated);
    let lines: Vec<&str> = old.lines().collect();
    assert_eq!(lines.len(), 2, "{old}");
    assert!(lines[0].starts_with(
        r#"{"time":"1970-01-01T00:00:00.000000000Z","method":"GET","target":"/1","client":"::1","duration_ms":"#
    ));
    assert!(lines[1].contains(r#""target":"/2","client":"::1","status":404,"duration_ms":"#), "{}", lines[1]);
    assert!(read(&path).contains(r#""target":"/3""#));
    std::fs::remove_dir_all(&dir).unwrap();
}
