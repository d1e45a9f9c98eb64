//! Bodies read as they come, `Expect`, upgrades and unreadable heads, served over a real
//! loopback connection by `serve`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::serve::*;
use crate::server::net::activity::Activity;
use crate::server::net::admission::Peer;
use crate::server::net::request_body::{Deferred, RequestBody};

type TestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

struct Answer(TestBody);

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.0.size_hint()
    }
}

impl Deferred for Answer {}

fn text(status: StatusCode, body: String) -> Response<Answer> {
    let mut r = Response::new(Answer(Full::new(Bytes::from(body)).boxed_unsync()));
    *r.status_mut() = status;
    r
}

/// What the handler saw: each request's path, and what it read of its body.
type Seen = Arc<Mutex<Vec<String>>>;

/// The handler: `/refuse` answers 429 without reading its body, `/ws` switches protocols and
/// echoes what the client sends, anything else reads its body and answers with it (and its
/// trailers).
async fn handle(mut req: Request<RequestBody>, seen: Seen) -> Response<Answer> {
    let path = req.uri().path().to_string();
    if path == "/refuse" {
        seen.lock().unwrap().push(path);
        return text(StatusCode::TOO_MANY_REQUESTS, "slow down".into());
    }
    if path == "/ws" {
        seen.lock().unwrap().push(path);
        let on = crate::server::net::upgrade::on(&mut req);
        tokio::spawn(async move {
            let mut tunnel = on.upgraded().await.expect("the connection is handed over");
            let mut got = [0u8; 4];
            tunnel.read_exact(&mut got).await.unwrap();
            tunnel.write_all(&got).await.unwrap();
        });
        let mut r = text(StatusCode::SWITCHING_PROTOCOLS, String::new());
        r.headers_mut().insert("upgrade", "echo".parse().unwrap());
        r.headers_mut().insert("connection", "upgrade".parse().unwrap());
        return r;
    }
    match req.into_body().collect().await {
        Ok(collected) => {
            let trailers = collected.trailers().map(|t| format!("{t:?}")).unwrap_or_default();
            let body = collected.to_bytes();
            seen.lock().unwrap().push(format!("{path} {} bytes{trailers}", body.len()));
            text(StatusCode::OK, format!("{} bytes", body.len()))
        }
        Err(e) => {
            seen.lock().unwrap().push(format!("{path} failed: {e}"));
            text(StatusCode::BAD_REQUEST, "broken".into())
        }
    }
}

/// Serves one connection with [`handle`], handing it over on an upgrade as the connection does.
async fn server(header_timeout: Duration) -> (std::net::SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let handler_seen = seen.clone();
    tokio::spawn(async move {
        let (mut stream, peer) = listener.accept().await.unwrap();
        let (_tx, rx) = watch::channel(false);
        let handler = move |req, _peer: Peer| handle(req, handler_seen.clone());
        let (activity, peer) = (Activity::new(), Peer::uncapped(peer));
        let mut unread = Bytes::new();
        loop {
            stream.readable().await.unwrap();
            match serve(&mut stream, &mut unread, &peer, &handler, &activity, &rx, header_timeout).await {
                After::Waiting => {}
                After::Upgraded(handover) => {
                    crate::server::net::upgrade::hand_over(handover, stream, unread);
                    return;
                }
                _ => return,
            }
        }
    });
    (addr, seen)
}

