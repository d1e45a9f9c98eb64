//! The upstream's side of the wire, against the real binary: a scripted HTTP/1.1 upstream on a
//! loopback socket answers each request with exact bytes, written as slowly as a byte at a time,
//! framed every way RFC 9112 allows and some ways it does not. The client must get each body
//! whole and exact, and a connection must be used again only when its response was framed beyond
//! doubt and read to its end: a misread response on a reused connection hands one client's bytes
//! to another.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{Opbound, TempSpec};
use http::Request;
use http_body_util::{BodyExt, Full};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: upstream wire tests, version: '1'}
x-rate-limit:
  - {per: address, limit: 100000, window: PT1M}
paths:
  /r/{name}:
    get: {operationId: get}
    head: {operationId: head}
    post: {operationId: post}
"#;

/// How one scripted answer is written.
struct Answer {
    bytes: Vec<u8>,
    /// Written a byte at a time, each flushed on its own.
    trickle: bool,
    /// The upstream closes the connection after it.
    close: bool,
}

fn answer(bytes: &str) -> Answer {
    Answer { bytes: bytes.as_bytes().to_vec(), trickle: false, close: false }
}

/// The scripted answer to `GET /r/NAME` (and HEAD, POST).
fn script(name: &str) -> Answer {
    match name {
        "length" => answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Up: 1\r\n\r\nhello"),
        "trickled" => Answer { trickle: true, ..answer("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello, world") },
        "chunked" => Answer {
            trickle: true,
            ..answer(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n\
                 5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Sum: 42\r\n\r\n",
            )
        },
        // Both lengths: the chunked coding wins (RFC 9112 §6.3), and the connection is not
        // trusted with another request.
        "both" => {
            answer("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
        }
        "bad-length" => answer("HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nhi"),
        "until-close" => Answer { close: true, ..answer("HTTP/1.1 200 OK\r\n\r\nall of it") },
        "no-content" => answer("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"),
        "interim" => answer(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal",
        ),
        "switch" => answer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"),
        // Bytes after the body: a response nobody asked for, or a smuggling attempt.
        "extra" => {
            answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsmuggl")
        }
        "cut" => Answer { close: true, ..answer("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc") },
        "close" => answer("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye"),
        "keep-alive" => answer(
            "HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\nX-Up: 1\r\nContent-Length: 2\r\n\r\nok",
        ),
        // A Connection field that names a field of the message: both are the hop's only.
        "names" => answer(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Up: 1\r\n\
             Content-Length: 2\r\n\r\nok",
        ),
        "then-closed" => Answer { close: true, ..answer("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone") },
        "huge-head" => answer(&format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n", "a".repeat(70 * 1024))),
        "rude" => answer("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"),
        "reason" => answer("HTTP/1.1 200 Quite Fine\r\nContent-Length: 0\r\n\r\n"),
        // An upstream with RateLimit fields of its own: opbound's replace them.
        "own-limits" => answer(
            "HTTP/1.1 200 OK\r\nRateLimit-Limit: 999\r\nX-Up: 1\r\nratelimit-remaining: 998\r\n\
             RateLimit-Reset: 7\r\nRateLimit-Limit: 1000\r\nContent-Length: 2\r\n\r\nok",
        ),
        // Fields of one name apart from each other, and an empty one.
        "cookies" => answer(
            "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Up: 1\r\nSet-Cookie: b=2\r\nX-Empty:\r\n\
             RateLimit-Limit: 999\r\nContent-Length: 2\r\n\r\nok",
        ),
        "trailers" => answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum, X-Secret\r\n\r\n\
             5\r\nhello\r\n0\r\nX-Sum: 42\r\nX-Secret: for opbound only\r\n\r\n",
        ),
        _ => answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    }
}

/// A request the upstream read: on which connection (counting from 1), its head and body.
#[derive(Clone, Debug)]
struct Received {
    connection: usize,
    head: String,
    body: Vec<u8>,
    /// The trailer section of a chunked body, as sent.
    trailers: String,
}

/// The scripted upstream.
struct Scripted {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Scripted {
    fn start() -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (c, r) = (connections.clone(), received.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                let r = r.clone();
                std::thread::spawn(move || serve_connection(stream, n, &r));
            }
        });
        Scripted { addr, connections, received }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve_connection(mut stream: TcpStream, connection: usize, received: &Mutex<Vec<Received>>) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_until_head(&mut stream, &mut buf) else { return };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        let length = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .unwrap_or(0usize);
        buf.drain(..end);
        let (body, trailers) = if chunked {
            let Some(read) = read_chunked(&mut stream, &mut buf) else { return };
            read
        } else {
            if !fill(&mut stream, &mut buf, length) {
                return;
            }
            (buf.drain(..length).collect(), String::new())
        };
        let target = head.split(' ').nth(1).unwrap_or("/").to_string();
        received.lock().unwrap().push(Received { connection, head: head.clone(), body, trailers });
        let mut answer = script(target.trim_start_matches("/r/"));
        if head.starts_with("HEAD ") && !target.ends_with("/rude") {
            // A HEAD's answer is its head alone (but for a rude upstream's).
            let end = answer.bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            answer.bytes.truncate(end);
        }
        if answer.trickle {
            for byte in &answer.bytes {
                if stream.write_all(&[*byte]).and_then(|()| stream.flush()).is_err() {
                    return;
                }
            }
        } else if stream.write_all(&answer.bytes).is_err() {
            return;
        }
        if answer.close {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

/// Reads into `buf` until it holds `n` bytes; false at the end of the stream.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> bool {
    while buf.len() < n {
        let mut more = [0u8; 4096];
        match stream.read(&mut more) {
            Ok(0) | Err(_) => return false,
            Ok(read) => buf.extend_from_slice(&more[..read]),
        }
    }
    true
}

/// Reads one line (without its CRLF) from the front of `buf`, reading more as needed.
fn line(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&buf[..at]).into_owned();
            buf.drain(..at + 2);
            return Some(line);
        }
        let have = buf.len();
        if !fill(stream, buf, have + 1) {
            return None;
        }
    }
}

