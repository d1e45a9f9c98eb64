//! The engine against compiled policies, on a manual clock: deciding, counting, capping keys,
//! headers and problem bodies. No test sleeps.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opbound::engine::headers::{self, HeaderStyle};
use opbound::engine::{KeyHasher, Limiter, ManualClock, Outcome, Stage, problem};
use opbound::policy::BoundIndex;
use opbound::request::{Given, Identity};
use opbound::spec::Source;
use opbound::{Options, Policy};

fn policy(yaml: &str) -> Arc<Policy> {
    let source = Source::from_text(Path::new("test.yaml"), yaml.to_string());
    match opbound::policy::load_source(source, &Options::default()) {
        Ok(l) => Arc::new(l.policy),
        Err(e) => panic!("test policy is invalid: {e:?}"),
    }
}

fn limiter(yaml: &str) -> (Limiter, ManualClock) {
    let clock = ManualClock::starting_at(Duration::from_secs(1_000_000));
    (Limiter::new(policy(yaml), Arc::new(clock.clone()), KeyHasher::random()), clock)
}

fn request(address: &str, headers: &[(&str, &str)]) -> Given {
    Given {
        address: address.parse::<IpAddr>().unwrap(),
        headers: headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec())).collect(),
        query: None,
    }
}

fn user(id: &str, roles: &[&str]) -> Identity {
    Identity { user: Some(id.to_string()), org: None, roles: roles.iter().map(|r| r.to_string()).collect() }
}

/// Routes and decides one request, as the server will.
fn decide(
    l: &Limiter,
    method: &str,
    path: &str,
    facts: &Given,
    identity: Option<&Identity>,
) -> opbound::engine::Decision {
    let op = l.policy().route(method, path);
    l.decide(&l.plan(op, facts, identity, Stage::All))
}

const TWO_BOUNDS: &str = r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {name: perimeter, per: address, limit: 5, window: PT1M}
paths:
  /search:
    post:
      operationId: search
      x-rate-limit:
        - {per: user, limit: 3, window: PT1M}
"#;

#[test]
fn a_refused_request_is_counted_by_no_bound() {
    let (l, _clock) = limiter(TWO_BOUNDS);
    let ip = request("203.0.113.1", &[]);
    let alice = user("alice", &[]);
    for _ in 0..3 {
        assert!(decide(&l, "POST", "/search", &ip, Some(&alice)).allowed());
    }
    // The user bound refuses; the address bound, which passed, must not count these.
    for _ in 0..10 {
        let d = decide(&l, "POST", "/search", &ip, Some(&alice));
        assert_eq!(d.outcome, Outcome::Limited { bound: BoundIndex::new(1) });
    }
    // Two more requests from the same address fit its budget of five.
    let bob = user("bob", &[]);
    assert!(decide(&l, "POST", "/search", &ip, Some(&bob)).allowed());
    assert!(decide(&l, "POST", "/search", &ip, Some(&bob)).allowed());
    let d = decide(&l, "POST", "/search", &ip, Some(&bob));
    assert_eq!(d.outcome, Outcome::Limited { bound: BoundIndex::new(0) }, "the sixth from this address");
}

#[test]
fn the_first_exceeded_bound_in_declared_order_refuses_and_headers_name_it() {
    let (l, _clock) = limiter(TWO_BOUNDS);
    let ip = request("203.0.113.1", &[]);
    let alice = user("alice", &[]);
    let d = decide(&l, "POST", "/search", &ip, Some(&alice));
    // Allowed: the bound with the least left is reported (user: 2 of 3 left; address: 4 of 5).
    let r = d.report.unwrap();
    assert_eq!((r.bound, r.limit, r.remaining), (BoundIndex::new(1), 3, 2));
    let h = text(headers::render(HeaderStyle::Legacy, l.policy(), &d));
    // The clock is 40 s into a minute: Reset is the end of the window, 20 s from now.
    assert_eq!(
        h,
        [("ratelimit-limit", "3".to_string()), ("ratelimit-remaining", "2".into()), ("ratelimit-reset", "20".into())]
    );
    for _ in 0..2 {
        decide(&l, "POST", "/search", &ip, Some(&alice));
    }
    let d = decide(&l, "POST", "/search", &ip, Some(&alice));
    let h = text(headers::render(HeaderStyle::Both, l.policy(), &d));
    let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
    assert_eq!(get("ratelimit-remaining").as_deref(), Some("0"));
    assert_eq!(get("ratelimit-policy").as_deref(), Some("\"search:0\";q=3;w=60"));
    // t is the end of the current window, 20 s away; the budget returns gradually after it.
    assert_eq!(get("ratelimit").as_deref(), Some("\"search:0\";r=0;t=20"));
    let retry: u64 = get("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    let (status, body) = problem::body(l.policy(), Some(0), &d).unwrap();
    assert_eq!(status, 429);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["detail"], "3 per PT1M per user on operation search");
    assert_eq!(body["bound"], "search:0");
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after"], retry);
    assert_eq!(body["title"], "Too Many Requests");
    assert!(headers::render(HeaderStyle::None, l.policy(), &d).iter().all(|(k, _)| *k == "retry-after"));
}

