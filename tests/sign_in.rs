//! `count-when` and `settle` on the real binary: an upstream that answers 401 unless the
//! password is right, and one that reports what a request used in a header; failed sign-ins
//! kept across a graceful stop and a hard kill.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use common::{Opbound, TempSpec, get_with};
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: sign-in, version: '1'}
paths:
  /login:
    get:
      x-rate-limit:
        - {per: header:x-user, limit: 5, window: PT15M, count-when: [401, 403]}
  /complete:
    get:
      x-rate-limit:
        - {per: header:x-user, limit: 100, window: PT1M, cost: 40, settle: header:X-Usage-Tokens}
"#;

/// Sign-in attempts that reached the upstream, per user.
type Arrivals = Arc<Mutex<HashMap<String, usize>>>;

/// `/login`: 200 when `x-password` is `right`, else 401, after a pause that keeps concurrent
/// attempts in flight together. `/complete`: 200 reporting `x-use` as `X-Usage-Tokens`.
async fn upstream() -> (SocketAddr, Arrivals) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arrivals = Arrivals::default();
    let seen = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let header = |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
                        let mut r = Response::builder();
                        if req.uri().path() == "/login" {
                            *seen.lock().unwrap().entry(header("x-user").to_string()).or_default() += 1;
                            let right = header("x-password") == "right";
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            r = r.status(if right { StatusCode::OK } else { StatusCode::UNAUTHORIZED });
                        } else {
                            r = r.header("x-usage-tokens", header("x-use"));
                        }
                        Ok::<_, Infallible>(r.body(Full::new(Bytes::from_static(b"done"))).unwrap())
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, arrivals)
}

/// `opbound serve` with its state in the spec's directory, never the working directory's.
fn start(spec: &TempSpec, upstream: SocketAddr, more: &[&str]) -> Opbound {
    let up = format!("http://{upstream}");
    let state = spec.dir().join("state");
    let state = state.to_str().unwrap();
    let args = [&["serve", "--spec", spec.arg(), "--upstream", up.as_str(), "--state-dir", state][..], more].concat();
    Opbound::start(&args)
}