/// Reads a chunked body from the front of `buf`: its data and its trailer section.
fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Vec<u8>, String)> {
    let mut data = Vec::new();
    loop {
        let size = line(stream, buf)?;
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        if !fill(stream, buf, size + 2) {
            return None;
        }
        data.extend(buf.drain(..size));
        buf.drain(..2);
    }
    let mut trailers = String::new();
    loop {
        let field = line(stream, buf)?;
        if field.is_empty() {
            return Some((data, trailers));
        }
        trailers.push_str(&field);
        trailers.push_str("\r\n");
    }
}

/// Reads into `buf` until it holds a whole request head; the head's length, or `None` at the end.
fn read_until_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        let mut more = [0u8; 4096];
        match stream.read(&mut more) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&more[..n]),
        }
    }
}

fn serve(upstream: &Scripted, spec: &TempSpec) -> Opbound {
    Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &upstream.url(), "--workers", "1"])
}

/// A response as the client got it: status, headers, body, trailers; `Err` when the body broke.
struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Result<(Vec<u8>, Option<http::HeaderMap>), String>,
}

async fn request(method: &str, url: String, body: &'static str) -> Reply {
    let req = Request::builder().method(method).uri(url).header("te", "trailers");
    let response = common::client()
        .request(req.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let (parts, body) = response.into_parts();
    let body = match body.collect().await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned();
            Ok((collected.to_bytes().to_vec(), trailers))
        }
        Err(e) => Err(e.to_string()),
    };
    Reply { status: parts.status.as_u16(), headers: parts.headers, body }
}

async fn get(opbound: &Opbound, name: &str) -> Reply {
    request("GET", opbound.url(&format!("/r/{name}")), "").await
}

