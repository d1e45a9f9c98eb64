//! Running opbound for months: reloads that keep counts, an admin listener with metrics, the
//! policy as JSON, and a console that renders in a real browser.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{Opbound, TempSpec, Upstream, get, get_with};
use serde_json::Value;

fn spec(x_limit: u32, y_limit: u32) -> String {
    format!(
        r#"
openapi: 3.0.3
info: {{title: operating tests, version: '1'}}
x-rate-limit:
  - {{name: perimeter, per: address, limit: 100000, window: PT1M, applies-to: {{authenticated: true}}}}
paths:
  /x:
    get:
      operationId: getX
      x-rate-limit: {{per: address, limit: {x_limit}, window: PT1M}}
  /y:
    get:
      operationId: getY
      x-rate-limit: {{per: address, limit: {y_limit}, window: PT1M}}
  /open:
    get: {{operationId: openOne, x-rate-limit: {{per: 'header:X-Key', limit: 5, window: PT1M}}}}
"#
    )
}

struct Running {
    ob: Opbound,
    admin: std::net::SocketAddr,
    _up: Upstream,
    spec: TempSpec,
}

impl Running {
    async fn start(name: &str, text: &str, extra: &[&str]) -> Running {
        let up = Upstream::start().await;
        let spec = TempSpec::new(name, text);
        let mut args = vec!["serve", "--spec", spec.arg(), "--upstream"];
        let url = up.url();
        args.push(&url);
        // The perimeter bound applies to signed-in callers, so opbound must be told who they are.
        args.extend_from_slice(&["--admin", "127.0.0.1:0", "--identity-header", "user=X-User-Id"]);
        args.extend_from_slice(extra);
        let ob = Opbound::start(&args);
        let admin = ob.admin().expect("admin address");
        Running { ob, admin, _up: up, spec }
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    async fn metrics(&self) -> HashMap<String, f64> {
        let r = get(self.admin_url("/metrics")).await;
        assert_eq!(r.status, 200);
        assert!(r.header("content-type").unwrap().starts_with("application/openmetrics-text"));
        parse_prometheus(&r.body).unwrap_or_else(|e| panic!("/metrics is not valid Prometheus text: {e}\n{}", r.body))
    }

    /// Waits until the reload counters reach the given values.
    async fn reloads_reach(&self, ok: f64, failed: f64) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let m = self.metrics().await;
            let (o, f) = (m["opbound_reloads_total{result=\"ok\"}"], m["opbound_reload_failures_total"]);
            if o >= ok && f >= failed {
                assert_eq!((o, f), (ok, failed), "more reloads than expected");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "reloads stayed at ok={o} failed={f}, waiting for ok={ok} failed={failed}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Replaces the spec the way editors and ConfigMaps do: a new file renamed over the old.
    fn replace(&self, text: &str) {
        let tmp = self.spec.dir().join(".spec.yaml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.spec.path).unwrap();
    }

    /// The reloader's outcome lines so far (not the spec warnings it also logs), as JSON.
    fn outcomes(&self) -> Vec<Value> {
        const OUTCOMES: [&str; 4] = ["reloaded", "reload refused", "the spec is valid again", "spec unchanged"];
        self.logged_json("opbound::reload")
            .into_iter()
            .filter(|l| l["fields"]["message"].as_str().is_some_and(|m| OUTCOMES.iter().any(|o| m.starts_with(o))))
            .collect()
    }

    /// Waits until there are `n` outcome lines, and returns the last.
    fn outcome(&self, n: usize) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let lines = self.outcomes();
            if lines.len() >= n {
                assert_eq!(lines.len(), n, "one outcome line per change: {lines:#?}");
                return lines[n - 1].clone();
            }
            assert!(Instant::now() < deadline, "{} outcome lines, waiting for {n}: {lines:#?}", lines.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The JSON log lines of a target.
    fn logged_json(&self, target: &str) -> Vec<Value> {
        self.ob
            .logged(target)
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == target)
            .collect()
    }

    #[cfg(unix)]
    fn hangup(&self) {
        std::process::Command::new("kill").args(["-HUP", &self.ob.child.id().to_string()]).status().unwrap();
    }
}

/// A strict reading of the Prometheus/OpenMetrics text format: every line a comment of a known
/// kind or a sample `name{labels} value`, ending with `# EOF`. Returns samples by series.
fn parse_prometheus(text: &str) -> Result<HashMap<String, f64>, String> {
    let mut samples = HashMap::new();
    let mut typed: HashMap<String, String> = HashMap::new();
    let lines: Vec<&str> = text.lines().collect();
    if lines.last() != Some(&"# EOF") {
        return Err("does not end with # EOF".into());
    }
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            match kind {
                "TYPE" => {
                    let t = parts.next().unwrap_or("");
                    if !["counter", "gauge", "histogram", "info", "unknown"].contains(&t) {
                        return Err(format!("unknown type in {line:?}"));
                    }
                    typed.insert(name.to_string(), t.to_string());
                }
                "HELP" | "UNIT" => {}
                _ => return Err(format!("unknown comment {line:?}")),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').ok_or(format!("no value in {line:?}"))?;
        let value: f64 = value.parse().map_err(|_| format!("bad value in {line:?}"))?;
        let name = series.split('{').next().unwrap();
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') || name.is_empty() {
            return Err(format!("bad metric name in {line:?}"));
        }
        let labels = &series[name.len()..];
        let well_formed = labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}'));
        if !well_formed {
            return Err(format!("bad labels in {line:?}"));
        }
        let family = ["_total", "_bucket", "_sum", "_count", "_created"]
            .iter()
            .fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        if !typed.contains_key(family) && !typed.contains_key(name) {
            return Err(format!("sample {name} has no # TYPE"));
        }
        samples.insert(series.to_string(), value);
    }
    Ok(samples)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_what_changed_and_keeps_the_rest() {
    let r = Running::start("reload", &spec(1, 2), &[]).await;
    let status = |p: &'static str| {
        let url = r.ob.url(p);
        async move { get(url).await.status }
    };
    assert_eq!(status("/x").await, 200);
    assert_eq!(status("/x").await, 429);
    assert_eq!(status("/y").await, 200);
    assert_eq!(status("/y").await, 200);
    assert_eq!(status("/y").await, 429);

    // getX changes (1 → 3): its counter starts fresh. getY and the perimeter do not change.
    r.replace(&spec(3, 2));
    r.reloads_reach(1.0, 0.0).await;
    assert_eq!(status("/x").await, 200, "the changed bound starts fresh");
    assert_eq!(status("/x").await, 200);
    assert_eq!(status("/x").await, 200);
    assert_eq!(status("/x").await, 429, "and enforces its new limit");
    assert_eq!(status("/y").await, 429, "the unchanged bound kept its count");
    assert!(!r.ob.logged_at_least("reloaded", 1).is_empty());

    // A syntax error, then a spec that parses but fails validation: the old policy keeps serving.
    r.replace("openapi: 3.0.3\npaths: [unclosed\n");
    r.reloads_reach(1.0, 1.0).await;
    r.replace(&spec(0, 2));
    r.reloads_reach(1.0, 2.0).await;
    assert_eq!(status("/y").await, 429, "still the old policy, with its counts");
    let refused = r.ob.logged_at_least("reload refused", 2);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].contains("cannot parse YAML"), "{}", refused[0]);
    assert!(refused[1].contains("limit 0 must be at least 1"), "{}", refused[1]);
    let limits: Value = get(r.admin_url("/limits")).await.json();
    let x = limits["operations"].as_array().unwrap().iter().find(|o| o["operation"] == "getX").unwrap();
    assert_eq!(x["bounds"][0]["limit"], 3, "/limits shows the policy still serving");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_when_the_file_is_not_watched() {
    let r = Running::start("sighup", &spec(1, 2), &["--no-watch"]).await;
    assert_eq!(get(r.ob.url("/x")).await.status, 200);
    assert_eq!(get(r.ob.url("/x")).await.status, 429);
    std::fs::write(&r.spec.path, spec(5, 2)).unwrap();
    r.hangup();
    r.reloads_reach(1.0, 0.0).await;
    assert_eq!(get(r.ob.url("/x")).await.status, 200);
    assert_eq!(r.outcome(1)["fields"]["message"], "reloaded: bounds that did not change kept their counts");

    // Nothing changed: the signal still gets its answer, one line at INFO, and nothing else moves.
    r.hangup();
    let line = r.outcome(2);
    assert_eq!((line["level"].as_str(), line["fields"]["message"].as_str()), (Some("INFO"), Some("spec unchanged")));
    r.reloads_reach(1.0, 0.0).await;
    assert!(r.ob.logged("SIGHUP").is_empty(), "the outcome is the only line a signal writes");
}