/// Rendered headers as text, to compare with what a client reads.
fn text(headers: impl IntoIterator<Item = (http::HeaderName, http::HeaderValue)>) -> Vec<(&'static str, String)> {
    headers
        .into_iter()
        .map(|(name, value)| {
            let name: &'static str = name.as_str().to_string().leak();
            (name, value.to_str().expect("ASCII").to_string())
        })
        .collect()
}

#[test]
fn concurrent_callers_do_not_overshoot() {
    let (l, clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {per: route, limit: 1000, window: PT1M}
  - {per: address, limit: 700, window: PT1M}
paths:
  /x: {get: {operationId: x, x-rate-limit: {per: route, algorithm: token-bucket, limit: 10, window: PT1S, burst: 600}}}
"#,
    );
    let l = Arc::new(l);
    let threads = 8;
    let admitted: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let l = l.clone();
                s.spawn(move || {
                    let ip = request(&format!("198.51.100.{}", t % 2), &[]);
                    (0..500).filter(|_| decide(&l, "GET", "/x", &ip, None).allowed()).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // 4,000 attempts; the bucket holds 600 and time stands still: exactly 600 pass.
    assert_eq!(admitted, 600, "no overshoot, however the threads interleave");
    let _ = clock;
}

#[test]
fn key_flood_keeps_memory_fixed_and_bounds_the_tail() {
    let (l, clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit: {per: address, limit: 50, window: PT1M, max-keys: 1000}
paths: {}
"#,
    );
    let table = l.table(BoundIndex::new(0)).clone();
    // Regulars arrive first and keep their own counters.
    let regular = request("192.0.2.10", &[]);
    for _ in 0..5 {
        assert!(decide(&l, "GET", "/", &regular, None).allowed());
    }
    let mut overflow_admitted = 0;
    for i in 0u32..1_000_000 {
        let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        let facts = Given { address: ip, headers: Vec::new(), query: None };
        let d = decide(&l, "GET", "/", &facts, None);
        if d.verdicts[0].overflow && d.allowed() {
            overflow_admitted += 1;
        }
        if i % 50_000 == 0 {
            assert!(table.tracked() <= 1000, "tracked {} keys", table.tracked());
        }
    }
    assert_eq!(table.tracked(), 1000);
    // The tail shares one counter: not refused outright, not unbounded.
    assert_eq!(overflow_admitted, 50, "the overflow counter admits its limit, once, for the whole tail");
    assert!(table.overflow_hits() >= 998_000);
    // The regular still has its own budget: 45 more.
    assert_eq!((0..100).filter(|_| decide(&l, "GET", "/", &regular, None).allowed()).count(), 45);

    // Two windows later every flood key has expired: new callers are tracked again.
    clock.advance(Duration::from_secs(121));
    let newcomer = request("192.0.2.99", &[]);
    let d = decide(&l, "GET", "/", &newcomer, None);
    assert!(d.allowed() && !d.verdicts[0].overflow);
    assert!(table.tracked() <= 1000);
}

#[test]
fn identity_free_stage_and_applies_to() {
    let (l, _clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {name: perimeter, per: address, limit: 100, window: PT1M}
  - {name: partner, per: user, limit: 1000, window: PT1M, applies-to: {roles: [partner]}}
  - {name: trial, per: user, limit: 2, window: PT1M, applies-to: {roles: [trial]}}
  - {name: anonymous, per: address, limit: 1, window: PT1M, applies-to: {authenticated: false}}
paths: {}
"#,
    );
    let ip = request("203.0.113.5", &[]);
    let plan = l.plan(None, &ip, None, Stage::IdentityFree);
    assert_eq!(plan.checks.iter().map(|c| c.bound.index()).collect::<Vec<_>>(), [0], "only the bound needing nothing");
    assert!(l.needs_identity(None));
    let trial = user("t", &["trial"]);
    let plan = l.plan(None, &ip, Some(&trial), Stage::All);
    assert_eq!(plan.checks.iter().map(|c| c.bound.index()).collect::<Vec<_>>(), [0, 2]);
    let partner = user("p", &["partner", "beta"]);
    let plan = l.plan(None, &ip, Some(&partner), Stage::All);
    assert_eq!(plan.checks.iter().map(|c| c.bound.index()).collect::<Vec<_>>(), [0, 1]);
    let plan = l.plan(None, &ip, None, Stage::All);
    assert_eq!(plan.checks.iter().map(|c| c.bound.index()).collect::<Vec<_>>(), [0, 3], "anonymous callers");
    assert!(l.decide(&l.plan(None, &ip, Some(&trial), Stage::All)).allowed());
    assert!(l.decide(&l.plan(None, &ip, Some(&trial), Stage::All)).allowed());
    assert_eq!(
        l.decide(&l.plan(None, &ip, Some(&trial), Stage::All)).outcome,
        Outcome::Limited { bound: BoundIndex::new(2) }
    );
}

#[test]
fn missing_keys_pass_or_reject() {
    let (l, _clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /pets:
    post:
      operationId: createPets
      x-rate-limit:
        - {per: 'header:X-Api-Key', limit: 2, window: PT1M, missing: reject}
        - {per: 'cookie:session', limit: 1, window: PT1M}
"#,
    );
    let bare = request("203.0.113.5", &[]);
    let d = decide(&l, "POST", "/pets", &bare, None);
    assert_eq!(d.outcome, Outcome::MissingKey { bound: BoundIndex::new(0) });
    assert_eq!(d.outcome.what(l.policy()).as_deref(), Some("header x-api-key"));
    let (status, body) = problem::body(l.policy(), Some(0), &d).unwrap();
    assert_eq!(status, 400);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["missing"], "header x-api-key");
    assert_eq!(
        body["detail"],
        "operation createPets counts requests per header:x-api-key, and this request lacks header x-api-key"
    );
    // With the header, the cookie bound (missing: pass) is skipped, and keys count separately.
    let keyed = request("203.0.113.5", &[("X-Api-Key", "k1")]);
    assert!(decide(&l, "POST", "/pets", &keyed, None).allowed());
    assert!(decide(&l, "POST", "/pets", &keyed, None).allowed());
    assert!(!decide(&l, "POST", "/pets", &keyed, None).allowed());
    let other = request("203.0.113.5", &[("X-Api-Key", "k2"), ("Cookie", "session=s")]);
    assert!(decide(&l, "POST", "/pets", &other, None).allowed());
    assert_eq!(decide(&l, "POST", "/pets", &other, None).outcome, Outcome::Limited { bound: BoundIndex::new(1) });
}

#[test]
fn shadow_bounds_report_but_never_refuse() {
    let (l, _clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {per: address, limit: 100, window: PT1M}
  - {per: address, limit: 2, window: PT1M, mode: shadow}
paths: {}
"#,
    );
    let ip = request("203.0.113.5", &[]);
    let ds: Vec<_> = (0..5).map(|_| decide(&l, "GET", "/", &ip, None)).collect();
    assert!(ds.iter().all(|d| d.allowed()));
    let shadow_refusals = ds.iter().filter(|d| d.verdicts.iter().any(|v| v.shadow && !v.admitted)).count();
    assert_eq!(shadow_refusals, 3, "the shadow bound would have refused three");
    // Headers never describe a shadow bound.
    assert!(ds.iter().all(|d| d.report.unwrap().bound == BoundIndex::new(0)));
}

#[test]
fn concurrency_permits_are_held_until_dropped() {
    let (l, _clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /exports:
    post:
      operationId: createExport
      x-rate-limit: {per: user, algorithm: concurrency, limit: 2, max-keys: 1}
"#,
    );
    let ip = request("203.0.113.5", &[]);
    let alice = user("alice", &[]);
    let first = decide(&l, "POST", "/exports", &ip, Some(&alice));
    let second = decide(&l, "POST", "/exports", &ip, Some(&alice));
    assert_eq!((first.permits.len(), second.permits.len()), (1, 1));
    let third = decide(&l, "POST", "/exports", &ip, Some(&alice));
    assert_eq!(third.outcome, Outcome::Limited { bound: BoundIndex::new(0) });
    assert_eq!(third.report.unwrap().retry_after(), 1);
    assert!(third.permits.is_empty());
    // Bob overflows the one-key table and shares the overflow counter.
    let bob = user("bob", &[]);
    let b1 = decide(&l, "POST", "/exports", &ip, Some(&bob));
    assert!(b1.allowed() && b1.verdicts[0].overflow);
    drop(first);
    let again = decide(&l, "POST", "/exports", &ip, Some(&alice));
    assert!(again.allowed(), "a finished request returns its permit");
    drop((second, again));
    assert_eq!(l.table(BoundIndex::new(0)).tracked(), 0, "idle concurrency keys are dropped at once");
    drop(b1);
    assert_eq!(l.table(BoundIndex::new(0)).overflow().b, 0);
}

#[test]
fn reload_keeps_unchanged_counters_and_starts_changed_ones_fresh() {
    let clock = ManualClock::starting_at(Duration::from_secs(1_000_000));
    let hasher = KeyHasher::random();
    let v1 = policy(TWO_BOUNDS);
    let old = Limiter::new(v1, Arc::new(clock.clone()), hasher.clone());
    let ip = request("203.0.113.1", &[]);
    let alice = user("alice", &[]);
    for _ in 0..3 {
        assert!(decide(&old, "POST", "/search", &ip, Some(&alice)).allowed());
    }
    let v2 = policy(&TWO_BOUNDS.replace("{per: user, limit: 3, window: PT1M}", "{per: user, limit: 4, window: PT1M}"));
    let new = Limiter::carrying_over(v2, Arc::new(clock.clone()), hasher, Some(&old));
    // The address bound kept its three; the user bound changed and starts from zero.
    let d = decide(&new, "POST", "/search", &ip, Some(&alice));
    assert!(d.allowed());
    let r = d.report.unwrap();
    assert_eq!((r.bound, r.remaining), (BoundIndex::new(0), 1), "address: 5 - 3 carried - 1 = 1 left");
    assert!(Arc::ptr_eq(new.table(BoundIndex::new(0)), old.table(BoundIndex::new(0))));
    assert!(!Arc::ptr_eq(new.table(BoundIndex::new(1)), old.table(BoundIndex::new(1))));
}

#[test]
fn peek_counts_nothing() {
    let (l, _clock) = limiter(TWO_BOUNDS);
    let ip = request("203.0.113.1", &[]);
    let plan = l.plan(Some(0), &ip, Some(&user("a", &[])), Stage::All);
    for _ in 0..10 {
        assert!(l.peek(&plan).allowed());
    }
    assert_eq!(l.decide(&plan).report.unwrap().remaining, 2);
}

/// Issue 10, item 13: a tag's bound is one counter per caller across every operation with the
/// tag, checked before the operation's own bounds.
#[test]
fn a_tag_bound_counts_across_the_tags_operations() {
    let (l, _clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
tags:
  - name: search
    x-rate-limit: {per: address, limit: 4, window: PT1M}
paths:
  /search: {get: {operationId: search, tags: [search]}}
  /search/suggest:
    get: {operationId: suggest, tags: [search], x-rate-limit: {per: address, limit: 10, window: PT1M}}
  /other: {get: {operationId: other, tags: [misc]}}
"#,
    );
    let policy = l.policy().clone();
    let suggest = policy.route("GET", "/search/suggest").unwrap();
    let ids: Vec<&str> = policy.bounds_for(Some(suggest)).map(|b| policy.bounds[b].id.as_str()).collect();
    assert_eq!(ids, ["tag:search:0", "suggest:0"], "the tag's bound first, then the operation's own");
    let ip = request("192.0.2.1", &[]);
    let mut outcomes = Vec::new();
    for path in ["/search", "/search/suggest", "/search", "/search/suggest", "/search", "/search/suggest"] {
        outcomes.push(decide(&l, "GET", path, &ip, None).allowed());
    }
    assert_eq!(outcomes, [true, true, true, true, false, false], "four across both operations");
    let d = decide(&l, "GET", "/search", &ip, None);
    assert_eq!(d.outcome, Outcome::Limited { bound: BoundIndex::new(0) });
    let (_, body) = problem::body(&policy, policy.route("GET", "/search"), &d).unwrap();
    assert!(body.contains("(tag search, shared with the tag's other operations)"), "{body}");
    // Another caller, and an operation without the tag, are untouched.
    assert!(decide(&l, "GET", "/search", &request("192.0.2.2", &[]), None).allowed());
    assert!(decide(&l, "GET", "/other", &ip, None).allowed());
}

/// Issue 10, item 16: a bound's own refusal status and message, as gateway plugins offer.
#[test]
fn a_bound_names_its_own_refusal_status_and_message() {
    let (l, _clock) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /quota:
    get:
      operationId: quota
      x-rate-limit: {per: address, limit: 1, window: PT1M, status: 403, message: Your plan allows one export a minute}
"#,
    );
    let ip = request("192.0.2.1", &[]);
    assert!(decide(&l, "GET", "/quota", &ip, None).allowed());
    let d = decide(&l, "GET", "/quota", &ip, None);
    let (status, body) = problem::body(l.policy(), l.policy().route("GET", "/quota"), &d).unwrap();
    assert_eq!(status, 403);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], 403);
    assert_eq!(body["title"], "Forbidden");
    assert_eq!(body["detail"], "Your plan allows one export a minute");
    assert_eq!(body["bound"], "quota:0");
    assert!(body["retry_after"].as_u64().unwrap() >= 1);
}