fn body(reply: &Reply) -> String {
    let (bytes, _) = reply.body.as_ref().expect("the whole body");
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn bodies_arrive_whole_however_they_are_framed_and_written() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-bodies", SPEC);
    let opbound = serve(&upstream, &spec);

    let reply = get(&opbound, "length").await;
    assert_eq!((reply.status, body(&reply).as_str()), (200, "hello"));
    assert_eq!(reply.headers["x-up"], "1");
    assert!(reply.headers.contains_key("ratelimit-limit"));
    assert_eq!(body(&get(&opbound, "trickled").await), "hello, world");
    let chunked = get(&opbound, "chunked").await;
    assert_eq!(body(&chunked), "hello, world");
    assert!(!chunked.headers.contains_key("content-length"));
    let trailers = chunked.body.as_ref().unwrap().1.as_ref().expect("the trailer section");
    assert_eq!(trailers["x-sum"], "42");
    let interim = get(&opbound, "interim").await;
    assert_eq!((interim.status, body(&interim).as_str()), (200, "final"), "interim answers are skipped");
    let reason = get(&opbound, "reason").await;
    assert_eq!(reason.status, 200);
    let limits = get(&opbound, "own-limits").await;
    let values =
        |name: &str| limits.headers.get_all(name).iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(values("ratelimit-limit"), ["100000"], "opbound's limit, once, in place of the upstream's two");
    assert_eq!(values("ratelimit-reset").len(), 1);
    let remaining = values("ratelimit-remaining");
    assert!(remaining.len() == 1 && remaining[0].starts_with("999"), "opbound's count: {remaining:?}");
    assert_eq!((values("x-up"), body(&limits)), (vec!["1".to_string()], "ok".to_string()));
    // Every one of those was framed exactly and read to its end: one connection carried them all.
    assert_eq!(upstream.connections(), 1);

    // A HEAD's answer and a 204 have no body whatever their fields say; the connection goes on.
    let head = request("HEAD", opbound.url("/r/length"), "").await;
    assert_eq!((head.status, body(&head).as_str()), (200, ""));
    assert_eq!(head.headers["content-length"], "5");
    let none = get(&opbound, "no-content").await;
    assert_eq!((none.status, body(&none).as_str()), (204, ""));
    assert_eq!(body(&get(&opbound, "length").await), "hello");
    assert_eq!(upstream.connections(), 1);
    assert!(upstream.received().iter().all(|r| r.connection == 1));

    // An upstream that answers a HEAD with a body anyway: the body is not the next answer.
    let rude = request("HEAD", opbound.url("/r/rude"), "").await;
    assert_eq!((rude.status, body(&rude).as_str()), (200, ""));
    assert_eq!(body(&get(&opbound, "length").await), "hello");
    assert_eq!(upstream.connections(), 2, "the connection with bytes nobody asked for was closed");
}

#[tokio::test]
async fn trailers_pass_both_ways_as_declared_but_never_what_is_stripped() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-trailers", SPEC);
    let url = upstream.url();
    let opbound = Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &url, "--strip-header", "X-Secret"]);

    // A response to a request without a body, and to one whose body was streamed up.
    for (method, body_sent) in [("GET", ""), ("POST", "a streamed body")] {
        let reply = request(method, opbound.url("/r/trailers"), body_sent).await;
        assert_eq!(body(&reply), "hello", "{method}");
        assert_eq!(reply.headers["trailer"], "X-Sum", "{method}: a stripped field is not declared");
        let trailers = reply.body.as_ref().unwrap().1.as_ref().expect("the trailer section");
        assert_eq!(trailers["x-sum"], "42", "{method}");
        assert!(!trailers.contains_key("x-secret"), "{method}: {trailers:?}");
    }

    // A request's trailers never reach the upstream: they could bring back an identity header
    // stripped from the header section.
    let mut client = TcpStream::connect(opbound.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client
        .write_all(
            b"POST /r/length HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nTransfer-Encoding: chunked\r\n\
              Trailer: X-User-Id\r\n\r\n5\r\nhello\r\n0\r\nX-User-Id: admin\r\n\r\n",
        )
        .unwrap();
    let head = common::read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let sent = upstream.received().into_iter().find(|r| r.head.starts_with("POST /r/length")).unwrap();
    assert_eq!(sent.body, b"hello");
    assert!(!sent.head.to_ascii_lowercase().contains("trailer"), "{}", sent.head);
    assert!(!sent.trailers.contains("admin"), "{:?}", sent.trailers);
}