/// Regression: every edit was reloaded twice (the watcher and the periodic stat), fixing a spec
/// logged nothing, and with a refused spec on disk any file written beside it set off another
/// attempt, so a log written there fed a loop of `reload refused` lines.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_is_tried_once_and_every_outcome_logged_once() {
    let r = Running::start("outcomes", &spec(1, 2), &[]).await;
    let gauges = |m: &HashMap<String, f64>| {
        (m["opbound_config_last_reload_successful"], m["opbound_config_last_reload_success_timestamp_seconds"])
    };
    let (ok, started) = gauges(&r.metrics().await);
    assert_eq!(ok, 1.0, "the spec loaded at start counts as a successful load");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(now - started < 600.0 && started <= now, "started at {started}, now {now}");

    // One edit: one line, one failure.
    r.replace("openapi: 3.0.3\npaths: [unclosed\n");
    let refused = r.outcome(1);
    assert_eq!(refused["level"], "ERROR");
    assert!(refused["fields"]["message"].as_str().unwrap().starts_with("reload refused"), "{refused}");
    r.reloads_reach(0.0, 1.0).await;
    assert_eq!(gauges(&r.metrics().await), (0.0, started), "the last reload failed; the last success is the start");
    // An operator asking again gets an answer, not another attempt. The reloader handles one
    // thing at a time, so once this line is there, anything queued before it is done.
    r.hangup();
    let again = r.outcome(2);
    assert_eq!(again["level"], "WARN");
    assert!(again["fields"]["message"].as_str().unwrap().starts_with("spec unchanged since its reload was refused"));
    r.reloads_reach(0.0, 1.0).await;

    // A log written beside the refused spec, line by line, as `opbound serve > opbound.log` does.
    let log = r.spec.dir().join("opbound.log");
    for i in 0..200 {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        writeln!(f, "{{\"line\": {i}}}").unwrap();
    }
    // Fixing the spec (back to the text serving) is one more change in the same directory, seen
    // after the log's: its line coming third means the 200 writes added no line and no failure.
    r.replace(&spec(1, 2));
    let fixed = r.outcome(3);
    assert_eq!(fixed["level"], "INFO");
    assert!(fixed["fields"]["message"].as_str().unwrap().starts_with("the spec is valid again"), "{fixed}");
    let (ok, last) = gauges(&r.metrics().await);
    assert_eq!(ok, 1.0, "the gauge flips back");
    assert!(last >= started, "the last success is this one, not the start: {last} < {started}");
    r.reloads_reach(0.0, 1.0).await;
    assert_eq!(r.ob.logged("reload refused").len(), 1, "tried once");

    // The same broken text again is a new change: tried and refused once more. Then a new valid
    // spec is reloaded, and says the spec is valid again.
    r.replace("openapi: 3.0.3\npaths: [unclosed\n");
    assert_eq!(r.outcome(4)["level"], "ERROR");
    r.reloads_reach(0.0, 2.0).await;
    assert_eq!(gauges(&r.metrics().await).0, 0.0);
    r.replace(&spec(3, 2));
    let reloaded = r.outcome(5);
    assert_eq!(
        reloaded["fields"]["message"],
        "reloaded: the spec is valid again; bounds that did not change kept their counts"
    );
    r.reloads_reach(1.0, 2.0).await;
    assert_eq!(gauges(&r.metrics().await).0, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_fails_across_ten_reloads_under_load() {
    let r = Running::start("load", &spec(100_000, 100_000), &[]).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let url = r.ob.url(if w % 2 == 0 { "/x" } else { "/y" });
            let stop = stop.clone();
            tokio::spawn(async move {
                let client = common::client();
                let (mut ok, mut failed) = (0u64, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let req = http::Request::get(&url).body(http_body_util::Full::new(bytes::Bytes::new())).unwrap();
                    match client.request(req).await {
                        Ok(resp) if resp.status() == 200 => {
                            use http_body_util::BodyExt;
                            let _ = resp.into_body().collect().await;
                            ok += 1;
                        }
                        Ok(resp) => failed.push(format!("status {}", resp.status())),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    for i in 1..=10u32 {
        // Alternate which bound changes, so both the kept and the fresh paths run under load.
        let text = if i % 2 == 0 { spec(100_000 + i, 100_000) } else { spec(100_000, 100_000 + i) };
        r.replace(&text);
        r.reloads_reach(f64::from(i), 0.0).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for w in workers {
        let (ok, failed) = w.await.unwrap();
        assert!(failed.is_empty(), "requests failed during reloads: {failed:?}");
        total += ok;
    }
    assert!(total > 100, "the load ran: {total} requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_traffic_and_limits_match_routes_json() {
    let r = Running::start("metrics", &spec(2, 10), &[]).await;
    let before = r.metrics().await;
    assert!(!before.keys().any(|k| k.starts_with("opbound_requests_total")), "no series before any request");
    for _ in 0..3 {
        get(r.ob.url("/x")).await;
    }
    get(r.ob.url("/nowhere")).await;
    let after = r.metrics().await;
    let m = |k: &str| after.get(k).copied().unwrap_or_else(|| panic!("no series {k}"));
    assert_eq!(m("opbound_requests_total{operation=\"getX\",outcome=\"allowed\"}"), 2.0);
    assert_eq!(m("opbound_requests_total{operation=\"getX\",outcome=\"limited\"}"), 1.0);
    assert_eq!(m("opbound_requests_total{operation=\"-\",outcome=\"allowed\"}"), 1.0);
    assert_eq!(m("opbound_decisions_total{operation=\"getX\",bound=\"getX:0\",outcome=\"refused\"}"), 1.0);
    assert_eq!(m("opbound_decisions_total{operation=\"getX\",bound=\"getX:0\",outcome=\"allowed\"}"), 2.0);
    // The perimeter is for signed-in callers only: these anonymous requests never met it, so it
    // has no series; neither has getY, which saw no request.
    let counted = |needle: &str| {
        let counts = ["opbound_requests_total", "opbound_decisions_total"];
        after.keys().any(|k| k.contains(needle) && counts.iter().any(|c| k.starts_with(c)))
    };
    assert!(!counted("route:perimeter") && !counted("getY"), "{after:?}");
    assert_eq!(m("opbound_decision_duration_seconds_count"), 4.0);
    assert_eq!(m("opbound_tracked_keys{bound=\"getX:0\"}"), 1.0);
    assert_eq!(m("opbound_max_keys{bound=\"getX:0\"}"), 10000.0);
    assert_eq!(m("opbound_overflow_hits_total{bound=\"getX:0\"}"), 0.0);
    assert_eq!(m("opbound_operations"), 3.0);

    let limits: Value = get(r.admin_url("/limits")).await.json();
    let routes = std::process::Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(["routes", "--json", r.spec.arg()])
        .output()
        .unwrap();
    let routes: Value = serde_json::from_slice(&routes.stdout).unwrap();
    let keys: Vec<&String> = routes.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["route_bounds", "operations"]);
    for key in keys {
        assert_eq!(limits[key], routes[key], "/limits shows what `opbound routes --json` prints");
    }
    assert_eq!(limits["route_bounds"][0]["id"], "route:perimeter");
    let x = limits["operations"].as_array().unwrap().iter().find(|o| o["operation"] == "getX").unwrap();
    let ids: Vec<&Value> = x["bounds"].as_array().unwrap().iter().map(|b| &b["id"]).collect();
    assert_eq!(ids, ["getX:0"], "an operation lists its own bounds; the route bounds are listed once");
    assert_eq!(limits["per_instance"], true);
    let warnings = limits["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w["message"].as_str().unwrap().contains("openOne")), "{warnings:?}");
}

/// Regression: a refusal was a log line, so one exhausted bound under load wrote 24 MB in 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refusals_logs_a_line_a_second_counting_the_rest() {
    // One worker: with two, a refusal racing the first is counted in the first line (by design:
    // `Throttle::occurred` counts before it claims the slot), and the first line is checked whole.
    let r = Running::start("refusals", &spec(1, 10), &["--workers", "1"]).await;
    assert_eq!(get(r.ob.url("/x")).await.status, 200);
    let total = 500;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = common::client();
    let started = Instant::now();
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let (sent, client, url) = (sent.clone(), client.clone(), r.ob.url("/x"));
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                    let req = http::Request::get(&url).body(http_body_util::Full::new(bytes::Bytes::new())).unwrap();
                    let resp = client.request(req).await.expect("the request completes");
                    statuses.push(resp.status().as_u16());
                    use http_body_util::BodyExt;
                    let _ = resp.into_body().collect().await;
                }
                statuses
            })
        })
        .collect();
    for s in senders {
        let statuses = s.await.unwrap();
        assert!(statuses.iter().all(|&s| s == 429), "{statuses:?}");
    }
    let seconds = started.elapsed().as_secs();

    // Every refusal is a line or counted in one. The last are reported a second after the last
    // line, when no refusal comes to do it: wait for the counts to add up.
    let deadline = Instant::now() + Duration::from_secs(15);
    let lines = loop {
        let lines = r.logged_json("opbound::refusal");
        let reported: u64 = lines
            .iter()
            .map(|l| u64::from(l["fields"]["message"] == "refused") + l["fields"]["suppressed"].as_u64().unwrap())
            .sum();
        assert!(reported <= total as u64, "more reported than refused: {lines:#?}");
        if reported == total as u64 {
            break lines;
        }
        assert!(Instant::now() < deadline, "{reported} of {total} refusals reported: {lines:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A line a second at most, the report of the rest included.
    assert!(lines.len() as u64 <= seconds + 2, "{} lines for {total} refusals in {seconds} s: {lines:#?}", lines.len());
    let first = &lines[0]["fields"];
    assert_eq!(
        (first["message"].as_str(), first["bound"].as_str(), first["status"].as_u64(), first["suppressed"].as_u64()),
        (Some("refused"), Some("getX:0"), Some(429), Some(0)),
        "the first refusal is logged whole"
    );
    assert!(lines.iter().all(|l| l["fields"]["bound"] == "getX:0"), "{lines:#?}");

    // A refusal on another bound is not held back by this one's flood.
    for _ in 0..10 {
        get(r.ob.url("/y")).await;
    }
    assert_eq!(get(r.ob.url("/y")).await.status, 429);
    let y = r.ob.logged_at_least("getY:0", 1);
    assert_eq!(y.len(), 1, "{y:?}");
}

/// The shared specs, where the sweep finds them; absent, the test says so rather than pass.
fn shared_spec(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("OPBOUND_SHARED_SPECS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs"));
    if dir.is_dir() {
        return Some(dir.join(name));
    }
    if std::env::var_os("OPBOUND_SKIP_SWEEP").is_some() {
        eprintln!("\n!!! SKIPPED: {} is absent and OPBOUND_SKIP_SWEEP is set\n", dir.display());
        return None;
    }
    panic!("{} is absent; set OPBOUND_SHARED_SPECS=DIR, or OPBOUND_SKIP_SWEEP=1 to skip knowingly", dir.display());
}

/// Regression: one scrape of the Stripe spec was thousands of series, nearly all zeros (every
/// operation × bound × outcome made up front), and `/limits` repeated the route bounds under
/// every one of its 452 operations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_spec_scrapes_what_happened_and_lists_route_bounds_once() {
    let Some(stripe) = shared_spec("real/stripe.json") else { return };
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(stripe).unwrap()).unwrap();
    doc["x-rate-limit"] =
        serde_json::json!([{"name": "perimeter", "per": "address", "limit": 100000, "window": "PT1M"}]);
    let r = Running::start("stripe", &doc.to_string(), &[]).await;
    let operations = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum::<usize>();
    assert!(operations > 400, "{operations}");

    let before = r.metrics().await;
    let counts = |m: &HashMap<String, f64>| {
        m.keys().filter(|k| k.starts_with("opbound_requests_total") || k.starts_with("opbound_decisions_total")).count()
    };
    assert_eq!(counts(&before), 0, "no request, no count");
    assert!(before.len() < 40, "{} series before any request: {:?}", before.len(), before.keys());

    let paths = ["/v1/charges", "/v1/customers", "/v1/balance", "/nowhere"];
    for path in paths {
        assert_eq!(get(r.ob.url(path)).await.status, 200);
    }
    let after = r.metrics().await;
    // Each operation reached (and the row of requests that matched none) has a request count and
    // the route bound's part in it: two series each.
    assert_eq!(counts(&after), 2 * paths.len(), "{:?}", after.keys());
    assert_eq!(after.len(), before.len() + 2 * paths.len());
    assert_eq!(
        after["opbound_decisions_total{operation=\"GetCharges\",bound=\"route:perimeter\",outcome=\"allowed\"}"],
        1.0
    );
    for path in paths {
        get(r.ob.url(path)).await;
    }
    assert_eq!(r.metrics().await.len(), after.len(), "the same traffic again adds no series");

    let body = get(r.admin_url("/limits")).await.body;
    let limits: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body.matches("\"route:perimeter\"").count(), 1, "the route bound is listed once");
    assert_eq!(limits["route_bounds"].as_array().unwrap().len(), 1);
    assert_eq!(limits["operations"].as_array().unwrap().len(), operations);
    // What it was: the route bound again under every operation.
    let mut repeated = limits.clone();
    for op in repeated["operations"].as_array_mut().unwrap() {
        let mut bounds = limits["route_bounds"].as_array().unwrap().clone();
        bounds.extend(op["bounds"].as_array().unwrap().iter().cloned());
        op["bounds"] = Value::Array(bounds);
    }
    let was = repeated.to_string().len();
    assert!(
        body.len() * 2 < was,
        "/limits is {} bytes; listing route bounds under each operation made it {was}",
        body.len()
    );
}

