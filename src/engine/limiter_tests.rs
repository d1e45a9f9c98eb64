//! The limiter's shortcuts against its general paths: the plain plan, one tracked caller under a
//! sliding window, a plan of no bounds, and the words a refusal is sent with.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::request::{Given, Identity};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {name: perimeter, per: address, limit: 5, window: PT1M}
  - {name: everyone, per: route, limit: 50, window: PT1M}
paths:
  /plain:
    get:
      x-rate-limit:
        - {per: address, algorithm: token-bucket, limit: 3, window: PT1S, cost: 2}
  /keyed:
    get:
      x-rate-limit: [{per: 'header:x-key', limit: 3, window: PT1M}]
  /partners:
    get:
      x-rate-limit: [{per: address, limit: 3, window: PT1M, applies-to: {roles: [partner]}}]
  /costly:
    get:
      x-rate-limit: [{per: address, limit: 30, window: PT1M, cost-from: 'header:x-count', max-cost: 10}]
"#;

/// The plain plan is a shortcut: it must plan what the general walk plans, for every
/// operation it is taken for, at every stage.
#[test]
fn plain_plans_are_the_general_plans() {
    let source = crate::spec::Source::from_text(Path::new("t.yaml"), SPEC.to_string());
    let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
    let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
    let l = Limiter::new(policy.clone(), clock, KeyHasher::random());
    let op = |path: &str| policy.route("GET", path);
    let plain: Vec<bool> = ["/plain", "/keyed", "/partners", "/costly"].iter().map(|p| l.plain[op(p)]).collect();
    assert_eq!(plain, [true, false, false, false]);
    // Requests that match no operation see the route bounds alone: plain too.
    assert!(l.plain[None]);
    let partner = Identity { user: Some("u".into()), org: None, roles: vec!["partner".into()] };
    let facts = [
        Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None },
        Given {
            address: "2001:db8::1".parse().unwrap(),
            headers: vec![("x-key".into(), b"k".to_vec()), ("x-count".into(), b"4".to_vec())],
            query: None,
        },
    ];
    for path in ["/plain", "/keyed", "/partners", "/costly", "/nowhere"] {
        for f in &facts {
            for identity in [None, Some(&partner)] {
                for stage in [Stage::IdentityFree, Stage::BeforeBody, Stage::All] {
                    let mut fast = Plan::default();
                    l.plan_into(&mut fast, op(path), f, identity, stage);
                    let mut general = Plan::default();
                    l.plan_steps(&mut general, op(path), f, identity, stage);
                    assert_eq!(fast.checks, general.checks, "{path} {stage:?}");
                    assert_eq!(fast.rejected, general.rejected, "{path} {stage:?}");
                }
            }
        }
    }
    // The plain operation's plan: the address counted under one key on both address
    // bounds, the route under another, each at its own cost.
    let plan = l.plan(op("/plain"), &facts[0], None, Stage::IdentityFree);
    let costs: Vec<u32> = plan.checks.iter().map(|c| c.cost).collect();
    assert_eq!(costs, [1, 1, 2]);
    assert_eq!(plan.checks[0].key, plan.checks[2].key);
    assert_ne!(plan.checks[0].key, plan.checks[1].key);
}