async fn attempt(o: &Opbound, user: &str, password: &str) -> u16 {
    get_with(&o.url("/login"), &[("x-user", user), ("x-password", password)]).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_wrong_passwords_let_exactly_five_through() {
    let (addr, arrivals) = upstream().await;
    let spec = TempSpec::new("sign-in", SPEC);
    let o = start(&spec, addr, &[]);

    // Successes never count.
    for _ in 0..12 {
        assert_eq!(attempt(&o, "bob", "right").await, 200);
    }
    let statuses = wrong_at_once(&[&o], "alice", 50).await;
    let count = |s: u16| statuses.iter().filter(|&&x| x == s).count();
    assert_eq!((count(401), count(429)), (5, 45), "{statuses:?}");
    assert_eq!(arrivals.lock().unwrap()["alice"], 5, "exactly five reached the upstream");
    assert_eq!(attempt(&o, "alice", "right").await, 429, "even the right password waits now");

    // Another key is unaffected, and bob's successes left him all five failures.
    assert_eq!(attempt(&o, "carol", "wrong").await, 401);
    for _ in 0..5 {
        assert_eq!(attempt(&o, "bob", "wrong").await, 401);
    }
    assert_eq!(attempt(&o, "bob", "right").await, 429);
    assert_eq!(arrivals.lock().unwrap()["bob"], 17);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_usage_settles_the_charge_and_can_be_stripped() {
    let (addr, _) = upstream().await;
    let spec = TempSpec::new("settle", SPEC);
    let o = start(&spec, addr, &["--strip-header", "X-Usage-Tokens"]);
    let complete = |used: &'static str| {
        let url = o.url("/complete");
        async move { get_with(&url, &[("x-user", "alice"), ("x-use", used)]).await }
    };
    // Estimates alone (40 each) would refuse the third; the first used only 1.
    let first = complete("1").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-usage-tokens"), None, "--strip-header keeps it from the client");
    assert_eq!(complete("30").await.status, 200);
    assert_eq!(complete("90").await.status, 200);
    // 121 used of 100: over until paid back.
    assert_eq!(complete("1").await.status, 429);

    // A second instance: its own state directory, since the first holds the lock on its own.
    let plain = start(&TempSpec::new("settle-plain", SPEC), addr, &[]);
    let got = get_with(&plain.url("/complete"), &[("x-user", "bob"), ("x-use", "7")]).await;
    assert_eq!(got.header("x-usage-tokens"), Some("7"), "passed to the client by default");
}

/// `n` wrong passwords for `user` at once, spread over `instances` in turn: their statuses.
async fn wrong_at_once(instances: &[&Opbound], user: &'static str, n: usize) -> Vec<u16> {
    let attempts: Vec<_> = (0..n)
        .map(|i| {
            let url = instances[i % instances.len()].url("/login");
            tokio::spawn(async move { get_with(&url, &[("x-user", user), ("x-password", "wrong")]).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for a in attempts {
        statuses.push(a.await.unwrap());
    }
    statuses
}

/// Before a restart: bob signs in rightly three times, alice fails five times and is refused.
async fn five_failures(o: &Opbound) {
    for _ in 0..3 {
        assert_eq!(attempt(o, "bob", "right").await, 200);
    }
    assert_eq!(wrong_at_once(&[o], "alice", 5).await, [401; 5]);
    assert_eq!(attempt(o, "alice", "wrong").await, 429);
}

/// After it: alice is still refused, whatever her password; carol is not; bob's successes were
/// never counted, so he has all five failures left.
async fn still_refused(o: &Opbound) {
    assert_eq!(attempt(o, "alice", "wrong").await, 429, "a restart does not let her back in");
    assert_eq!(attempt(o, "alice", "right").await, 429);
    assert_eq!(attempt(o, "carol", "wrong").await, 401, "another user is not refused");
    assert_eq!(wrong_at_once(&[o], "bob", 5).await, [401; 5], "successes never count");
    assert_eq!(attempt(o, "bob", "wrong").await, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_survive_a_graceful_stop() {
    let (addr, _) = upstream().await;
    let spec = TempSpec::new("sign-in-sigterm", SPEC);
    // An hour between syncs: only the write on the way out can keep them.
    let first = start(&spec, addr, &["--state-sync", "1h"]);
    five_failures(&first).await;
    let mut first = first;
    first.stop_and_read_log();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "opbound did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(first.logged_at_least("durable state written", 1).len(), 1, "{:?}", first.stderr.lock().unwrap());
    still_refused(&start(&spec, addr, &["--state-sync", "1h"])).await;
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_survive_a_hard_kill_after_one_sync() {
    let (addr, _) = upstream().await;
    let spec = TempSpec::new("sign-in-sigkill", SPEC);
    let file = spec.dir().join("state").join("quotas.redb");
    let mut first = start(&spec, addr, &["--state-sync", "100ms"]);
    five_failures(&first).await;
    // Something changes after the failures were settled (dave's success reserves and releases),
    // so a write behind must follow: wait for it, not for a guessed time.
    let before = modified(&file);
    assert_eq!(attempt(&first, "dave", "right").await, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    while modified(&file) == before {
        assert!(Instant::now() < deadline, "no write behind within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    still_refused(&start(&spec, addr, &["--state-sync", "100ms"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_let_exactly_five_through_and_remember_after_a_restart() {
    let (addr, arrivals) = upstream().await;
    let spec = TempSpec::new("sign-in-redis", SPEC);
    let redis = common::Redis::start("sign-in", &[]);
    let store = redis.url();
    let flags = ["--store", store.as_str(), "--store-timeout", "2s", "--admin", "127.0.0.1:0"];
    let both = || [start(&spec, addr, &flags), start(&spec, addr, &flags)];
    let instances = both();
    for o in &instances {
        wait_store(o).await;
    }

    // Successes never count, on either instance.
    for i in 0..12 {
        assert_eq!(attempt(&instances[i % 2], "bob", "right").await, 200);
    }
    let statuses = wrong_at_once(&[&instances[0], &instances[1]], "alice", 50).await;
    let count = |s: u16| statuses.iter().filter(|&&x| x == s).count();
    assert_eq!((count(401), count(429)), (5, 45), "{statuses:?}");
    assert_eq!(arrivals.lock().unwrap()["alice"], 5, "exactly five reached the upstream across both instances");
    assert_eq!(attempt(&instances[1], "alice", "right").await, 429);
    assert_eq!(attempt(&instances[0], "carol", "wrong").await, 401, "another user is unaffected");

    drop(instances);
    let instances = both();
    for o in &instances {
        wait_store(o).await;
    }
    for o in &instances {
        assert_eq!(attempt(o, "alice", "right").await, 429, "still refused after both restarted");
    }
    assert_eq!(attempt(&instances[1], "bob", "wrong").await, 401, "bob's successes left him his failures");
    assert_eq!(arrivals.lock().unwrap()["alice"], 5);
}

/// Waits until an instance's admin says its store answers, so no attempt falls back.
async fn wait_store(o: &Opbound) {
    let admin = o.admin().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !common::get(format!("http://{admin}/metrics")).await.body.lines().any(|l| l == "opbound_store_up 1") {
        assert!(std::time::Instant::now() < deadline, "the store never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