/// Chromium as Debian ships it, headless, with a fresh profile of its own (tests run in parallel)
/// and no background traffic.
fn chromium(args: &[&str]) -> std::process::Output {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chromium is not installed; the README's test command (.ci/test) installs it with apt-get");
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile = std::env::temp_dir().join(format!("opbound-chromium-{}-{run}", std::process::id()));
    let out = std::process::Command::new(binary)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(profile);
    out
}

/// The console as a browser `width` pixels wide leaves it once its script has fetched and drawn
/// the numbers: the DOM, with what the page measured on `<body data-...>`.
struct Console {
    dom: String,
}

impl Console {
    async fn load(url: String, width: u32) -> Console {
        let out = tokio::task::spawn_blocking(move || {
            chromium(&["--virtual-time-budget=5000", &format!("--window-size={width},900"), "--dump-dom", &url])
        })
        .await
        .unwrap();
        let dom = String::from_utf8_lossy(&out.stdout).into_owned();
        let console = Console { dom };
        assert!(
            console.attr("measured").is_some(),
            "the page drew nothing: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            console.dom
        );
        assert_eq!(console.attr("viewport").as_deref(), Some(width.to_string().as_str()), "the window's width");
        console
    }

    /// What the page wrote on `<body data-NAME>`.
    fn attr(&self, name: &str) -> Option<String> {
        let body = self.dom.split("<body").nth(1)?.split('>').next()?;
        let value = body.split(&format!(" data-{name}=\"")).nth(1)?.split('"').next()?;
        Some(unescape(value))
    }