#[tokio::test]
async fn a_connection_whose_framing_is_in_doubt_is_closed_after_its_response() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-doubt", SPEC);
    let opbound = serve(&upstream, &spec);

    let mut expected_connections = 1;
    for (name, body_seen) in [
        ("both", "hi"),
        ("until-close", "all of it"),
        ("close", "bye"),
        ("then-closed", "done"),
        // Bytes after the body are never read as the next response.
        ("extra", "hi"),
    ] {
        let reply = get(&opbound, name).await;
        assert_eq!((reply.status, body(&reply).as_str()), (200, body_seen), "{name}");
        let next = get(&opbound, "length").await;
        assert_eq!(body(&next), "hello", "after {name}: the next answer is its own");
        expected_connections += 1;
        assert_eq!(upstream.connections(), expected_connections, "after {name}: a new connection");
    }
    // Each request was sent once: none was sent again on a new connection after a good answer.
    assert_eq!(upstream.received().len(), 10);
}

#[tokio::test]
async fn an_upstream_answer_reaches_http1_and_http2_clients_with_every_field_in_order() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-fields", SPEC);
    let opbound = serve(&upstream, &spec);
    // HTTP/1.1 is written by opbound's own writer, HTTP/2 by hyper's from the response's map:
    // the fields as the upstream read them reach both, its RateLimit field replaced.
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let http2 = h2.request(Request::get(opbound.url("/r/cookies")).body(Full::new(Bytes::new())).unwrap());
    let http2 = http2.await.unwrap();
    assert_eq!(http2.version(), http::Version::HTTP_2);
    let http2_headers = http2.headers().clone();
    assert_eq!(http2.into_body().collect().await.unwrap().to_bytes(), "ok");
    let http1 = get(&opbound, "cookies").await;
    assert_eq!(body(&http1), "ok");
    for (client, headers) in [("HTTP/1.1", &http1.headers), ("HTTP/2", &http2_headers)] {
        let values = |name: &str| headers.get_all(name).iter().map(|v| v.to_str().unwrap()).collect::<Vec<_>>();
        assert_eq!(values("set-cookie"), ["a=1", "b=2"], "{client}");
        assert_eq!((values("x-up"), values("x-empty")), (vec!["1"], vec![""]), "{client}");
        assert_eq!(values("ratelimit-limit"), ["100000"], "{client}: opbound's, not the upstream's");
    }
}

#[tokio::test]
async fn the_hop_by_hop_fields_of_an_upstream_answer_never_reach_the_client() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-hop", SPEC);
    let opbound = serve(&upstream, &spec);

    for name in ["keep-alive", "names"] {
        let reply = get(&opbound, name).await;
        assert_eq!((reply.status, body(&reply).as_str()), (200, "ok"), "{name}");
        assert_eq!(reply.headers["x-up"], "1", "{name}");
        for hop in ["connection", "keep-alive", "x-hop"] {
            assert!(!reply.headers.contains_key(hop), "{name}: {hop} passed: {:?}", reply.headers);
        }
    }
    // Neither said close: one connection carried both.
    assert_eq!(body(&get(&opbound, "length").await), "hello");
    assert_eq!(upstream.connections(), 1);
}

