//! Regression tests for ways a client stepped around a bound (issue 9), on the real binary over
//! loopback, in front of a real recording upstream. Path and method spellings are in
//! `frameworks.rs` (real Flask and Express), gateway headers in `gateways.rs` (real nginx, Caddy).

mod common;

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::{Opbound, TempSpec, Upstream, get_with, raw};
use http::Request;
use http_body_util::Full;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: hardening tests, version: '1'}
components:
  securitySchemes:
    basic: {type: http, scheme: basic}
    bearer: {type: http, scheme: bearer}
paths:
  /limited:
    get:
      operationId: limited
      x-rate-limit: {per: address, limit: 2, window: PT1H}
  /charges:
    post:
      operationId: createCharge
      security: [{basic: []}, {bearer: []}]
      x-rate-limit: {per: token, limit: 2, window: PT1H}
"#;

const IDENTITY_SPEC: &str = r#"
openapi: 3.0.3
info: {title: identity bounds, version: '1'}
paths:
  /mine:
    get:
      operationId: mine
      x-rate-limit: {per: user, limit: 20, window: PT1M}
  /team:
    get:
      operationId: team
      x-rate-limit:
        - {per: org, limit: 100, window: PT1M}
        - {per: address, limit: 5, window: PT1M, applies-to: {roles: [trial]}}
"#;

fn serve(upstream: &str, spec: &TempSpec, extra: &[&str]) -> Opbound {
    let mut args = vec!["serve", "--spec", spec.arg(), "--upstream", upstream];
    args.extend_from_slice(extra);
    Opbound::start(&args)
}

/// Runs the binary to completion (it is expected to refuse to start) and returns its exit code
/// and its `error:` lines.
fn refused_start(args: &[&str]) -> (i32, String) {
    let (code, _, err) = common::run_to_end(&[args, &["--listen", "127.0.0.1:0"][..]].concat());
    let error = err.lines().filter(|l| l.starts_with("error:")).collect::<Vec<_>>().join("\n");
    assert!(!error.is_empty(), "no error line in: {err}");
    (code, error)
}

