//! The meter against a real limiter on a manual clock: what each wire format reports is what is
//! charged, a body cut short pays at least its estimate, and a success that reports nothing
//! pays `max-cost`.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{BodyKind, Limits, Meter};
use crate::engine::{Decision, KeyHasher, Limiter, ManualClock, Outcome, Stage};
use crate::policy::BoundIndex;
use crate::request::{Given, WithBody};
use crate::spec::Source;

/// A limiter with one bound of 10,000 tokens a minute, reserving `max_tokens` from the request
/// (at most 1,000) and settled as `settle` says.
fn limiter(settle: &str) -> Limiter {
    limiter_of(&format!("cost-from: json:/max_tokens, max-cost: 1000, settle: '{settle}'"))
}

/// A limiter with one bound of 10,000 tokens a minute, counting as `counting` says.
fn limiter_of(counting: &str) -> Limiter {
    let yaml = format!(
        "openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\npaths:\n  /v1/chat:\n    post:\n      requestBody: {{content: {{application/json: {{schema: {{type: object, properties: {{max_tokens: {{type: integer}}}}}}}}}}}}\n      x-rate-limit:\n        - {{per: route, limit: 10000, window: PT1M, {counting}}}\n"
    );
    let source = Source::from_text(Path::new("test.yaml"), yaml);
    let policy = match crate::policy::load_source(source, &crate::Options::default()) {
        Ok(l) => Arc::new(l.policy),
        Err(e) => panic!("test policy is invalid: {e:?}"),
    };
    let clock = ManualClock::starting_at(Duration::from_secs(1_000_000));
    Limiter::new(policy, Arc::new(clock), KeyHasher::random())
}

/// Admits a request that reserves `estimate`.
fn admit(l: &Limiter, estimate: u32) -> Decision {
    let head = Given { address: "192.0.2.1".parse::<IpAddr>().unwrap(), headers: vec![], query: None };
    let body = format!("{{\"max_tokens\": {estimate}}}");
    let facts = WithBody { facts: &head, body: Some(body.as_bytes()) };
    let op = l.policy().route("POST", "/v1/chat");
    let d = l.decide(&l.plan(op, &facts, None, Stage::All));
    assert!(matches!(d.outcome, Outcome::Allowed), "admitted");
    d
}

/// Admits a request reserving `estimate` and meters its response.
fn meter(l: &Limiter, estimate: u32, content_type: &str) -> Meter {
    let mut d = admit(l, estimate);
    let kind = BodyKind { content_type: Some(content_type), content_encoding: None };
    let reservations = std::mem::take(&mut d.reservations);
    Meter::new(reservations, 200, kind, |_| None, Limits::default()).expect("the bound reads the body")
}

fn used(l: &Limiter) -> u32 {
    let b = BoundIndex::new(0);
    10000 - l.inspect(b, l.caller_key(b, "").unwrap()).remaining
}

#[test]
fn a_json_body_is_charged_what_it_reports() {
    let l = limiter("json:/usage/total_tokens");
    let mut m = meter(&l, 300, "application/json");
    assert_eq!(used(&l), 300, "the estimate is held while the response comes");
    for piece in
        br#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":5,"total_tokens":42}}"#.chunks(7)
    {
        m.feed(piece);
    }
    m.end();
    assert_eq!(used(&l), 42);
}

#[test]
fn an_anthropic_stream_is_charged_its_weighted_sum() {
    let l = limiter("json:/message/usage/input_tokens + 4 * json:/usage/output_tokens");
    let mut m = meter(&l, 500, "text/event-stream; charset=utf-8");
    m.feed(b"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n");
    m.feed(b"event: message_delta\ndata: {\"usage\":{\"output_tokens\":10}}\n\n");
    m.end();
    assert_eq!(used(&l), 20 + 4 * 10);
}

