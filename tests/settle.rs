//! `count-when` and `settle` in the engine, on a manual clock: reservations held as pending,
//! committed or released by the response's status, committed when the response never comes,
//! and charges corrected to what the upstream reports. No test sleeps.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opbound::engine::{Decision, KeyHasher, Limiter, ManualClock, Stage};
use opbound::policy::BoundIndex;
use opbound::request::Given;
use opbound::spec::Source;
use opbound::{Options, Policy};

fn limiter(bounds: &str) -> (Limiter, ManualClock) {
    let yaml = format!(
        "openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\npaths:\n  /login:\n    post:\n      x-rate-limit:\n{bounds}"
    );
    let source = Source::from_text(Path::new("test.yaml"), yaml);
    let policy: Arc<Policy> = match opbound::policy::load_source(source, &Options::default()) {
        Ok(l) => Arc::new(l.policy),
        Err(e) => panic!("test policy is invalid: {e:?}"),
    };
    let clock = ManualClock::starting_at(Duration::from_secs(1_000_000));
    (Limiter::new(policy, Arc::new(clock.clone()), KeyHasher::random()), clock)
}

fn login(l: &Limiter, user: &str, address: &str) -> Decision {
    let facts = Given {
        address: address.parse::<IpAddr>().unwrap(),
        headers: vec![("x-user".to_string(), user.as_bytes().to_vec())],
        query: None,
    };
    let op = l.policy().route("POST", "/login");
    l.decide(&l.plan(op, &facts, None, Stage::All))
}

fn answered(d: Decision, status: u16) {
    let mut d = d;
    std::mem::take(&mut d.reservations).settle(status, |_| None, false);
}

fn reported(d: Decision, used: u64) {
    let mut d = d;
    std::mem::take(&mut d.reservations).settle(
        200,
        |s| (s.to_string() == "header:x-usage-tokens").then_some(used),
        false,
    );
}

fn remaining(l: &Limiter, bound: usize, user: &str) -> u32 {
    let b = BoundIndex::new(bound);
    l.inspect(b, l.caller_key(b, user).unwrap()).remaining
}

const FAILED_SIGN_INS: &str = "        - {per: header:x-user, limit: 3, window: PT15M, count-when: [401, 403, 5xx]}\n";

#[test]
fn matching_statuses_commit_and_others_release() {
    let (l, _clock) = limiter(FAILED_SIGN_INS);
    for _ in 0..20 {
        let d = login(&l, "alice", "192.0.2.1");
        assert!(d.allowed());
        assert_eq!(d.reservations.len(), 1);
        answered(d, 200);
    }
    assert_eq!(remaining(&l, 0, "alice"), 3, "successes never count");
    for status in [401, 404, 503, 302, 403] {
        answered(login(&l, "alice", "192.0.2.1"), status);
    }
    assert_eq!(remaining(&l, 0, "alice"), 0, "401, 503 and 403 count; 404 and 302 do not");
    assert!(!login(&l, "alice", "192.0.2.1").allowed());
    assert!(login(&l, "bob", "192.0.2.1").allowed(), "another key is unaffected");
}

#[test]
fn pending_reservations_count_against_the_limit() {
    let (l, _clock) = limiter(FAILED_SIGN_INS);
    let held: Vec<Decision> = (0..3).map(|_| login(&l, "alice", "192.0.2.1")).collect();
    assert!(held.iter().all(Decision::allowed));
    let refused = login(&l, "alice", "192.0.2.1");
    assert!(!refused.allowed(), "three in flight fill a limit of three");
    assert!(refused.reservations.is_empty(), "a refusal reserves nothing");
    let mut held = held.into_iter();
    answered(held.next().unwrap(), 200);
    assert!(login(&l, "alice", "192.0.2.1").allowed(), "a released reservation frees its place");
}

#[test]
fn a_reservation_dropped_without_a_response_commits() {
    let (l, clock) = limiter(FAILED_SIGN_INS);
    for _ in 0..3 {
        drop(login(&l, "alice", "192.0.2.1"));
    }
    assert!(!login(&l, "alice", "192.0.2.1").allowed());
    clock.advance(Duration::from_secs(31 * 60));
    assert!(login(&l, "alice", "192.0.2.1").allowed(), "committed counts age out as any count does");
}

#[test]
fn a_refusal_by_another_bound_takes_no_reservation() {
    let (l, _clock) = limiter(
        "        - {per: address, limit: 1, window: PT1M}\n        - {per: header:x-user, limit: 5, window: PT1M, count-when: [401]}\n",
    );
    let first = login(&l, "alice", "192.0.2.1");
    assert!(first.allowed());
    assert_eq!(remaining(&l, 1, "alice"), 4, "the admitted request is pending");
    for _ in 0..10 {
        let d = login(&l, "alice", "192.0.2.1");
        assert!(!d.allowed());
        assert!(d.reservations.is_empty());
    }
    assert_eq!(remaining(&l, 1, "alice"), 4, "refusals by the address bound reserved nothing");
    answered(first, 401);
    assert_eq!(remaining(&l, 1, "alice"), 4, "the reservation became a count");
}

