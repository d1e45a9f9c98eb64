//! `opbound serve` and `opbound decide`, the real binary, over real loopback sockets, in front of
//! a real upstream server.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Opbound, TempSpec, Upstream, get, get_with, raw, read_head, send};
use http::Request;
use http_body_util::Full;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: sidecar tests, version: '1'}
x-rate-limit:
  - {name: perimeter, per: address, limit: 1000, window: PT1M}
paths:
  /x:
    get:
      operationId: getX
      x-rate-limit: {per: address, limit: 1, window: PT1M}
  /y:
    get: {operationId: getY}
  /limited:
    get:
      operationId: limited
      x-rate-limit: {per: address, limit: 2, window: PT1M}
  /upload:
    post:
      operationId: upload
      x-rate-limit: {per: address, limit: 1, window: PT1M}
  /hold/{n}:
    get:
      operationId: hold
      x-rate-limit: {per: address, algorithm: concurrency, limit: 1}
  /stream/{n}:
    get:
      operationId: stream
      x-rate-limit: {per: address, algorithm: concurrency, limit: 1}
  /ws:
    get: {operationId: websocket}
  /mine:
    get:
      operationId: mine
      x-rate-limit: {per: user, limit: 1, window: PT1M}
"#;

/// `serve` in front of `upstream`. `/mine` counts per user, so opbound needs to know who the
/// user is: from a JWT when `extra` says so, else from a trusted proxy's identity header.
fn serve(upstream: &str, spec: &TempSpec, extra: &[&str]) -> Opbound {
    let mut args = vec!["serve", "--spec", spec.arg(), "--upstream", upstream];
    if !extra.iter().any(|a| a.starts_with("--jwt")) {
        args.extend_from_slice(&["--identity-header", "user=X-User-Id"]);
    }
    args.extend_from_slice(extra);
    Opbound::start(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_has_the_four_headers_and_a_problem_body() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("refusal", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let first = get(&ob.url("/limited")).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("ratelimit-limit"), Some("2"));
    assert_eq!(first.header("ratelimit-remaining"), Some("1"));
    assert!(first.header("ratelimit-reset").is_some());
    assert_eq!(first.header("retry-after"), None);
    get(&ob.url("/limited")).await;
    let refused = get(&ob.url("/limited")).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("ratelimit-limit"), Some("2"));
    assert_eq!(refused.header("ratelimit-remaining"), Some("0"));
    let reset: u64 = refused.header("ratelimit-reset").unwrap().parse().unwrap();
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    // Reset: the end of the current minute; Retry-After: the exact wait, at most two windows.
    assert!((1..=120).contains(&retry) && (1..=60).contains(&reset), "retry-after {retry}, reset {reset}");
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    let body = refused.json();
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["bound"], "limited:0");
    assert_eq!(body["detail"], "2 per PT1M per address on operation limited");
    assert_eq!(body["retry_after"], retry);
    assert_eq!(up.targets(), ["/limited", "/limited"], "the refused request never reached the upstream");
    // One structured log line per refusal.
    let lines = ob.logged_at_least("\"refused\"", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("\"bound\":\"limited:0\"") && lines[0].contains("\"status\":429"), "{}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_answers_healthz_apart_from_traffic() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("admin", SPEC);
    let ob = serve(&up.url(), &spec, &["--admin", "127.0.0.1:0"]);
    let admin = ob.admin().expect("the admin listener logs its address");
    assert_ne!(admin, ob.addr);
    let r = get(format!("http://{admin}/healthz")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    assert_eq!(get(format!("http://{admin}/nothing")).await.status, 404);
    assert!(up.targets().is_empty(), "admin requests never reach the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_are_502_and_504_with_rate_headers() {
    // Nothing listens on the upstream port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let spec = TempSpec::new("502", SPEC);
    let ob = serve(&format!("http://{closed}"), &spec, &[]);
    let r = get(&ob.url("/limited")).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("ratelimit-remaining"), Some("1"), "the request was counted and says so");
    assert_eq!(r.json()["status"], 502);
    // Issue 47, item 7: the client gets a stable type and an id; the cause is in the log only.
    let body = r.json();
    assert_eq!(body["type"], "tag:opbound.dev,2026:upstream-unavailable");
    let id = body["request-id"].as_str().unwrap_or_else(|| panic!("no request id: {}", r.body)).to_string();
    assert!(id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    for internal in ["os error", "refused", "Connection", "127.0.0.1", &closed.port().to_string()] {
        assert!(!r.body.contains(internal), "{internal:?} reached the client: {}", r.body);
    }
    let again = get(&ob.url("/limited")).await.json();
    assert_ne!(again["request-id"].as_str(), Some(id.as_str()), "each failure has its own id");
    let logged = ob.logged_at_least("upstream request failed", 1);
    assert!(
        logged[0].contains(&id) && logged[0].contains("refused"),
        "the log line carries the client's id and the cause: {logged:?}"
    );

    let up = Upstream::start().await;
    let ob = serve(&up.url(), &spec, &["--upstream-timeout", "300ms"]);
    let r = get(&ob.url("/hold/1")).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.header("ratelimit-limit"), Some("1"));
    assert!(r.header("ratelimit-remaining").is_some());
    assert!(r.json()["request-id"].is_string(), "{}", r.body);
    up.release.add_permits(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusal_comes_before_the_body_is_read_and_the_upstream_dialled() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("early", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let ok = send(Request::post(ob.url("/upload")).body(Full::new(Bytes::from_static(b"small"))).unwrap()).await;
    assert_eq!(ok.status, 200);
    let dialled = up.connections.load(std::sync::atomic::Ordering::SeqCst);
    // Announce a megabyte and send ten bytes: the refusal must not wait for the rest.
    let answer = tokio::task::spawn_blocking({
        let addr = ob.addr;
        move || {
            raw(
                "127.0.0.1",
                addr,
                b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n\r\n0123456789",
                Duration::from_secs(5),
            )
        }
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after:"), "{answer}");
    assert_eq!(up.seen.lock().unwrap().len(), 1, "the upstream saw only the first upload");
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), dialled, "no new upstream connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canonical_path_is_forwarded_and_no_spelling_evades_a_bound() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("canonical", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    assert_eq!(get(&ob.url("/x")).await.status, 200);
    for spelling in ["//x", "/./x", "/%78", "/x/", "/a/../x", "/%2e/x", "/y/../x?q=1"] {
        let r = get(&ob.url(spelling)).await;
        assert_eq!(r.status, 429, "{spelling} reached getX without its bound");
        assert_eq!(r.json()["bound"], "getX:0");
    }
    assert_eq!(get(&ob.url("/./%79?q=%2F&r=a+b")).await.status, 200);
    assert_eq!(get(&ob.url("/y//")).await.status, 200);
    assert_eq!(up.targets(), ["/x", "/y?q=%2F&r=a+b", "/y/"], "canonical paths, queries unchanged");
    let malformed = tokio::task::spawn_blocking({
        let addr = ob.addr;
        move || raw("127.0.0.1", addr, b"GET /a%zz HTTP/1.1\r\nHost: t\r\n\r\n", Duration::from_secs(5))
    })
    .await
    .unwrap();
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");
    // An absolute form is read by its path (still /x, still limited), and only for http and
    // https: another scheme, or none, is refused as decide refuses it, never routed as /x.
    for (target, status) in [("http://t/x", "429"), ("HTTP://t/%78", "429"), ("ftp://t/x", "400"), ("://t/x", "400")] {
        let addr = ob.addr;
        let request = format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let answer =
            tokio::task::spawn_blocking(move || raw("127.0.0.1", addr, request.as_bytes(), Duration::from_secs(5)))
                .await
                .unwrap();
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{target}: {answer}");
    }
    assert_eq!(up.targets(), ["/x", "/y?q=%2F&r=a+b", "/y/"], "no absolute form reached the upstream");
    let garbage = tokio::task::spawn_blocking({
        let addr = ob.addr;
        move || raw("127.0.0.1", addr, b"\x16\x03\x01 not http at all\r\n\r\n", Duration::from_secs(5))
    })
    .await
    .unwrap();
    assert!(garbage.is_empty() || garbage.starts_with("HTTP/1.1 4"), "{garbage}");
    // Still serving after both.
    assert_eq!(get(&ob.url("/y")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_count_only_from_trusted_proxies() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("trust", SPEC);
    let ob = serve(&up.url(), &spec, &["--trusted-proxy", "127.0.0.1", "--identity-header", "user=X-User-Id"]);
    let addr = ob.addr;
    let from = |source: &'static str, xff: &'static str, path: &'static str, user: &'static str| {
        tokio::task::spawn_blocking(move || {
            let mut req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
            if !xff.is_empty() {
                req.push_str(&format!("X-Forwarded-For: {xff}\r\n"));
            }
            if !user.is_empty() {
                req.push_str(&format!("X-User-Id: {user}\r\n"));
            }
            req.push_str("\r\n");
            raw(source, addr, req.as_bytes(), Duration::from_secs(5))
        })
    };
    let status = |s: String| s.split(' ').nth(1).unwrap_or("").to_string();
    // 127.0.0.2 is not trusted: its X-Forwarded-For is whatever it wrote, and is ignored.
    assert_eq!(status(from("127.0.0.2", "203.0.113.1", "/x", "").await.unwrap()), "200");
    assert_eq!(status(from("127.0.0.2", "203.0.113.2", "/x", "").await.unwrap()), "429");
    // 127.0.0.1 is: the rightmost untrusted entry is the client, the leftmost a claim.
    assert_eq!(status(from("127.0.0.1", "198.51.100.9, 203.0.113.5", "/x", "").await.unwrap()), "200");
    assert_eq!(status(from("127.0.0.1", "1.2.3.4, 203.0.113.5", "/x", "").await.unwrap()), "429");
    assert_eq!(status(from("127.0.0.1", "203.0.113.6", "/x", "").await.unwrap()), "200");
    // The upstream sees the chain with the peer appended.
    let seen = up.seen.lock().unwrap().clone();
    let xff: Vec<&str> = seen.iter().map(|s| s.headers.get("x-forwarded-for").unwrap().to_str().unwrap()).collect();
    assert_eq!(xff, ["203.0.113.1, 127.0.0.2", "198.51.100.9, 203.0.113.5, 127.0.0.1", "203.0.113.6, 127.0.0.1"]);
    assert!(seen.iter().all(|s| s.headers.get("x-forwarded-proto").is_some_and(|v| v == "http")));
    // Identity headers count only from a trusted peer: from 127.0.0.2 the caller is anonymous
    // and the per-user bound does not apply.
    assert_eq!(status(from("127.0.0.1", "", "/mine", "u1").await.unwrap()), "200");
    assert_eq!(status(from("127.0.0.1", "", "/mine", "u1").await.unwrap()), "429");
    assert_eq!(status(from("127.0.0.2", "", "/mine", "u1").await.unwrap()), "200");
    assert_eq!(status(from("127.0.0.2", "", "/mine", "u1").await.unwrap()), "200");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_permits_return_when_the_response_ends_or_the_client_leaves() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("concurrency", SPEC);
    let ob = serve(&up.url(), &spec, &[]);

    // A streamed response holds the permit until its last byte is sent.
    let first = tokio::spawn(get(ob.url("/stream/1")));
    up.wait_arrival().await;
    assert_eq!(get(&ob.url("/stream/2")).await.status, 429, "one in flight at a time");
    up.release.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!((first.status, first.body.as_str()), (200, "first part, second part"));
    let again = tokio::spawn(get(ob.url("/stream/3")));
    up.wait_arrival().await;
    up.release.add_permits(1);
    assert_eq!(again.await.unwrap().status, 200, "the permit came back when the body ended");

    // A client that disconnects mid-request frees its permit at once.
    let addr = ob.addr;
    let stream = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut s, b"GET /hold/1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        s
    })
    .await
    .unwrap();
    up.wait_arrival().await;
    assert_eq!(get(&ob.url("/hold/2")).await.status, 429);
    drop(stream);
    let mut freed = false;
    for _ in 0..100 {
        let next = tokio::spawn(get(ob.url("/hold/3")));
        let r = tokio::time::timeout(Duration::from_millis(100), next).await;
        match r {
            Ok(Ok(got)) if got.status == 429 => continue,
            // Not refused: it is at the upstream, holding the permit.
            _ => {
                freed = true;
                break;
            }
        }
    }
    assert!(freed, "the permit of the client that left came back");
    up.release.add_permits(10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_pass_through() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("ws", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let addr = ob.addr;
    let echoed = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n").unwrap();
        let head = read_head(&mut s);
        s.write_all(b"ping across the tunnel").unwrap();
        let mut buf = [0u8; 22];
        s.read_exact(&mut buf).unwrap();
        (head, String::from_utf8_lossy(&buf).into_owned())
    })
    .await
    .unwrap();
    assert!(echoed.0.starts_with("HTTP/1.1 101"), "{}", echoed.0);
    assert!(echoed.0.to_ascii_lowercase().contains("ratelimit-limit"), "{}", echoed.0);
    assert_eq!(echoed.1, "ping across the tunnel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_clients_are_served() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("h2c", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let r = client.request(Request::get(ob.url("/limited")).body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    assert_eq!(r.version(), http::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("ratelimit-limit").unwrap(), "2");
    assert_eq!(up.targets(), ["/limited"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_users_are_counted_per_user() {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let up = Upstream::start().await;
    let spec = TempSpec::new("jwt", SPEC);
    let secret = spec.dir().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let ob = serve(&up.url(), &spec, &["--jwt-secret-file", secret.to_str().unwrap(), "--jwt-issuer", "https://auth"]);
    let token = |sub: &str, key: &[u8]| {
        let claims = serde_json::json!({"sub": sub, "exp": 4_000_000_000u64, "iss": "https://auth"});
        format!("Bearer {}", encode(&Header::default(), &claims, &EncodingKey::from_secret(key).unwrap()).unwrap())
    };
    let (alice, bob, forged) = (token("alice", b"s3cret"), token("bob", b"s3cret"), token("alice", b"guess"));
    assert_eq!(get_with(&ob.url("/mine"), &[("authorization", &alice)]).await.status, 200);
    assert_eq!(get_with(&ob.url("/mine"), &[("authorization", &alice)]).await.status, 429);
    assert_eq!(get_with(&ob.url("/mine"), &[("authorization", &bob)]).await.status, 200);
    // A forged token makes the caller anonymous: the per-user bound does not apply.
    assert_eq!(get_with(&ob.url("/mine"), &[("authorization", &forged)]).await.status, 200);
    assert_eq!(get_with(&ob.url("/mine"), &[("authorization", &forged)]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_requests_in_flight_finish() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("graceful", SPEC);
    let mut ob = serve(&up.url(), &spec, &["--shutdown-timeout", "10s"]);
    let in_flight = tokio::spawn(get(ob.url("/hold/1")));
    up.wait_arrival().await;
    ob.terminate();
    // New connections are refused soon after the signal.
    let mut closed = false;
    for _ in 0..50 {
        if std::net::TcpStream::connect(ob.addr).is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed, "the listener closes on SIGTERM");
    up.release.add_permits(1);
    let r = in_flight.await.unwrap();
    assert_eq!(r.status, 200, "the request in flight finished");
    let status = tokio::task::spawn_blocking(move || ob.child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_cannot_hold_a_connection() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("slowloris", SPEC);
    let ob = serve(&up.url(), &spec, &["--header-read-timeout", "300ms"]);
    let addr = ob.addr;
    let started = std::time::Instant::now();
    let answer = tokio::task::spawn_blocking(move || {
        raw("127.0.0.1", addr, b"GET /y HTTP/1.1\r\nHost:", Duration::from_secs(10))
    })
    .await
    .unwrap();
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "the server dropped the half-sent request after {waited:?}");
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_reads_each_gateway_convention() {
    let spec = TempSpec::new("decide", SPEC);
    let decide = |gateway: &str, more: &[&str]| {
        let mut args = vec!["decide", "--spec", spec.arg(), "--trusted-proxy", "127.0.0.1", "--gateway", gateway];
        args.extend_from_slice(&["--identity-header", "user=X-User-Id"]);
        args.extend_from_slice(more);
        Opbound::start(&args)
    };
    // nginx auth_request.
    let ob = decide("nginx", &[]);
    let nginx = [("x-original-method", "GET"), ("x-original-uri", "/limited?a=1")];
    let r = get_with(&ob.url("/auth"), &nginx).await;
    assert_eq!((r.status, r.header("ratelimit-remaining")), (200, Some("1")));
    assert!(r.body.is_empty());
    // Concurrency permits go back at once: a decision service never sees the response end.
    for _ in 0..3 {
        assert_eq!(
            get_with(&ob.url("/auth"), &[("x-original-method", "GET"), ("x-original-uri", "/hold/1")]).await.status,
            200
        );
    }
    // A method header that is not a token is unreadable, refused and counted nowhere: escaped as
    // a target is, it would have been judged as the method `G%20T`.
    let r = get_with(&ob.url("/auth"), &[("x-original-method", "G T"), ("x-original-uri", "/limited")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("G%20T") && r.body.contains("not an HTTP method"), "{}", r.body);
    let r = get_with(&ob.url("/auth"), &nginx).await;
    assert_eq!((r.status, r.header("ratelimit-remaining")), (200, Some("0")));
    // Traefik ForwardAuth and Caddy forward_auth.
    for gateway in ["traefik", "caddy"] {
        let ob = decide(gateway, &[]);
        let forwarded = [("x-forwarded-method", "GET"), ("x-forwarded-uri", "/limited")];
        assert_eq!(get_with(&ob.url("/auth"), &forwarded).await.status, 200);
        assert_eq!(get_with(&ob.url("/auth"), &forwarded).await.status, 200);
        let r = get_with(&ob.url("/auth"), &forwarded).await;
        assert_eq!(r.status, 429, "{gateway}");
        assert!(r.header("retry-after").is_some());
        assert_eq!(r.json()["bound"], "limited:0");
    }
    // Envoy ext_authz: the original path after the prefix, the method as sent.
    let ob = decide("envoy", &["--path-prefix", "/check"]);
    let r = get(&ob.url("/check/x")).await;
    assert_eq!(r.status, 200);
    let r = get(&ob.url("/check/x")).await;
    assert_eq!((r.status, r.json()["bound"].as_str()), (429, Some("getX:0")));
    // A path outside the prefix cannot be read: refused, not routed as something else.
    assert_eq!(get(&ob.url("/x")).await.status, 400);

    let ob = decide("nginx", &["--deny-status", "403"]);
    for _ in 0..2 {
        get_with(&ob.url("/"), &[("x-original-method", "GET"), ("x-original-uri", "/limited")]).await;
    }
    let r = get_with(&ob.url("/"), &[("x-original-method", "GET"), ("x-original-uri", "/limited")]).await;
    assert_eq!(r.status, 403);
    assert!(r.header("retry-after").is_some(), "a 403 that means 429 carries Retry-After");
    assert_eq!(r.json()["status"], 429);
}

/// The demo's bound is 5 per ten seconds per address, and sliding windows are aligned to the
/// wall clock: six requests that straddle a boundary see the previous window's count decay (the
/// sixth is then rightly admitted). So a run is judged only when its six requests fell in one
/// window; one that straddled is run again on a fresh demo, whose memory is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_starts_and_shows_a_200_then_a_429() {
    use std::io::{BufRead, BufReader};
    use std::time::{SystemTime, UNIX_EPOCH};
    let window = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs() / 10;
    for _attempt in 0..3 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_opbound"))
            .args(["demo", "--listen", "127.0.0.1:0"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines: Vec<String> = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout).lines().map_while(Result::ok).take_while(|l| !l.starts_with("Ctrl-C")).collect()
        })
        .await
        .unwrap();
        assert!(lines.iter().any(|l| l.contains("5 per PT10S per address")), "{lines:#?}");
        let curl = lines.iter().find(|l| l.trim_start().starts_with("curl -i ")).expect("the demo prints curl lines");
        let url = curl.trim_start().trim_start_matches("curl -i ").to_string();
        let before = SystemTime::now();
        let mut statuses = Vec::new();
        let mut last = None;
        for _ in 0..6 {
            let got = get(&url).await;
            statuses.push(got.status);
            last = Some(got);
        }
        let after = SystemTime::now();
        let _ = child.kill();
        let _ = child.wait();
        if window(before) != window(after) {
            eprintln!("the six requests straddled a ten-second window boundary ({statuses:?}); again");
            continue;
        }
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{lines:#?}");
        the_book_shows_this_refusal(&last.unwrap());
        return;
    }
    panic!("three runs in a row straddled a window boundary: each should take milliseconds");
}

/// Issue 47, item 13: a second demo, with 8080 taken, moved to another port without a word, so
/// the README's `curl http://127.0.0.1:8080/...` lines reached whatever held 8080. It says why.
#[test]
fn a_demo_that_cannot_have_8080_says_where_it_went() {
    use std::io::{BufRead, BufReader};
    // Held here, or already held by something else on this machine: taken either way.
    let _held = std::net::TcpListener::bind("127.0.0.1:8080");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_opbound"))
        .arg("demo")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines: Vec<String> =
        BufReader::new(stdout).lines().map_while(Result::ok).take_while(|l| !l.starts_with("Ctrl-C")).collect();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let addr = lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("opbound ")?.split_whitespace().next()?.strip_prefix("http://"))
        .expect("the guide says where opbound listens");
    assert_ne!(addr, "127.0.0.1:8080", "{lines:#?}");
    assert!(
        stderr.contains(&format!("127.0.0.1:8080 is taken; the demo listens on {addr} instead")),
        "stderr: {stderr}\nstdout: {lines:#?}"
    );
}

/// Issue 47: the demo's 429 as the install page shows it said `ratelimit-reset: 15` for a ten-second
/// window. The page's sample has the headers the demo sends, in its order, with the same body save
/// the seconds, and its seconds, like the demo's, are within the window.
fn the_book_shows_this_refusal(refusal: &common::Got) {
    let page = include_str!("../docs/src/install.md");
    let start = page.find("HTTP/1.1 429 Too Many Requests").expect("the install page shows the demo's 429");
    let sample: Vec<&str> = page[start..].lines().take_while(|l| !l.starts_with("```")).collect();
    let shown = |name: &str| -> &str {
        sample
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("the sample has no {name}"))
    };
    let names: Vec<&str> =
        sample[1..].iter().take_while(|l| !l.is_empty()).map(|l| l.split(':').next().unwrap()).collect();
    let sent: Vec<&str> = refusal.headers.keys().map(|k| k.as_str()).filter(|k| names.contains(k)).collect();
    assert_eq!(names, sent, "the sample's headers, in the demo's order");
    for name in ["content-type", "ratelimit-limit", "ratelimit-remaining"] {
        assert_eq!(shown(name), refusal.header(name).unwrap(), "{name}");
    }
    for name in ["ratelimit-reset", "retry-after"] {
        let (page, sent): (u64, u64) = (shown(name).parse().unwrap(), refusal.header(name).unwrap().parse().unwrap());
        assert!(
            (1..=10).contains(&page) && (1..=10).contains(&sent),
            "{name}: the page says {page}, the demo sent {sent}"
        );
    }
    let body = sample.last().unwrap();
    let mut expected: serde_json::Value = serde_json::from_str(body).unwrap();
    let mut actual = refusal.json();
    expected["retry_after"] = serde_json::Value::Null;
    actual["retry_after"] = serde_json::Value::Null;
    assert_eq!(expected, actual, "the sample's body");
}

/// Issue 10, item 15: `--shadow` runs every bound in shadow mode, to try a spec on live traffic:
/// nothing is refused, and what would have been is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_runs_every_bound_without_refusing() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("shadow", SPEC);
    let ob = serve(&up.url(), &spec, &["--shadow", "--admin", "127.0.0.1:0"]);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get(&ob.url("/limited")).await.status);
    }
    assert_eq!(statuses, [200; 5], "a shadow bound never refuses");
    assert_eq!(up.targets().len(), 5);
    let metrics = get(format!("http://{}/metrics", ob.admin().unwrap())).await.body;
    let would = metrics
        .lines()
        .find(|l| l.contains("bound=\"limited:0\"") && l.contains("outcome=\"shadow_refused\""))
        .unwrap_or_else(|| panic!("no shadow_refused series for limited:0 in:\n{metrics}"));
    assert!(would.ends_with(" 3"), "three of five would have been refused: {would}");
    assert!(!ob.logged("shadow mode").is_empty(), "the start says no bound refuses");
}

/// Issue 10, item 14: an https:// upstream, trusted through a private CA, with the name to verify
/// given when the upstream is reached by address. The upstream is Debian's nginx with TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified() {
    use common::tls_files;
    let spec = TempSpec::new("https-upstream", SPEC);
    let dir = spec.dir();
    tls_files(dir, "DNS:api.test");
    let (_nginx, port) = common::tls_nginx(dir, "server.pem", "server.key", ECHO).await;
    let url = format!("https://127.0.0.1:{port}");
    let ca = dir.join("ca.pem");
    let ca = ca.to_str().unwrap();
    // Trusted CA, and the name the certificate carries: forwarded over TLS, with SNI.
    // One worker: the second request finds the first one's connection in its pool.
    let ob = serve(&url, &spec, &["--upstream-ca-file", ca, "--upstream-server-name", "api.test", "--workers", "1"]);
    let r = get(&ob.url("/limited?a=1")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "tls api.test /limited?a=1"), "{:?}", r.headers);
    assert_eq!(r.header("ratelimit-remaining"), Some("1"));
    // The TLS connection is kept and carries the next request.
    let r = get(&ob.url("/limited?a=2")).await;
    assert_eq!((r.status, r.header("x-connection-requests")), (200, Some("2")), "{:?}", r.headers);
    // The certificate does not name 127.0.0.1: without the server name, verification fails.
    let ob = serve(&url, &spec, &["--upstream-ca-file", ca]);
    assert_eq!(get(&ob.url("/limited")).await.status, 502);
    // Without the private CA the system roots do not trust it either.
    let ob = serve(&url, &spec, &["--upstream-server-name", "api.test"]);
    assert_eq!(get(&ob.url("/limited")).await.status, 502);
}

/// What the TLS nginx answers: the server name asked for and the target.
const ECHO: &str = "location / { add_header X-Connection-Requests $connection_requests; return 200 \"tls $ssl_server_name $request_uri\"; }";

/// Makes a self-signed certificate the way the usual one-liner does (`CA:TRUE`, by OpenSSL's
/// default configuration) for `san`, as `name.pem` and `name.key` in `dir`.
fn self_signed(dir: &std::path::Path, name: &str, san: &str) {
    let out = std::process::Command::new(common::require("openssl"))
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", &format!("subjectAltName={san}")])
        .args(["-keyout", &format!("{name}.key"), "-out", &format!("{name}.pem")])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", &format!("{name}.pem")])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"), "the certificate is a CA's, as in the issue");
}

/// Issue 47, item 6: the certificate `openssl req -x509 ... -addext subjectAltName=...` makes
/// says CA:TRUE, which the Web PKI refuses as a server's (`CaUsedAsEndEntity`); curl, nginx and
/// Python accept it when told to trust it, and so does opbound when it is given itself in
/// `--upstream-ca-file`. Still checked: that it is exactly that certificate, and the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_upstream_given_in_the_ca_file_is_trusted() {
    let spec = TempSpec::new("self-signed", SPEC);
    let dir = spec.dir();
    self_signed(dir, "cert", "DNS:localhost,IP:127.0.0.1");
    self_signed(dir, "other", "DNS:localhost,IP:127.0.0.1");
    let (_nginx, port) = common::tls_nginx(dir, "cert.pem", "cert.key", ECHO).await;
    let url = format!("https://127.0.0.1:{port}");
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();

    let ob = serve(&url, &spec, &["--upstream-ca-file", &file("cert.pem")]);
    let r = get(&ob.url("/limited?a=1")).await;
    // No SNI for an address: nginx's $ssl_server_name is empty.
    assert_eq!((r.status, r.body.as_str()), (200, "tls  /limited?a=1"), "{}", r.body);
    let ob = serve(&url, &spec, &["--upstream-ca-file", &file("cert.pem"), "--upstream-server-name", "localhost"]);
    assert_eq!(get(&ob.url("/limited")).await.status, 200, "by name too");

    // Another self-signed certificate in the file trusts nothing else.
    let ob = serve(&url, &spec, &["--upstream-ca-file", &file("other.pem")]);
    assert_eq!(get(&ob.url("/limited")).await.status, 502);
    // Nor does the pinned one stand for a name it does not carry.
    let ob = serve(&url, &spec, &["--upstream-ca-file", &file("cert.pem"), "--upstream-server-name", "api.test"]);
    assert_eq!(get(&ob.url("/limited")).await.status, 502);
    // Trusted through the system's roots, it is refused, and the log says what to do.
    let ob = serve(&url, &spec, &["--upstream-server-name", "localhost"]);
    let r = get(&ob.url("/limited")).await;
    assert_eq!(r.status, 502);
    assert!(!r.body.contains("CA"), "the client is not told why: {}", r.body);
    let logged = ob.logged_at_least("upstream request failed", 1);
    assert!(logged[0].contains("CA:TRUE") && logged[0].contains("--upstream-ca-file"), "{logged:?}");
}

