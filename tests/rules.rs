//! The engine's rules, run against every store: in memory, and in a real redis-server through
//! `decide.lua`, which writes the same arithmetic a second time. A rule broken in either place is
//! caught here. Each rule is an `async fn` taking a `Backend`; `every_store!` makes one test per
//! rule and store, so a new store joins by adding one line to it.
//!
//! Time stands still only in memory (Redis counts on its own clock), so these rules use windows
//! long enough that no test run sees one end.

mod common;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opbound::engine::{Decision, KeyHasher, Limiter, ManualClock, Outcome, Stage};
use opbound::policy::BoundIndex;
use opbound::request::{Given, Identity};
use opbound::spec::Source;
use opbound::store::Store;
use opbound::store::redis::{RedisSettings, RedisStore, Target};

/// A store under test, with what its limiters must hash callers with.
struct Backend {
    store: Store,
    hasher: KeyHasher,
    _redis: Option<common::Redis>,
}

impl Backend {
    fn memory() -> Backend {
        Backend { store: Store::Memory, hasher: KeyHasher::random(), _redis: None }
    }

    /// A fresh redis-server and a store on it, connected and sharing its key secret.
    async fn redis() -> Backend {
        let redis = common::Redis::start("rules", &[]);
        let target = Target::parse(&redis.url()).unwrap();
        // Generous: a call that timed out would let the request through (on-store-error: open).
        let settings = RedisSettings { timeout: Duration::from_secs(5), ..RedisSettings::default() };
        let store = RedisStore::start(target, settings);
        let mut secret = store.secret();
        let secret = tokio::time::timeout(Duration::from_secs(10), secret.wait_for(Option::is_some))
            .await
            .expect("the store answers")
            .expect("the store runs")
            .expect("a secret");
        Backend { store: Store::Redis(store), hasher: KeyHasher::with_secret(secret), _redis: Some(redis) }
    }

    fn limiter(&self, yaml: &str) -> Limiter {
        self.limiter_at(yaml, Duration::from_secs(1_000_000))
    }

    /// A limiter whose clock reads the real time: quotas cut calendar periods from it, and Redis
    /// lets a quota's key go a minute after its period ends, so the two must agree on the date.
    fn limiter_now(&self, yaml: &str) -> Limiter {
        self.limiter_at(yaml, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap())
    }

    fn limiter_at(&self, yaml: &str, start: Duration) -> Limiter {
        let source = Source::from_text(Path::new("rules.yaml"), yaml.to_string());
        let policy = match opbound::policy::load_source(source, &opbound::Options::default()) {
            Ok(l) => Arc::new(l.policy),
            Err(e) => panic!("test policy is invalid: {e:?}"),
        };
        Limiter::new(policy, Arc::new(ManualClock::starting_at(start)), self.hasher.clone())
    }

    /// Routes and decides one request, as the server does.
    async fn decide(&self, l: &Limiter, path: &str, facts: &Given, identity: Option<&Identity>) -> Decision {
        let op = l.policy().route("GET", path);
        self.store.decide(l, &l.plan(op, facts, identity, Stage::All)).await
    }
}

fn from(address: &str, headers: &[(&str, &str)]) -> Given {
    Given {
        address: address.parse::<IpAddr>().unwrap(),
        headers: headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec())).collect(),
        query: None,
    }
}

fn allowed(d: &Decision) -> bool {
    d.allowed()
}

/// A refused request is counted by no bound: the looser bound still has what it had.
async fn a_refused_request_is_counted_by_no_bound(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit: {per: address, limit: 5, window: PT1H}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit: {per: route, limit: 2, window: PT1H}
  /y:
    get: {operationId: y}
"#,
    );
    let me = from("192.0.2.1", &[]);
    for _ in 0..2 {
        assert!(allowed(&b.decide(&l, "/x", &me, None).await));
    }
    for _ in 0..3 {
        let d = b.decide(&l, "/x", &me, None).await;
        assert_eq!(d.outcome, Outcome::Limited { bound: BoundIndex::new(1) });
    }
    // Three refusals later, the route bound (5 per address) has counted only the two that
    // passed: /y, which only it bounds, gets the other three.
    let mut passed = 0;
    for _ in 0..6 {
        passed += usize::from(allowed(&b.decide(&l, "/y", &me, None).await));
    }
    assert_eq!(passed, 3, "refused requests were counted by the route bound");
}