#[tokio::test]
async fn a_response_that_cannot_be_believed_is_a_502_and_nothing_of_it_passes() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-502", SPEC);
    // Every failure is logged at DEBUG with its request id (the first of a period at WARN too).
    let opbound = Opbound::start_under(
        &["env", "OPBOUND_LOG=info,opbound::server::proxy=debug"],
        &["serve", "--spec", spec.arg(), "--upstream", &upstream.url(), "--workers", "1"],
    );

    for (name, cause) in
        [("bad-length", "framing is malformed"), ("switch", "switched protocols unasked"), ("huge-head", "longer than")]
    {
        let reply = get(&opbound, name).await;
        assert_eq!(reply.status, 502, "{name}");
        assert_eq!(reply.headers["content-type"], "application/problem+json");
        // The cause is the operator's: in the log under the id the client was given.
        let text = body(&reply);
        assert!(!text.contains(cause), "{name}: the cause reached the client: {text}");
        let problem: serde_json::Value = serde_json::from_str(&text).unwrap();
        let id = problem["request-id"].as_str().unwrap_or_else(|| panic!("{name}: no request id: {text}"));
        let logged = opbound.logged_at_least(id, 1);
        assert!(logged.iter().any(|l| l.contains(cause)), "{name}: {logged:?}");
        assert!(reply.headers.contains_key("ratelimit-limit"), "a 502 still says what is left");
        assert_eq!(body(&get(&opbound, "length").await), "hello", "after {name}");
    }

    // A body cut short cannot be finished: the client's response breaks rather than end early
    // (its head may not even have been sent when the connection is closed).
    let req = Request::get(opbound.url("/r/cut")).body(Full::new(Bytes::new())).unwrap();
    if let Ok(cut) = common::client().request(req).await {
        assert_eq!(cut.status(), 200);
        assert!(cut.into_body().collect().await.is_err(), "a body cut short is not passed off as whole");
    }
    assert_eq!(body(&get(&opbound, "length").await), "hello", "and opbound goes on");
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_used_and_a_request_is_sent_once() {
    let upstream = Scripted::start();
    let spec = TempSpec::new("wire-idle", SPEC);
    let opbound = serve(&upstream, &spec);

    // The upstream closes each connection right after its answer, without saying so first: the
    // next request finds the connection closed, whether or not opbound has seen the close yet.
    for round in 1..=5 {
        let reply = get(&opbound, "then-closed").await;
        assert_eq!(body(&reply), "done", "round {round}");
    }
    assert_eq!(upstream.connections(), 5);
    assert_eq!(upstream.received().len(), 5, "no request reached the upstream twice");
}

#[tokio::test]
async fn a_body_read_for_a_key_is_sent_whole_with_its_length() {
    let upstream = Scripted::start();
    let spec = TempSpec::new(
        "wire-key",
        r#"
openapi: 3.0.3
info: {title: upstream wire tests, version: '1'}
paths:
  /r/{name}:
    post:
      operationId: post
      requestBody: {content: {application/json: {schema: {type: object}}}}
      x-rate-limit:
        - {per: 'json:/user', limit: 100, window: PT1M}
"#,
    );
    let opbound = serve(&upstream, &spec);
    let payload = r#"{"user": "ada", "note": "a body read ahead for its key"}"#;
    let req = Request::post(opbound.url("/r/length"))
        .header("content-type", "application/json")
        .header("expect", "100-continue")
        .body(Full::new(Bytes::from(payload)))
        .unwrap();
    let response = common::client().request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.into_body().collect().await.unwrap();
    let received = upstream.received();
    let head = received[0].head.to_ascii_lowercase();
    assert_eq!(received[0].body, payload.as_bytes());
    assert!(head.contains(&format!("content-length: {}\r\n", payload.len())), "{head}");
    assert!(!head.contains("expect:"), "the body is whole: nothing is left to continue");
    assert!(!head.contains("transfer-encoding"), "{head}");
}

#[test]
fn a_slow_upstream_times_out_as_a_504() {
    // An upstream that accepts and reads but never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let spec = TempSpec::new("wire-slow", SPEC);
    let url = format!("http://{addr}");
    let opbound = Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &url, "--upstream-timeout", "300ms"]);
    let mut client = TcpStream::connect(opbound.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client.write_all(b"GET /r/x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let head = common::read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 504"), "{head}");
}
