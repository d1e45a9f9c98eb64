//! Quotas through the engine on a manual clock: calendar periods at month ends, leap years, the
//! year's end, ISO weeks, local midnight across both daylight-saving changes, first-use
//! anniversaries, and a reload that changes the limit but keeps what was consumed.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opbound::engine::{Decision, KeyHasher, Limiter, ManualClock, Stage, problem};
use opbound::request::Given;
use opbound::spec::Source;

/// Unix nanoseconds of an RFC 3339 instant.
fn at(rfc3339: &str) -> Duration {
    let t: jiff::Timestamp = rfc3339.parse().unwrap();
    Duration::from_nanos(t.as_nanosecond() as u64)
}

fn spec(quota: &str) -> String {
    format!(
        r#"
openapi: 3.0.3
info: {{title: quota, version: '1'}}
paths:
  /convert:
    post:
      operationId: convert
      x-rate-limit:
        - {quota}
"#
    )
}

struct Bench {
    limiter: Limiter,
    clock: ManualClock,
}

impl Bench {
    fn new(quota: &str, start: &str) -> Bench {
        let clock = ManualClock::starting_at(at(start));
        let source = Source::from_text(Path::new("quota.yaml"), spec(quota));
        let policy = match opbound::policy::load_source(source, &opbound::Options::default()) {
            Ok(l) => Arc::new(l.policy),
            Err(e) => panic!("invalid: {e:?}"),
        };
        let limiter = Limiter::new(policy, Arc::new(clock.clone()), KeyHasher::random());
        Bench { limiter, clock }
    }

    fn post(&self, org: &str) -> Decision {
        let facts = Given {
            address: "192.0.2.1".parse::<IpAddr>().unwrap(),
            headers: vec![("x-org".to_string(), org.as_bytes().to_vec())],
            query: None,
        };
        let l = &self.limiter;
        l.decide(&l.plan(l.policy().route("POST", "/convert"), &facts, None, Stage::All))
    }

    /// Uses what is left of the quota at `when`, checks the next request is refused until
    /// `next`, and that at `next` the quota is whole again.
    fn used_up_until(&self, when: &str, limit: u32, next: &str) {
        self.clock.set(at(when));
        let mut refused = self.post("acme");
        for _ in 0..limit {
            if !refused.allowed() {
                break;
            }
            refused = self.post("acme");
        }
        assert!(!refused.allowed(), "at {when}, {limit} requests use the quota up");
        let report = refused.report.unwrap();
        assert_eq!(Duration::from_nanos(report.period_end.unwrap()), at(next), "the period of {when} ends at {next}");
        assert_eq!(Duration::from_nanos(report.retry), at(next) - at(when));
        self.clock.set(at(next) - Duration::from_nanos(1));
        assert!(!self.post("acme").allowed(), "still {when}'s period a nanosecond before {next}");
        self.clock.set(at(next));
        let d = self.post("acme");
        assert!(d.allowed(), "a new period at {next}");
        assert_eq!(d.report.unwrap().remaining, limit - 1);
    }
}

#[test]
fn month_ends_leap_years_and_the_year_end() {
    let b = Bench::new("{algorithm: quota, per: 'header:x-org', limit: 3, period: P1M}", "2026-01-01T00:00:00Z");
    b.used_up_until("2026-01-31T12:00:00Z", 3, "2026-02-01T00:00:00Z");
    b.used_up_until("2026-02-28T23:59:59Z", 3, "2026-03-01T00:00:00Z");
    b.used_up_until("2026-12-31T23:00:00Z", 3, "2027-01-01T00:00:00Z");
    let leap = Bench::new("{algorithm: quota, per: 'header:x-org', limit: 2, period: P1M}", "2028-02-01T00:00:00Z");
    leap.used_up_until("2028-02-28T12:00:00Z", 2, "2028-03-01T00:00:00Z");
}

#[test]
fn leap_day_is_part_of_february() {
    let b = Bench::new("{algorithm: quota, per: 'header:x-org', limit: 2, period: P1M}", "2028-02-28T00:00:00Z");
    b.clock.set(at("2028-02-28T10:00:00Z"));
    assert!(b.post("acme").allowed());
    assert!(b.post("acme").allowed());
    b.clock.set(at("2028-02-29T10:00:00Z"));
    assert!(!b.post("acme").allowed(), "29 February 2028 is still February");
}