/// Item 12: bounds per user, per org or for roles were silently inert without an identity
/// source (25 of 25 admitted against a 20 a minute bound).
#[test]
fn bounds_that_need_an_identity_refuse_to_start_without_a_source() {
    let spec = TempSpec::new("unfed", IDENTITY_SPEC);
    let up = "http://127.0.0.1:9";
    let (code, err) = refused_start(&["serve", "--spec", spec.arg(), "--upstream", up]);
    assert_eq!(code, 2, "{err}");
    for needle in ["mine:0 (counts per user", "team:0 (counts per org", "team:1 (applies to roles", "--jwt-secret-file"]
    {
        assert!(err.contains(needle), "{needle:?} missing from: {err}");
    }
    for flag in ["--identity-header user=HEADER", "--identity-header org=HEADER", "--identity-header roles=HEADER"] {
        assert!(err.contains(flag), "{flag:?} missing from: {err}");
    }
    // Feeding only the user leaves the org and the roles unfed.
    let (code, err) =
        refused_start(&["serve", "--spec", spec.arg(), "--upstream", up, "--identity-header", "user=X-User-Id"]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("mine:0") && err.contains("team:0") && err.contains("team:1"), "{err}");
    // decide refuses alike.
    let (code, err) =
        refused_start(&["decide", "--spec", spec.arg(), "--gateway", "nginx", "--trusted-proxy", "127.0.0.1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("mine:0"), "{err}");
}

/// Issue 47, item 8: `check` said "valid" for a spec `serve` refuses to start. `check --serve`
/// with serve's identity flags refuses exactly what serve refuses, each bound located.
#[test]
fn check_serve_refuses_what_serve_refuses() {
    let spec = TempSpec::new("check-serve", IDENTITY_SPEC);
    let check = |flags: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_opbound"))
            .args(["check", "--serve"])
            .args(flags)
            .arg(spec.arg())
            .output()
            .expect("opbound runs");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let up = "http://127.0.0.1:9";
    for (flags, unfed) in [
        (&[][..], &["mine:0", "team:0", "team:1"][..]),
        (&["--identity-header", "user=X-User-Id"], &["team:0", "team:1"]),
        (&["--identity-header", "org=X-Org-Id", "--identity-header", "roles=X-Roles"], &["mine:0"]),
    ] {
        let (code, err) = check(flags);
        assert_eq!(code, 1, "{flags:?}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), unfed.len(), "{flags:?}: {err}");
        for (line, bound) in errors.iter().zip(unfed) {
            assert!(line.contains(&format!("bound {bound} ")) && line.contains("(line "), "{line}");
        }
        let (code, refused) = refused_start(&[&["serve", "--spec", spec.arg(), "--upstream", up][..], flags].concat());
        assert_eq!(code, 2, "{refused}");
        for bound in unfed {
            assert!(refused.contains(bound), "serve refused without naming {bound}: {refused}");
        }
    }
    let all =
        ["--identity-header", "user=X-User-Id", "--identity-header", "org=X-Org-Id", "--identity-header", "roles=X"];
    assert_eq!(check(&all).0, 0, "fed, valid");
    let jwt = spec.dir().join("jwt.secret");
    std::fs::write(&jwt, "sekrit\n").unwrap();
    assert_eq!(check(&["--jwt-secret-file", jwt.to_str().unwrap()]).0, 0, "a JWT feeds them all");
    // Plain check says serving needs a source, and stays valid.
    let out = Command::new(env!("CARGO_BIN_EXE_opbound")).args(["check", spec.arg()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("serving needs an identity source"), "{err}");
}

/// Item 12, on reload: a spec that adds an identity bound nothing can feed is refused, and the
/// policy that was serving keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_unfed_identity_bounds_is_refused() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("unfed-reload", SPEC);
    let ob = serve(&up.url(), &spec, &["--no-watch"]);
    assert_eq!(get_with(&ob.url("/limited"), &[]).await.status, 200);
    std::fs::write(&spec.path, IDENTITY_SPEC).unwrap();
    let _ = Command::new("kill").arg("-HUP").arg(ob.child.id().to_string()).status();
    let refused = ob.logged_at_least("reload refused", 1);
    assert!(refused.iter().any(|l| l.contains("mine:0")), "{refused:?}");
    // The old policy still counts: one more request to /limited passes, the next is refused.
    assert_eq!(get_with(&ob.url("/limited"), &[]).await.status, 200);
    assert_eq!(get_with(&ob.url("/limited"), &[]).await.status, 429);
}

/// Item 13: `X-User-Id: admin` from a client that is not a trusted proxy reached the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_from_untrusted_clients_never_reach_the_upstream() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("strip", SPEC);
    let ob = serve(
        &up.url(),
        &spec,
        &["--identity-header", "user=X-User-Id", "--identity-header", "roles=X-Roles", "--trusted-proxy", "127.0.0.1"],
    );
    let addr = ob.addr;
    let request = b"GET /limited HTTP/1.1\r\nHost: t\r\nX-User-Id: admin\r\nX-Roles: partner\r\nX-Other: kept\r\nConnection: close\r\n\r\n";
    let from_client = tokio::task::spawn_blocking(move || raw("127.0.0.2", addr, request, Duration::from_secs(5)));
    assert!(from_client.await.unwrap().starts_with("HTTP/1.1 200"));
    let from_proxy = tokio::task::spawn_blocking(move || raw("127.0.0.1", addr, request, Duration::from_secs(5)));
    assert!(from_proxy.await.unwrap().starts_with("HTTP/1.1 200"));
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let (client, proxy) = (&seen[0].headers, &seen[1].headers);
    assert_eq!(client.get("x-user-id"), None, "an untrusted client's identity header reached the upstream");
    assert_eq!(client.get("x-roles"), None);
    assert_eq!(client.get("x-other").unwrap(), "kept", "other headers pass");
    assert_eq!(proxy.get("x-user-id").unwrap(), "admin", "a trusted proxy's identity header passes");
    assert_eq!(proxy.get("x-roles").unwrap(), "partner");
}

/// Item 14: `Basic base64(key:)` and `Bearer key` were counted apart, doubling a key's budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_api_key_sent_as_basic_or_bearer_shares_one_budget() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("token", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let post = |auth: &'static str| {
        let req = Request::post(ob.url("/charges")).header("authorization", auth).body(Full::new(Bytes::new()));
        common::send(req.unwrap())
    };
    // sk_1 as Bearer, as Basic "sk_1:", as Basic ":sk_1" with its scheme in lower case.
    let statuses = [
        post("Bearer sk_1").await.status,
        post("Basic c2tfMTo=").await.status,
        post("basic OnNrXzE=").await.status,
        post("bearer sk_1").await.status,
    ];
    assert_eq!(statuses, [200, 200, 429, 429]);
    // Another key has its own budget.
    assert_eq!(post("Basic c2tfMjo=").await.status, 200);
    assert_eq!(up.targets().len(), 3);
}

/// Item 4, for `serve`: behind a trusted proxy, `Forwarded` won over `X-Forwarded-For`, and the
/// proxy passed the client's own `Forwarded` on, so every request got a fresh budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_address_comes_from_one_configured_header() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("address-header", SPEC);
    let ob = serve(&up.url(), &spec, &["--trusted-proxy", "127.0.0.1"]);
    // The proxy (127.0.0.1) wrote X-Forwarded-For; the client wrote Forwarded, new each time.
    let mut statuses = Vec::new();
    for i in 0..4 {
        let spoof = format!("for=198.51.100.{i}");
        let r = get_with(&ob.url("/limited"), &[("x-forwarded-for", "203.0.113.7"), ("forwarded", &spoof)]).await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 429, 429], "Forwarded must not be read by default");

    // Told to read Forwarded, opbound reads it and nothing else.
    let ob = serve(&up.url(), &spec, &["--trusted-proxy", "127.0.0.1", "--client-address-header", "forwarded"]);
    let mut statuses = Vec::new();
    for i in 0..4 {
        let spoof = format!("198.51.100.{i}");
        let r = get_with(&ob.url("/limited"), &[("forwarded", "for=203.0.113.7"), ("x-forwarded-for", &spoof)]).await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 429, 429], "X-Forwarded-For must not be read when Forwarded is chosen");
}

/// Item 6, over HTTP/2: `:method get` matched no operation and Werkzeug ran the GET view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_case_method_over_h2_is_charged_as_its_upper_case() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("h2-method", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let method = http::Method::from_bytes(b"get").unwrap();
        let req = Request::builder().method(method).uri(ob.url("/limited")).body(Full::new(Bytes::new())).unwrap();
        statuses.push(client.request(req).await.map(|r| r.status().as_u16()).unwrap_or(0));
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    let seen = up.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|s| s.method == "GET"), "forwarded in upper case: {:?}", seen.iter().map(|s| &s.method));
}
