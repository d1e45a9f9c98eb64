//! `serve --request-log`: the real binary's own log of the requests it judged, one line each, in
//! order, with the facts the bounds read, hashed or plain; flushed at a graceful stop and
//! reopened on SIGHUP.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Opbound, Upstream, get, get_with};
use serde_json::Value;

const SPEC: &str = "fixtures/request_log/spec.yaml";

/// A directory of the test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("opbound-request-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve` in front of `upstream`, logging to `log`, believing the test's identity headers.
fn serve(upstream: &Upstream, log: &Path, extra: &[&str]) -> Opbound {
    let mut args = vec!["serve", "--spec", SPEC, "--upstream"];
    let url = upstream.url();
    args.push(&url);
    let log = log.to_str().unwrap();
    args.extend_from_slice(&["--request-log", log, "--trusted-proxy", "127.0.0.1"]);
    args.extend_from_slice(&["--identity-header", "user=X-User-Id"]);
    args.extend_from_slice(extra);
    Opbound::start(&args)
}

/// Stops opbound with SIGTERM and waits for it to exit: its log is whole then.
fn stop(ob: &mut Opbound) {
    ob.terminate();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = ob.child.try_wait().unwrap() {
            assert!(status.success(), "opbound stopped with {status}: {:?}", ob.stderr.lock().unwrap());
            return;
        }
        assert!(Instant::now() < deadline, "opbound did not stop: {:?}", ob.stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every line of a request log, parsed, with its text.
fn lines(path: &Path) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| (l.to_string(), serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))))
        .collect()
}

/// The keys of a line, in order.
fn keys(line: &str) -> Vec<String> {
    let map: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
    map.keys().cloned().collect()
}

fn is_hash(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| s.strip_prefix("h:"))
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// RFC 3339 in UTC with all nine fractional digits: `2026-11-30T21:30:00.123456789Z`.
fn is_nano_time(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let shape = "dddd-dd-ddTdd:dd:dd.dddddddddZ";
    s.len() == shape.len()
        && s.bytes().zip(shape.bytes()).all(|(c, p)| if p == b'd' { c.is_ascii_digit() } else { c == p })
}

/// A request sent: its path, its headers, and the status it must get.
type Sent = (&'static str, &'static [(&'static str, &'static str)], u16);

/// The traffic both hashed runs send.
const TRAFFIC: &[Sent] = &[
    ("/pets?limit=3", &[("X-Tenant", "acme")], 200),
    ("/pets", &[("X-Tenant", "acme")], 200),
    ("/pets", &[("X-Tenant", "acme")], 429),
    ("/pets", &[("X-Tenant", "umbrella")], 200),
    ("/mine", &[("X-User-Id", "ann")], 200),
    ("/mine", &[("X-User-Id", "ann")], 429),
    ("/open", &[("X-User-Id", "bob")], 200),
    ("/a%2Fb", &[], 400),
];

