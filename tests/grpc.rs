//! `opbound decide --grpc`, the real binary, driven over loopback by clients built from Envoy's
//! own protobuf definitions (`envoy-types`): ext_authz v3 `Check`, the rate-limit service v3
//! `ShouldRateLimit`, and `grpc.health.v1.Health`. Envoy itself cannot run here (no package);
//! these tests speak its side of the protocol, message for message.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use common::{Opbound, TempSpec, free_port, get_with};
use envoy_types::pb::envoy::config::core::v3::{
    Address, HeaderMap as PbHeaderMap, HeaderValue, HeaderValueOption, SocketAddress, address,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{
    AttributeContext, CheckRequest, CheckResponse, DeniedHttpResponse, check_response,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use prost::Message;
use serde_json::Value;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: grpc, version: '1'}
paths:
  /items/{id}:
    get:
      operationId: getItem
      x-rate-limit:
        - {per: address, limit: 2, window: PT1M}
  /keyed:
    get:
      operationId: keyed
      x-rate-limit:
        - {per: 'header:X-Api-Key', limit: 1, window: PT1M, missing: reject}
  /mine:
    get:
      operationId: mine
      x-rate-limit:
        - {per: user, limit: 1, window: PT1M}
  /batch:
    post:
      operationId: batch
      x-rate-limit:
        - {per: route, limit: 10, window: PT1M}
"#;

/// Starts `decide` with gRPC only and the flags given.
fn grpc_only(spec: &TempSpec, more: &[&str]) -> Opbound {
    let mut args = vec!["decide", "--spec", spec.arg(), "--grpc", "127.0.0.1:0", "--no-http"];
    if !more.contains(&"--trusted-proxy") {
        args.extend(["--trusted-proxy", "127.0.0.1"]);
    }
    // The spec's per-user bound needs an identity source.
    if !more.contains(&"--jwt-secret-file") && !more.contains(&"--identity-header") {
        args.extend(["--identity-header", "user=X-User-Id"]);
    }
    args.extend_from_slice(more);
    Opbound::start_as_written(&args)
}

fn endpoint(ob: &Opbound) -> String {
    format!("http://{}", ob.grpc().expect("gRPC listening"))
}

/// A check of `method path` with these headers, from a client at `source`, as Envoy sends it.
fn check_request(method: &str, path: &str, headers: &[(&str, &str)], source: &str) -> CheckRequest {
    let source = Peer {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: source.to_string(),
                ..Default::default()
            })),
        }),
        ..Default::default()
    };
    let http = HttpRequest {
        method: method.to_string(),
        path: path.to_string(),
        host: "api.example".to_string(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(source),
            request: Some(Request { http: Some(http), ..Default::default() }),
            ..Default::default()
        }),
    }
}

async fn check(ob: &Opbound, request: CheckRequest) -> CheckResponse {
    let mut client = AuthorizationClient::connect(endpoint(ob)).await.expect("connects");
    client.check(request).await.expect("a check is answered").into_inner()
}

