//! A bound means the same on N instances: several real `opbound` processes on a real
//! `redis-server` (and a real three-node Redis Cluster), started on free loopback ports.
//! `.ci/test` installs redis-server when missing.

mod common;
#[path = "cluster/count_when.rs"]
mod count_when;
#[path = "cluster/quota_clocks.rs"]
mod quota_clocks;

/// An opbound instance inside the test process, on a shared Redis: its own store connection
/// with `settings`, and a limiter on `clock` keyed by the secret the instances agree on.
async fn in_process(
    redis: &Redis,
    settings: opbound::store::redis::RedisSettings,
    name: &str,
    spec: &str,
    clock: opbound::engine::ManualClock,
) -> (opbound::store::Store, std::sync::Arc<opbound::engine::Limiter>) {
    use opbound::store::redis::{RedisStore, Target};
    let store = RedisStore::start(Target::parse(&redis.url()).unwrap(), settings);
    let mut secret = store.secret();
    let secret = tokio::time::timeout(Duration::from_secs(10), secret.wait_for(Option::is_some))
        .await
        .expect("the store answers")
        .expect("the store runs")
        .expect("a secret");
    let source = opbound::spec::Source::from_text(std::path::Path::new(name), spec.to_string());
    let options = opbound::Options { shared_store: true, ..opbound::Options::default() };
    let policy = std::sync::Arc::new(opbound::policy::load_source(source, &options).expect("a valid spec").policy);
    let hasher = opbound::engine::KeyHasher::with_secret(secret);
    let limiter = opbound::engine::Limiter::new(policy, std::sync::Arc::new(clock), hasher);
    (opbound::store::Store::Redis(store), std::sync::Arc::new(limiter))
}

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Killed, Opbound, Redis, TempSpec, Upstream, free_port, get, require};

/// Windows of an hour: a burst that crosses a window edge may pass one more than the limit
/// (the previous window's share is rounded down), and an hour's edge is sixty times rarer.
const SPEC: &str = r#"
openapi: 3.0.3
info: {title: cluster tests, version: '1'}
paths:
  /window:
    get:
      operationId: window
      x-rate-limit: {per: route, limit: 50, window: PT1H}
  /bucket:
    get:
      operationId: bucket
      x-rate-limit: {per: route, algorithm: token-bucket, limit: 1, window: PT1H, burst: 30}
  /hold/{n}:
    get:
      operationId: hold
      x-rate-limit: {per: route, algorithm: concurrency, limit: 5}
  /three:
    get:
      operationId: three
      x-rate-limit:
        - {per: route, limit: 1000000, window: PT1M}
        - {per: address, limit: 1000000, window: PT1M}
        - {per: 'header:X-Key', algorithm: token-bucket, limit: 1000000, window: PT1S}
  /flush:
    get:
      operationId: flush
      x-rate-limit: {per: route, limit: 3, window: PT1H}
  /open:
    get:
      operationId: open
      x-rate-limit: {per: route, limit: 3, window: PT1H, on-store-error: open}
  /closed:
    get:
      operationId: closed
      x-rate-limit: {per: route, limit: 3, window: PT1H, on-store-error: closed}
  /local:
    get:
      operationId: local
      x-rate-limit: {per: route, limit: 3, window: PT1H, on-store-error: local}
"#;

/// Instances on one store. A store call that times out lets its request through (`open`), so
/// tests about exact counts give the store time: on a loaded two-core machine, with the tests of
/// this file running side by side, 50 ms is not always enough.
async fn instances(n: usize, upstream: &str, spec: &TempSpec, store: &str, extra: &[&str]) -> Vec<Opbound> {
    let obs: Vec<Opbound> = (0..n)
        .map(|_| {
            let args =
                ["serve", "--spec", spec.arg(), "--upstream", upstream, "--store", store, "--admin", "127.0.0.1:0"];
            Opbound::start(&[&args[..], extra].concat())
        })
        .collect();
    for ob in &obs {
        common::wait_store(ob, true).await;
    }
    obs
}

const EXACT: &[&str] = &["--store-timeout", "2s"];