/// A tracked caller under a sliding window skips `Locked` (`run_one`'s fast path): it must
/// answer what the general path answers, through admissions, refusals, shadow bounds and
/// windows rolling over, on two limiters kept in step.
#[test]
fn the_tracked_sliding_window_path_decides_as_the_general_path_does() {
    let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /e:\n    get:\n      x-rate-limit: \
                [{per: address, limit: 3, window: PT10S}]\n  /s:\n    get:\n      x-rate-limit: \
                [{per: address, limit: 2, window: PT10S, mode: shadow}]\n";
    let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
    let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
    let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
    let (fast, general) = (
        Limiter::new(policy.clone(), clock.clone(), KeyHasher::random()),
        Limiter::new(policy.clone(), clock.clone(), KeyHasher::random()),
    );
    let facts = Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None };
    let mut refused = 0;
    for path in ["/e", "/s"] {
        let op = policy.route("GET", path);
        for step in 0..40 {
            let (a, b) = (fast.plan(op, &facts, None, Stage::All), general.plan(op, &facts, None, Stage::All));
            let check = b.checks[0];
            let tracked = fast.table(check.bound).get(a.checks[0].key).is_some();
            let x = fast.decide(&a);
            let y = general.run_one_locked(&check, true, general.table(check.bound).lock_shard(check.key));
            assert_eq!(x.outcome, y.outcome, "{path} step {step} (tracked before: {tracked})");
            assert_eq!(x.report, y.report, "{path} step {step}");
            let strip = |d: &Decision| {
                d.verdicts.iter().map(|v| (v.bound, v.admitted, v.shadow, v.overflow, v.cost)).collect::<Vec<_>>()
            };
            assert_eq!(strip(&x), strip(&y), "{path} step {step}");
            assert_eq!(
                fast.table(check.bound).get(a.checks[0].key),
                general.table(check.bound).get(check.key),
                "{path} step {step}: the counters"
            );
            refused += usize::from(!x.verdicts[0].admitted);
            // Bursts of five a window, with a window and a half now and then: both the
            // previous window's weight and a counter too old to weigh at all.
            clock.advance(Duration::from_millis(if step % 5 == 4 { 15_000 } else { 700 }));
        }
    }
    assert!(refused > 10, "only {refused} refusals: the comparison never saw a full window");
}

/// A refusal keeps only what it is about; the words it is sent with are worked out from the
/// policy, and must be the ones it was always sent with.
#[test]
fn a_refusal_says_what_is_wrong_in_the_words_it_always_did() {
    let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    post:\n      x-rate-limit:\n\
                \x20       - {per: 'header:x-api-key', limit: 9, window: PT1M, missing: reject}\n\
                \x20       - {per: 'query:key', limit: 9, window: PT1M}\n\
                \x20       - {per: route, limit: 99, window: PT1M, cost-from: 'header:x-count', max-cost: 9}\n\
                \x20       - {per: route, limit: 99, window: PT1M, cost-from: 'json:/items', max-cost: 9}\n\
                \x20       - {per: token, limit: 9, window: PT1M}\n";
    let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
    let policy = crate::policy::load_source(source, &crate::Options::default()).unwrap().policy;
    let b = |i: usize| policy.bounds_for(policy.route("POST", "/a")).nth(i).unwrap();
    let what = |o: Outcome| o.what(&policy);
    use crate::request::{CostProblem, Unclear};
    let cases = [
        (Outcome::MissingKey { bound: b(0) }, "header x-api-key"),
        (
            Outcome::UnclearKey { bound: b(1), why: Unclear::Repeated },
            "query parameter key more than once with different values",
        ),
        (
            Outcome::UnclearKey { bound: b(1), why: Unclear::Malformed },
            "query parameter key with a malformed percent-escape",
        ),
        (
            Outcome::UnclearKey { bound: b(4), why: Unclear::Repeated },
            "its credential more than once with different values",
        ),
        (
            Outcome::UnclearKey { bound: b(0), why: Unclear::Encoded },
            "header x-api-key in a compressed body (Content-Encoding), which opbound does not read",
        ),
        (
            Outcome::UnclearKey { bound: b(0), why: Unclear::Stalled { patience_ms: 2_500 } },
            "a body that stalled (not all of it within 2.5s)",
        ),
        (Outcome::BadCost { bound: b(2), why: CostProblem::NotACount }, "header x-count is not a non-negative integer"),
        (
            Outcome::BadCost { bound: b(2), why: CostProblem::Unclear },
            "header x-count is given more than once with different values, or malformed",
        ),
        (
            Outcome::BadCost { bound: b(3), why: CostProblem::Unclear },
            "the JSON body gives /items more than once with different values",
        ),
        (
            Outcome::BadCost { bound: b(3), why: CostProblem::NotACount },
            "/items in the JSON body is not a non-negative integer or an array",
        ),
        (
            Outcome::BadCost { bound: b(3), why: CostProblem::Compressed },
            "a compressed body (Content-Encoding) states the cost at /items, which opbound does not read",
        ),
    ];
    for (outcome, words) in cases {
        assert_eq!(what(outcome).as_deref(), Some(words), "{outcome:?}");
    }
    assert_eq!(what(Outcome::Allowed), None);
    assert_eq!(what(Outcome::Limited { bound: b(0) }), None);
}

