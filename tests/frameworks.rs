//! Real Flask and Express apps behind `opbound serve`: every spelling of a request that the
//! framework routes to an operation is charged to that operation or refused with a 400, so no
//! route runs more often than its bound allows. `.ci/test` installs both frameworks.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::apps::{App, Framework};
use common::{Opbound, TempSpec, raw};
use serde_json::Value;

/// Every bound in the spec: 3 an hour, so nothing refills while a row runs.
const LIMIT: usize = 3;

/// How often each row sends its request.
const SENDS: usize = 6;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: framework tests, version: '1'}
components:
  securitySchemes:
    basic: {type: http, scheme: basic}
    bearer: {type: http, scheme: bearer}
paths:
  /api/limited:
    get:
      operationId: limited
      x-rate-limit: {per: address, limit: 3, window: PT1H}
  /api/items/{id}:
    get:
      operationId: items
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      x-rate-limit: {per: address, limit: 3, window: PT1H}
  /api/items/{id}/parts/{part}:
    get:
      operationId: parts
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: part, in: path, required: true, schema: {type: string}}
      x-rate-limit: {per: address, limit: 3, window: PT1H}
  /api/session:
    get:
      operationId: session
      x-rate-limit: {per: 'cookie:sid', limit: 3, window: PT1H}
  /api/search:
    get:
      operationId: search
      x-rate-limit: {per: 'query:key', limit: 3, window: PT1H}
  /api/keyed:
    get:
      operationId: keyed
      x-rate-limit: {per: 'header:X-Api-Key', limit: 3, window: PT1H}
  /api/token:
    get:
      operationId: token
      security: [{basic: []}, {bearer: []}]
      x-rate-limit: {per: token, limit: 3, window: PT1H}
  /api/login:
    post:
      operationId: login
      requestBody: {content: {application/json: {schema: {type: object}}}}
      x-rate-limit: {per: 'json:/username', limit: 3, window: PT1H}
"#;

/// The routes whose bound is per client address; the others are per the key the app records.
const PER_ADDRESS: &[&str] = &["limited", "items", "parts"];

/// A sign-in's JSON body, after the blank line that ends a spelling's headers.
macro_rules! login {
    ($($header:literal,)* body: $body:literal) => {
        concat!("POST /api/login", $("\n", $header,)* "\n\n", $body)
    };
}

/// One row: a name, for reports; for baselines, the route that must run exactly `LIMIT` times
/// (which proves the table can fail); and the requests sent in turn, the i-th send using the
/// (i mod len)-th. A request is its method and target, then its header lines, `\n` apart;
/// `{n}` becomes the send's number, for values that differ on every request. Each row has its
/// own key values, so no row starts on a budget another spent.
type Row = (&'static str, Option<&'static str>, &'static [&'static str]);