#[test]
fn a_key_with_a_reservation_is_never_swept() {
    let (l, clock) =
        limiter("        - {per: header:x-user, limit: 5, window: PT1S, max-keys: 1, count-when: [401]}\n");
    let held = login(&l, "alice", "192.0.2.1");
    clock.advance(Duration::from_secs(10));
    // The table is full with alice's pending reservation: bob shares the overflow counter.
    let bob = login(&l, "bob", "192.0.2.1");
    assert!(bob.verdicts[0].overflow, "alice's key was kept");
    answered(bob, 200);
    answered(held, 200);
    clock.advance(Duration::from_secs(10));
    let carol = login(&l, "carol", "192.0.2.1");
    assert!(!carol.verdicts[0].overflow, "once settled and idle, alice's key is swept");
}

const SETTLED: &str = "x-usage-tokens";

#[test]
fn settle_refunds_and_overdraws_a_sliding_window() {
    let (l, clock) = limiter(&format!(
        "        - {{per: header:x-user, limit: 100, window: PT1M, cost: 40, settle: header:{SETTLED}}}\n"
    ));
    let d = login(&l, "alice", "192.0.2.1");
    assert_eq!(remaining(&l, 0, "alice"), 60, "admission charges the estimate");
    reported(d, 5);
    assert_eq!(remaining(&l, 0, "alice"), 95, "the unused part is refunded");
    reported(login(&l, "alice", "192.0.2.1"), 500);
    assert_eq!(remaining(&l, 0, "alice"), 0);
    assert!(!login(&l, "alice", "192.0.2.1").allowed(), "over the limit until paid back");
    clock.advance(Duration::from_secs(3 * 60));
    assert!(login(&l, "alice", "192.0.2.1").allowed());
}

#[test]
fn settle_refunds_and_overdraws_a_token_bucket() {
    let (l, clock) = limiter(&format!(
        "        - {{per: header:x-user, algorithm: token-bucket, limit: 100, window: PT1M, cost: 50, settle: header:{SETTLED}}}\n"
    ));
    reported(login(&l, "alice", "192.0.2.1"), 10);
    assert_eq!(remaining(&l, 0, "alice"), 90);
    reported(login(&l, "alice", "192.0.2.1"), 290);
    assert!(!login(&l, "alice", "192.0.2.1").allowed(), "200 tokens owed");
    clock.advance(Duration::from_secs(60));
    assert!(!login(&l, "alice", "192.0.2.1").allowed(), "100 still owed after a minute");
    clock.advance(Duration::from_secs(90));
    assert!(login(&l, "alice", "192.0.2.1").allowed(), "paid back, with room for 50");
}

#[test]
fn settle_refunds_and_overdraws_a_quota() {
    let (l, _clock) = limiter(&format!(
        "        - {{per: header:x-user, algorithm: quota, period: P1D, limit: 100, cost: 10, settle: header:{SETTLED}}}\n"
    ));
    reported(login(&l, "alice", "192.0.2.1"), 0);
    assert_eq!(remaining(&l, 0, "alice"), 100, "nothing used, nothing charged");
    reported(login(&l, "alice", "192.0.2.1"), 150);
    assert!(!login(&l, "alice", "192.0.2.1").allowed());
}

#[test]
fn no_header_or_a_dropped_response_keeps_the_estimate() {
    let (l, _clock) = limiter(&format!(
        "        - {{per: header:x-user, limit: 100, window: PT1M, cost: 40, settle: header:{SETTLED}}}\n"
    ));
    answered(login(&l, "alice", "192.0.2.1"), 200);
    drop(login(&l, "alice", "192.0.2.1"));
    assert_eq!(remaining(&l, 0, "alice"), 20);
}

/// Issue 63: a success that should have reported its usage and did not pays the bound's
/// `max-cost`, not the estimate the client set; an error (500) or a response that never came
/// keeps the estimate.
#[test]
fn a_success_without_its_header_pays_max_cost() {
    let (l, _clock) = limiter(&format!(
        "        - {{per: header:x-user, limit: 100, window: PT1M, cost: 5, max-cost: 40, settle: header:{SETTLED}}}\n"
    ));
    answered(login(&l, "alice", "192.0.2.1"), 200);
    assert_eq!(remaining(&l, 0, "alice"), 60, "no header on a 200: max-cost");
    answered(login(&l, "alice", "192.0.2.1"), 500);
    drop(login(&l, "alice", "192.0.2.1"));
    assert_eq!(remaining(&l, 0, "alice"), 50, "the estimate for a 500, and for no response");
    reported(login(&l, "alice", "192.0.2.1"), 7);
    assert_eq!(remaining(&l, 0, "alice"), 43, "what was reported, when it was");
}

#[test]
fn count_when_and_settle_together_charge_the_report_only_when_counted() {
    let (l, _clock) = limiter(&format!(
        "        - {{per: header:x-user, limit: 100, window: PT1M, cost: 10, count-when: [2xx], settle: header:{SETTLED}}}\n"
    ));
    reported(login(&l, "alice", "192.0.2.1"), 30);
    assert_eq!(remaining(&l, 0, "alice"), 70);
    let d = login(&l, "alice", "192.0.2.1");
    std::mem::take(&mut { d }.reservations).settle(500, |_| Some(50), false);
    assert_eq!(remaining(&l, 0, "alice"), 70, "a 500 is not counted, whatever it reports");
}