#[test]
fn a_week_across_the_year_change() {
    // 2026-12-31 is a Thursday: its ISO week runs from Monday 28 December to Monday 4 January.
    let b = Bench::new("{algorithm: quota, per: 'header:x-org', limit: 2, period: P1W}", "2026-12-28T00:00:00Z");
    b.used_up_until("2026-12-31T12:00:00Z", 2, "2027-01-04T00:00:00Z");
}

#[test]
fn local_midnight_across_both_daylight_saving_changes() {
    let q = "{algorithm: quota, per: 'header:x-org', limit: 1, period: P1D, timezone: Europe/Berlin}";
    let b = Bench::new(q, "2026-03-28T00:00:00Z");
    // 29 March 2026 in Berlin is 23 hours long: from 23:00Z the day before to 22:00Z.
    b.used_up_until("2026-03-29T12:00:00Z", 1, "2026-03-29T22:00:00Z");
    // 25 October 2026 is 25 hours long: from 22:00Z the day before to 23:00Z.
    b.used_up_until("2026-10-25T12:00:00Z", 1, "2026-10-25T23:00:00Z");
}

#[test]
fn first_use_anniversaries() {
    let b = Bench::new(
        "{algorithm: quota, per: 'header:x-org', limit: 1, period: P1M, reset: first-use}",
        "2026-01-31T09:30:00Z",
    );
    // The first request anchors acme's periods: 31 January, 28 February, 31 March.
    b.used_up_until("2026-01-31T09:30:00Z", 1, "2026-02-28T09:30:00Z");
    b.clock.set(at("2026-03-30T00:00:00Z"));
    assert!(!b.post("acme").allowed());
    b.clock.set(at("2026-03-31T09:30:00Z"));
    assert!(b.post("acme").allowed(), "the anniversary is the 31st again");
    // Another caller's periods start at its own first request.
    b.clock.set(at("2026-03-31T12:00:00Z"));
    let d = b.post("globex");
    assert!(d.allowed());
    assert_eq!(Duration::from_nanos(d.report.unwrap().period_end.unwrap()), at("2026-04-30T12:00:00Z"));
}

#[test]
fn a_refusal_says_until_when_in_the_quotas_zone() {
    let q = "{algorithm: quota, per: 'header:x-org', limit: 1, period: P1M, timezone: Europe/Berlin}";
    let b = Bench::new(q, "2026-11-30T10:00:00Z");
    assert!(b.post("acme").allowed());
    let d = b.post("acme");
    let (status, body) = problem::body(b.limiter.policy(), Some(0), &d).unwrap();
    assert_eq!(status, 429);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["quota_resets_at"], "2026-12-01T00:00:00+01:00");
    assert_eq!(body["quota_period"], "P1M");
    assert_eq!(body["retry_after"], 13 * 3600, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("until 2026-12-01T00:00:00+01:00"), "{body}");
}

#[test]
fn a_reload_that_raises_the_limit_keeps_what_was_consumed() {
    let b = Bench::new("{algorithm: quota, per: 'header:x-org', limit: 3, period: P1M}", "2026-06-10T00:00:00Z");
    for _ in 0..3 {
        assert!(b.post("acme").allowed());
    }
    assert!(!b.post("acme").allowed());
    let reload = |quota: &str| {
        let source = Source::from_text(Path::new("quota.yaml"), spec(quota));
        let policy = Arc::new(opbound::policy::load_source(source, &opbound::Options::default()).unwrap().policy);
        Limiter::carrying_over(policy, Arc::new(b.clock.clone()), b.limiter.hasher().clone(), Some(&b.limiter))
    };
    // The customer upgraded mid-month: 5 now, of which 3 are used.
    let upgraded = reload("{algorithm: quota, per: 'header:x-org', limit: 5, period: P1M}");
    let facts = Given {
        address: "192.0.2.1".parse::<IpAddr>().unwrap(),
        headers: vec![("x-org".to_string(), b"acme".to_vec())],
        query: None,
    };
    let post = |l: &Limiter| l.decide(&l.plan(l.policy().route("POST", "/convert"), &facts, None, Stage::All));
    assert_eq!(post(&upgraded).report.unwrap().remaining, 1);
    assert!(post(&upgraded).allowed());
    assert!(!post(&upgraded).allowed());
    // A quota with another period counts afresh: a different promise.
    let daily = reload("{algorithm: quota, per: 'header:x-org', limit: 5, period: P1D}");
    assert_eq!(post(&daily).report.unwrap().remaining, 4);
}