/// Reads until the connection closes, or `until` is read.
async fn read_until(client: &mut TcpStream, until: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !String::from_utf8_lossy(&got).contains(until) {
        match client.read(&mut buf).await.unwrap() {
            0 => break,
            n => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn chunked_and_long_bodies_are_read_as_they_come_and_the_next_request_after_them() {
    let (addr, seen) = server(Duration::from_secs(10)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    let long = 100_000;
    client
        .write_all(
            b"POST /chunked HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 11\r\n\r\n",
        )
        .await
        .unwrap();
    client.write_all(format!("POST /long HTTP/1.1\r\nContent-Length: {long}\r\n\r\n").as_bytes()).await.unwrap();
    for _ in 0..10 {
        client.write_all(&vec![b'x'; long / 10]).await.unwrap();
        tokio::task::yield_now().await;
    }
    client.write_all(b"GET /next HTTP/1.1\r\nConnection: close\r\n\r\n").await.unwrap();
    let answers = read_until(&mut client, "\0").await;
    assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), 3, "{answers}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, ["/chunked 11 bytes{\"x-sum\": \"11\"}", &format!("/long {long} bytes"), "/next 0 bytes"]);
}

#[tokio::test]
async fn continue_is_said_only_when_the_body_is_wanted() {
    let (addr, seen) = server(Duration::from_secs(10)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"POST /upload HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n").await.unwrap();
    let said = read_until(&mut client, "\r\n\r\n").await;
    assert_eq!(said, "HTTP/1.1 100 Continue\r\n\r\n");
    client.write_all(b"hello").await.unwrap();
    let answer = read_until(&mut client, "5 bytes").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");

    // Refused before its body is wanted: no 100, and the connection ends, since the client may
    // never send the body.
    client.write_all(b"POST /refuse HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n").await.unwrap();
    let answer = read_until(&mut client, "\0").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_body_no_one_read_is_dropped_and_never_read_as_requests() {
    let (addr, seen) = server(Duration::from_secs(10)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    // A long body refused unread, holding what looks like a request; then a real one.
    let hidden = b"GET /hidden HTTP/1.1\r\n\r\n";
    let mut body = hidden.repeat(2000);
    body.truncate(40_000);
    let mut wire = format!("POST /refuse HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    wire.extend_from_slice(&body);
    wire.extend_from_slice(
        b"POST /refuse HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n18\r\nGET /hidden HTTP/1.1\r\n\r\n\r\n0\r\n\r\n",
    );
    wire.extend_from_slice(b"GET /next HTTP/1.1\r\nConnection: close\r\n\r\n");
    client.write_all(&wire).await.unwrap();
    let answers = read_until(&mut client, "\0").await;
    assert_eq!(answers.matches("HTTP/1.1 429").count(), 2, "{answers}");
    assert!(answers.contains("HTTP/1.1 200 OK"), "the connection goes on: {answers}");
    assert_eq!(seen.lock().unwrap().clone(), ["/refuse", "/refuse", "/next 0 bytes"]);
}

#[tokio::test]
async fn a_broken_chunk_fails_the_body_and_ends_the_connection() {
    let (addr, seen) = server(Duration::from_secs(10)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(
            b"POST /broken HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\nGET /hidden HTTP/1.1\r\n\r\n",
        )
        .await
        .unwrap();
    let answer = read_until(&mut client, "\0").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("/broken failed: the chunked body is malformed"), "{seen:?}");
}

#[tokio::test]
async fn an_upgrade_hands_the_connection_over_with_what_came_after_the_request() {
    let (addr, _) = server(Duration::from_secs(10)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    // The first bytes of the new protocol come right behind the request.
    client.write_all(b"GET /ws HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\nping").await.unwrap();
    let answer = read_until(&mut client, "ping").await;
    assert!(answer.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nping"), "echoed through the tunnel: {answer}");
}

#[tokio::test]
async fn unreadable_heads_are_answered_and_the_connection_closed() {
    for (wire, status) in [
        (&b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..], "400 Bad Request"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "501 Not Implemented"),
        (b"GET / HTTP/1.1\r\nbad name: 1\r\n\r\nGET /hidden HTTP/1.1\r\n\r\n", "400 Bad Request"),
    ] {
        let (addr, seen) = server(Duration::from_secs(10)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(wire).await.unwrap();
        let answer = read_until(&mut client, "\0").await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
        assert!(seen.lock().unwrap().is_empty(), "nothing reached the handler");
    }
}

#[tokio::test(start_paused = true)]
async fn a_head_that_stops_coming_is_answered_408_after_the_header_timeout() {
    let (addr, seen) = server(Duration::from_secs(10)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n").await.unwrap();
    let started = tokio::time::Instant::now();
    let answer = read_until(&mut client, "\0").await;
    assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
    assert!(started.elapsed() >= Duration::from_secs(10), "not before the timeout");
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_future_a_waiting_connection_holds_stays_small() {
    // A connection's task holds the serve future whole while it waits for its next request, so
    // whatever serve keeps across an await (a buffer on the stack, say) every idle connection
    // pays for: an 8 KiB buffer in it once tripled an idle connection's memory (the proxy
    // bench's idle part). The bound is for a debug build, where futures are larger.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (mut stream, peer) = listener.accept().await.unwrap();
    let (_tx, rx) = watch::channel(false);
    let seen = Seen::default();
    let handler = move |req, _peer: Peer| handle(req, seen.clone());
    let (activity, peer) = (Activity::new(), Peer::uncapped(peer));
    let mut unread = Bytes::new();
    let serving = serve(&mut stream, &mut unread, &peer, &handler, &activity, &rx, Duration::from_secs(10));
    let size = std::mem::size_of_val(&serving);
    assert!(size <= 2048, "the serve future is {size} bytes");
    drop((serving, client));
}