/// Sends `TRAFFIC` through `ob`, checking each status.
async fn send_traffic(ob: &Opbound) {
    for (path, headers, status) in TRAFFIC {
        let got = get_with(&ob.url(path), headers).await;
        assert_eq!(got.status, *status, "{path} {headers:?}: {}", got.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_a_line_in_order_with_its_keys_hashed() {
    let up = Upstream::start().await;
    let dir = TempDir::new("hashed");
    let secret = dir.join("secret");
    std::fs::write(&secret, "a secret of at least sixteen bytes\n").unwrap();
    let (first, second) = (dir.join("first.log"), dir.join("second.log"));
    let secret_args = ["--request-log-secret-file", secret.to_str().unwrap()];

    let mut ob = serve(&up, &first, &secret_args);
    let started = std::time::SystemTime::now();
    send_traffic(&ob).await;
    stop(&mut ob);
    assert!(ob.logged("random secret").is_empty(), "the secret file was given");

    let lines = lines(&first);
    assert_eq!(lines.len(), TRAFFIC.len(), "one line per request: {lines:#?}");
    for ((text, line), (path, _, status)) in lines.iter().zip(TRAFFIC) {
        assert!(is_nano_time(&line["time"]), "{text}");
        assert_eq!(line["method"], "GET", "{text}");
        assert_eq!(line["target"], *path, "{text}");
        assert_eq!(line["client"], "127.0.0.1", "{text}");
        assert_eq!(line["status"], *status, "{text}");
        assert!(line["duration_ms"].as_f64().is_some_and(|d| (0.0..10_000.0).contains(&d)), "{text}");
    }
    // Times are the limiter's clock at each judgement: in order, and now.
    let times: Vec<&str> = lines.iter().map(|(_, l)| l["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let year = started.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 31_556_952 + 1970;
    assert!(times[0].starts_with(&year.to_string()) || times[0].starts_with(&(year + 1).to_string()), "{times:?}");

    let (text, allowed) = &lines[0];
    assert_eq!(
        keys(text),
        ["time", "method", "target", "client", "status", "duration_ms", "operation", "outcome", "headers"]
            .map(String::from),
        "no identity for a request that sent none: {text}"
    );
    assert_eq!((&allowed["operation"], &allowed["outcome"]), (&"listPets".into(), &"allowed".into()));
    let acme = &allowed["headers"]["x-tenant"];
    assert!(is_hash(acme), "{text}");
    assert_eq!(&lines[1].1["headers"]["x-tenant"], acme, "equal values hash alike");
    let (text, limited) = &lines[2];
    assert_eq!(
        keys(text),
        ["time", "method", "target", "client", "status", "duration_ms", "operation", "outcome", "bound", "headers"]
            .map(String::from),
        "{text}"
    );
    assert_eq!((&limited["outcome"], &limited["bound"]), (&"limited".into(), &"listPets:perTenant".into()));
    let umbrella = &lines[3].1["headers"]["x-tenant"];
    assert!(is_hash(umbrella) && umbrella != acme, "different values hash apart: {}", lines[3].0);

    let (text, mine) = &lines[4];
    assert_eq!((&mine["operation"], &mine["outcome"]), (&"mine".into(), &"allowed".into()), "{text}");
    assert!(is_hash(&mine["user"]) && mine.get("headers").is_none(), "{text}");
    let refused = &lines[5].1;
    assert_eq!((&refused["outcome"], &refused["bound"]), (&"limited".into(), &"mine:perUser".into()));
    assert_eq!(refused["user"], mine["user"]);
    // `/open` reads no identity, but the policy does: replay may run it under a spec that does.
    let (text, open) = &lines[6];
    assert!(is_hash(&open["user"]) && open["user"] != mine["user"], "{text}");
    assert_eq!(open["outcome"], "allowed");
    let (text, malformed) = &lines[7];
    assert_eq!(
        keys(text),
        ["time", "method", "target", "client", "status", "duration_ms", "outcome"].map(String::from),
        "{text}"
    );
    assert_eq!(malformed["outcome"], "malformed");

    // The same secret, another process: the same hashes.
    let mut ob = serve(&up, &second, &secret_args);
    send_traffic(&ob).await;
    stop(&mut ob);
    let again = self::lines(&second);
    assert_eq!(again[0].1["headers"]["x-tenant"], *acme);
    assert_eq!(again[4].1["user"], mine["user"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_keys_are_written_as_they_came_and_a_random_secret_is_said() {
    let up = Upstream::start().await;
    let dir = TempDir::new("plain");
    let (plain, hashed) = (dir.join("plain.log"), dir.join("hashed.log"));
    let mut ob = serve(&up, &plain, &["--request-log-keys", "plain", "--admin", "127.0.0.1:0"]);
    get_with(&ob.url("/pets"), &[("X-Tenant", "acme \"co\"")]).await;
    get_with(&ob.url("/open?x=1"), &[("X-User-Id", "bob")]).await;
    let metrics = get(format!("http://{}/metrics", ob.admin().expect("an admin listener"))).await;
    assert!(metrics.body.contains("\nopbound_request_log_dropped_total 0\n"), "{}", metrics.body);
    stop(&mut ob);
    assert!(ob.logged("random secret").is_empty(), "plain keys need no secret");
    let lines = lines(&plain);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(lines[0].1["headers"]["x-tenant"], "acme \"co\"", "{}", lines[0].0);
    assert_eq!(lines[1].1["user"], "bob", "{}", lines[1].0);
    assert_eq!(lines[1].1["target"], "/open?x=1");

    let mut ob = serve(&up, &hashed, &[]);
    get_with(&ob.url("/open"), &[("X-User-Id", "bob")]).await;
    stop(&mut ob);
    let said = ob.logged("random secret");
    assert_eq!(said.len(), 1, "{:?}", ob.stderr.lock().unwrap());
    assert!(said[0].contains("--request-log-secret-file"), "{}", said[0]);
    assert!(is_hash(&self::lines(&hashed)[0].1["user"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reopens_the_file_for_logrotate() {
    let up = Upstream::start().await;
    let dir = TempDir::new("sighup");
    let (path, rotated) = (dir.join("requests.log"), dir.join("requests.log.1"));
    let mut ob = serve(&up, &path, &[]);
    assert_eq!(get_with(&ob.url("/pets?n=1"), &[]).await.status, 200);
    std::fs::rename(&path, &rotated).unwrap();
    let _ = std::process::Command::new("kill").args(["-HUP", &ob.child.id().to_string()]).status();
    // The writer says when it has reopened; lines after that go to the new file.
    let reopened = ob.logged_at_least("request log reopened", 1);
    assert_eq!(reopened.len(), 1, "{:?}", ob.stderr.lock().unwrap());
    assert!(path.exists(), "the file is created again");
    assert_eq!(get_with(&ob.url("/pets?n=2"), &[]).await.status, 200);
    stop(&mut ob);
    let old = lines(&rotated);
    assert_eq!(old.iter().map(|(_, l)| l["target"].clone()).collect::<Vec<_>>(), ["/pets?n=1"]);
    let new = lines(&path);
    assert_eq!(new.iter().map(|(_, l)| l["target"].clone()).collect::<Vec<_>>(), ["/pets?n=2"]);
}

/// The outcome a replayed decision names, as the request log writes it, with its bound's id.
fn replayed_outcome(policy: &opbound::Policy, replayed: &opbound::replay::run::Replayed) -> (String, Option<String>) {
    use opbound::engine::Outcome;
    let Some(decision) = &replayed.decision else { return ("malformed".into(), None) };
    let (word, bound) = match &decision.outcome {
        Outcome::Allowed => ("allowed", None),
        Outcome::Limited { bound } => ("limited", Some(*bound)),
        Outcome::MissingKey { bound, .. } => ("missing-key", Some(*bound)),
        Outcome::UnclearKey { bound, .. } => ("unclear-key", Some(*bound)),
        Outcome::BadCost { bound, .. } => ("bad-cost", Some(*bound)),
        Outcome::CostTooHigh { bound, .. } => ("cost-too-high", Some(*bound)),
        Outcome::Unavailable { bound } => ("unavailable", Some(*bound)),
    };
    (word.to_string(), bound.map(|b| policy.bounds[b].id.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_the_log_reaches_the_decisions_serve_made_live() {
    use opbound::replay::logs::{Format, Logs, Options};
    use opbound::replay::run::{Replayer, Settings};

    const LIVE: &str = "fixtures/replay/live.yaml";
    let up = Upstream::start().await;
    let dir = TempDir::new("replayed");
    let log = dir.join("live.log");
    // One worker: a request's logged time and its judgement are not separated by another's.
    let url = up.url();
    let log_arg = log.to_str().unwrap();
    let mut ob = Opbound::start(&[
        "serve",
        "--spec",
        LIVE,
        "--upstream",
        &url,
        "--request-log",
        log_arg,
        "--trusted-proxy",
        "127.0.0.1",
        "--identity-header",
        "user=X-User-Id",
        "--identity-header",
        "roles=X-Roles",
        "--workers",
        "1",
    ]);
    // Three clients at once, each a deterministic mix of every bound's keys from six addresses.
    let mut clients = Vec::new();
    for client in 0..3u64 {
        let base = ob.url("");
        clients.push(tokio::spawn(async move {
            let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (client + 1);
            let mut statuses = Vec::new();
            for _ in 0..60 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let address = format!("192.0.2.{}", state % 6 + 1);
                let pick = |n: u64| (state >> 8) % n;
                let key = format!("k{}", (state >> 16) % 4);
                let token = format!("Bearer t{}", (state >> 20) % 3);
                let user = format!("u{}", (state >> 24) % 4);
                let (path, mut headers): (String, Vec<(&str, String)>) = match pick(6) {
                    0 => (format!("/search?key={key}&q=1"), vec![]),
                    1 => ("/reports".into(), vec![("Authorization", token)]),
                    2 => ("/tenants".into(), vec![("X-Tenant", key.clone())]),
                    // No tenant: refused with 400, missing-key.
                    3 => ("/tenants".into(), vec![]),
                    4 => {
                        let role = if (state >> 28).is_multiple_of(2) { "partner" } else { "trial" };
                        ("/mine".into(), vec![("X-User-Id", user), ("X-Roles", role.to_string())])
                    }
                    _ => ("/a%2Fb".into(), vec![]),
                };
                headers.push(("X-Forwarded-For", address));
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                statuses.push(get_with(&format!("{base}{path}"), &headers).await.status);
            }
            statuses
        }));
    }
    let mut statuses = Vec::new();
    for c in clients {
        statuses.extend(c.await.unwrap());
    }
    stop(&mut ob);
    for status in [200, 400, 429] {
        assert!(statuses.contains(&status), "the traffic must be admitted, malformed and limited: {statuses:?}");
    }

    // What serve decided, in the order it judged (the time each line carries).
    let mut live: Vec<Value> = lines(&log).into_iter().map(|(_, l)| l).collect();
    assert_eq!(live.len(), 180);
    live.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));
    let policy = opbound::load(Path::new(LIVE), &opbound::Options::default()).unwrap().policy;
    let mut replayer = Replayer::new(policy, Settings::default(), &[]);
    let options = Options { format: Format::Opbound, ..Options::default() };
    let records: Vec<_> = Logs::open(std::slice::from_ref(&log), options).unwrap().map(Result::unwrap).collect();
    assert_eq!(records.len(), live.len());
    let limiter = replayer.limiter();
    let mut kinds = std::collections::BTreeSet::new();
    for (record, line) in records.iter().zip(&live) {
        let replayed = replayer.replay(record).await;
        let (outcome, bound) = replayed_outcome(limiter.policy(), &replayed);
        assert_eq!(
            (outcome.as_str(), bound.as_deref()),
            (line["outcome"].as_str().unwrap(), line["bound"].as_str()),
            "line {}: {line}",
            record.source.line
        );
        kinds.insert((outcome, bound));
    }
    // Every bound refused something live, and replay agreed each time.
    for bound in ["route:perAddress", "search:perKey", "reports:perToken", "tenants:perTenant", "mine:trial"] {
        assert!(kinds.iter().any(|(_, b)| b.as_deref() == Some(bound)), "{bound} never refused: {kinds:?}");
    }
}