/// Sends `method` to the admin listener's `/counters` with an optional bearer token.
async fn counters(ob: &Opbound, method: &str, query: &str, token: Option<&str>) -> common::Got {
    let mut b = Request::builder().method(method).uri(format!("http://{}/counters?{query}", ob.admin().unwrap()));
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    send(b.body(Full::new(Bytes::new())).unwrap()).await
}

/// Issue 10, item 17: an operator looks up one caller's counter by the key's value, and resets
/// it with the admin token; without the token, /counters only reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_looks_up_and_resets_one_callers_counter() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("counters", SPEC);
    let token = spec.dir().join("admin-token");
    std::fs::write(&token, "s3cret-admin\n").unwrap();
    let ob = serve(&up.url(), &spec, &["--admin", "127.0.0.1:0", "--admin-token-file", token.to_str().unwrap()]);
    for _ in 0..2 {
        assert_eq!(get(&ob.url("/limited")).await.status, 200);
    }
    assert_eq!(get(&ob.url("/limited")).await.status, 429);

    let seen = counters(&ob, "GET", "bound=limited:0&key=127.0.0.1", None).await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    let v = seen.json();
    assert_eq!((v["tracked"].as_bool(), v["limit"].as_u64(), v["remaining"].as_u64()), (Some(true), Some(2), Some(0)));
    assert_eq!(v["per"], "address");
    let other = counters(&ob, "GET", "bound=limited:0&key=192.0.2.9", None).await.json();
    assert_eq!((other["tracked"].as_bool(), other["remaining"].as_u64()), (Some(false), Some(2)));

    // A reset needs the token, exactly.
    assert_eq!(counters(&ob, "DELETE", "bound=limited:0&key=127.0.0.1", None).await.status, 401);
    assert_eq!(counters(&ob, "DELETE", "bound=limited:0&key=127.0.0.1", Some("guess")).await.status, 401);
    assert_eq!(get(&ob.url("/limited")).await.status, 429, "refused resets changed nothing");
    let reset = counters(&ob, "DELETE", "bound=limited:0&key=127.0.0.1", Some("s3cret-admin")).await;
    assert_eq!((reset.status, reset.json()["had_counter"].as_bool()), (200, Some(true)), "{}", reset.body);
    assert_eq!(get(&ob.url("/limited")).await.status, 200, "the caller starts afresh");

    // Mistakes say what to fix.
    let unknown = counters(&ob, "GET", "bound=limted:0&key=127.0.0.1", None).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["detail"].as_str().unwrap().contains("did you mean limited:0?"), "{}", unknown.body);
    assert_eq!(counters(&ob, "GET", "bound=limited:0&key=not-an-ip", None).await.status, 400);

    // Without a token file, the endpoint only reads.
    let ob = serve(&up.url(), &spec, &["--admin", "127.0.0.1:0"]);
    assert_eq!(counters(&ob, "GET", "bound=limited:0&key=127.0.0.1", None).await.status, 200);
    let refused = counters(&ob, "DELETE", "bound=limited:0&key=127.0.0.1", Some("s3cret-admin")).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("--admin-token-file"), "{}", refused.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_as_soon_as_it_listens_is_a_graceful_stop() {
    // The handler is installed before the listening line is written: a SIGTERM from then on
    // ends the process with status 0, never by the signal's default action.
    let up = Upstream::start().await;
    let spec = TempSpec::new("early-term", SPEC);
    let serve = serve(&up.url(), &spec, &[]);
    let decide = Opbound::start(&[
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
    ]);
    for mut ob in [serve, decide] {
        ob.terminate();
        let status = tokio::task::spawn_blocking(move || ob.child.wait().unwrap()).await.unwrap();
        assert!(status.success(), "{status:?}");
    }
}