#[test]
fn a_stream_cut_short_pays_at_least_its_estimate() {
    let l = limiter("json:/usage/total_tokens");
    // Cut before any usage: what it used is unknown, so max-cost.
    drop(meter(&l, 300, "text/event-stream"));
    assert_eq!(used(&l), 1000);
    // Cut after reporting less than the estimate: the estimate.
    let mut m = meter(&l, 200, "text/event-stream");
    m.feed(b"data: {\"usage\":{\"total_tokens\":50}}\n\n");
    drop(m);
    assert_eq!(used(&l), 1200);
    // Cut after reporting more: what it reported.
    let mut m = meter(&l, 100, "text/event-stream");
    m.feed(b"data: {\"usage\":{\"total_tokens\":150}}\n\n");
    drop(m);
    assert_eq!(used(&l), 1350);
    // Whole, having reported less than its estimate: what it reported.
    let mut m = meter(&l, 100, "text/event-stream");
    m.feed(b"data: {\"usage\":{\"total_tokens\":30}}\n\ndata: [DONE]\n\n");
    m.end();
    assert_eq!(used(&l), 1380);
}

/// Issue 63: a stream that never reported its usage paid the client's estimate (1 for 10,034
/// tokens). A success that reports nothing now pays `max-cost`, however it came: a JSON body
/// without usage, a stream without a usage chunk, a body not JSON, compressed, or past the cap.
#[test]
fn what_cannot_be_read_pays_max_cost_and_is_counted() {
    let l = limiter("json:/usage/total_tokens");
    let before = super::unread_total();
    let mut m = meter(&l, 1, "text/event-stream");
    m.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n");
    m.end();
    assert_eq!(used(&l), 1000, "a whole stream without a usage chunk");
    let mut m = meter(&l, 70, "application/json");
    m.feed(br#"{"id":"x","usage":{}}"#);
    m.end();
    assert_eq!(used(&l), 2000, "a JSON body without the usage");
    let mut m = meter(&l, 70, "application/json");
    m.feed(b"<html>not json</html>");
    m.end();
    assert_eq!(used(&l), 3000);
    let mut d = admit(&l, 30);
    let gzip = BodyKind { content_type: Some("application/json"), content_encoding: Some("gzip") };
    let mut m = Meter::new(std::mem::take(&mut d.reservations), 200, gzip, |_| None, Limits::default()).unwrap();
    m.feed(br#"{"usage":{"total_tokens":1}}"#);
    m.end();
    assert_eq!(used(&l), 4000, "a compressed body is not read");
    assert!(super::unread_total() >= before + 4);
    // Past the byte cap, what was found by then stands: here, nothing.
    let mut d = admit(&l, 30);
    let json = BodyKind { content_type: Some("application/json"), content_encoding: None };
    let limits = Limits { max_bytes: 16, ..Limits::default() };
    let mut m = Meter::new(std::mem::take(&mut d.reservations), 200, json, |_| None, limits).unwrap();
    m.feed(br#"{"pad":"xxxxxxxxxxxxxxxxxxxx","usage":{"total_tokens":1}}"#);
    m.end();
    assert_eq!(used(&l), 5000);
}

/// Only a success is expected to report its usage: an error's body (a 400 saying why) leaves
/// the estimate. And a bound without `max-cost` has nothing else to charge.
#[test]
fn an_error_or_a_bound_without_max_cost_leaves_the_estimate() {
    let l = limiter("json:/usage/total_tokens");
    let mut d = admit(&l, 70);
    let json = BodyKind { content_type: Some("application/json"), content_encoding: None };
    let mut m = Meter::new(std::mem::take(&mut d.reservations), 400, json, |_| None, Limits::default()).unwrap();
    m.feed(br#"{"error":{"message":"bad"}}"#);
    m.end();
    assert_eq!(used(&l), 70);
    let l = limiter_of("cost: 20, settle: json:/usage/total_tokens");
    let mut m = meter(&l, 0, "application/json");
    m.feed(br#"{"id":"x"}"#);
    m.end();
    assert_eq!(used(&l), 20);
    // max-cost beside settle alone: what a silent success pays.
    let l = limiter_of("cost: 20, max-cost: 500, settle: json:/usage/total_tokens");
    let mut m = meter(&l, 0, "application/json");
    m.feed(br#"{"id":"x"}"#);
    m.end();
    assert_eq!(used(&l), 500);
}