const ROWS: &[Row] = &[
    // The path and the method.
    ("GET /api/limited", Some("limited"), &["GET /api/limited"]),
    ("GET /api%2Flimited", None, &["GET /api%2Flimited"]),
    ("GET /api%2flimited", None, &["GET /api%2flimited"]),
    ("GET /api/items/1%2Fparts%2F2", None, &["GET /api/items/1%2Fparts%2F2"]),
    ("get /api/limited", None, &["get /api/limited"]),
    ("Get /api/limited", None, &["Get /api/limited"]),
    ("GET /api/limited;x=y", None, &["GET /api/limited;x=y"]),
    ("GET /api;x=y/limited", None, &["GET /api;x=y/limited"]),
    ("GET /API/LIMITED", None, &["GET /API/LIMITED"]),
    ("GET /Api/Limited", None, &["GET /Api/Limited"]),
    ("GET /api\\limited", None, &["GET /api\\limited"]),
    ("GET /api%5Climited", None, &["GET /api%5Climited"]),
    ("GET /api/limited.", None, &["GET /api/limited."]),
    ("GET /api/limited%20", None, &["GET /api/limited%20"]),
    ("GET /api/limited%09", None, &["GET /api/limited%09"]),
    ("GET /api/limited.json", None, &["GET /api/limited.json"]),
    ("GET //api//limited", None, &["GET //api//limited"]),
    ("GET /api/./limited", None, &["GET /api/./limited"]),
    ("GET /api/x/../limited", None, &["GET /api/x/../limited"]),
    ("GET /%61pi/limited", None, &["GET /%61pi/limited"]),
    ("GET /api/limited/", None, &["GET /api/limited/"]),
    ("GET /api/limited#frag", None, &["GET /api/limited#frag"]),
    ("GET /api/items/1", Some("items"), &["GET /api/items/1"]),
    ("GET /api/items/%31", None, &["GET /api/items/%31"]),
    ("GET /api/items/1/parts/2", Some("parts"), &["GET /api/items/1/parts/2"]),
    // Cookies: one session written a different way on every request.
    ("Cookie: sid=plain", Some("session"), &["GET /api/session\nCookie: sid=plain"]),
    (
        "Cookie: sid=abc, six spellings",
        None,
        &[
            "GET /api/session\nCookie: sid=abc",
            "GET /api/session\nCookie: sid = abc",
            "GET /api/session\nCookie: sid=\"abc\"",
            "GET /api/session\nCookie:  sid=abc;",
            "GET /api/session\nCookie: sid=abc; sid=zzz",
            "GET /api/session\nCookie: sid=%61bc",
        ],
    ),
    // Query parameters: a malformed escape, and a key sent twice with junk that changes.
    ("?key=q0", Some("search"), &["GET /api/search?key=q0"]),
    ("?key=%ZZ&key=q1", None, &["GET /api/search?key=%ZZ&key=q1"]),
    ("?key=q2&key=junk{n}", None, &["GET /api/search?key=q2&key=junk{n}"]),
    ("?key=junk{n}&key=q3", None, &["GET /api/search?key=junk{n}&key=q3"]),
    (
        "?key=q4, four spellings",
        None,
        &[
            "GET /api/search?key=q4",
            "GET /api/search?key=%ZZ&key=q4",
            "GET /api/search?key=q4&key=junk{n}",
            "GET /api/search?key=junk{n}&key=q4",
        ],
    ),
    // Headers: the key header twice, with junk that changes.
    ("X-Api-Key: h0", Some("keyed"), &["GET /api/keyed\nX-Api-Key: h0"]),
    ("X-Api-Key: h1, X-Api-Key: junk{n}", None, &["GET /api/keyed\nX-Api-Key: h1\nX-Api-Key: junk{n}"]),
    ("X-Api-Key: junk{n}, X-Api-Key: h2", None, &["GET /api/keyed\nX-Api-Key: junk{n}\nX-Api-Key: h2"]),
    // Credentials: one key as a bearer token and as a Basic username.
    ("Authorization: Bearer tok0", Some("token"), &["GET /api/token\nAuthorization: Bearer tok0"]),
    (
        "Authorization: Bearer tok1, Basic base64(tok1:)",
        None,
        // dG9rMTo= is base64 of `tok1:`.
        &["GET /api/token\nAuthorization: Bearer tok1", "GET /api/token\nAuthorization: Basic dG9rMTo="],
    ),
    (
        "Authorization: Bearer tok2, bearer tok2",
        None,
        &["GET /api/token\nAuthorization: Bearer tok2", "GET /api/token\nAuthorization: bearer tok2"],
    ),
    // A JSON body: the username the app signs in is the one counted, however the body is
    // written. Both apps read the body as JSON whatever its Content-Type says, as many do.
    ("login b0", Some("login"), &[login!("Content-Type: application/json", body: r#"{"username":"b0"}"#)]),
    (
        "login: username twice, junk first",
        None,
        &[login!("Content-Type: application/json", body: r#"{"username":"junk{n}","username":"b1"}"#)],
    ),
    (
        "login: username twice, junk last",
        None,
        &[login!("Content-Type: application/json", body: r#"{"username":"b2","username":"junk{n}"}"#)],
    ),
    (
        "login b3, five spellings",
        None,
        &[
            login!("Content-Type: application/json", body: r#"{"username":"b3"}"#),
            login!("Content-Type: application/json; charset=utf-8", body: r#"{ "username" : "\u0062\u0033" }"#),
            login!("Content-Type: text/plain", body: r#"{"username":"b3"}"#),
            login!(body: r#"{"username":"b3"}"#),
            login!("Content-Type: application/json", body: r#"{"username":"b3","password":"x{n}"}"#),
        ],
    ),
    (
        "login b4: a byte order mark, UTF-16",
        None,
        &[
            login!("Content-Type: application/json", body: "\u{feff}{\"username\":\"b4\"}"),
            login!("Content-Type: application/json", body: "{utf-16le}{\"username\":\"b4\"}"),
            login!("Content-Type: application/json", body: "{utf-16be}{\"username\":\"b4\"}"),
        ],
    ),
    // Both apps read a lone surrogate escape into their string; opbound reads it as U+FFFD, so
    // the key is there (the request was uncounted when opbound refused to parse the body).
    (
        "login b6: a lone surrogate",
        None,
        &[
            login!("Content-Type: application/json", body: r#"{"username":"b6\ud800"}"#),
            login!("Content-Type: application/json", body: r#"{"username":"b6\ud800","password":"x{n}"}"#),
        ],
    ),
    // Express inflates a gzipped body; opbound does not, so it refuses one rather than let it
    // go uncounted.
    (
        "login b5, gzipped",
        None,
        &[
            login!("Content-Type: application/json", body: r#"{"username":"b5"}"#),
            login!("Content-Type: application/json", "Content-Encoding: gzip", body: "{gzip b5}"),
        ],
    ),
];

const FLASK: Framework = Framework {
    name: "flask",
    program: "python3",
    dir: "tests/frameworks",
    args: &["flask_app.py"],
    check: &["-c", "import flask"],
    missing: "flask is not installed for python3; the README's test command (.ci/test) installs it with pip",
};

const EXPRESS: Framework = Framework {
    name: "express",
    program: "node",
    dir: "tests/frameworks/express",
    args: &["app.js"],
    check: &["-e", "require('express'); require('cookie-parser'); require('basic-auth')"],
    missing: "express is not installed in tests/frameworks/express; the README's test command (.ci/test) runs \
              `npm ci` there (and installs node with apt-get)",
};

/// What the framework tests ask of an app.
trait Recording {
    fn call(&self, method: &str, path: &str) -> String;
    fn take_runs(&self) -> Vec<Run>;
}

impl Recording for App {
    /// Sends a request straight to the app, not through opbound.
    fn call(&self, method: &str, path: &str) -> String {
        let request = format!("{method} {path} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n");
        let response = raw("127.0.0.1", self.addr, request.as_bytes(), Duration::from_secs(10));
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        assert!(head.starts_with("HTTP/1.1 2"), "{method} {path} on the app: {response}\n{}", self.log());
        body.to_string()
    }

    /// The routes that ran since the last call, then forgets them.
    fn take_runs(&self) -> Vec<Run> {
        // The apps keep a lone surrogate in a key they ran (the row "a lone surrogate"), which
        // serde_json refuses: read as opbound reads it.
        let body = self.call("GET", "/_ran").replace("\\ud800", "\\ufffd");
        let runs: Vec<Value> =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("/_ran is not JSON ({e}): {body}"));
        self.call("DELETE", "/_ran");
        runs.iter().map(Run::from).collect()
    }
}

/// A route that ran, as the app recorded it.
#[derive(Debug)]
struct Run {
    route: String,
    /// The key the framework read (cookie, query parameter, header, credential), if any.
    key: Option<String>,
    /// The client address, the last X-Forwarded-For entry.
    address: Option<String>,
}

impl From<&Value> for Run {
    fn from(v: &Value) -> Run {
        let text = |field: &str| v[field].as_str().map(str::to_string);
        Run { route: text("route").unwrap_or_default(), key: text("key"), address: text("address") }
    }
}

impl Run {
    /// The budget this run spent: the client address for per-address routes, otherwise the key
    /// the framework read. A run without a key spends none (`missing: pass` skips the bound).
    fn budget(&self) -> Option<(&str, &str)> {
        let key = if PER_ADDRESS.contains(&self.route.as_str()) { &self.address } else { &self.key };
        key.as_deref().map(|k| (self.route.as_str(), k))
    }
}

/// The raw HTTP/1.1 request for a spelling: its request line and header lines, a Host, and
/// `Connection: close` so the answer ends with the connection.
fn request(spelling: &str) -> Vec<u8> {
    let (head, body) = match spelling.split_once("\n\n") {
        Some((head, body)) => (head, Some(body_bytes(body))),
        None => (spelling, None),
    };
    let mut lines = head.split('\n');
    let mut out = format!("{} HTTP/1.1\r\nHost: api.test\r\n", lines.next().unwrap());
    for header in lines {
        out.push_str(header);
        out.push_str("\r\n");
    }
    if let Some(body) = &body {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut out = out.into_bytes();
    out.extend(body.unwrap_or_default());
    out
}

/// `{"username":"b5"}`, gzipped (Python's `gzip.compress(..., mtime=0)`).
const GZIPPED_B5: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xab, 0x56, 0x2a, 0x2d, 0x4e, 0x2d, 0xca, 0x4b, 0xcc,
    0x4d, 0x55, 0xb2, 0x52, 0x4a, 0x32, 0x55, 0xaa, 0x05, 0x00, 0x41, 0xc8, 0xdd, 0x85, 0x11, 0x00, 0x00, 0x00,
];

/// A spelling's body: UTF-8, UTF-16 when it starts with `{utf-16le}` or `{utf-16be}`, or
/// [`GZIPPED_B5`] for `{gzip b5}`.
fn body_bytes(body: &str) -> Vec<u8> {
    if body == "{gzip b5}" {
        return GZIPPED_B5.to_vec();
    }
    let utf16 = |text: &str, big: bool| -> Vec<u8> {
        text.encode_utf16().flat_map(|u| if big { u.to_be_bytes() } else { u.to_le_bytes() }).collect()
    };
    match (body.strip_prefix("{utf-16le}"), body.strip_prefix("{utf-16be}")) {
        (Some(text), _) => utf16(text, false),
        (_, Some(text)) => utf16(text, true),
        _ => body.as_bytes().to_vec(),
    }
}

/// The status code of a raw response, or `None` when it does not start with a status line.
fn status(response: &str) -> Option<u16> {
    let line = response.split("\r\n").next()?;
    let rest = line.strip_prefix("HTTP/1.1 ").or_else(|| line.strip_prefix("HTTP/1.0 "))?;
    rest.get(..3)?.parse().ok()
}

/// One send of a row: the spelling sent, what opbound answered, and what the app ran for it.
struct Sent {
    spelling: String,
    response: String,
    runs: Vec<Run>,
}

impl Sent {
    /// opbound's status and what ran, short: `200 limited`, `200 session for "abc"`, `429`.
    /// A run is said to come from an address only when it is not the row's own `from`.
    fn outcome(&self, from: &str) -> String {
        let mut out = status(&self.response).map_or_else(|| "no status line".to_string(), |s| s.to_string());
        for run in &self.runs {
            out.push(' ');
            out.push_str(&run.route);
            if let Some(key) = run.key.as_deref().filter(|_| !PER_ADDRESS.contains(&run.route.as_str())) {
                out.push_str(&format!(" for {key:?}"));
            }
            if run.address.as_deref() != Some(from) {
                out.push_str(&format!(" from {:?}", run.address));
            }
        }
        out
    }
}

/// What is wrong with one row's sends: a route that ran past its bound, a baseline that did not
/// run exactly `LIMIT` times, an answer from opbound that is not a status line below 500.
fn check_row(exact: Option<&str>, sent: &[Sent]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (n, s) in sent.iter().enumerate() {
        match status(&s.response) {
            Some(code) if code < 500 => {}
            Some(code) => wrong.push(format!("send {n} got {code}: {:?}", s.response)),
            None => wrong.push(format!("send {n} got no status line: {:?}", s.response)),
        }
    }
    let mut spent: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for run in sent.iter().flat_map(|s| &s.runs) {
        if let Some(budget) = run.budget() {
            *spent.entry(budget).or_default() += 1;
        }
    }
    for ((route, key), count) in spent {
        if count > LIMIT {
            wrong.push(format!("{route} ran {count} times for {key:?}, its bound allows {LIMIT}"));
        }
    }
    if let Some(route) = exact {
        let count = sent.iter().flat_map(|s| &s.runs).filter(|r| r.route == route).count();
        if count != LIMIT {
            wrong.push(format!("the baseline ran {route} {count} times, not exactly {LIMIT}"));
        }
    }
    wrong
}

/// Runs every row against `framework` behind one opbound (given `--escaped-slashes escaped`) and
/// reports every row that failed, with what each of its sends got and ran. `table` picks the
/// rows' source addresses.
fn run_table(framework: &Framework, table: u8, escaped: &str) {
    let app = App::start(framework);
    let spec = TempSpec::new(&format!("frameworks-{}-{escaped}", framework.name), SPEC);
    let ob = Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &app.url(), "--escaped-slashes", escaped]);
    app.take_runs();
    let mut failures = Vec::new();
    for (i, (name, exact, spellings)) in ROWS.iter().enumerate() {
        // Each row from its own address, so per-address bounds start with a fresh budget.
        let from = format!("127.0.{table}.{}", i + 1);
        let sent: Vec<Sent> = (0..SENDS)
            .map(|n| {
                let spelling = spellings[n % spellings.len()].replace("{n}", &n.to_string());
                let response = raw(&from, ob.addr, &request(&spelling), Duration::from_secs(10));
                // Read after every send, so each run is told with the request that made it.
                Sent { spelling, response, runs: app.take_runs() }
            })
            .collect();
        let wrong = check_row(*exact, &sent);
        // Every row is printed (seen with --nocapture, or on failure): what each framework ran
        // for each spelling. A failing row lists its sends one a line, in the panic too.
        if wrong.is_empty() {
            let outcomes: Vec<String> = sent.iter().map(|s| s.outcome(&from)).collect();
            println!("{}: {name} (from {from}): ok [{}]", framework.name, outcomes.join(", "));
            continue;
        }
        let mut report = format!("{}: {name} (from {from}): {}", framework.name, wrong.join("; "));
        for (n, s) in sent.iter().enumerate() {
            report.push_str(&format!("\n  send {n}: {} -> {}", s.spelling.replace('\n', " | "), s.outcome(&from)));
        }
        println!("{report}");
        failures.push(report);
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows let {} run a route past its bound, or got no proper answer:\n{}\n\n{} log:\n{}",
        failures.len(),
        ROWS.len(),
        framework.name,
        failures.join("\n"),
        framework.name,
        app.log()
    );
}

#[test]
fn flask_runs_no_route_past_its_bound() {
    run_table(&FLASK, 21, "reject");
}

#[test]
fn express_runs_no_route_past_its_bound() {
    run_table(&EXPRESS, 22, "reject");
}

/// `unescape` forwards `%2F` as the `/` it was matched as, so either framework runs what was
/// charged, whether it decodes `%2F` itself (Werkzeug) or not (Express).
#[test]
fn flask_behind_unescape_runs_no_route_past_its_bound() {
    run_table(&FLASK, 23, "unescape");
}

#[test]
fn express_behind_unescape_runs_no_route_past_its_bound() {
    run_table(&EXPRESS, 24, "unescape");
}