    /// The page as drawn, without the script that drew it.
    fn page(&self) -> &str {
        self.dom.split("<script").next().unwrap()
    }

    /// The text of the page from the element with id `from` to the one with id `to`.
    fn text_between(&self, from: &str, to: &str) -> String {
        let page = self.page();
        let start = page.find(&format!("id=\"{from}\"")).unwrap_or_else(|| panic!("no #{from} on the page"));
        let end = page[start..].find(&format!("id=\"{to}\"")).map_or(page.len(), |e| start + e);
        text(&page[start..end])
    }

    /// Operation ids of the table's rows, top to bottom.
    fn rows(&self) -> Vec<String> {
        self.page().split("<tr data-operation=\"").skip(1).map(|r| r.split('"').next().unwrap().to_string()).collect()
    }

    /// The numbers in the row of an operation: allowed, limited, missing key, unavailable.
    fn counts(&self, operation: &str) -> Vec<String> {
        let row = self.page().split(&format!("<tr data-operation=\"{operation}\"")).nth(1).unwrap();
        let row = row.split("</tr>").next().unwrap();
        row.split("<td class=\"num").skip(1).map(|c| text(c.split_once('>').unwrap().1)).collect()
    }

    /// No element is wider than the window, and none has content wider than its box.
    fn assert_fits(&self, width: u32) {
        assert_eq!(
            self.attr("overflow").as_deref(),
            Some("no"),
            "the page is {} px wide in a {width} px window",
            self.attr("scroll-width").unwrap_or_default()
        );
        assert_eq!(
            self.attr("clipped").as_deref(),
            Some("0"),
            "content cut off at {width} px: {}",
            self.attr("clipped-what").unwrap_or_default()
        );
    }
}