/// Sends `total` requests from 16 tasks, spread round-robin across the instances.
async fn burst(obs: &[Opbound], path: &str, total: usize) -> Vec<u16> {
    let urls: Vec<String> = obs.iter().map(|o| o.url(path)).collect();
    common::spread(&urls, &[], total).await.iter().map(|g| g.status).collect()
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_instances_on_one_redis_admit_exactly_the_limit() {
    let redis = Redis::start("exact", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("exact", SPEC);
    for n in [2, 3] {
        redis.cli(&["FLUSHALL"]);
        let obs = instances(n, &up.url(), &spec, &redis.url(), EXACT).await;
        let window = burst(&obs, "/window", 200).await;
        assert_eq!((count(&window, 200), count(&window, 429)), (50, 150), "{n} instances, sliding window");
        let bucket = burst(&obs, "/bucket", 120).await;
        assert_eq!((count(&bucket, 200), count(&bucket, 429)), (30, 90), "{n} instances, token bucket");

        // Concurrency: twenty at once, five may be in flight; the leases go back afterwards.
        let urls: Vec<String> = (0..20).map(|i| obs[i % n].url(&format!("/hold/{i}"))).collect();
        let held: Vec<_> = urls.iter().cloned().map(|u| tokio::spawn(get(u))).collect();
        for _ in 0..5 {
            up.wait_arrival().await;
        }
        // The refused ones answer at once; the admitted ones wait at the upstream.
        let deadline = Instant::now() + Duration::from_secs(10);
        while held.iter().filter(|h| h.is_finished()).count() < 15 {
            assert!(Instant::now() < deadline, "refusals did not come back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        up.release.add_permits(5);
        let mut statuses = Vec::new();
        for h in held {
            statuses.push(h.await.unwrap().status);
        }
        assert_eq!((count(&statuses, 200), count(&statuses, 429)), (5, 15), "{n} instances, concurrency");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let leases: u64 = redis.cli(&["EVAL", "local n=0 for _,k in ipairs(redis.call('KEYS','opbound:hold*')) do n=n+redis.call('ZCARD',k) end return n", "0"]).trim().parse().unwrap();
            if leases == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{leases} leases were never returned");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // No raw identifier in any key: a prefix, the bound, and hashes.
        let keys = redis.cli(&["KEYS", "*"]);
        assert!(keys.lines().all(|k| k == "opbound:secret" || k.starts_with("opbound:")), "{keys}");
        assert!(!keys.contains("127.0.0.1"), "{keys}");
    }
}

/// `rediss://` with a private CA: a real TLS redis-server, certificates made by openssl.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_with_a_private_ca_counts_in_the_store() {
    let dir = TempSpec::new("tls", SPEC);
    let d = dir.dir().to_str().unwrap().to_string();
    common::tls_files(dir.dir(), "IP:127.0.0.1");
    let port = free_port();
    let tls = [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &format!("{d}/server.pem"),
        "--tls-key-file",
        &format!("{d}/server.key"),
        "--tls-ca-cert-file",
        &format!("{d}/ca.pem"),
        "--tls-auth-clients",
        "no",
    ];
    let _server = Killed(
        Command::new(require("redis-server"))
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", &d])
            .args(tls)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let up = Upstream::start().await;
    let ca = format!("{d}/ca.pem");
    let store = format!("rediss://127.0.0.1:{port}");
    let obs = instances(2, &up.url(), &dir, &store, &["--store-timeout", "2s", "--store-ca-file", &ca]).await;
    let window = burst(&obs, "/window", 120).await;
    assert_eq!((count(&window, 200), count(&window, 429)), (50, 70), "two instances over TLS");
}

/// A store that loses the shared key secret (FLUSHALL) while instances run, and a new instance
/// that makes another: within two secret checks (every 5 s, so this waits 11 s) they agree again,
/// and nothing is counted in the store under a secret the others do not share.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_agree_on_the_key_secret_after_the_store_loses_it() {
    let redis = Redis::start("secret", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("secret", SPEC);
    let mut obs = instances(1, &up.url(), &spec, &redis.url(), EXACT).await;
    redis.cli(&["FLUSHALL"]);
    obs.extend(instances(1, &up.url(), &spec, &redis.url(), EXACT).await);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let window = burst(&obs, "/window", 120).await;
    assert_eq!((count(&window, 200), count(&window, 429)), (50, 70), "two instances, one secret again");
}

/// Leases live in Redis time, so this test waits in real time: two and a half lease lives of 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_outlive_their_ttl_while_in_flight_and_lapse_when_an_instance_dies() {
    let redis = Redis::start("leases", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("leases", SPEC);
    let lease = ["--store-timeout", "2s", "--lease-ttl", "2s"];
    let mut obs = instances(2, &up.url(), &spec, &redis.url(), &lease).await;
    let (b, a) = (obs.pop().unwrap(), obs.pop().unwrap());
    let held: Vec<_> = (0..5).map(|i| tokio::spawn(get(a.url(&format!("/hold/{i}"))))).collect();
    for _ in 0..5 {
        up.wait_arrival().await;
    }
    tokio::time::sleep(Duration::from_millis(5000)).await;
    assert_eq!(get(b.url("/hold/x")).await.status, 429, "five requests still in flight keep their leases");
    up.release.add_permits(5);
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }

    // An instance that dies with permits in hand does not keep them.
    let mut c = instances(1, &up.url(), &spec, &redis.url(), &lease).await.pop().unwrap();
    let _orphans: Vec<_> = (0..5).map(|i| tokio::spawn(get(c.url(&format!("/hold/o{i}"))))).collect();
    for _ in 0..5 {
        up.wait_arrival().await;
    }
    assert_eq!(get(b.url("/hold/y")).await.status, 429);
    let _ = c.child.kill();
    let _ = c.child.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = tokio::time::timeout(Duration::from_millis(200), get(b.url("/hold/z"))).await;
        if !matches!(r, Ok(ref got) if got.status == 429) {
            break;
        }
        assert!(Instant::now() < deadline, "the dead instance's leases never lapsed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    up.release.add_permits(10);
}

/// A lease that cannot be renewed leaves a trace: counted in `/metrics` and logged, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_that_fail_are_counted_and_logged() {
    let redis = Redis::start("lease-failures", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("lease-failures", SPEC);
    let obs = instances(1, &up.url(), &spec, &redis.url(), &["--store-timeout", "1s", "--lease-ttl", "2s"]).await;
    let ob = &obs[0];
    let metric = |name: &'static str| {
        let admin = ob.admin().unwrap();
        async move {
            let m = get(format!("http://{admin}/metrics")).await.body;
            let line = m.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).map(str::to_string);
            line.unwrap_or_else(|| panic!("no {name} in:\n{m}")).parse::<u64>().unwrap()
        }
    };
    assert_eq!(metric("opbound_store_lease_failures_total").await, 0);
    assert_eq!(metric("opbound_store_undo_failures_total").await, 0);
    let held = tokio::spawn(get(ob.url("/hold/0")));
    up.wait_arrival().await;
    // Renewal runs every third of the lease's life; with the store gone, the next one fails.
    redis.stop();
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric("opbound_store_lease_failures_total").await == 0 {
        assert!(Instant::now() < deadline, "no failed renewal was counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!ob.logged_at_least("store lease renewal failed", 1).is_empty(), "{:#?}", ob.logged("store"));
    up.release.add_permits(1);
    assert_eq!(held.await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_request_whatever_the_number_of_bounds() {
    let redis = Redis::start("roundtrip", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("roundtrip", SPEC);
    let obs = instances(1, &up.url(), &spec, &redis.url(), EXACT).await;
    // Load the script once, then count.
    get(obs[0].url("/window")).await;
    let before = (redis.calls("evalsha"), redis.calls("eval"), redis.calls("script|load"));
    for i in 0..20 {
        let r = common::get_with(&obs[0].url("/three"), &[("x-key", &format!("k{i}"))]).await;
        assert_eq!(r.status, 200);
    }
    let after = (redis.calls("evalsha"), redis.calls("eval"), redis.calls("script|load"));
    assert_eq!(after.0 - before.0, 20, "one EVALSHA per request with three bounds");
    assert_eq!((after.1, after.2), (before.1, before.2), "nothing else");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_redis_goes_away_bounds_do_as_declared_and_recover() {
    let redis = Redis::start("failure", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("failure", SPEC);
    // Short enough to show answers stay fast with the store gone, long enough for a loaded machine.
    let obs = instances(1, &up.url(), &spec, &redis.url(), &["--store-timeout", "1s"]).await;
    let ob = &obs[0];
    assert_eq!(get(ob.url("/flush")).await.status, 200);
    // SCRIPT FLUSH changes nothing: the script is loaded again and counts go on.
    redis.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(get(ob.url("/flush")).await.status, 200);
    assert_eq!(get(ob.url("/flush")).await.status, 200);
    assert_eq!(get(ob.url("/flush")).await.status, 429, "the fourth of three, after the flush");
    // The refused caller is now refused here, without a round trip, until its Retry-After.
    let calls = redis.calls("evalsha");
    assert_eq!(get(ob.url("/flush")).await.status, 429);
    assert_eq!(redis.calls("evalsha"), calls, "the deny cache answered");

    let port = redis.stop();
    let timed = |path: &'static str| {
        let url = ob.url(path);
        async move {
            let started = Instant::now();
            let r = get(url).await;
            // Generous: a store call gives up after 50 ms; a stalled proxy would take seconds.
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{path} took {:?} with the store down",
                started.elapsed()
            );
            r
        }
    };
    for _ in 0..5 {
        assert_eq!(timed("/open").await.status, 200, "on-store-error: open admits");
    }
    let closed = timed("/closed").await;
    assert_eq!(closed.status, 503, "on-store-error: closed refuses");
    assert!(closed.header("retry-after").is_some());
    assert_eq!(closed.json()["bound"], "closed:0");
    let local: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(timed("/local").await.status);
        }
        v
    };
    assert_eq!(local, [200, 200, 200, 429, 429], "on-store-error: local counts here");
    common::wait_store(ob, false).await;
    let metrics = get(format!("http://{}/metrics", ob.admin().unwrap())).await.body;
    assert!(!metrics.contains("opbound_store_errors_total 0"), "errors are counted");
    assert!(!ob.logged_at_least("store unreachable", 1).is_empty());

    // Redis comes back on the same port: enforcement through the store resumes.
    let _redis = Redis::on_port("failure-again", port, &[]);
    common::wait_store(ob, true).await;
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(get(ob.url("/closed")).await.status);
        }
        v
    };
    assert_eq!(statuses, [200, 200, 200, 429], "counted in the store again: {:#?}", ob.logged("store"));
    assert!(ob.logged_at_least("store reachable", 2).len() >= 2, "connected, then recovered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_three_node_redis_cluster_admits_exactly_the_limit() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes: Vec<Redis> = ports
        .iter()
        .map(|p| {
            Redis::on_port(
                "cluster",
                *p,
                &["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"],
            )
        })
        .collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new(require("redis-cli"))
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !nodes.iter().all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")) {
        assert!(Instant::now() < deadline, "the cluster did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let up = Upstream::start().await;
    let spec = TempSpec::new("cluster", SPEC);
    let store = format!("redis+cluster://{}", addrs.join(","));
    let obs = instances(3, &up.url(), &spec, &store, EXACT).await;
    let window = burst(&obs, "/window", 200).await;
    assert_eq!((count(&window, 200), count(&window, 429)), (50, 150), "sliding window on a cluster");
    let bucket = burst(&obs, "/bucket", 120).await;
    assert_eq!((count(&bucket, 200), count(&bucket, 429)), (30, 90), "token bucket on a cluster");
    // A request whose three bounds live in different hash slots still passes, once per call.
    for i in 0..10 {
        assert_eq!(common::get_with(&obs[i % 3].url("/three"), &[("x-key", "k")]).await.status, 200);
    }
    let keys: usize = nodes.iter().map(|n| n.cli(&["DBSIZE"]).trim().parse::<usize>().unwrap_or(0)).sum();
    assert!(keys >= 5, "keys spread over the nodes: {keys}");
}

/// Issue 10, item 17, with a shared store: a caller's counter looked up on one instance is the
/// one every instance counts in, and a reset through an instance deletes it in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_counter_looked_up_and_reset_through_one_instance_is_the_shared_one() {
    let redis = Redis::start("counters", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("counters", SPEC);
    let token = spec.dir().join("token");
    std::fs::write(&token, "t0ken").unwrap();
    let extra = [EXACT, &["--admin-token-file", token.to_str().unwrap()][..]].concat();
    let obs = instances(2, &up.url(), &spec, &redis.url(), &extra).await;
    let statuses = burst(&obs, "/flush", 5).await;
    assert_eq!(count(&statuses, 200), 3);
    let admin = |i: usize| format!("http://{}/counters?bound=flush:0&key=", obs[i].admin().unwrap());
    let seen = get(admin(1)).await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!((seen.json()["tracked"].as_bool(), seen.json()["remaining"].as_u64()), (Some(true), Some(0)));
    let looked_again = get(admin(1)).await.json();
    assert_eq!(looked_again["remaining"].as_u64(), Some(0), "a look-up counts nothing");
    let reset = common::send(
        http::Request::delete(admin(1)).header("authorization", "Bearer t0ken").body(Default::default()).unwrap(),
    )
    .await;
    assert_eq!((reset.status, reset.json()["had_counter"].as_bool()), (200, Some(true)), "{}", reset.body);
    // The resetting instance admits the caller again at once. (Another instance that refused the
    // caller itself remembers that refusal in its local deny cache until its Retry-After: the
    // book's admin listener section says so.)
    let after = burst(&obs[1..], "/flush", 3).await;
    assert_eq!(count(&after, 200), 3, "{after:?}");
}

/// Quotas of a month in Redis. The periods are calendar months in UTC: a test run across midnight
/// at a month's end could see a new period start in the middle (once in some thirty days).
const QUOTAS: &str = r#"
openapi: 3.0.3
info: {title: cluster quota tests, version: '1'}
paths:
  /quota:
    get:
      operationId: quota
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 100, period: P1M}
  /heavy:
    get:
      operationId: heavy
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 100, period: P1M, cost: 3}
  /durable:
    get:
      operationId: durable
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 10, period: P1M, on-store-error: closed}
"#;

/// Instances on one store for quotas, each with its own state directory inside the test's
/// temporary directory (never the default `.opbound-state` of the checkout).
async fn quota_instances(n: usize, upstream: &str, spec: &TempSpec, store: &str) -> Vec<Opbound> {
    let obs: Vec<Opbound> = (0..n)
        .map(|i| {
            let state = spec.dir().join(format!("state-{i}"));
            let args = [
                "serve",
                "--spec",
                spec.arg(),
                "--upstream",
                upstream,
                "--store",
                store,
                "--admin",
                "127.0.0.1:0",
                "--state-dir",
                state.to_str().unwrap(),
            ];
            Opbound::start(&[&args[..], EXACT].concat())
        })
        .collect();
    for ob in &obs {
        common::wait_store(ob, true).await;
    }
    obs
}

/// Sends `total` requests for `org` from 16 tasks, spread round-robin across the instances.
async fn burst_as(obs: &[Opbound], path: &str, org: &str, total: usize) -> Vec<common::Got> {
    let urls: Vec<String> = obs.iter().map(|o| o.url(path)).collect();
    common::spread(&urls, &[("x-org", org)], total).await
}

/// The end of the period a quota refusal names, checked to be in the future.
fn resets_at(refused: &common::Got) -> jiff::Timestamp {
    let body = refused.json();
    let until = body["quota_resets_at"].as_str().unwrap_or_else(|| panic!("no quota_resets_at: {body}"));
    let end: jiff::Timestamp = until.parse().unwrap_or_else(|e| panic!("{until}: {e}"));
    assert!(end > jiff::Timestamp::now(), "{body}");
    end
}

fn assert_refused_by_quota(got: &common::Got, bound: &str) {
    assert_eq!(got.status, 429, "{}", got.body);
    let retry: u64 = got.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
    let body = got.json();
    assert_eq!(body["bound"], bound, "{body}");
    assert_eq!(body["quota_period"], "P1M", "{body}");
    assert_eq!(body["retry_after"].as_u64(), Some(retry), "{body}");
    resets_at(got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_redis_share_one_quota_exactly_under_concurrent_load() {
    let redis = Redis::start("quota", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota", QUOTAS);
    let obs = quota_instances(2, &up.url(), &spec, &redis.url()).await;

    let got = burst_as(&obs, "/quota", "acme", 300).await;
    let statuses: Vec<u16> = got.iter().map(|g| g.status).collect();
    assert_eq!((count(&statuses, 200), count(&statuses, 429)), (100, 200), "a quota of 100 on two instances");
    for refused in got.iter().filter(|g| g.status == 429) {
        assert_refused_by_quota(refused, "quota:0");
    }

    // A cost of 3 in a quota of 100: 33 requests take 99, and the 34th would go over.
    let heavy = burst_as(&obs, "/heavy", "acme", 120).await;
    let statuses: Vec<u16> = heavy.iter().map(|g| g.status).collect();
    assert_eq!((count(&statuses, 200), count(&statuses, 429)), (33, 87), "cost 3 in a quota of 100");
    for refused in heavy.iter().filter(|g| g.status == 429) {
        assert_refused_by_quota(refused, "heavy:0");
    }

    // Another organisation has its own count, on both instances.
    for ob in &obs {
        assert_eq!(common::get_with(&ob.url("/quota"), &[("x-org", "globex")]).await.status, 200);
    }
    // What Redis holds: acme's 100 and 99, globex's 2.
    let consumed = redis.cli(&[
        "EVAL",
        "local t={} for _,k in ipairs(redis.call('KEYS','opbound:*')) do \
         if redis.call('TYPE',k).ok=='hash' then t[#t+1]=tonumber(redis.call('HGET',k,'c')) end end \
         table.sort(t) return t",
        "0",
    ]);
    assert_eq!(consumed.split_whitespace().collect::<Vec<_>>(), ["2", "99", "100"], "{consumed}");
}

/// Redis with an append-only file fsynced on every write: stopped and started again on the same
/// port and directory, it still holds what the quota consumed. While it is away the quota, which
/// fails closed, lets nothing through uncounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_survives_a_redis_restart_with_an_append_only_file() {
    let spec = TempSpec::new("quota-aof", QUOTAS);
    let data = spec.dir().join("redis-data");
    std::fs::create_dir_all(&data).unwrap();
    // The later --dir wins over the one Redis::on_port passes; this one outlives the server.
    let aof = ["--appendonly", "yes", "--appendfsync", "always", "--dir", data.to_str().unwrap()];
    let redis = Redis::start("quota-aof", &aof);
    let up = Upstream::start().await;
    let obs = quota_instances(1, &up.url(), &spec, &redis.url()).await;
    let ob = &obs[0];
    let url = ob.url("/durable");
    let durable = || common::get_with(&url, &[("x-org", "acme")]);
    for i in 0..7 {
        assert_eq!(durable().await.status, 200, "request {i} of 10");
    }

    // SIGTERM: Redis shuts down gracefully (and every write was fsynced anyway).
    let port = redis.stop();
    for _ in 0..3 {
        let r = durable().await;
        assert_eq!(r.status, 503, "on-store-error: closed, with Redis down: {}", r.body);
        assert_eq!(r.json()["bound"], "durable:0");
    }
    common::wait_store(ob, false).await;

    let redis = Redis::on_port("quota-aof-again", port, &aof);
    let keys = redis.cli(&["KEYS", "opbound:*"]);
    assert!(keys.lines().count() >= 2, "the secret and the quota came back from the file: {keys}");
    common::wait_store(ob, true).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(durable().await);
    }
    let codes: Vec<u16> = statuses.iter().map(|g| g.status).collect();
    assert_eq!(codes, [200, 200, 200, 429], "7 of 10 were used before the restart: {:#?}", ob.logged("store"));
    assert_refused_by_quota(&statuses[3], "durable:0");
}

/// A quota's key in Redis lives until a minute after its period's end, and no longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_key_expires_a_minute_after_the_period_ends() {
    let redis = Redis::start("quota-ttl", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-ttl", QUOTAS);
    let obs = quota_instances(1, &up.url(), &spec, &redis.url()).await;
    let ob = &obs[0];
    // Ten of ten, then a refusal that says when the period ends.
    for _ in 0..10 {
        assert_eq!(common::get_with(&ob.url("/durable"), &[("x-org", "acme")]).await.status, 200);
    }
    let refused = common::get_with(&ob.url("/durable"), &[("x-org", "acme")]).await;
    assert_refused_by_quota(&refused, "durable:0");
    let end = resets_at(&refused).as_millisecond();
    let reset: i64 = refused.header("ratelimit-reset").expect("RateLimit-Reset").parse().unwrap();

    let keys: Vec<String> =
        redis.cli(&["KEYS", "opbound:*"]).lines().filter(|k| *k != "opbound:secret").map(str::to_string).collect();
    assert_eq!(keys.len(), 1, "one quota key: {keys:?}");
    let before = jiff::Timestamp::now().as_millisecond();
    let pttl: i64 = redis.cli(&["PTTL", &keys[0]]).trim().parse().unwrap();
    let after = jiff::Timestamp::now().as_millisecond();
    assert!(pttl > 0, "the key expires: PTTL {pttl}");
    let (least, most) = (end - after + 60_000 - 1_000, end - before + 60_000 + 1_000);
    assert!((least..=most).contains(&pttl), "PTTL {pttl} ms, expected {least}..={most} (period end {end})");
    // RateLimit-Reset says the same end, in whole seconds rounded up.
    let to_end = (end - before + 999) / 1000;
    assert!((reset - to_end).abs() <= 2, "RateLimit-Reset {reset} s, the period ends in {to_end} s");
}