#[test]
fn a_plan_keys_each_bound_as_an_operator_names_its_caller() {
    // Keys found three ways in one plan: the address once for two address bounds, the route's
    // fixed key, and a header's. An operator's look-up must name the same counters.
    let (l, _) = limiter(
        r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {name: everyone, per: route, limit: 100, window: PT1M}
  - {name: perimeter, per: address, limit: 50, window: PT1M}
paths:
  /search:
    get:
      x-rate-limit:
        - {name: searches, per: address, limit: 5, window: PT1M}
        - {name: keyed, per: 'header:x-api-key', limit: 5, window: PT1M}
"#,
    );
    let facts = request("2001:db8::7", &[("x-api-key", "k-1")]);
    let mut plan = opbound::engine::Plan::default();
    l.plan_into(&mut plan, l.policy().route("GET", "/search"), &facts, None, Stage::All);
    let by_name = |plan: &opbound::engine::Plan, name: &str| {
        let b = l.policy().bounds.iter().position(|b| b.id.ends_with(name)).expect(name);
        let b = BoundIndex::new(b);
        (b, plan.checks.iter().find(|c| c.bound == b).expect(name).key)
    };
    for (name, value) in [("everyone", ""), ("perimeter", "2001:db8::7"), ("searches", "2001:db8::7"), ("keyed", "k-1")]
    {
        let (b, key) = by_name(&plan, name);
        assert_eq!(key, l.caller_key(b, value).unwrap(), "{name}");
    }
    // Planned again into the same plan, another caller's keys replace the first's.
    l.plan_into(&mut plan, l.policy().route("GET", "/search"), &request("192.0.2.1", &[]), None, Stage::All);
    let (b, key) = by_name(&plan, "perimeter");
    assert_eq!(key, l.caller_key(b, "192.0.2.1").unwrap());
    assert_eq!(plan.checks.len(), 3, "no header, no header bound: {:?}", plan.checks);
}
