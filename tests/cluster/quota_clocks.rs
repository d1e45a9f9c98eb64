//! Quotas in Redis on instances whose clocks the tests set: first-use periods (anchored by the
//! first admitted request, rolled at each anniversary by the instance, since the script cannot
//! do calendar arithmetic) and instances whose clocks disagree across a period's edge. Each
//! instance is a limiter and a store connection of its own, in this process, on one real
//! redis-server. Instants are in 2031 so Redis, which expires keys on its own clock, keeps them.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use opbound::engine::{Decision, Limiter, ManualClock, Stage};
use opbound::policy::BoundIndex;
use opbound::request::Given;
use opbound::store::Store;
use opbound::store::redis::RedisSettings;

use super::common::Redis;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: quota clocks, version: '1'}
paths:
  /first:
    get:
      operationId: first
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 5, period: P1M, reset: first-use}
  /calendar:
    get:
      operationId: calendar
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 5, period: P1M}
  /busy:
    get:
      operationId: busy
      x-rate-limit: {algorithm: quota, per: 'header:x-org', limit: 25, period: P1M, reset: first-use}
  /both:
    get:
      operationId: both
      x-rate-limit:
        - {algorithm: quota, per: 'header:x-org', limit: 100, period: P1M, reset: first-use}
        - {per: 'header:x-org', limit: 3, window: PT1H}
"#;

fn at(rfc3339: &str) -> Duration {
    let t: jiff::Timestamp = rfc3339.parse().unwrap();
    Duration::from_nanos(t.as_nanosecond() as u64)
}

/// One opbound instance: its own clock, limiter and connection to the shared Redis.
struct Instance {
    store: Store,
    limiter: Arc<Limiter>,
    clock: ManualClock,
}

impl Instance {
    async fn start(redis: &Redis, now: Duration) -> Instance {
        let settings = RedisSettings { timeout: Duration::from_secs(5), ..RedisSettings::default() };
        let clock = ManualClock::starting_at(now);
        let (store, limiter) = super::in_process(redis, settings, "quota-clocks.yaml", SPEC, clock.clone()).await;
        Instance { store, limiter, clock }
    }

    async fn request(&self, path: &str, org: &str) -> Decision {
        let facts = Given {
            address: "192.0.2.1".parse::<IpAddr>().unwrap(),
            headers: vec![("x-org".to_string(), org.as_bytes().to_vec())],
            query: None,
        };
        let op = self.limiter.policy().route("GET", path);
        self.store.decide(&self.limiter, &self.limiter.plan(op, &facts, None, Stage::All)).await
    }

    async fn admitted(&self, path: &str, org: &str) -> bool {
        self.request(path, org).await.allowed()
    }

    /// What the store says the caller consumed this period, and the period's end.
    async fn consumed(&self, path: &str, org: &str) -> (u32, Duration) {
        let position = self.limiter.policy().bounds.iter().position(|b| b.id == format!("{}:0", &path[1..])).unwrap();
        let bound = BoundIndex::new(position);
        let key = self.limiter.caller_key(bound, org).unwrap();
        let s = self.store.standing(&self.limiter, bound, key).await.unwrap().unwrap();
        (s.consumed, Duration::from_nanos(s.window.end))
    }

