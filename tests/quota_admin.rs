//! `/quota` on the admin listener of the real binary: a caller's consumption and period, an
//! operator's change to it (refused without the admin token), the change kept across a restart,
//! and what `/metrics` says about quotas and the state writer.

mod common;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};

use common::{Got, Opbound, Redis, TempSpec, Upstream, get, get_with, send};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: quota admin, version: '1'}
paths:
  /convert:
    get:
      operationId: convert
      x-rate-limit:
        - {algorithm: quota, per: 'header:x-org', limit: 1000, period: P1M, timezone: Europe/Paris}
        - {per: address, limit: 1000, window: PT1M}
"#;

const BOUND: &str = "convert:0";

fn serve(spec: &TempSpec, up: &Upstream, token: Option<&str>) -> Opbound {
    let state = spec.dir().join("state");
    let token_file = spec.dir().join("admin-token");
    let mut args = vec![
        "serve".to_string(),
        "--spec".into(),
        spec.arg().into(),
        "--upstream".into(),
        up.url(),
        "--admin".into(),
        "127.0.0.1:0".into(),
        "--state-dir".into(),
        state.to_str().unwrap().into(),
        "--state-sync".into(),
        "100ms".into(),
    ];
    if let Some(token) = token {
        std::fs::write(&token_file, token).unwrap();
        args.extend(["--admin-token-file".into(), token_file.to_str().unwrap().into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Opbound::start(&args)
}

async fn quota(o: &Opbound, query: &str) -> Got {
    get(format!("http://{}/quota?{query}", o.admin().unwrap())).await
}

async fn adjust(o: &Opbound, body: Value, token: Option<&str>) -> Got {
    let mut req = Request::post(format!("http://{}/quota", o.admin().unwrap()));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    send(req.body(Full::new(Bytes::from(body.to_string()))).unwrap()).await
}

async fn convert(o: &Opbound, org: &str) -> Got {
    let got = get_with(&o.url("/convert"), &[("x-org", org)]).await;
    assert_eq!(got.status, 200, "{}", got.body);
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_is_looked_up_with_its_period() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-admin-get", SPEC);
    let o = serve(&spec, &up, None);
    let unseen = quota(&o, &format!("bound={BOUND}&key=acme")).await;
    assert_eq!(unseen.status, 200, "{}", unseen.body);
    let v = unseen.json();
    assert_eq!(
        (v["tracked"].clone(), v["consumed"].clone(), v["remaining"].clone()),
        (json!(false), json!(0), json!(1000))
    );
    for _ in 0..3 {
        convert(&o, "acme").await;
    }
    let v = quota(&o, &format!("bound={BOUND}&key=acme")).await.json();
    assert_eq!(v["tracked"], true);
    // Issue 47, item 12: `/counters` says `tracked`, and so does `/quota`; the old name stays a
    // release.
    assert_eq!(v["key_tracked"], v["tracked"], "{v}");
    assert_eq!(v["consumed"], 3);
    assert_eq!(v["limit"], 1000);
    assert_eq!(v["remaining"], 997);
    assert_eq!((v["period"].as_str(), v["reset"].as_str()), (Some("P1M"), Some("calendar")));
    assert_eq!(v["timezone"], "Europe/Paris");
    // A month in Paris starts at local midnight on the 1st, written with Paris's offset.
    let start = v["period_start"].as_str().unwrap();
    assert!(start.ends_with("-01T00:00:00+01:00") || start.ends_with("-01T00:00:00+02:00"), "{start}");
    let (s, e) = (v["period_start_unix"].as_u64().unwrap(), v["period_end_unix"].as_u64().unwrap());
    assert!(s < e && e - s >= 28 * 86_400, "{v}");
    // The console shows a quota by its period, and a rate bound by its window only.
    let console = get(format!("http://{}/console.json", o.admin().unwrap())).await.json();
    let bounds = &console["operations"][0]["bounds"];
    assert_eq!(bounds[0]["period"], "1000 per P1M (calendar, Europe/Paris)", "{bounds}");
    assert_eq!(bounds[1]["period"], Value::Null, "{bounds}");

    let unknown = quota(&o, "bound=convert:9&key=acme").await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.body.contains("convert:9"), "{}", unknown.body);
    let not_quota = quota(&o, "bound=convert:1&key=127.0.0.1").await;
    assert_eq!(not_quota.status, 400);
    assert!(not_quota.body.contains("not a quota"), "{}", not_quota.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_off_without_a_token_and_refused_with_a_wrong_one() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-admin-off", SPEC);
    let o = serve(&spec, &up, None);
    let off = adjust(&o, json!({"bound": BOUND, "key": "acme", "add": 5}), Some("anything")).await;
    assert_eq!(off.status, 403);
    assert!(off.body.contains("--admin-token-file"), "{}", off.body);
    drop(o);

    let spec = TempSpec::new("quota-admin-wrong", SPEC);
    let o = serve(&spec, &up, Some("s3cret"));
    assert_eq!(adjust(&o, json!({"bound": BOUND, "key": "acme", "add": 5}), Some("guess")).await.status, 401);
    assert_eq!(adjust(&o, json!({"bound": BOUND, "key": "acme", "add": 5}), None).await.status, 401);
    assert_eq!(quota(&o, &format!("bound={BOUND}&key=acme")).await.json()["consumed"], 0, "nothing changed");
    let both = adjust(&o, json!({"bound": BOUND, "key": "acme", "add": 5, "set": 1}), Some("s3cret")).await;
    assert_eq!(both.status, 400, "{}", both.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adjustment_counts_at_once_and_survives_a_restart() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-admin-adjust", SPEC);
    let o = serve(&spec, &up, Some("s3cret"));
    for _ in 0..2 {
        convert(&o, "acme").await;
    }
    let set = adjust(&o, json!({"bound": BOUND, "key": "acme", "set": 600}), Some("s3cret")).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!((set.json()["before"].clone(), set.json()["after"].clone()), (json!(2), json!(600)));
    // Support grants 500 more this month.
    let granted = adjust(&o, json!({"bound": BOUND, "key": "acme", "add": -500}), Some("s3cret")).await;
    assert_eq!(granted.json()["consumed"], 100, "{}", granted.body);
    assert_eq!(convert(&o, "acme").await.header("ratelimit-remaining"), Some("899"));
    // A caller never seen is created by an adjustment; below zero is zero.
    let fresh = adjust(&o, json!({"bound": BOUND, "key": "globex", "add": -7}), Some("s3cret")).await;
    assert_eq!((fresh.json()["tracked"].clone(), fresh.json()["after"].clone()), (json!(true), json!(0)));

    let log = o.stop_and_read_log();
    let adjusted: Vec<&String> = log.iter().filter(|l| l.contains("quota adjusted")).collect();
    assert_eq!(adjusted.len(), 3, "{log:?}");
    assert!(adjusted[0].contains("\"before\":2") && adjusted[0].contains("\"after\":600"), "{}", adjusted[0]);
    assert!(log.iter().all(|l| !l.contains("acme")), "the raw key is never logged");
    let mut o = o;
    assert_eq!(o.logged_at_least("durable state written", 1).len(), 1);
    let _ = o.child.wait();
    drop(o);

    let o = serve(&spec, &up, Some("s3cret"));
    let v = quota(&o, &format!("bound={BOUND}&key=acme")).await.json();
    assert_eq!(v["consumed"], 101, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_quotas_consumed_and_how_the_state_is_written() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-admin-metrics", SPEC);
    let o = serve(&spec, &up, None);
    for org in ["acme", "acme", "globex"] {
        convert(&o, org).await;
    }
    let metrics = format!("http://{}/metrics", o.admin().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let text = get(&metrics).await.body;
        if text.lines().any(|l| l.starts_with("opbound_state_sync_seconds_count") && !l.ends_with(" 0"))
            || std::time::Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(text.contains(&format!("opbound_quota_consumed_total{{bound=\"{BOUND}\"}} 3\n")), "{text}");
    assert!(!text.contains("opbound_quota_consumed_total{bound=\"convert:1\"}"), "only quotas: {text}");
    assert!(text.contains("opbound_state_sync_failures_total 0\n"), "{text}");
    let count = text.lines().find(|l| l.starts_with("opbound_state_sync_seconds_count")).unwrap();
    assert_ne!(count, "opbound_state_sync_seconds_count 0", "{text}");
}

/// The same quota, and a first-use one, for instances sharing a Redis store.
const REDIS_SPEC: &str = r#"
openapi: 3.0.3
info: {title: quota admin on redis, version: '1'}
paths:
  /convert:
    get:
      operationId: convert
      x-rate-limit:
        - {algorithm: quota, per: 'header:x-org', limit: 1000, period: P1M, timezone: Europe/Paris}
        - {per: address, limit: 1000, window: PT1M}
  /trial:
    get:
      operationId: trial
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 10, period: P1M, reset: first-use}
"#;

/// An instance on a shared Redis, once it counts there.
async fn serve_on(spec: &TempSpec, up: &Upstream, redis: &Redis, name: &str) -> Opbound {
    let state = spec.dir().join(format!("state-{name}"));
    let token_file = spec.dir().join("admin-token");
    std::fs::write(&token_file, "s3cret").unwrap();
    let o = Opbound::start(&[
        "serve",
        "--spec",
        spec.arg(),
        "--upstream",
        &up.url(),
        "--store",
        &redis.url(),
        "--store-timeout",
        "2s",
        "--admin",
        "127.0.0.1:0",
        "--state-dir",
        state.to_str().unwrap(),
        "--admin-token-file",
        token_file.to_str().unwrap(),
    ]);
    let metrics = format!("http://{}/metrics", o.admin().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !get(&metrics).await.body.lines().any(|l| l == "opbound_store_up 1") {
        assert!(std::time::Instant::now() < deadline, "the store never came up");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_a_quota_is_looked_up_and_adjusted_in_the_store_every_instance_shares() {
    let redis = Redis::start("quota-admin-redis", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-admin-redis", REDIS_SPEC);
    let a = serve_on(&spec, &up, &redis, "a").await;
    let b = serve_on(&spec, &up, &redis, "b").await;
    let unseen = quota(&a, &format!("bound={BOUND}&key=acme")).await;
    assert_eq!(unseen.status, 200, "{}", unseen.body);
    assert_eq!((unseen.json()["tracked"].clone(), unseen.json()["consumed"].clone()), (json!(false), json!(0)));

    // Consumed through b, read through a: the store's count, with the memory store's JSON.
    for _ in 0..3 {
        convert(&b, "acme").await;
    }
    let v = quota(&a, &format!("bound={BOUND}&key=acme")).await.json();
    assert_eq!(
        (v["tracked"].clone(), v["consumed"].clone(), v["remaining"].clone()),
        (json!(true), json!(3), json!(997))
    );
    assert_eq!(
        (v["period"].as_str(), v["reset"].as_str(), v["timezone"].as_str()),
        (Some("P1M"), Some("calendar"), Some("Europe/Paris"))
    );
    let start = v["period_start"].as_str().unwrap();
    assert!(start.ends_with("-01T00:00:00+01:00") || start.ends_with("-01T00:00:00+02:00"), "{start}");
    let (s, e) = (v["period_start_unix"].as_u64().unwrap(), v["period_end_unix"].as_u64().unwrap());
    assert!(s < e && e - s >= 28 * 86_400, "{v}");

    // The token is required, as in memory.
    assert_eq!(adjust(&a, json!({"bound": BOUND, "key": "acme", "add": 5}), None).await.status, 401);
    assert_eq!(adjust(&a, json!({"bound": BOUND, "key": "acme", "add": 5}), Some("guess")).await.status, 401);
    assert_eq!(quota(&b, &format!("bound={BOUND}&key=acme")).await.json()["consumed"], 3, "nothing changed");

    // Set through a, seen by a request through b; add through b, seen through a.
    let set = adjust(&a, json!({"bound": BOUND, "key": "acme", "set": 995}), Some("s3cret")).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!((set.json()["before"].clone(), set.json()["after"].clone()), (json!(3), json!(995)));
    assert_eq!(convert(&b, "acme").await.header("ratelimit-remaining"), Some("4"));
    let granted = adjust(&b, json!({"bound": BOUND, "key": "acme", "add": -500}), Some("s3cret")).await;
    assert_eq!((granted.json()["before"].clone(), granted.json()["consumed"].clone()), (json!(996), json!(496)));
    assert_eq!(convert(&a, "acme").await.header("ratelimit-remaining"), Some("503"));

    // Used up by hand: refused; given one back: the instance that refused admits again at once.
    adjust(&a, json!({"bound": BOUND, "key": "acme", "set": 1000}), Some("s3cret")).await;
    assert_eq!(get_with(&a.url("/convert"), &[("x-org", "acme")]).await.status, 429);
    adjust(&a, json!({"bound": BOUND, "key": "acme", "add": -1}), Some("s3cret")).await;
    assert_eq!(convert(&a, "acme").await.header("ratelimit-remaining"), Some("0"));

    // A first-use quota: the period starts at the caller's first request, wherever it came.
    let before = jiff::Timestamp::now().as_second() as u64;
    get_with(&b.url("/trial"), &[("x-org", "acme")]).await;
    let v = quota(&a, "bound=trial:0&key=acme").await.json();
    assert_eq!((v["reset"].as_str(), v["consumed"].clone()), (Some("first-use"), json!(1)), "{v}");
    let (s, e) = (v["period_start_unix"].as_u64().unwrap(), v["period_end_unix"].as_u64().unwrap());
    assert!(s >= before && s <= before + 60 && e - s >= 28 * 86_400, "{v}");
    let added = adjust(&a, json!({"bound": "trial:0", "key": "acme", "add": 8}), Some("s3cret")).await.json();
    assert_eq!((added["after"].clone(), added["period_start_unix"].as_u64()), (json!(9), Some(s)), "the same anchor");
    assert_eq!(get_with(&b.url("/trial"), &[("x-org", "acme")]).await.status, 200);
    assert_eq!(get_with(&b.url("/trial"), &[("x-org", "acme")]).await.status, 429);
}