/// The text of some HTML: tags dropped, entities read, runs of white space as one space.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = unescape(&out);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&nbsp;", " ").replace("&amp;", "&")
}

/// The per-instance notice, which the page must say exactly once.
const PER_INSTANCE: &str = "N instances admit up to N times each limit";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_renders_every_operation_its_bounds_counts_and_warnings() {
    let r = Running::start("console", &spec(2, 10), &[]).await;
    for _ in 0..3 {
        get(r.ob.url("/x")).await;
    }
    get(r.ob.url("/y")).await;
    let c = Console::load(r.admin_url("/"), 1280).await;
    c.assert_fits(1280);
    for op in ["getX", "getY", "openOne", "-"] {
        assert!(c.rows().contains(&op.to_string()), "{op} is not on the page: {:?}", c.rows());
    }
    for bound in ["getX:0", "getY:0", "openOne:0", "route:perimeter"] {
        assert!(c.page().contains(&format!("data-bound=\"{bound}\"")), "bound {bound} is not on the page");
    }
    // Refused first, then by traffic, then in path order; no traffic on the row of unmatched.
    assert_eq!(c.rows(), ["getX", "getY", "openOne", "-"]);
    assert_eq!(c.counts("getX"), ["2", "1", "0", "0"], "allowed, limited, missing key, unavailable");
    assert_eq!(c.counts("getY"), ["1", "0", "0", "0"]);
    let page = text(c.page());
    assert_eq!(page.matches(PER_INSTANCE).count(), 1, "the per-instance notice, once: {page}");
    assert!(page.contains("anonymous callers pass no bound on operation openOne"), "the warning is shown: {page}");
    assert!(page.contains("1 warning about the spec"), "the per-instance warning is not listed again: {page}");
    assert!(c.page().contains("class=\"open\""), "an open operation is marked");
    let totals = c.text_between("traffic", "warnings");
    assert!(totals.contains("3 allowed · 1 refused"), "{totals}");
    assert!(c.text_between("reload", "traffic").contains("the spec on disk is serving"));

    // The filter and the toggle, as a link or a reload of the page keeps them.
    let filtered = Console::load(r.admin_url("/#q=openOne:0"), 1280).await;
    assert_eq!(filtered.rows(), ["openOne"], "a bound id finds its operation");
    let filtered = Console::load(r.admin_url("/#q=get%20/y"), 1280).await;
    assert_eq!(filtered.rows(), ["getY"], "every word matches: method and path");
    let busy = Console::load(r.admin_url("/#traffic=1"), 1280).await;
    assert_eq!(busy.rows(), ["getX", "getY"], "only operations with traffic");
    assert_eq!(busy.attr("rows").as_deref(), Some("2"));
}