    /// The end of the period a refusal names.
    async fn refused_until(&self, path: &str, org: &str) -> Duration {
        let d = self.request(path, org).await;
        assert!(!d.allowed(), "refused");
        Duration::from_nanos(d.report.unwrap().period_end.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_use_is_anchored_by_the_first_request_and_resets_on_its_anniversary() {
    let redis = Redis::start("quota-first-use", &[]);
    let a = Instance::start(&redis, at("2031-01-31T10:00:00Z")).await;
    for _ in 0..5 {
        assert!(a.admitted("/first", "acme").await);
    }
    assert_eq!(a.refused_until("/first", "acme").await, at("2031-02-28T10:00:00Z"), "a month from the first use");
    // Another instance, first seeing the caller a fortnight later, finds its anchor in the store:
    // the period it names ends on the caller's anniversary, not a month after the fortnight.
    let b = Instance::start(&redis, at("2031-02-14T00:00:00Z")).await;
    assert_eq!(b.refused_until("/first", "acme").await, at("2031-02-28T10:00:00Z"));
    assert_eq!(b.consumed("/first", "acme").await, (5, at("2031-02-28T10:00:00Z")));
    b.clock.set(at("2031-02-28T09:59:59Z"));
    assert_eq!(b.refused_until("/first", "acme").await, at("2031-02-28T10:00:00Z"));
    // The anniversary: a new period, rolled by the instance from the stored anchor.
    b.clock.set(at("2031-02-28T10:00:00Z"));
    a.clock.set(at("2031-02-28T10:00:00Z"));
    for i in 0..5 {
        let by = if i % 2 == 0 { &a } else { &b };
        assert!(by.admitted("/first", "acme").await, "request {i} of the second period");
    }
    // Anniversaries are counted from the anchor: the 31st again, not the 28th.
    assert_eq!(a.refused_until("/first", "acme").await, at("2031-03-31T10:00:00Z"));
    assert_eq!(b.refused_until("/first", "acme").await, at("2031-03-31T10:00:00Z"));
    // A caller first seen later has its own anchor.
    assert!(b.admitted("/first", "globex").await);
    assert_eq!(b.consumed("/first", "globex").await, (1, at("2031-03-28T10:00:00Z")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_first_use_quota_exactly_even_as_it_rolls() {
    let redis = Redis::start("quota-first-use-shared", &[]);
    let start = at("2031-05-10T08:00:00Z");
    let obs = [Arc::new(Instance::start(&redis, start).await), Arc::new(Instance::start(&redis, start).await)];
    // 60 requests at once, half on each, against 25: exactly 25 pass, on whichever instance.
    let burst = |obs: &[Arc<Instance>; 2]| {
        let tasks: Vec<_> = (0..60)
            .map(|i| {
                let ob = obs[i % 2].clone();
                tokio::spawn(async move { ob.admitted("/busy", "acme").await })
            })
            .collect();
        async move {
            let mut admitted = 0;
            for t in tasks {
                admitted += usize::from(t.await.unwrap());
            }
            admitted
        }
    };
    assert_eq!(burst(&obs).await, 25, "the first period");
    assert_eq!(obs[0].consumed("/busy", "acme").await, (25, at("2031-06-10T08:00:00Z")));
    // Both instances reach the anniversary together and race to roll it: still exactly 25.
    for ob in &obs {
        ob.clock.set(at("2031-06-10T08:00:00Z"));
    }
    assert_eq!(burst(&obs).await, 25, "the second period, rolled by both instances at once");
    assert_eq!(obs[1].consumed("/busy", "acme").await, (25, at("2031-07-10T08:00:00Z")));
}

/// A decision that rolls a first-use period is made whole in the second call: the first counts
/// nothing, so the rate bound beside the quota is charged once per admitted request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_counts_nothing_until_the_decision_is_made_whole() {
    let redis = Redis::start("quota-roll-atomic", &[]);
    let a = Instance::start(&redis, at("2031-01-15T00:00:00Z")).await;
    assert!(a.admitted("/both", "acme").await, "anchors the quota, 1 of 3 in the hour");
    a.clock.set(at("2031-02-15T00:00:00Z"));
    let calls = redis.calls("evalsha");
    assert!(a.admitted("/both", "acme").await, "rolls the quota, 2 of 3");
    assert_eq!(redis.calls("evalsha") - calls, 2, "the roll's reply, then the decision");
    assert!(a.admitted("/both", "acme").await, "3 of 3: the roll charged the hour once");
    let calls = redis.calls("evalsha");
    let refused = a.request("/both", "acme").await;
    assert_eq!(redis.calls("evalsha") - calls, 1, "no roll within a period");
    assert!(!refused.allowed(), "4 of 3");
    assert_eq!(a.consumed("/both", "acme").await, (2, at("2031-03-15T00:00:00Z")), "the refusal took no quota");
}

/// Instance `ahead`'s clock runs 3 s ahead of `behind`'s across the edge E of a period the
/// caller used up. What is asserted, and why:
///
/// - before `ahead` has asked in the new period, `behind` (whose clock is still before E) is
///   refused: its period is used up (by the store, or by its own deny cache until its clock
///   reaches E), and a request is never counted in an earlier period;
/// - once `ahead` has counted a request in the new period, `behind`'s requests during the 3 s
///   of skew are counted in that new period (the store never sets a later period back), so
///   they are admitted and charged there: the skew moves at most those 3 s of requests into the
///   next period, and loses none;
/// - nothing is counted twice: the new period admits exactly its limit, however the requests
///   are spread between the instances, and the store's count equals the requests it admitted.
async fn skew_across_an_edge(path: &str, first: &str, edge: &str, next: &str) {
    let redis = Redis::start("quota-skew", &[]);
    let ahead = Instance::start(&redis, at(first) + Duration::from_secs(3)).await;
    let behind = Instance::start(&redis, at(first)).await;
    for org in ["early", "late"] {
        for i in 0..5 {
            let by = if i % 2 == 0 { &behind } else { &ahead };
            assert!(by.admitted(path, org).await, "{org}: request {i} of the first period");
        }
        assert!(!ahead.admitted(path, org).await, "{org}: used up");
    }
    // behind refuses "early" from its deny cache until its own clock reaches E; "late" it has not
    // refused, so its requests go to the store.
    assert!(!behind.admitted(path, "early").await);
    let edge = at(edge);
    behind.clock.set(edge - Duration::from_secs(2));
    ahead.clock.set(edge + Duration::from_secs(1));

    // "early": behind asks first, still in its used-up period.
    assert!(!behind.admitted(path, "early").await, "the old period is used up, on behind's clock");
    assert!(ahead.admitted(path, "early").await, "the new period, on ahead's clock");

    // "late": ahead counts in the new period first; behind's requests then count there too.
    assert!(ahead.admitted(path, "late").await);
    assert!(behind.admitted(path, "late").await, "charged to the period ahead started");
    assert!(behind.admitted(path, "late").await);
    assert!(ahead.admitted(path, "late").await);
    assert!(behind.admitted(path, "late").await);
    assert!(!ahead.admitted(path, "late").await, "exactly 5 in the new period");
    assert!(!behind.admitted(path, "late").await);
    assert_eq!(ahead.consumed(path, "late").await, (5, at(next)));
    // Once behind's clock reaches the edge too, nothing changes: nothing was counted twice.
    behind.clock.set(edge + Duration::from_secs(1));
    assert!(!behind.admitted(path, "late").await);
    assert_eq!(behind.consumed(path, "late").await, (5, at(next)));
    assert_eq!(behind.consumed(path, "early").await, (1, at(next)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_clocks_across_a_calendar_edge_count_nothing_twice() {
    skew_across_an_edge("/calendar", "2031-02-27T12:00:00Z", "2031-03-01T00:00:00Z", "2031-04-01T00:00:00Z").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_clocks_across_a_first_use_anniversary_count_nothing_twice() {
    // behind anchors both callers (its request comes first), at its own time.
    skew_across_an_edge("/first", "2031-01-31T10:00:00Z", "2031-02-28T10:00:00Z", "2031-03-31T10:00:00Z").await;
}
