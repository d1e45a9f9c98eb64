//! Bounds keyed on a request body (`per: json:/POINTER`, `per: form:NAME`) and costs a request
//! states (`cost-from` with `max-cost`), in the engine on a manual clock: which key and cost a
//! plan takes from each source, what is missing or unclear, and that a cost above `max-cost` is
//! refused before anything is counted. And what `check` says about them.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opbound::engine::{KeyHasher, Limiter, ManualClock, Outcome, Stage};
use opbound::policy::BoundIndex;
use opbound::request::{Given, WithBody};
use opbound::spec::Source;

const SPEC: &str = r#"
openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /login:
    post:
      operationId: login
      requestBody: {content: {application/json: {}, application/x-www-form-urlencoded: {}}}
      x-rate-limit:
        - {per: address, limit: 20, window: PT1M}
        - {per: json:/username, limit: 5, window: PT15M, missing: reject}
  /form:
    post:
      operationId: form
      requestBody: {content: {application/x-www-form-urlencoded: {}}}
      x-rate-limit: {per: form:username, limit: 2, window: PT15M}
  /items/bulk:
    post:
      operationId: bulk
      requestBody: {content: {application/json: {}}}
      x-rate-limit: {per: route, limit: 100, window: PT1H, cost-from: json:/items, max-cost: 10}
  /search:
    get:
      operationId: search
      x-rate-limit:
        - {per: route, limit: 100, window: PT1H, cost-from: query:n, max-cost: 10, cost: 3}
        - {per: address, limit: 100, window: PT1H, cost-from: header:X-Count, max-cost: 50}
"#;

fn limiter(yaml: &str) -> Limiter {
    let source = Source::from_text(Path::new("body.yaml"), yaml.to_string());
    let policy = match opbound::policy::load_source(source, &opbound::Options::default()) {
        Ok(l) => Arc::new(l.policy),
        Err(e) => panic!("test policy is invalid: {e:?}"),
    };
    Limiter::new(policy, Arc::new(ManualClock::starting_at(Duration::from_secs(1000))), KeyHasher::random())
}

fn head(content_type: &str, query: Option<&str>, headers: &[(&str, &str)]) -> Given {
    let mut all = vec![("content-type".to_string(), content_type.as_bytes().to_vec())];
    all.extend(headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())));
    Given { address: "192.0.2.9".parse::<IpAddr>().unwrap(), headers: all, query: query.map(str::to_string) }
}

/// Plans and decides a request at every stage, as `Shared::judge` does in memory.
fn decide(l: &Limiter, method: &str, path: &str, head: &Given, body: Option<&str>) -> opbound::engine::Decision {
    let op = l.policy().route(method, path);
    let facts = WithBody { facts: head, body: body.map(str::as_bytes) };
    l.decide(&l.plan(op, &facts, None, Stage::All))
}