/// The issue this pins down: at 1,400 px the bound columns were cut off; 452 operations in path
/// order hid what was refused; a refused reload was not shown; the per-instance notice appeared
/// twice. The Stripe spec, a refused operation, a busy operation with three bounds and the
/// longest template, and a reload refused: at 1,280 and 1,920 px, nothing is wider than the
/// window and the figures an operator looks for are at the top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_is_refused_first_and_fits_1280_and_1920_pixels() {
    let Some(stripe) = shared_spec("real/stripe.json") else { return };
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(stripe).unwrap()).unwrap();
    doc["x-rate-limit"] =
        serde_json::json!([{"name": "perimeter", "per": "address", "limit": 100000, "window": "PT1M"}]);
    doc["paths"]["/v1/charges"]["get"]["x-rate-limit"] =
        serde_json::json!({"per": "address", "limit": 2, "window": "PT1M"});
    let long = "/v1/customers/{customer}/subscriptions/{subscription_exposed_id}/discount";
    let longest = doc["paths"].as_object().unwrap().keys().map(String::len).max();
    assert_eq!(longest, Some(long.len()), "the longest template");
    doc["paths"][long]["get"]["x-rate-limit"] = serde_json::json!([
        {"name": "burst", "per": "address", "limit": 50, "window": "PT1S"},
        {"name": "hourly", "per": "address", "algorithm": "token-bucket", "limit": 1000, "window": "PT1H", "burst": 200},
        {"name": "per-key", "per": "header:X-Api-Key", "limit": 100, "window": "PT1M"},
    ]);
    let r = Running::start("console-stripe", &doc.to_string(), &[]).await;

    let statuses = [get(r.ob.url("/v1/charges")).await.status, get(r.ob.url("/v1/charges")).await.status];
    assert_eq!(statuses, [200, 200]);
    assert_eq!(get(r.ob.url("/v1/charges")).await.status, 429);
    for _ in 0..4 {
        let got = get_with(&r.ob.url("/v1/customers/cus_1/subscriptions/sub_1/discount"), &[("x-api-key", "k")]).await;
        assert_eq!(got.status, 200);
    }
    assert_eq!(get(r.ob.url("/v1/customers")).await.status, 200);
    r.replace("openapi: 3.0.3\npaths: [unclosed\n");
    r.reloads_reach(0.0, 1.0).await;

    let long_id = "GetCustomersCustomerSubscriptionsSubscriptionExposedIdDiscount";
    for width in [1280, 1920] {
        let c = Console::load(r.admin_url("/"), width).await;
        c.assert_fits(width);
        let rows = c.rows();
        assert_eq!(rows.len(), 453, "every operation, and the row of requests that matched none");
        assert_eq!(
            rows[..4],
            ["GetCharges", long_id, "GetCustomers", "GetAccount"],
            "the refused operation first, then by traffic, then in path order"
        );
        assert_eq!(c.attr("first").as_deref(), Some("GetCharges"));
        assert_eq!(c.counts("GetCharges"), ["2", "1", "0", "0"]);
        for bound in ["GetCharges:0", &format!("{long_id}:burst"), &format!("{long_id}:per-key")] {
            assert!(c.page().contains(&format!("data-bound=\"{bound}\"")), "bound {bound} is not on the page");
        }

        let reload = c.text_between("reload", "traffic");
        assert!(reload.contains("refused: the previous spec keeps serving"), "{reload}");
        assert!(reload.contains("0 applied · 1 refused"), "{reload}");
        assert!(reload.contains("cannot parse YAML"), "the reason is shown: {reload}");
        let store = c.text_between("store", "reload");
        assert!(store.contains("in memory"), "{store}");
        let totals = c.text_between("traffic", "warnings");
        assert!(totals.contains("7 allowed · 1 refused"), "{totals}");
        assert!(totals.contains("1 operation refusing, 3 with traffic"), "{totals}");
        let page = text(c.page());
        assert_eq!(page.matches(PER_INSTANCE).count(), 1, "the per-instance notice, once");
        assert!(page.contains("452 operations · 5 bounds"), "{page:.300}");

        let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/console-{width}.png"));
        let _ = std::fs::remove_file(&shot);
        let (url, path) = (r.admin_url("/"), shot.clone());
        let out = tokio::task::spawn_blocking(move || {
            chromium(&[
                "--virtual-time-budget=5000",
                &format!("--window-size={width},900"),
                &format!("--screenshot={}", path.display()),
                &url,
            ])
        })
        .await
        .unwrap();
        assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
        if width == 1280 && std::env::var_os("OPBOUND_BLESS").is_some() {
            let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src");
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::copy(&shot, docs.join("console.png")).unwrap();
        }
    }
}