/// The first exceeded bound in declared order refuses, and the headers report it.
async fn the_first_exceeded_bound_in_declared_order_refuses(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit:
        - {per: address, limit: 3, window: PT1H}
        - {per: route, limit: 3, window: PT1H}
"#,
    );
    let me = from("192.0.2.2", &[]);
    for _ in 0..3 {
        assert!(allowed(&b.decide(&l, "/x", &me, None).await));
    }
    // Both are exhausted; the first written refuses.
    let d = b.decide(&l, "/x", &me, None).await;
    assert_eq!(d.outcome, Outcome::Limited { bound: BoundIndex::new(0) });
    assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((BoundIndex::new(0), 0)));
    assert!(d.report.unwrap().retry_after() >= 1);
}

/// An allowed request reports the enforced bound with the least left.
async fn the_reported_bound_has_the_least_left(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit:
        - {per: address, limit: 10, window: PT1H}
        - {per: route, limit: 4, window: PT1H}
"#,
    );
    let d = b.decide(&l, "/x", &from("192.0.2.3", &[]), None).await;
    assert!(d.allowed());
    assert_eq!(d.report.map(|r| (r.bound, r.limit, r.remaining)), Some((BoundIndex::new(1), 4, 3)));
}

/// A shadow bound reports what it would refuse and never refuses; it counts only what it admits.
async fn a_shadow_bound_never_refuses(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit: {per: address, limit: 1, window: PT1H, mode: shadow}
"#,
    );
    let me = from("192.0.2.4", &[]);
    for i in 0..4 {
        let d = b.decide(&l, "/x", &me, None).await;
        assert!(d.allowed(), "request {i}");
        assert_eq!((d.verdicts[0].shadow, d.verdicts[0].admitted), (true, i == 0), "request {i}");
    }
}

/// A missing key skips a bound (`missing: pass`) or refuses with 400 (`missing: reject`).
async fn missing_keys_pass_or_reject(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /pass:
    get:
      operationId: pass
      x-rate-limit: {per: 'header:X-Key', limit: 1, window: PT1H}
  /reject:
    get:
      operationId: reject
      x-rate-limit: {per: 'header:X-Key', limit: 1, window: PT1H, missing: reject}
"#,
    );
    let bare = from("192.0.2.5", &[]);
    for _ in 0..3 {
        assert!(b.decide(&l, "/pass", &bare, None).await.allowed());
    }
    let d = b.decide(&l, "/reject", &bare, None).await;
    assert!(matches!(d.outcome, Outcome::MissingKey { bound, .. } if bound == BoundIndex::new(1)), "{:?}", d.outcome);
    let keyed = from("192.0.2.5", &[("x-key", "k1")]);
    assert!(b.decide(&l, "/reject", &keyed, None).await.allowed());
    assert_eq!(b.decide(&l, "/reject", &keyed, None).await.outcome, Outcome::Limited { bound: BoundIndex::new(1) });
}

/// `applies-to` picks the bound by the caller's roles: pricing tiers without naming anybody.
async fn applies_to_picks_the_tier(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit:
        - {name: partner, per: user, limit: 5, window: PT1H, applies-to: {roles: [partner]}}
        - {name: trial, per: user, limit: 1, window: PT1H, applies-to: {roles: [trial]}}
"#,
    );
    let me = from("192.0.2.6", &[]);
    let user = |id: &str, role: &str| Identity { user: Some(id.into()), org: None, roles: vec![role.into()] };
    let (trial, partner) = (user("t-1", "trial"), user("p-1", "partner"));
    assert!(b.decide(&l, "/x", &me, Some(&trial)).await.allowed());
    assert_eq!(b.decide(&l, "/x", &me, Some(&trial)).await.outcome, Outcome::Limited { bound: BoundIndex::new(1) });
    let partner_passed = {
        let mut n = 0;
        for _ in 0..7 {
            n += usize::from(b.decide(&l, "/x", &me, Some(&partner)).await.allowed());
        }
        n
    };
    assert_eq!(partner_passed, 5);
}

/// A request takes `cost` tokens from a token bucket.
async fn cost_takes_that_many_tokens(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit: {per: address, algorithm: token-bucket, limit: 1, window: PT1H, burst: 10, cost: 4}
"#,
    );
    let me = from("192.0.2.7", &[]);
    let first = b.decide(&l, "/x", &me, None).await;
    assert_eq!(first.report.map(|r| r.remaining), Some(6));
    assert!(b.decide(&l, "/x", &me, None).await.allowed());
    let third = b.decide(&l, "/x", &me, None).await;
    assert_eq!(third.outcome, Outcome::Limited { bound: BoundIndex::new(0) }, "2 tokens left, 4 needed");
    assert_eq!(third.report.map(|r| r.remaining), Some(2));
}