#[test]
fn a_json_key_counts_each_username_apart_and_the_body_is_read_only_at_the_last_stage() {
    let l = limiter(SPEC);
    let json = head("application/json", None, &[]);
    let op = l.policy().route("POST", "/login");
    assert!(l.needs_body(op) && !l.needs_identity(op));
    let early = l.plan(op, &json, None, Stage::IdentityFree);
    assert_eq!(early.checks.len(), 1, "only the address bound is checked before the body");
    assert!(early.rejected.is_none(), "a missing body key is nothing before the body is read");
    for _ in 0..5 {
        assert!(decide(&l, "POST", "/login", &json, Some(r#"{"username":"ann","password":"x"}"#)).allowed());
    }
    let sixth = decide(&l, "POST", "/login", &json, Some(r#"{"password":"y","username":"ann"}"#));
    assert_eq!(sixth.outcome, Outcome::Limited { bound: BoundIndex::new(1) });
    assert!(decide(&l, "POST", "/login", &json, Some(r#"{"username":"bob"}"#)).allowed(), "others are unaffected");
}

#[test]
fn what_cannot_be_read_as_the_upstream_reads_it_is_missing_or_unclear() {
    let l = limiter(SPEC);
    let json = head("application/json", None, &[]);
    let missing = |d: opbound::engine::Decision| matches!(d.outcome, Outcome::MissingKey { .. });
    assert!(missing(decide(&l, "POST", "/login", &json, None)), "no body read (over the limit, or decide)");
    assert!(missing(decide(&l, "POST", "/login", &json, Some("{\"username\":"))));
    assert!(missing(decide(&l, "POST", "/login", &json, Some(r#"{"username":{"first":"ann"}}"#))));
    assert!(missing(decide(&l, "POST", "/login", &json, Some(r#"{"username":null}"#))));
    let form = head("application/x-www-form-urlencoded", None, &[]);
    assert!(missing(decide(&l, "POST", "/login", &form, Some("username=ann"))), "a form is not JSON");
    // JSON labelled as something else is JSON to many applications, so it is read as JSON.
    let labelled = decide(&l, "POST", "/login", &form, Some(r#"{"username":"zed"}"#));
    assert!(labelled.allowed() && !missing(labelled));
    // A compressed body: the upstream may inflate it, opbound does not, so a client could pick
    // to go uncounted by compressing. Unclear, whatever `missing` says.
    let gz = head("application/json", None, &[("content-encoding", "gzip")]);
    let compressed = decide(&l, "POST", "/login", &gz, Some("\u{1f}\u{8b}..."));
    assert!(matches!(compressed.outcome, Outcome::UnclearKey { .. }), "{:?}", compressed.outcome);
    let twice = decide(&l, "POST", "/login", &json, Some(r#"{"username":"ann","username":"bob"}"#));
    assert!(matches!(twice.outcome, Outcome::UnclearKey { .. }), "{:?}", twice.outcome);
    let problem = opbound::engine::problem::body(l.policy(), l.policy().route("POST", "/login"), &twice).unwrap();
    assert_eq!(problem.0, 400);
}

#[test]
fn a_form_key_is_read_as_a_query_parameter_is() {
    let l = limiter(SPEC);
    let form = head("application/x-www-form-urlencoded", None, &[]);
    assert!(decide(&l, "POST", "/form", &form, Some("username=ann&password=x")).allowed());
    assert!(decide(&l, "POST", "/form", &form, Some("password=y&username=%61nn")).allowed());
    let third = decide(&l, "POST", "/form", &form, Some("username=ann"));
    assert_eq!(third.outcome, Outcome::Limited { bound: BoundIndex::new(2) });
    let twice = decide(&l, "POST", "/form", &form, Some("username=ann&username=bob"));
    assert!(matches!(twice.outcome, Outcome::UnclearKey { .. }));
    assert!(decide(&l, "POST", "/form", &form, Some("password=x")).allowed(), "missing: pass");
}

#[test]
fn costs_come_from_a_json_array_a_query_parameter_or_a_header() {
    let l = limiter(SPEC);
    let json = head("application/json", None, &[]);
    let cost = |method: &str, path: &str, head: &Given, body: Option<&str>| {
        let op = l.policy().route(method, path);
        let plan = l.plan(op, &WithBody { facts: head, body: body.map(str::as_bytes) }, None, Stage::All);
        assert!(plan.rejected.is_none(), "{:?}", plan.rejected);
        plan.checks.iter().map(|c| c.cost).collect::<Vec<_>>()
    };
    assert_eq!(cost("POST", "/items/bulk", &json, Some(r#"{"items":[1,2,3,4]}"#)), [4]);
    assert_eq!(cost("POST", "/items/bulk", &json, Some(r#"{"items":7}"#)), [7]);
    assert_eq!(cost("POST", "/items/bulk", &json, Some(r#"{"other":1}"#)), [1], "absent: cost");
    assert_eq!(cost("POST", "/items/bulk", &json, None), [1], "no body read: cost");
    assert_eq!(cost("GET", "/search", &head("", Some("n=9"), &[("x-count", "40")]), None), [9, 40]);
    assert_eq!(cost("GET", "/search", &head("", None, &[]), None), [3, 1]);
    assert_eq!(cost("GET", "/search", &head("", Some("n=0"), &[]), None), [0, 1]);
}

#[test]
fn a_cost_above_max_cost_is_refused_with_413_and_nothing_is_counted() {
    let l = limiter(SPEC);
    let json = head("application/json", None, &[]);
    let op = l.policy().route("POST", "/items/bulk");
    let eleven = r#"{"items":[0,0,0,0,0,0,0,0,0,0,0]}"#;
    let too_high = decide(&l, "POST", "/items/bulk", &json, Some(eleven));
    assert_eq!(too_high.outcome, Outcome::CostTooHigh { bound: BoundIndex::new(3), stated: 11 });
    let (status, body) = opbound::engine::problem::body(l.policy(), op, &too_high).unwrap();
    assert_eq!(status, 413);
    assert!(body.contains("at most 10 in one request, and this one states 11"), "{body}");
    // Ten requests of 10 use the whole budget of 100: the refused 11 took nothing.
    for i in 0..10 {
        let d = decide(&l, "POST", "/items/bulk", &json, Some(r#"{"items":10}"#));
        assert!(d.allowed(), "request {i}");
    }
    assert!(!decide(&l, "POST", "/items/bulk", &json, Some(r#"{"items":1}"#)).allowed());

    // A cost in the head is refused before any bound is consulted: at the first stage.
    let search = l.policy().route("GET", "/search");
    let plan = l.plan(search, &head("", Some("n=11"), &[]), None, Stage::IdentityFree);
    assert!(matches!(plan.rejected, Some(Outcome::CostTooHigh { stated: 11, .. })));
    for (query, header) in [(Some("n=-1"), None), (Some("n=2.5"), None), (Some("n=1&n=2"), None), (None, Some("x"))] {
        let headers: Vec<(&str, &str)> = header.map(|h| ("x-count", h)).into_iter().collect();
        let d = decide(&l, "GET", "/search", &head("", query, &headers), None);
        assert!(matches!(d.outcome, Outcome::BadCost { .. }), "{query:?} {header:?}: {:?}", d.outcome);
        assert_eq!(opbound::engine::problem::body(l.policy(), search, &d).unwrap().0, 400);
    }
    let bad = decide(&l, "POST", "/items/bulk", &json, Some(r#"{"items":"ten"}"#));
    assert!(matches!(bad.outcome, Outcome::BadCost { .. }));
}

fn warnings(yaml: &str, decision_service: bool) -> Vec<String> {
    let source = Source::from_text(Path::new("body.yaml"), yaml.to_string());
    let options = opbound::Options { decision_service, shared_store: true, ..opbound::Options::default() };
    match opbound::policy::load_source(source, &options) {
        Ok(l) => l.policy.warnings.iter().map(|f| format!("{}: {}", f.pointer, f.message)).collect(),
        Err(e) => panic!("invalid: {e:?}"),
    }
}

#[test]
fn check_warns_when_the_operation_declares_no_such_body_and_for_decide() {
    let spec = r#"
openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /login:
    post:
      operationId: login
      requestBody: {content: {application/x-www-form-urlencoded: {}}}
      x-rate-limit: {per: json:/username, limit: 5, window: PT15M}
  /plain:
    post:
      operationId: plain
      x-rate-limit: [{per: address, limit: 5, window: PT15M, cost-from: json:/items, max-cost: 5}]
  /ok:
    post:
      operationId: ok
      requestBody: {content: {application/vnd.api+json; charset=utf-8: {}}}
      x-rate-limit: {per: json:/username, limit: 5, window: PT15M}
"#;
    let body: Vec<String> = warnings(spec, false).into_iter().filter(|w| w.contains("requestBody:")).collect();
    assert_eq!(
        body,
        [
            "/paths/~1login/post/requestBody: bound login:0 reads per json:/username from a body sent as application/json (or a +json type), but operation login declares its body as application/x-www-form-urlencoded: unless a client sends one, its key is missing",
            "/paths/~1plain/post/requestBody: bound plain:0 reads cost-from json:/items from a body sent as application/json (or a +json type), but operation plain declares no requestBody: unless a client sends one, every request costs cost",
        ]
    );
    let decide = warnings(spec, true);
    assert!(
        decide
            .iter()
            .any(|w| w.starts_with(": 3 bounds read the request body, which a decision service never sees (except")),
        "{decide:#?}"
    );
}