/// The store's status is on the page: Redis reachable, then unreachable once it stops answering,
/// and no per-instance notice, since counts are shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_says_whether_the_shared_store_answers() {
    let redis = common::Redis::start("console", &[]);
    let port = redis.port;
    let store = format!("redis://127.0.0.1:{port}");
    let r = Running::start("console-redis", &spec(2, 10), &["--store", &store]).await;
    let store_up = |up: bool| {
        let r = &r;
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while r.metrics().await.get("opbound_store_up") != Some(&f64::from(u8::from(up))) {
                assert!(Instant::now() < deadline, "the store never became {}", if up { "up" } else { "down" });
                // A request finds out the store is gone; the probe finds out it is back.
                get(r.ob.url("/y")).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    store_up(true).await;
    let node = format!("opbound_store_node_up{{node=\"127.0.0.1:{port}\"}}");
    assert_eq!(r.metrics().await.get(&node), Some(&1.0), "the node's gauge");
    let exposition = get(r.admin_url("/metrics")).await.body;
    assert_eq!(python_parse_errors(&exposition), None, "prometheus_client refuses /metrics:\n{exposition}");
    let c = Console::load(r.admin_url("/"), 1280).await;
    c.assert_fits(1280);
    let status = c.text_between("store", "reload");
    assert!(status.contains("Redis: reachable"), "{status}");
    assert!(status.contains(&format!("Counts in {store} are shared by every instance")), "{status}");
    assert_eq!(c.attr("store-up").as_deref(), Some("true"));
    assert_eq!(text(c.page()).matches("per instance").count(), 0, "counts are shared: {}", text(c.page()));

    drop(redis);
    store_up(false).await;
    assert_eq!(r.metrics().await.get(&node), Some(&0.0), "the node's gauge");
    let c = Console::load(r.admin_url("/"), 1280).await;
    let status = c.text_between("store", "reload");
    assert!(status.contains("Redis: unreachable"), "{status}");
    assert!(status.contains("bounds follow their on-store-error"), "{status}");
    assert_eq!(c.attr("store-up").as_deref(), Some("false"));
}

/// `/metrics` read by prometheus_client's OpenMetrics parser, which checks every histogram:
/// buckets cumulative and `+Inf` equal to `_count`. Returns its complaint, if any.
fn python_parse_errors(text: &str) -> Option<String> {
    let script = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
        list(parse(sys.stdin.read()))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// One instant query against Prometheus's HTTP API: the value of its one series, if any.
async fn prometheus_query(prometheus: u16, query: &str) -> Option<f64> {
    if !common::listening(([127, 0, 0, 1], prometheus).into()) {
        return None;
    }
    let url = format!("http://127.0.0.1:{prometheus}/api/v1/query?query={}", encode_query(query));
    let r = get(url).await;
    if r.status != 200 {
        return None;
    }
    let v: Value = r.json();
    let result = v["data"]["result"].as_array()?;
    result.first()?["value"][1].as_str()?.parse().ok()
}

fn encode_query(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Regression: the histograms were cumulated twice (opbound handed prometheus-client cumulative
/// buckets, and its encoder adds them up again), so after 20 decisions `+Inf` read 206 and every
/// `histogram_quantile` fell in the wrong bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_reads_the_histograms_as_written() {
    let prometheus = common::require("prometheus");
    let r = Running::start("prometheus", &spec(100_000, 2), &[]).await;
    const N: usize = 200;
    for _ in 0..N {
        assert_eq!(get(r.ob.url("/x")).await.status, 200);
    }

    let text = get(r.admin_url("/metrics")).await.body;
    assert_eq!(python_parse_errors(&text), None, "prometheus_client refuses /metrics:\n{text}");
    let m = r.metrics().await;
    let name = "opbound_decision_duration_seconds";
    assert_eq!(m[&format!("{name}_count")], N as f64);
    // The buckets as written: upper bound and cumulative count, ascending.
    let mut buckets: Vec<(f64, f64)> = m
        .iter()
        .filter_map(|(k, v)| {
            let le = k.strip_prefix(&format!("{name}_bucket{{le=\""))?.strip_suffix("\"}")?;
            Some((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, *v))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(buckets.last(), Some(&(f64::INFINITY, N as f64)), "+Inf is the count: {buckets:?}");
    // Where the 99th percentile of the N decisions lies, from the count rather than from +Inf.
    let rank = 0.99 * N as f64;
    let i = buckets.iter().position(|(_, c)| *c >= rank).unwrap();
    let (lower, upper) = (if i == 0 { 0.0 } else { buckets[i - 1].0 }, buckets[i].0);

    let dir = r.spec.dir().join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: opbound\n    static_configs: [{{targets: ['{}']}}]\n",
            r.admin
        ),
    )
    .unwrap();
    let port = common::free_port();
    let _prometheus = common::Killed(
        std::process::Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .expect("prometheus starts"),
    );

    // Wait for a scrape that saw every decision.
    let deadline = Instant::now() + Duration::from_secs(60);
    let count_query = format!("{name}_count");
    while prometheus_query(port, &count_query).await != Some(N as f64) {
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped {N} decisions: {}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let inf = prometheus_query(port, &format!("{name}_bucket{{le=\"+Inf\"}}")).await;
    assert_eq!(inf, Some(N as f64), "Prometheus's +Inf bucket is the count");
    let p99 = prometheus_query(port, &format!("histogram_quantile(0.99, {name}_bucket)")).await.unwrap();
    assert!(
        lower < p99 && p99 <= upper,
        "histogram_quantile(0.99) = {p99}, outside the bucket ({lower}, {upper}] that holds the 99th percentile \
         of the {N} decisions: {buckets:?}"
    );
}