/// What a check answer says, flattened: gRPC code, HTTP status (200 when allowed), headers, body.
struct Answer {
    code: i32,
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

fn flatten(options: &[HeaderValueOption]) -> HashMap<String, String> {
    options.iter().filter_map(|o| o.header.as_ref()).map(|h| (h.key.clone(), h.value.clone())).collect()
}

fn answer(r: CheckResponse) -> Answer {
    let code = r.status.as_ref().map_or(-1, |s| s.code);
    match r.http_response {
        Some(check_response::HttpResponse::OkResponse(ok)) => {
            Answer { code, status: 200, headers: flatten(&ok.response_headers_to_add), body: String::new() }
        }
        Some(check_response::HttpResponse::DeniedResponse(DeniedHttpResponse { status, headers, body })) => {
            Answer { code, status: status.map_or(0, |s| s.code as u16), headers: flatten(&headers), body }
        }
        other => panic!("a check answer without an OK or denied HTTP response: {other:?}"),
    }
}

async fn checked(ob: &Opbound, method: &str, path: &str, headers: &[(&str, &str)], source: &str) -> Answer {
    answer(check(ob, check_request(method, path, headers, source)).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_allows_with_headers_then_refuses_as_serve_would() {
    let spec = TempSpec::new("grpc-check", SPEC);
    let ob = grpc_only(&spec, &[]);
    let a = checked(&ob, "GET", "/items/1", &[], "203.0.113.9").await;
    assert_eq!((a.code, a.status), (0, 200));
    assert_eq!((a.header("ratelimit-limit"), a.header("ratelimit-remaining")), (Some("2"), Some("1")));
    assert!(a.header("ratelimit-reset").is_some());
    // Another spelling of the same operation is the same operation.
    let a = checked(&ob, "get", "/items/./2?x=1", &[], "203.0.113.9").await;
    assert_eq!((a.status, a.header("ratelimit-remaining")), (200, Some("0")));
    let refused = checked(&ob, "GET", "/items/3", &[], "203.0.113.9").await;
    assert_eq!(refused.code, tonic::Code::ResourceExhausted as i32);
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    assert_eq!(refused.header("ratelimit-remaining"), Some("0"));
    let retry: u64 = refused.header("retry-after").expect("retry-after").parse().unwrap();
    // Two of two this minute: the next one passes once the estimate has room, half-way into the
    // next window at the latest (1 of the 2 still weighs until then).
    assert!((1..=90).contains(&retry), "retry-after {retry}");
    let body = refused.json();
    assert_eq!((body["status"].as_u64(), body["bound"].as_str()), (Some(429), Some("getItem:0")));
    // Per address: another client still has its budget.
    assert_eq!(checked(&ob, "GET", "/items/1", &[], "203.0.113.10").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_the_status_serve_would_answer() {
    let spec = TempSpec::new("grpc-status", SPEC);
    let ob = grpc_only(&spec, &[]);
    // A key the bound requires, missing: 400.
    let missing = checked(&ob, "GET", "/keyed", &[], "203.0.113.9").await;
    assert_eq!((missing.status, missing.code), (400, tonic::Code::InvalidArgument as i32));
    assert_eq!(missing.json()["type"], "tag:opbound.dev,2026:missing-key");
    // A key sent twice with different values (Envoy's raw header map keeps them apart): 400.
    let mut twice = check_request("GET", "/keyed", &[], "203.0.113.9");
    let http = twice.attributes.as_mut().unwrap().request.as_mut().unwrap().http.as_mut().unwrap();
    let raw = |k: &str, v: &str| HeaderValue { key: k.into(), raw_value: v.as_bytes().to_vec(), ..Default::default() };
    http.header_map = Some(PbHeaderMap { headers: vec![raw("x-api-key", "a"), raw("x-api-key", "b")] });
    let unclear = answer(check(&ob, twice).await);
    assert_eq!(unclear.status, 400);
    assert_eq!(unclear.json()["type"], "tag:opbound.dev,2026:unclear-key");
    // The key once: counted, then refused.
    assert_eq!(checked(&ob, "GET", "/keyed", &[("x-api-key", "a")], "203.0.113.9").await.status, 200);
    assert_eq!(checked(&ob, "GET", "/keyed", &[("x-api-key", "a")], "203.0.113.9").await.status, 429);
    // What cannot be read is refused, never decided as something else.
    for (method, path) in [("GET", "/items%2F1"), ("GE T", "/items/1"), ("GET", "items/1"), ("GET", "")] {
        let a = checked(&ob, method, path, &[], "203.0.113.9").await;
        assert_eq!(a.status, 400, "{method} {path:?}");
        assert_eq!(a.json()["type"], "tag:opbound.dev,2026:malformed-request", "{method} {path:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_envoy_is_believed() {
    let spec = TempSpec::new("grpc-untrusted", SPEC);
    let ob = grpc_only(&spec, &["--trusted-proxy", "10.0.0.0/8"]);
    let a = checked(&ob, "GET", "/items/1", &[], "203.0.113.9").await;
    assert_eq!(a.status, 400, "the peer (127.0.0.1) is not a trusted proxy");
    assert!(a.json()["detail"].as_str().unwrap().contains("--trusted-proxy"));
    // A misconfigured gateway sends nothing else: the operator hears of it, once, not per check.
    assert_eq!(checked(&ob, "GET", "/items/1", &[], "203.0.113.9").await.status, 400);
    let warned = ob.logged_at_least("could not be read", 1);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("--trusted-proxy") && warned[0].contains("ext_authz"), "{warned:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_is_envoys_peer_unless_that_peer_is_trusted() {
    let spec = TempSpec::new("grpc-address", SPEC);
    let ob = grpc_only(&spec, &["--trusted-proxy", "127.0.0.0/8"]);
    // An untrusted client's own X-Forwarded-For is not believed: it spends its own budget.
    for (i, spoof) in ["198.51.100.1", "198.51.100.2"].iter().enumerate() {
        let a = checked(&ob, "GET", "/items/1", &[("x-forwarded-for", spoof)], "203.0.113.20").await;
        assert_eq!((a.status, a.header("ratelimit-remaining")), (200, Some(["1", "0"][i])));
    }
    let a = checked(&ob, "GET", "/items/1", &[("x-forwarded-for", "198.51.100.3")], "203.0.113.20").await;
    assert_eq!(a.status, 429);
    // A balancer in front of Envoy (trusted): the client is the address it forwarded for.
    for client in ["198.51.100.1", "198.51.100.2"] {
        let a = checked(&ob, "GET", "/items/1", &[("x-forwarded-for", client)], "127.0.0.5").await;
        assert_eq!((a.status, a.header("ratelimit-remaining")), (200, Some("1")), "{client}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_from_headers_and_from_a_jwt() {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let spec = TempSpec::new("grpc-identity", SPEC);
    let ob = grpc_only(&spec, &["--identity-header", "user=X-User-Id"]);
    let user = |u: &'static str| [("x-user-id", u)];
    assert_eq!(checked(&ob, "GET", "/mine", &user("alice"), "203.0.113.9").await.status, 200);
    assert_eq!(checked(&ob, "GET", "/mine", &user("alice"), "203.0.113.9").await.status, 429);
    assert_eq!(checked(&ob, "GET", "/mine", &user("bob"), "203.0.113.9").await.status, 200);

    let secret = spec.dir().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let ob = grpc_only(&spec, &["--jwt-secret-file", secret.to_str().unwrap()]);
    let token = |sub: &str, key: &[u8]| {
        let claims = serde_json::json!({"sub": sub, "exp": 4_000_000_000u64});
        format!("Bearer {}", encode(&Header::default(), &claims, &EncodingKey::from_secret(key).unwrap()).unwrap())
    };
    let (alice, bob, forged) = (token("alice", b"s3cret"), token("bob", b"s3cret"), token("alice", b"guess"));
    let auth = |t: &str| [("authorization".to_string(), t.to_string())];
    let ask = |t: &str| {
        let h = auth(t);
        let headers: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        check_request("GET", "/mine", &headers, "203.0.113.9")
    };
    assert_eq!(answer(check(&ob, ask(&alice)).await).status, 200);
    assert_eq!(answer(check(&ob, ask(&alice)).await).status, 429);
    assert_eq!(answer(check(&ob, ask(&bob)).await).status, 200);
    // A forged token makes the caller anonymous: the per-user bound does not apply.
    assert_eq!(answer(check(&ob, ask(&forged)).await).status, 200);
    assert_eq!(answer(check(&ob, ask(&forged)).await).status, 200);
}

/// A rate-limit request with one descriptor of these entries, `hits` times.
fn rls_request(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "opbound".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
            hits_addend: hits.map(|value| UInt64Value { value }),
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

async fn should_rate_limit(ob: &Opbound, request: RateLimitRequest) -> RateLimitResponse {
    let mut client = RateLimitServiceClient::connect(endpoint(ob)).await.expect("connects");
    client.should_rate_limit(request).await.expect("answered").into_inner()
}

fn rls_headers(r: &RateLimitResponse) -> HashMap<String, String> {
    r.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_service_reads_descriptors_and_charges_hits() {
    let spec = TempSpec::new("grpc-rls", SPEC);
    let ob = grpc_only(&spec, &[]);
    let batch = [("method", "POST"), ("path", "/batch?dry=0"), ("remote_address", "203.0.113.9")];
    let r = should_rate_limit(&ob, rls_request(&batch, Some(4))).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses.len(), 1);
    let status = &r.statuses[0];
    let limit = status.current_limit.as_ref().expect("the bound reported");
    assert_eq!((limit.name.as_str(), limit.requests_per_unit), ("batch:0", 10));
    assert_eq!(limit.unit, rate_limit::Unit::Minute as i32);
    assert_eq!(status.limit_remaining, 6, "four hits of ten");
    let reset = status.duration_until_reset.as_ref().unwrap();
    assert!((0..=60).contains(&reset.seconds), "{reset:?}");
    assert_eq!(rls_headers(&r).get("ratelimit-remaining").map(String::as_str), Some("6"));
    assert!(r.raw_body.is_empty());

    assert_eq!(should_rate_limit(&ob, rls_request(&batch, Some(4))).await.statuses[0].limit_remaining, 2);
    let refused = should_rate_limit(&ob, rls_request(&batch, Some(4))).await;
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    assert_eq!(refused.statuses[0].code, Code::OverLimit as i32);
    let headers = rls_headers(&refused);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(headers.get("content-type").map(String::as_str), Some("application/problem+json"));
    let body: Value = serde_json::from_slice(&refused.raw_body).unwrap();
    assert_eq!((body["status"].as_u64(), body["bound"].as_str()), (Some(429), Some("batch:0")));
    // Two hits still fit: a refused request counted nothing.
    assert_eq!(should_rate_limit(&ob, rls_request(&batch, Some(2))).await.overall_code, Code::Ok as i32);

    // More hits than the bound could ever admit: 413, before anything is counted.
    let other = [("method", "POST"), ("path", "/batch"), ("remote_address", "203.0.113.10")];
    let spec2 = TempSpec::new("grpc-rls-2", SPEC);
    let fresh = grpc_only(&spec2, &[]);
    let too_many = should_rate_limit(&fresh, rls_request(&other, Some(11))).await;
    assert_eq!(too_many.overall_code, Code::OverLimit as i32);
    let body: Value = serde_json::from_slice(&too_many.raw_body).unwrap();
    assert_eq!((body["status"].as_u64(), body["max_cost"].as_u64()), (Some(413), Some(10)));
    assert_eq!(should_rate_limit(&fresh, rls_request(&other, Some(10))).await.overall_code, Code::Ok as i32);
    // The request-level hits_addend counts when no descriptor gives one.
    let mut r = rls_request(&other, None);
    r.hits_addend = 1;
    assert_eq!(should_rate_limit(&fresh, r).await.overall_code, Code::OverLimit as i32, "ten of ten were used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_service_reads_headers_and_refuses_what_it_cannot_read() {
    let spec = TempSpec::new("grpc-rls-keys", SPEC);
    let ob = grpc_only(&spec, &[]);
    let keyed = |key: &'static str| [("method", "GET"), ("path", "/keyed"), ("x-api-key", key)];
    assert_eq!(should_rate_limit(&ob, rls_request(&keyed("k1"), None)).await.overall_code, Code::Ok as i32);
    assert_eq!(should_rate_limit(&ob, rls_request(&keyed("k1"), None)).await.overall_code, Code::OverLimit as i32);
    assert_eq!(should_rate_limit(&ob, rls_request(&keyed("k2"), None)).await.overall_code, Code::Ok as i32);
    // Missing method or path: refused (fail closed), with a 400 body saying why.
    let r = should_rate_limit(&ob, rls_request(&[("path", "/keyed"), ("x-api-key", "k3")], None)).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let body: Value = serde_json::from_slice(&r.raw_body).unwrap();
    assert_eq!(body["status"], 400);
    assert!(body["detail"].as_str().unwrap().contains("method"), "{body}");
    // A missing key the bound requires: refused with the missing-key body.
    let r = should_rate_limit(&ob, rls_request(&[("method", "GET"), ("path", "/keyed")], None)).await;
    let body: Value = serde_json::from_slice(&r.raw_body).unwrap();
    assert_eq!(
        (r.overall_code, body["type"].as_str()),
        (Code::OverLimit as i32, Some("tag:opbound.dev,2026:missing-key"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_failures_follow_on_store_error() {
    const STORE_SPEC: &str = r#"
openapi: 3.0.3
info: {title: store, version: '1'}
paths:
  /open:
    get:
      x-rate-limit: {per: route, limit: 1, window: PT1H, on-store-error: open}
  /closed:
    get:
      x-rate-limit: {per: route, limit: 1, window: PT1H, on-store-error: closed}
  /local:
    get:
      x-rate-limit: {per: route, limit: 1, window: PT1H, on-store-error: local}
"#;
    let spec = TempSpec::new("grpc-store", STORE_SPEC);
    // Nothing listens on this port: every store call fails.
    let store = format!("redis://127.0.0.1:{}", free_port());
    let ob = grpc_only(&spec, &["--store", &store]);
    for _ in 0..3 {
        assert_eq!(checked(&ob, "GET", "/open", &[], "203.0.113.9").await.status, 200, "open admits");
    }
    let closed = checked(&ob, "GET", "/closed", &[], "203.0.113.9").await;
    assert_eq!((closed.status, closed.code), (503, tonic::Code::Unavailable as i32), "closed refuses");
    assert!(closed.header("retry-after").is_some());
    assert_eq!(checked(&ob, "GET", "/local", &[], "203.0.113.9").await.status, 200);
    assert_eq!(checked(&ob, "GET", "/local", &[], "203.0.113.9").await.status, 429, "local counts here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_while_serving_changes_the_answers() {
    let spec = TempSpec::new("grpc-reload", SPEC);
    let ob = grpc_only(&spec, &[]);
    assert_eq!(checked(&ob, "GET", "/keyed", &[("x-api-key", "k")], "203.0.113.9").await.status, 200);
    assert_eq!(checked(&ob, "GET", "/keyed", &[("x-api-key", "k")], "203.0.113.9").await.status, 429);
    // The same connection keeps working across the reload.
    let mut client = AuthorizationClient::connect(endpoint(&ob)).await.unwrap();
    let raised = SPEC.replace("{per: 'header:X-Api-Key', limit: 1,", "{per: 'header:X-Api-Key', limit: 5,");
    let tmp = spec.dir().join(".next.yaml");
    std::fs::write(&tmp, raised).unwrap();
    std::fs::rename(&tmp, &spec.path).unwrap();
    assert!(!ob.logged_at_least("\"reloaded", 1).is_empty(), "the change was reloaded");
    let a = answer(
        client.check(check_request("GET", "/keyed", &[("x-api-key", "k")], "203.0.113.9")).await.unwrap().into_inner(),
    );
    assert_eq!((a.status, a.header("ratelimit-limit")), (200, Some("5")), "the new limit, counted afresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_serving_and_then_stopping() {
    let spec = TempSpec::new("grpc-health", SPEC);
    let ob = grpc_only(&spec, &["--shutdown-timeout", "5s"]);
    let channel = tonic::transport::Endpoint::from_shared(endpoint(&ob)).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.auth.v3.Authorization", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let unknown = health.check(HealthCheckRequest { service: "nope".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    let mut watch = health.watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    let first: HealthCheckResponse = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    ob.terminate();
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message()).await.expect("told before it stops");
    assert_eq!(next.unwrap().unwrap().status, ServingStatus::NotServing as i32);

    // A service opbound does not serve is unimplemented, not a hang.
    let spec = TempSpec::new("grpc-unknown", SPEC);
    let ob = grpc_only(&spec, &[]);
    let mut channel = tonic::transport::Endpoint::from_shared(endpoint(&ob)).unwrap().connect().await.unwrap();
    let mut client = tonic::client::Grpc::new(&mut channel);
    client.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/some.Other/Method");
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let e = client.unary(tonic::Request::new(HealthCheckRequest::default()), path, codec).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_http_decide_share_one_policy_and_its_counts() {
    let spec = TempSpec::new("grpc-both", SPEC);
    let admin = format!("127.0.0.1:{}", free_port());
    let ob = Opbound::start(&[
        "decide",
        "--spec",
        spec.arg(),
        "--gateway",
        "nginx",
        "--trusted-proxy",
        "127.0.0.1",
        "--identity-header",
        "user=X-User-Id",
        "--grpc",
        "127.0.0.1:0",
        "--admin",
        &admin,
    ]);
    // nginx asks over HTTP for a client at 203.0.113.9; Envoy asks over gRPC for the same one.
    let http = get_with(
        &ob.url("/"),
        &[("x-original-method", "GET"), ("x-original-uri", "/items/1"), ("x-forwarded-for", "203.0.113.9")],
    )
    .await;
    assert_eq!((http.status, http.header("ratelimit-remaining")), (200, Some("1")));
    let a = checked(&ob, "GET", "/items/1", &[], "203.0.113.9").await;
    assert_eq!((a.status, a.header("ratelimit-remaining")), (200, Some("0")));
    assert_eq!(checked(&ob, "GET", "/items/1", &[], "203.0.113.9").await.status, 429);
    let metrics = common::get(format!("http://{admin}/metrics")).await.body;
    assert!(metrics.contains("opbound_requests_total{operation=\"getItem\",outcome=\"allowed\"} 2"), "{metrics}");
    assert!(metrics.contains("opbound_requests_total{operation=\"getItem\",outcome=\"limited\"} 1"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_envoy_cannot_tell_is_warned_at_start() {
    const UNSEEN: &str = r#"
openapi: 3.0.3
info: {title: unseen, version: '1'}
paths:
  /slow:
    get:
      x-rate-limit: {per: address, algorithm: concurrency, limit: 2}
  /login:
    post:
      x-rate-limit:
        - {per: header:x-user, limit: 3, window: PT15M, count-when: [401]}
"#;
    let spec = TempSpec::new("grpc-unseen", UNSEEN);
    let dir = spec.dir().join("state");
    let ob = grpc_only(&spec, &["--state-dir", dir.to_str().unwrap()]);
    assert_eq!(ob.logged("cannot be released through a decision service").len(), 1, "{:?}", ob.logged("WARN"));
    assert_eq!(ob.logged("counts every admitted request through a decision service").len(), 1);
    // The permit goes back at once: a concurrency bound of 2 admits a third check.
    for _ in 0..3 {
        assert_eq!(checked(&ob, "GET", "/slow", &[], "203.0.113.9").await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_envoy_sends_whole_is_read_for_its_keys() {
    const SIGN_IN: &str = r#"
openapi: 3.0.3
info: {title: sign-in, version: '1'}
paths:
  /login:
    post:
      requestBody:
        content:
          application/json:
            schema: {type: object}
      x-rate-limit:
        - {per: json:/username, limit: 1, window: PT15M, missing: reject}
"#;
    let spec = TempSpec::new("grpc-body", SIGN_IN);
    let ob = grpc_only(&spec, &[]);
    let login = |body: &str, extra: &[(&'static str, &'static str)]| {
        let mut headers = vec![("content-type", "application/json")];
        headers.extend_from_slice(extra);
        let mut r = check_request("POST", "/login", &headers, "203.0.113.9");
        let http = r.attributes.as_mut().unwrap().request.as_mut().unwrap().http.as_mut().unwrap();
        http.body = body.to_string();
        r
    };
    let partial = [("x-envoy-auth-partial-body", "false")];
    assert_eq!(answer(check(&ob, login(r#"{"username":"ann"}"#, &partial)).await).status, 200);
    assert_eq!(answer(check(&ob, login(r#"{"username":"ann"}"#, &[])).await).status, 429, "the same user");
    // Sent as bytes (pack_as_bytes), another user is another key.
    let mut bytes = login("", &[]);
    let http = bytes.attributes.as_mut().unwrap().request.as_mut().unwrap().http.as_mut().unwrap();
    http.raw_body = br#"{"username":"bob"}"#.to_vec();
    assert_eq!(answer(check(&ob, bytes).await).status, 200);
    // Only part of the body: its key is not read from the prefix, so it is missing.
    let cut = answer(check(&ob, login(r#"{"username":"cy"}"#, &[("x-envoy-auth-partial-body", "true")])).await);
    assert_eq!((cut.status, cut.json()["type"].as_str()), (400, Some("tag:opbound.dev,2026:missing-key")));
    // No body at all (Envoy not configured to send it): missing too.
    assert_eq!(answer(check(&ob, login("", &[])).await).status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_over_one_connection_are_counted_exactly() {
    const EXACT: &str = r#"
openapi: 3.0.3
info: {title: exact, version: '1'}
paths:
  /report:
    post:
      x-rate-limit: {per: route, limit: 5, window: PT1H}
"#;
    let spec = TempSpec::new("grpc-exact", EXACT);
    let ob = grpc_only(&spec, &["--workers", "2"]);
    // One HTTP/2 connection, forty calls in flight on it at once, as Envoy multiplexes them.
    let client = AuthorizationClient::connect(endpoint(&ob)).await.unwrap();
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let source = format!("203.0.113.{}", i % 250);
                let r = client.check(check_request("POST", "/report", &[], &source)).await.unwrap();
                answer(r.into_inner()).status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 5, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 35, "{statuses:?}");
}

/// Bytes already encoded, sent and read back as they are: one large message built once and sent
/// many times, and answers measured as they came.
#[derive(Clone, Copy, Default)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const CHECK: &str = "/envoy.service.auth.v3.Authorization/Check";

async fn channel(ob: &Opbound) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(endpoint(ob)).unwrap().connect().await.expect("connects")
}

/// One call of already encoded bytes on `channel`; the answer's bytes, up to 64 MiB of them.
async fn call_raw(
    channel: &tonic::transport::Channel,
    path: &'static str,
    message: Bytes,
) -> Result<Bytes, tonic::Status> {
    let mut client = tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(64 << 20);
    client.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static(path);
    client.unary(tonic::Request::new(message), path, Raw).await.map(tonic::Response::into_inner)
}

/// A `RateLimitRequest` of `n` empty descriptors, encoded: two bytes each (field 2, length 0).
fn empty_descriptors(n: usize) -> Bytes {
    let bytes = Bytes::from([0x12u8, 0x00].repeat(n));
    assert_eq!(RateLimitRequest::decode(&bytes[..6]).unwrap().descriptors.len(), 3);
    bytes
}

/// One descriptor of these entries, `hits` times, a refund when `refund`.
fn rls_descriptor(entries: &[(&str, &str)], hits: Option<u64>, refund: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        is_negative_hits: refund,
        ..Default::default()
    }
}

/// The HTTP request of a check, to change in place.
fn http_of(r: &mut CheckRequest) -> &mut HttpRequest {
    r.attributes.as_mut().unwrap().request.as_mut().unwrap().http.as_mut().unwrap()
}

/// The VmRSS and VmHWM (peak) of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process runs");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Issue 52, item 5: one `ShouldRateLimit` call from an untrusted peer with a flood of empty
/// descriptors was answered with a status for each of them, refusals included. A refusal is one
/// status, and from Envoy a call past the cap is one `INVALID_ARGUMENT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_one_status_however_many_descriptors() {
    let spec = TempSpec::new("grpc-flood", SPEC);
    // This client (127.0.0.1) is not a trusted proxy here.
    let untrusting = grpc_only(&spec, &["--trusted-proxy", "10.0.0.0/8"]);
    let flood = RateLimitRequest { descriptors: vec![RateLimitDescriptor::default(); 100_000], ..Default::default() };
    let r = should_rate_limit(&untrusting, flood.clone()).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32, "fail closed");
    assert!(r.statuses.is_empty(), "{} statuses", r.statuses.len());
    assert!(r.encoded_len() <= 1024, "{} bytes", r.encoded_len());
    let body: Value = serde_json::from_slice(&r.raw_body).unwrap();
    assert!(body["detail"].as_str().unwrap().contains("--trusted-proxy"), "{body}");

    let ob = grpc_only(&spec, &[]);
    let batch =
        rls_descriptor(&[("method", "POST"), ("path", "/batch"), ("remote_address", "203.0.113.9")], None, false);
    let mut client = RateLimitServiceClient::connect(endpoint(&ob)).await.unwrap();
    let past = RateLimitRequest { descriptors: vec![batch.clone(); 257], ..Default::default() };
    let e = client.should_rate_limit(past).await.expect_err("past the cap");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("257 descriptors"), "{e:?}");
    let e = client.should_rate_limit(flood).await.expect_err("past the cap");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    // At the cap the call is read: one request, counted once, a status for each descriptor.
    let at = RateLimitRequest { descriptors: vec![batch; 256], ..Default::default() };
    let r = client.should_rate_limit(at).await.unwrap().into_inner();
    assert_eq!((r.overall_code, r.statuses.len()), (Code::Ok as i32, 256));
    assert_eq!(r.statuses[255].limit_remaining, 9, "one of ten: the refused calls counted nothing");

    // tonic refuses a call past the message cap (1 MiB) before reading it; one just under it is
    // read and refused for its descriptors.
    let channel = channel(&ob).await;
    let over = call_raw(&channel, SHOULD_RATE_LIMIT, empty_descriptors((1 << 19) + 1)).await.expect_err("too large");
    assert_eq!(over.code(), tonic::Code::OutOfRange, "{over:?}");
    let under = call_raw(&channel, SHOULD_RATE_LIMIT, empty_descriptors((1 << 19) - 8)).await.expect_err("too many");
    assert_eq!(under.code(), tonic::Code::InvalidArgument, "{under:?}");
    assert!(ob.logged("panicked").is_empty());
}

/// Issue 52, item 5, the acceptance test: 300 calls of 1.9M empty descriptors each (3.8 MB, under
/// tonic's 4 MiB default) from an untrusted peer, on four connections at once, leave opbound
/// under 100 MiB, each answered in under 1 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_floods_from_an_untrusted_peer_leave_it_small() {
    const CALLS: usize = 300;
    const CONNECTIONS: usize = 4;
    const IN_FLIGHT: usize = 5;
    let spec = TempSpec::new("grpc-floods", SPEC);
    let ob = grpc_only(&spec, &["--trusted-proxy", "10.0.0.0/8"]);
    let pid = ob.child.id();
    let flood = empty_descriptors(1_900_000);
    assert!(flood.len() > 3_700_000 && flood.len() < 4 << 20);
    let (before, _) = memory_kib(pid);
    let small = |answer: Result<Bytes, tonic::Status>| {
        let answer = answer.expect("a flood is answered");
        assert!(answer.len() <= 1024, "{} bytes", answer.len());
        let r = RateLimitResponse::decode(answer).unwrap();
        assert_eq!((r.overall_code, r.statuses.len()), (Code::OverLimit as i32, 0));
    };
    // One alone first: an answer per descriptor fails here, before many are in flight.
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(channel(&ob).await);
    }
    small(call_raw(&channels[0], SHOULD_RATE_LIMIT, flood.clone()).await);
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS * IN_FLIGHT)
        .map(|i| {
            let (channel, flood) = (channels[i % CONNECTIONS].clone(), flood.clone());
            let calls =
                (CALLS - 1) / (CONNECTIONS * IN_FLIGHT) + usize::from(i < (CALLS - 1) % (CONNECTIONS * IN_FLIGHT));
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for _ in 0..calls {
                    answers.push(call_raw(&channel, SHOULD_RATE_LIMIT, flood.clone()).await);
                }
                answers
            })
        })
        .collect();
    let mut answered = 1;
    for task in tasks {
        for answer in task.await.unwrap() {
            small(answer);
            answered += 1;
        }
    }
    assert_eq!(answered, CALLS);
    let (after, peak) = memory_kib(pid);
    drop(channels);
    eprintln!(
        "{CALLS} floods of {} bytes in {:.1?}: VmRSS {before} KiB before, {after} KiB after, VmHWM {peak} KiB",
        flood.len(),
        started.elapsed()
    );
    assert!(peak < 100 * 1024, "peak RSS {peak} KiB");
}

/// Issue 52, item 6: a check with 32,769 headers made `HeaderMap::append` panic, from any peer,
/// before the trust check; the reset stream is an allow under Envoy's `failure_mode_allow`.
/// Too many headers are one denial (431) instead, never an error status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_with_too_many_headers_is_one_denial_not_a_panic() {
    let spec = TempSpec::new("grpc-headers", SPEC);
    let ob = grpc_only(&spec, &[]);
    let flooded = |n: usize| {
        let mut r = check_request("GET", "/items/1", &[], "203.0.113.9");
        http_of(&mut r).headers = (0..n).map(|i| (format!("x-h-{i}"), "v".to_string())).collect();
        r
    };
    let r = check(&ob, flooded(32_769)).await;
    assert!(r.encoded_len() <= 1024, "{} bytes", r.encoded_len());
    let a = answer(r);
    assert_eq!((a.status, a.code), (431, tonic::Code::InvalidArgument as i32));
    assert!(a.json()["detail"].as_str().unwrap().contains("32769 headers"), "{}", a.body);
    // Raw headers count as well, and both fields together.
    let mut raw = check_request("GET", "/items/1", &[("x-a", "1")], "203.0.113.9");
    let h = |i: usize| HeaderValue { key: format!("x-m-{i}"), raw_value: b"v".to_vec(), ..Default::default() };
    http_of(&mut raw).header_map = Some(PbHeaderMap { headers: (0..256).map(h).collect() });
    assert_eq!(answer(check(&ob, raw).await).status, 431, "256 raw and one more");
    // At the cap the check is judged: counted, nothing before it was.
    let a = answer(check(&ob, flooded(256)).await);
    assert_eq!((a.status, a.header("ratelimit-remaining")), (200, Some("1")));

    // An untrusted peer: refused unread, whatever it sends.
    let untrusting = grpc_only(&spec, &["--trusted-proxy", "10.0.0.0/8"]);
    let a = answer(check(&untrusting, flooded(32_769)).await);
    assert_eq!((a.status, a.code), (400, tonic::Code::PermissionDenied as i32));
    for ob in [&ob, &untrusting] {
        assert!(ob.logged("panicked").is_empty(), "{:?}", ob.logged("panicked"));
    }
}

/// Issue 52, item 7: a check with no source address (or one that did not parse, like
/// `[2001:db8::1]`) fell back to the trusted Envoy peer, and so read the client's own
/// `X-Forwarded-For`: a new value, a new budget. Without a usable source the client is the one
/// unknown client; bracketed and `ip:port` sources are the client they name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_usable_source_the_client_is_unknown_and_its_forwarded_for_unread() {
    let spec = TempSpec::new("grpc-sourceless", SPEC);
    let ob = grpc_only(&spec, &[]);
    let spoofed = |source: Option<&str>, xff: &str| {
        let mut r = check_request("GET", "/items/1", &[("x-forwarded-for", xff)], source.unwrap_or(""));
        if source.is_none() {
            r.attributes.as_mut().unwrap().source = None;
        }
        r
    };
    let mut statuses = Vec::new();
    for (source, xff) in [(None, "198.51.100.1"), (None, "198.51.100.2"), (Some("envoy-internal"), "198.51.100.3")] {
        statuses.push(answer(check(&ob, spoofed(source, xff)).await).status);
    }
    assert_eq!(statuses, [200, 200, 429], "one budget of two for every request without a usable source");
    let mut statuses = Vec::new();
    for (source, xff) in
        [("[2001:db8::1]", "198.51.100.4"), ("[2001:db8::1]:443", "198.51.100.5"), ("2001:db8::1", "198.51.100.6")]
    {
        statuses.push(answer(check(&ob, spoofed(Some(source), xff)).await).status);
    }
    assert_eq!(statuses, [200, 200, 429], "three spellings of one client");
    let a = answer(check(&ob, spoofed(Some("203.0.113.50:41000"), "198.51.100.7")).await);
    assert_eq!((a.status, a.header("ratelimit-remaining")), (200, Some("1")), "another client");

    // The rate-limit service: no remote_address is the unknown client too.
    let ob = grpc_only(&spec, &[]);
    let mut codes = Vec::new();
    for xff in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        let r = rls_request(&[("method", "GET"), ("path", "/items/1"), ("x-forwarded-for", xff)], None);
        codes.push(should_rate_limit(&ob, r).await.overall_code);
    }
    assert_eq!(codes, [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]);
    let bracketed = [("method", "GET"), ("path", "/items/1"), ("remote_address", "[2001:db8::2]:443")];
    let r = should_rate_limit(&ob, rls_request(&bracketed, None)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 1));
}

/// Issue 52, item 8: a call with an over-limit descriptor and a refund (`is_negative_hits`)
/// beside it was answered OK, counting nothing. The refund is left out; the rest is judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_beside_a_counted_descriptor_is_no_pass() {
    let spec = TempSpec::new("grpc-refund", SPEC);
    let ob = grpc_only(&spec, &[]);
    let batch = [("method", "POST"), ("path", "/batch"), ("remote_address", "203.0.113.9")];
    assert_eq!(should_rate_limit(&ob, rls_request(&batch, Some(10))).await.overall_code, Code::Ok as i32);
    let mixed = RateLimitRequest {
        descriptors: vec![rls_descriptor(&batch, Some(1), false), rls_descriptor(&batch, Some(5), true)],
        ..Default::default()
    };
    let r = should_rate_limit(&ob, mixed).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32, "ten of ten were used");
    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::OverLimit as i32, Code::Ok as i32]);

    // Refunds alone: OK, and nothing counted or given back.
    let ob = grpc_only(&spec, &[]);
    let refunds = RateLimitRequest { descriptors: vec![rls_descriptor(&batch, Some(5), true)], ..Default::default() };
    assert_eq!(should_rate_limit(&ob, refunds.clone()).await.overall_code, Code::Ok as i32);
    let r = should_rate_limit(&ob, rls_request(&batch, Some(10))).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 0));
    assert_eq!(should_rate_limit(&ob, refunds).await.overall_code, Code::Ok as i32);
    assert_eq!(should_rate_limit(&ob, rls_request(&batch, Some(1))).await.overall_code, Code::OverLimit as i32);
}

/// Issue 52: Envoy drops a client's own `x-envoy-auth-partial-body` and writes `true` or `false`
/// beside a body it sends. A marker that is not Envoy's alone (two that disagree, a spelling it
/// never writes) once marked a whole body as cut, so `missing: pass` skipped the bound: the
/// check is refused instead, and a whole body is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_envoys_partial_body_marker_makes_a_key_missing() {
    const PASS: &str = r#"
openapi: 3.0.3
info: {title: sign-in, version: '1'}
paths:
  /login:
    post:
      requestBody:
        content:
          application/json:
            schema: {type: object}
      x-rate-limit:
        - {per: json:/username, limit: 1, window: PT15M, missing: pass}
"#;
    let spec = TempSpec::new("grpc-partial", PASS);
    let ob = grpc_only(&spec, &[]);
    // As a gateway sends raw headers: every value apart.
    let login = |user: &str, said: &[&str]| {
        let mut r = check_request("POST", "/login", &[], "203.0.113.9");
        let raw =
            |k: &str, v: &str| HeaderValue { key: k.into(), raw_value: v.as_bytes().to_vec(), ..Default::default() };
        let mut headers = vec![raw("content-type", "application/json")];
        headers.extend(said.iter().map(|v| raw("x-envoy-auth-partial-body", v)));
        let http = http_of(&mut r);
        http.header_map = Some(PbHeaderMap { headers });
        http.body = format!(r#"{{"username":"{user}"}}"#);
        r
    };
    for said in [&["true", "false"][..], &["false", "true"], &["1"]] {
        for _ in 0..2 {
            let a = answer(check(&ob, login("ann", said)).await);
            assert_eq!(a.status, 400, "{said:?}: {}", a.body);
            assert!(a.json()["detail"].as_str().unwrap().contains("x-envoy-auth-partial-body"), "{}", a.body);
        }
    }
    // Envoy's own word: whole, counted; cut, the key is missing and `pass` skips the bound.
    assert_eq!(answer(check(&ob, login("bob", &["false"])).await).status, 200);
    assert_eq!(answer(check(&ob, login("bob", &["false"])).await).status, 429);
    assert_eq!(answer(check(&ob, login("bob", &["true"])).await).status, 200);
    assert_eq!(answer(check(&ob, login("bob", &[])).await).status, 429, "no marker: whole");
}

/// Issue 52, items 5 and 6, sent by an independent gRPC client: Python's grpcio
/// (`tests/grpc/grpcio_call.py`; installed by `.ci/test`, and missing it fails the test), with
/// messages encoded from Envoy's protos. Each flood is one small answer, never a reset stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_gets_one_small_answer_for_each_flood() {
    let spec = TempSpec::new("grpc-grpcio", SPEC);
    let trusting = grpc_only(&spec, &[]);
    let untrusting = grpc_only(&spec, &["--trusted-proxy", "10.0.0.0/8"]);
    let mut headers = check_request("GET", "/items/1", &[], "203.0.113.9");
    http_of(&mut headers).headers = (0..32_769).map(|i| (format!("x-h-{i}"), "v".to_string())).collect();
    let flood = empty_descriptors(1_900_000);
    let batch = rls_descriptor(&[("method", "POST"), ("path", "/batch")], None, false);
    let past = RateLimitRequest { descriptors: vec![batch; 257], ..Default::default() };
    let write = |name: &str, bytes: &[u8]| {
        let path = spec.dir().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let calls = serde_json::json!([
        {"target": trusting.grpc().unwrap().to_string(), "method": CHECK, "request": write("headers.bin", &headers.encode_to_vec())},
        {"target": untrusting.grpc().unwrap().to_string(), "method": CHECK, "request": write("headers.bin", &headers.encode_to_vec())},
        {"target": untrusting.grpc().unwrap().to_string(), "method": SHOULD_RATE_LIMIT, "request": write("flood.bin", &flood)},
        {"target": trusting.grpc().unwrap().to_string(), "method": SHOULD_RATE_LIMIT, "request": write("past.bin", &past.encode_to_vec())},
    ]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc/grpcio_call.py");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (install it; .ci/test does)");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), calls.to_string().as_bytes()).unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "grpcio_call.py failed:\n{report}");
    let answers: Vec<Value> = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 4, "{report}");
    let bytes = |a: &Value| {
        assert_eq!(a["code"], "OK", "{a}");
        let hex = a["response"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        assert!(bytes.len() <= 1024, "{} bytes: {a}", bytes.len());
        bytes
    };
    let trusted = answer(CheckResponse::decode(&bytes(&answers[0])[..]).unwrap());
    assert_eq!((trusted.status, trusted.code), (431, tonic::Code::InvalidArgument as i32));
    let untrusted = answer(CheckResponse::decode(&bytes(&answers[1])[..]).unwrap());
    assert_eq!((untrusted.status, untrusted.code), (400, tonic::Code::PermissionDenied as i32));
    let flooded = RateLimitResponse::decode(&bytes(&answers[2])[..]).unwrap();
    assert_eq!((flooded.overall_code, flooded.statuses.len()), (Code::OverLimit as i32, 0));
    assert_eq!(answers[3]["code"], "INVALID_ARGUMENT", "{}", answers[3]);
}