/// A concurrency permit is held while its request is in flight and returned when dropped.
async fn concurrency_permits_return_when_dropped(b: &Backend) {
    let l = b.limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /x:
    get:
      operationId: x
      x-rate-limit: {per: address, algorithm: concurrency, limit: 2}
"#,
    );
    let me = from("192.0.2.8", &[]);
    let first = b.decide(&l, "/x", &me, None).await;
    let second = b.decide(&l, "/x", &me, None).await;
    assert!(first.allowed() && second.allowed());
    assert_eq!(b.decide(&l, "/x", &me, None).await.outcome, Outcome::Limited { bound: BoundIndex::new(0) });
    drop(first);
    // A store returns its lease in the background: it is back within moments.
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        let d = b.decide(&l, "/x", &me, None).await;
        if d.allowed() || Instant::now() > deadline {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(again.allowed(), "the dropped permit never came back");
    assert_eq!(b.decide(&l, "/x", &me, None).await.outcome, Outcome::Limited { bound: BoundIndex::new(0) });
    drop(second);
}

/// One test per rule and store. A store joins with one more `mod` line here.
macro_rules! every_store {
    ($($rule:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    super::$rule(&super::Backend::memory()).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    super::$rule(&super::Backend::redis().await).await
                }
            )*
        }
    };
}

/// A quota is consumed by cost; a request it refuses consumes nothing anywhere, and one a rate
/// bound refuses consumes no quota, whichever of the two is written first.
async fn a_quota_counts_cost_and_refusals_consume_nothing(b: &Backend) {
    let l = b.limiter_now(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit-policies:
  conversions: {algorithm: quota, per: 'header:x-org', limit: 7, period: P1M, cost: 3}
paths:
  /convert:
    get:
      operationId: convert
      x-rate-limit:
        - {use: conversions}
        - {per: 'header:x-org', limit: 100, window: PT1H}
  /slow:
    get:
      operationId: slow
      x-rate-limit:
        - {per: 'header:x-org', limit: 1, window: PT1H}
        - {use: conversions}
"#,
    );
    let quota = l.policy().bound_named("policy:conversions").expect("the quota");
    let a = from("192.0.2.30", &[("x-org", "a")]);
    for left in [4, 1] {
        let d = b.decide(&l, "/convert", &a, None).await;
        assert!(allowed(&d));
        assert_eq!(d.report.map(|r| r.remaining), Some(left));
    }
    // Quota first: 6 + 3 is over 7. Refused until the month ends, and counted nowhere.
    for attempt in 0..3 {
        let d = b.decide(&l, "/convert", &a, None).await;
        assert_eq!(d.outcome, Outcome::Limited { bound: quota });
        let r = d.report.unwrap();
        // Later refusals may come from Redis's deny cache, which does not know what is left.
        if attempt == 0 {
            assert_eq!((r.bound, r.remaining), (quota, 1));
        }
        assert!(r.period_end.is_some(), "a quota's refusal knows when its period ends");
        assert!(r.retry_after() >= 1 && r.retry_after() <= 31 * 86_400, "{}", r.retry_after());
    }
    // Rate bound first: its refusal consumes no quota. Org b: 3 for /slow, the refused /slow
    // nothing, so one /convert (3 more) still fits and the next does not.
    let org = from("192.0.2.31", &[("x-org", "b")]);
    assert!(allowed(&b.decide(&l, "/slow", &org, None).await));
    let d = b.decide(&l, "/slow", &org, None).await;
    assert!(!allowed(&d));
    assert_ne!(d.outcome, Outcome::Limited { bound: quota }, "the rate bound refuses first");
    let d = b.decide(&l, "/convert", &org, None).await;
    assert!(allowed(&d), "the refused /slow consumed quota");
    assert_eq!(d.report.map(|r| r.remaining), Some(1));
    assert_eq!(b.decide(&l, "/convert", &org, None).await.outcome, Outcome::Limited { bound: quota });
}

every_store!(
    a_quota_counts_cost_and_refusals_consume_nothing,
    a_refused_request_is_counted_by_no_bound,
    the_first_exceeded_bound_in_declared_order_refuses,
    the_reported_bound_has_the_least_left,
    a_shadow_bound_never_refuses,
    missing_keys_pass_or_reject,
    applies_to_picks_the_tier,
    cost_takes_that_many_tokens,
    concurrency_permits_return_when_dropped,
);
