//! `count-when` and `settle` in Redis, exact across instances: two limiters in this process on
//! one real redis-server, each with its own store connection. A reservation pending on one
//! counts on the other; the response commits or releases it (settled by a spawned call, which
//! the tests wait for by asking the store); one whose instance is gone commits when it lapses.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opbound::engine::{Decision, Limiter, ManualClock, Stage};
use opbound::policy::BoundIndex;
use opbound::request::Given;
use opbound::store::Store;
use opbound::store::redis::RedisSettings;

use super::common::Redis;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: count when, version: '1'}
paths:
  /login:
    post:
      operationId: login
      x-rate-limit: {per: 'header:x-user', limit: 5, window: PT15M, count-when: [401, 403]}
  /usage:
    post:
      operationId: usage
      x-rate-limit: {per: 'header:x-user', limit: 100, window: PT1H, cost: 10, settle: 'header:x-usage'}
  /bucket:
    post:
      operationId: bucket
      x-rate-limit: {per: 'header:x-user', algorithm: token-bucket, limit: 100, window: PT1H, cost: 10, settle: 'header:x-usage'}
  /quota:
    post:
      operationId: quota
      x-rate-limit: {algorithm: quota, per: 'header:x-user', limit: 3, period: P1M, count-when: [4xx]}
"#;

/// One opbound instance: its own limiter and connection to the shared Redis.
struct Instance {
    store: Store,
    limiter: Arc<Limiter>,
}

impl Instance {
    async fn start(redis: &Redis, reservation_ttl: Duration) -> Instance {
        let settings = RedisSettings { timeout: Duration::from_secs(5), reservation_ttl, ..RedisSettings::default() };
        // Quotas cut their periods on the instance's clock; the rest go by Redis's TIME.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let clock = ManualClock::starting_at(now);
        let (store, limiter) = super::in_process(redis, settings, "count-when.yaml", SPEC, clock).await;
        Instance { store, limiter }
    }

    async fn request(&self, path: &str, user: &str) -> Decision {
        let facts = Given {
            address: "192.0.2.1".parse::<IpAddr>().unwrap(),
            headers: vec![("x-user".to_string(), user.as_bytes().to_vec())],
            query: None,
        };
        let op = self.limiter.policy().route("POST", path);
        self.store.decide(&self.limiter, &self.limiter.plan(op, &facts, None, Stage::All)).await
    }

    /// What the store says is left for the caller, pending reservations included.
    async fn remaining(&self, path: &str, user: &str) -> u32 {
        let position = self.limiter.policy().bounds.iter().position(|b| b.id == format!("{}:0", &path[1..])).unwrap();
        let bound = BoundIndex::new(position);
        let key = self.limiter.caller_key(bound, user).unwrap();
        self.store.inspect(&self.limiter, bound, key).await.unwrap().remaining
    }

    /// Waits until the settle calls spawned so far have landed: the store says `remaining`.
    async fn settles_to(&self, path: &str, user: &str, remaining: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.remaining(path, user).await;
            if now == remaining {
                return;
            }
            assert!(Instant::now() < deadline, "{path} for {user}: {now} left, expected {remaining}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn answered(d: Decision, status: u16) {
    let mut d = d;
    std::mem::take(&mut d.reservations).settle(status, |_| None, false);
}

fn reported(d: Decision, used: u64) {
    let mut d = d;
    std::mem::take(&mut d.reservations).settle(200, |s| (s.to_string() == "header:x-usage").then_some(used), false);
}

const LONG: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_on_one_instance_counts_against_another() {
    let redis = Redis::start("count-when-pending", &[]);
    let (a, b) = (Instance::start(&redis, LONG).await, Instance::start(&redis, LONG).await);
    let mut held = Vec::new();
    for _ in 0..5 {
        let d = a.request("/login", "alice").await;
        assert!(d.allowed());
        held.push(d);
    }
    assert!(!b.request("/login", "alice").await.allowed(), "five pending on a fill the limit on b");
    assert!(!a.request("/login", "alice").await.allowed());
    assert!(b.request("/login", "bob").await.allowed(), "another user is unaffected");
    // The sign-ins succeed: nothing counts, and b, refused only by pending, did not cache it.
    for d in held {
        answered(d, 200);
    }
    b.settles_to("/login", "alice", 5).await;
    assert!(b.request("/login", "alice").await.allowed(), "a refusal by pending alone is not remembered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_status_commits_and_another_releases() {
    let redis = Redis::start("count-when-status", &[]);
    let (a, b) = (Instance::start(&redis, LONG).await, Instance::start(&redis, LONG).await);
    for status in [401, 200, 403, 500, 201] {
        let d = a.request("/login", "alice").await;
        assert!(d.allowed());
        answered(d, status);
    }
    a.settles_to("/login", "alice", 3).await;
    for _ in 0..3 {
        let d = b.request("/login", "alice").await;
        assert!(d.allowed());
        answered(d, 401);
    }
    b.settles_to("/login", "alice", 0).await;
    assert!(!a.request("/login", "alice").await.allowed(), "five failures in all");
    // A dropped response (the client left) counts as failed.
    let d = a.request("/login", "carol").await;
    drop(d);
    a.settles_to("/login", "carol", 4).await;
    // So does a quota with count-when.
    for status in [404, 200, 429] {
        let d = b.request("/quota", "dave").await;
        assert!(d.allowed());
        answered(d, status);
    }
    a.settles_to("/quota", "dave", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_whose_instance_is_gone_commits_when_it_lapses() {
    let redis = Redis::start("count-when-lapse", &[]);
    let gone = Instance::start(&redis, Duration::from_millis(1)).await;
    let b = Instance::start(&redis, LONG).await;
    for _ in 0..4 {
        let d = gone.request("/login", "alice").await;
        assert!(d.allowed());
        // The instance dies with the request in flight: nobody settles it.
        std::mem::forget(d);
    }
    // The reservations lapse a millisecond later, on Redis's clock.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(b.remaining("/login", "alice").await, 1, "committed by the next decision on the key");
    let members = redis.cli(&["KEYS", "*:r"]);
    assert!(members.trim().is_empty(), "no reservation left: {members}");
    let d = b.request("/login", "alice").await;
    assert!(d.allowed());
    answered(d, 200);
    b.settles_to("/login", "alice", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_refunds_and_overdraws() {
    let redis = Redis::start("count-when-settle", &[]);
    let (a, b) = (Instance::start(&redis, LONG).await, Instance::start(&redis, LONG).await);
    for path in ["/usage", "/bucket"] {
        let d = a.request(path, "erin").await;
        assert!(d.allowed());
        b.settles_to(path, "erin", 90).await;
        reported(d, 2);
        b.settles_to(path, "erin", 98).await;
        let d = b.request(path, "erin").await;
        assert!(d.allowed());
        reported(d, 250);
        a.settles_to(path, "erin", 0).await;
        assert!(!a.request(path, "erin").await.allowed(), "{path}: over the limit until paid back");
        // No header: the estimate stands.
        let d = a.request(path, "frank").await;
        answered(d, 200);
        let d = a.request(path, "frank").await;
        drop(d);
        b.settles_to(path, "frank", 80).await;
    }
}