/// `run_many` evaluates each bound in its place and builds the decision where it returns
/// it: the verdicts must still come out in the plan's order whatever order the locks were
/// taken in, each with its own bound's flags, and a refusal must count no bound.
#[test]
fn several_bounds_are_reported_in_the_plans_order_and_a_refusal_counts_none() {
    let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /m:\n    get:\n      x-rate-limit:\n\
                \x20       - {per: address, limit: 2, window: PT1M}\n\
                \x20       - {per: route, limit: 1, window: PT1M, mode: shadow}\n\
                \x20       - {per: address, algorithm: token-bucket, limit: 5, window: PT1M}\n";
    let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
    let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
    let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
    let l = Limiter::new(policy.clone(), clock, KeyHasher::random());
    let facts = Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None };
    let mut plan = l.plan(policy.route("GET", "/m"), &facts, None, Stage::All);
    assert_eq!(plan.checks.len(), 3);
    // Planned in declared order, which is the lock order; reversed, the two differ.
    plan.checks.reverse();
    let [bucket, shadow, window] = [plan.checks[0], plan.checks[1], plan.checks[2]];
    let counter = |c: Check| l.table(c.bound).get(c.key);
    let flags = |d: &Decision| {
        d.verdicts.iter().map(|v| (v.bound, v.key, v.admitted, v.shadow, v.overflow, v.cost)).collect::<Vec<_>>()
    };
    let expect = |admitted: [bool; 3]| {
        [bucket, shadow, window]
            .iter()
            .zip(admitted)
            .map(|(c, a)| (c.bound, c.key, a, c.bound == shadow.bound, false, c.cost))
            .collect::<Vec<_>>()
    };
    // The first: every bound admits; the report is the enforced bound with the least left.
    let d = l.decide(&plan);
    assert_eq!(d.outcome, Outcome::Allowed);
    assert_eq!(flags(&d), expect([true, true, true]));
    assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((window.bound, 1)));
    // The second: the shadow bound is over its limit and refuses nothing.
    let d = l.decide(&plan);
    assert_eq!(d.outcome, Outcome::Allowed);
    assert_eq!(flags(&d), expect([true, false, true]));
    assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((window.bound, 0)));
    // The third: the window refuses, and no bound counts the request.
    let before = [counter(bucket), counter(shadow), counter(window)];
    let d = l.decide(&plan);
    assert_eq!(d.outcome, Outcome::Limited { bound: window.bound });
    assert_eq!(flags(&d), expect([true, false, false]));
    assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((window.bound, 0)));
    assert!(d.report.is_some_and(|r| r.retry > 0));
    assert_eq!([counter(bucket), counter(shadow), counter(window)], before, "a refused request was counted");
}

/// A plan of no bounds skips `run_many`: it must answer what `run_many` answers for none.
#[test]
fn a_plan_of_no_bounds_is_decided_as_the_general_path_decides_it() {
    let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /open:\n    get: {}\n";
    let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
    let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
    let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
    let l = Limiter::new(policy.clone(), clock, KeyHasher::random());
    let facts = Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None };
    let plan = l.plan(policy.route("GET", "/open"), &facts, None, Stage::All);
    assert!(plan.checks.is_empty() && plan.rejected.is_none());
    for commit in [true, false] {
        let (fast, general) = (l.run(&plan, commit), l.run_many(&[], commit));
        assert_eq!(fast.outcome, general.outcome);
        assert_eq!(fast.outcome, Outcome::Allowed);
        assert_eq!(fast.report, general.report);
        assert_eq!(fast.verdicts, general.verdicts);
        assert_eq!((fast.permits.len(), fast.reservations.len()), (0, 0));
        assert_eq!((general.permits.len(), general.reservations.len()), (0, 0));
    }
}
