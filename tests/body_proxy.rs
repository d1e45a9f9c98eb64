//! Bounds keyed on a request body, on the real binary in front of a real recording upstream:
//! the body reaches the upstream byte for byte (fixed-length and chunked, within the limit and
//! far over it), the decision comes after reading no more than `--max-key-body`, and a cost a
//! request states is refused with 413 above `max-cost` (counting nothing) or 400 when it is no
//! integer.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Opbound, TempSpec, Upstream, get, send};
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SPEC: &str = r#"
openapi: 3.1.0
info: {title: body keys, version: '1'}
paths:
  /login:
    post:
      operationId: login
      requestBody: {content: {application/json: {}}}
      x-rate-limit:
        - {per: address, limit: 1000, window: PT1M}
        - {per: json:/username, limit: 2, window: PT15M}
  /strict:
    post:
      operationId: strict
      requestBody: {content: {application/json: {}}}
      x-rate-limit: {per: json:/username, limit: 100, window: PT15M, missing: reject}
  /search:
    get:
      operationId: search
      x-rate-limit: {per: address, limit: 10, window: PT1H, cost-from: query:n, max-cost: 10}
"#;

async fn start() -> (Upstream, Opbound, TempSpec) {
    let upstream = Upstream::start().await;
    let spec = TempSpec::new("body-proxy", SPEC);
    let ob = Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &upstream.url()]);
    (upstream, ob, spec)
}

async fn post(ob: &Opbound, path: &str, body: &'static [u8]) -> common::Got {
    let req = Request::post(ob.url(path))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body)));
    send(req.unwrap()).await
}

/// The head of a chunked JSON POST, the connection closed after it.
fn chunked_head(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
}

fn chunk(data: &[u8]) -> Vec<u8> {
    [format!("{:x}\r\n", data.len()).as_bytes(), data, b"\r\n"].concat()
}

/// Sends a chunked request in these chunks and reads the response to its end.
async fn chunked(ob: &Opbound, path: &str, chunks: &[&[u8]]) -> String {
    let mut stream = tokio::net::TcpStream::connect(ob.addr).await.unwrap();
    stream.write_all(chunked_head(path).as_bytes()).await.unwrap();
    for c in chunks {
        stream.write_all(&chunk(c)).await.unwrap();
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn last_body(upstream: &Upstream) -> Bytes {
    upstream.seen.lock().unwrap().last().expect("the upstream saw a request").body.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_length_body_is_keyed_on_and_forwarded_unchanged() {
    let (upstream, ob, _spec) = start().await;
    let body: &[u8] = b"{ \"username\" : \"ann\",\n  \"password\": \"caf\xc3\xa9\", \"x\": [1, 2.50] }";
    for _ in 0..2 {
        assert_eq!(post(&ob, "/login", body).await.status, 200);
        assert_eq!(last_body(&upstream), body);
    }
    let seen = upstream.seen.lock().unwrap().last().unwrap().headers.clone();
    assert_eq!(seen.get("content-length").unwrap(), &body.len().to_string());
    let third = post(&ob, "/login", br#"{"password":"other","username":"ann"}"#).await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(post(&ob, "/login", br#"{"username":"bob"}"#).await.status, 200, "other usernames are unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_is_keyed_on_and_forwarded_unchanged() {
    let (upstream, ob, _spec) = start().await;
    let parts: [&[u8]; 3] = [b"{\"user", b"name\":\"ann\",", b" \"n\": 1}"];
    for _ in 0..2 {
        let response = chunked(&ob, "/login", &parts).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert_eq!(last_body(&upstream), parts.concat());
    }
    let third = chunked(&ob, "/login", &parts).await;
    assert!(third.starts_with("HTTP/1.1 429"), "the key was read from the chunks: {third}");
}

/// 10 MB, fixed-length and chunked, on a body-keyed operation: a missing key (missing: pass),
/// and the whole body at the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_far_over_the_limit_is_a_missing_key_and_forwarded_whole() {
    let (upstream, ob, _spec) = start().await;
    let mut big = br#"{"username":"ann","blob":""#.to_vec();
    big.extend((0..10 * 1024 * 1024).map(|i| b'a' + (i % 26) as u8));
    big.extend_from_slice(b"\"}");
    let big: &'static [u8] = Box::leak(big.into_boxed_slice());
    for _ in 0..3 {
        assert_eq!(post(&ob, "/login", big).await.status, 200, "missing: pass, however often");
        assert!(last_body(&upstream) == big, "fixed-length: forwarded whole");
    }
    let pieces: Vec<&[u8]> = big.chunks(256 * 1024).collect();
    let response = chunked(&ob, "/login", &pieces).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{}", &response[..response.len().min(300)]);
    assert!(last_body(&upstream) == big, "chunked: what was read ahead, then the rest");
}

/// With missing: reject, a chunked body that passes the limit is refused while the client is
/// still sending it: opbound decided after reading no more than the limit (and a frame).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_comes_before_the_rest_of_a_long_body_is_sent() {
    let (upstream, ob, _spec) = start().await;
    let mut stream = tokio::net::TcpStream::connect(ob.addr).await.unwrap();
    stream.write_all(chunked_head("/strict").as_bytes()).await.unwrap();
    let mut start = br#"{"username":"ann","blob":""#.to_vec();
    start.resize(100 * 1024, b'a');
    stream.write_all(&chunk(&start)).await.unwrap();
    // The rest (and the last chunk) is never sent: the answer cannot wait for it.
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !String::from_utf8_lossy(&out).contains("missing-key") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&out));
            out.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("refused before the body ended");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(upstream.seen.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stated_cost_above_max_cost_is_413_and_counts_nothing() {
    let (upstream, ob, _spec) = start().await;
    let too_high = get(ob.url("/search?n=11")).await;
    assert_eq!(too_high.status, 413, "{}", too_high.body);
    assert_eq!(too_high.header("content-type"), Some("application/problem+json"));
    assert_eq!(too_high.json()["max_cost"], 10);
    assert!(too_high.json()["detail"].as_str().unwrap().contains("at most 10"));
    for bad in ["n=ten", "n=-1", "n=1&n=2"] {
        let r = get(ob.url(&format!("/search?{bad}"))).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    assert!(upstream.seen.lock().unwrap().is_empty());
    // The whole budget of 10 is still there.
    assert_eq!(get(ob.url("/search?n=10")).await.status, 200);
    assert_eq!(get(ob.url("/search?n=0")).await.status, 200, "a cost of 0 takes nothing");
    assert_eq!(get(ob.url("/search?n=1")).await.status, 429);
}

/// A client that sends half a sign-in and stops: opbound waits for the body no longer than the
/// header-read timeout, then refuses (400) rather than hold the request open or let it through
/// unkeyed (with `missing: pass`, pausing mid-body would otherwise go uncounted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_is_refused_after_the_header_read_timeout() {
    let upstream = Upstream::start().await;
    let spec = TempSpec::new("body-stall", SPEC);
    let ob =
        Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &upstream.url(), "--header-read-timeout", "1s"]);
    let mut stream = tokio::net::TcpStream::connect(ob.addr).await.unwrap();
    let head = "POST /login HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"username":"#).await.unwrap();
    let started = std::time::Instant::now();
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut out))
        .await
        .expect("opbound answered a stalled body")
        .unwrap();
    let response = String::from_utf8_lossy(&out[..n]).into_owned();
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert!(response.contains("stalled"), "{response}");
    assert!(started.elapsed() >= Duration::from_millis(900), "not before the timeout: {:?}", started.elapsed());
    assert!(upstream.seen.lock().unwrap().is_empty(), "the upstream never saw it");
}
