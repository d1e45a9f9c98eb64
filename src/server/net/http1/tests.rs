use std::convert::Infallible;

use http_body_util::{BodyExt, Full, StreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use hyper::body::{Body, Frame};
use tokio::sync::watch;

use super::read::*;
use super::serve::*;
use super::write::*;
use crate::server::facts::fields::Fields;
use crate::server::facts::fields::Headers;
use crate::server::net::activity::Activity;
use crate::server::net::admission::Peer;
use crate::server::net::request_body::Deferred;
use crate::server::net::request_body::RequestBody;
use crate::server::wire::{Framing, MAX_HEAD, MAX_HEADERS};

fn read(text: &str) -> (Head, BytesMut) {
    let mut buf = BytesMut::from(text);
    let head = read_head(&mut buf);
    (head, buf)
}

#[test]
fn the_usual_requests_are_read_here_with_their_bodies() {
    let (head, rest) = read("GET /a?b=c HTTP/1.1\r\nHost: t\r\nX-Api-Key: k\r\nX-Api-Key: l\r\n\r\nGET /next");
    let Head::Request(mut request, exchange) = head else { panic!("read here") };
    assert_eq!((request.method(), request.uri().to_string().as_str()), (&Method::GET, "/a?b=c"));
    assert!(request.headers().is_empty(), "the fields are a list, not in the map");
    let fields = request.body_mut().take_fields().expect("read as a list");
    let all: Vec<_> = fields.iter().map(|(n, v)| (n.as_str(), v)).collect();
    assert_eq!(all, [("host", &b"t"[..]), ("x-api-key", b"k"), ("x-api-key", b"l")]);
    let keys: Vec<_> = Headers::List(&fields).get_all("x-api-key").collect();
    assert_eq!(keys, [b"k", b"l"]);
    assert_eq!(
        exchange,
        Exchange {
            version: Version::HTTP_11,
            keep_alive: true,
            head: false,
            trailers: false,
            body: Framing::Empty,
            expect_continue: false,
            upgrade: false
        }
    );
    assert!(request.body().is_end_stream());
    assert_eq!(rest, "GET /next", "the next request stays in the buffer");

    let (head, rest) = read("POST /login HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET");
    let Head::Request(mut request, _) = head else { panic!("read here") };
    assert_eq!(request.body_mut().take_whole().unwrap(), "hello");
    assert_eq!(rest, "GET");
}

#[test]
fn keep_alive_follows_the_version_and_connection() {
    let cases = [
        ("GET / HTTP/1.1\r\n\r\n", true),
        ("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        ("GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: x, CLOSE\r\n\r\n", false),
        ("GET / HTTP/1.0\r\n\r\n", false),
        ("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        ("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false),
    ];
    for (text, keep_alive) in cases {
        let (Head::Request(_, exchange), _) = read(text) else { panic!("read here: {text:?}") };
        assert_eq!(exchange.keep_alive, keep_alive, "{text:?}");
    }
}

#[test]
fn what_is_not_whole_waits_and_a_long_or_chunked_body_is_read_as_it_comes() {
    let partial = ["GET / HTTP/1.1\r\nHost: t\r\n", "GET / HTTP/1.1\r\nHost: t\r\n\r", ""];
    for text in partial {
        let (head, rest) = read(text);
        assert!(matches!(head, Head::Partial), "{text:?}");
        assert_eq!(rest, text, "nothing taken");
    }
    let long = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\nabc", MAX_WHOLE_BODY + 1);
    let streamed: [(&str, Framing, bool, bool); 8] = [
        ("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel", Framing::Length(5), false, false),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Framing::Chunked, false, false),
        (&long, Framing::Length(MAX_WHOLE_BODY as u64 + 1), false, false),
        ("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", Framing::Length(1), true, false),
        // Sent at once all the same: nothing to wait for.
        ("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na", Framing::Empty, false, false),
        ("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", Framing::Length(1), false, false),
        ("GET /ws HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", Framing::Empty, false, true),
        ("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na", Framing::Empty, false, false),
    ];
    for (text, body, expect_continue, upgrade) in streamed {
        let (head, rest) = read(text);
        let Head::Request(request, exchange) = head else { panic!("read here: {text:?}") };
        assert_eq!(
            (exchange.body, exchange.expect_continue, exchange.upgrade),
            (body, expect_continue, upgrade),
            "{text:?}"
        );
        // Only the head is taken: the body is read from the connection as it is asked for.
        let head_end = text.find("\r\n\r\n").unwrap() + 4;
        if body != Framing::Empty {
            assert_eq!(rest, text[head_end..], "{text:?}");
        }
        // An upgrade is passed on by whoever reads the request's map.
        assert_eq!(request.headers().contains_key("upgrade"), upgrade, "{text:?}");
    }
    let (Head::Request(_, connect), _) = read("CONNECT t:443 HTTP/1.1\r\n\r\n") else { panic!("read here") };
    assert!(!connect.keep_alive, "nothing after a CONNECT is read as a request");
}

#[test]
fn what_cannot_be_read_is_answered_with_its_status() {
    let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X-A: 1\r\n".repeat(MAX_HEADERS + 1));
    let long_fields = format!("GET / HTTP/1.1\r\nX-A: {}\r\n\r\n", "a".repeat(MAX_HEAD));
    let long_target = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
    let malformed: [(&str, u16); 16] = [
        ("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na", 400),
        ("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\na", 400),
        ("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ("GE(T / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nbad name: x\r\n\r\n", 400),
        ("GET /\x7f HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\n\r\n", 505),
        // httparse takes these; http's URI parser does not, once the head is taken apart.
        ("GET http://[::1/ HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\n\r\n", 400),
        ("GET http:/// HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nX-A: 1\r\n x\r\n\r\n", 400),
        (&many, 431),
        (&long_fields, 431),
        (&long_target, 414),
    ];
    for (text, status) in malformed {
        let (head, _) = read(text);
        let Head::Malformed(answer) = head else { panic!("malformed: {text:?}") };
        assert_eq!(answer.as_u16(), status, "{text:?}");
    }
}

/// Serves one connection: the request in `request`, answered with `respond`, by hyper's
/// server or by ours; returns the bytes the client received until the connection closed.
async fn exchange_over<R>(ours: bool, request: &'static [u8], respond: R) -> Vec<u8>
where
    R: Fn() -> Response<ProxyBodyForTest> + Clone + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut stream, peer) = listener.accept().await.unwrap();
        if ours {
            let activity = Activity::new();
            let (_tx, rx) = watch::channel(false);
            let handle = move |_req: Request<RequestBody>, _peer: Peer| {
                let respond = respond.clone();
                async move { respond() }
            };
            let mut unread = Bytes::new();
            stream.readable().await.unwrap();
            serve(
                &mut stream,
                &mut unread,
                &Peer::uncapped(peer),
                &handle,
                &activity,
                &rx,
                std::time::Duration::from_secs(10),
            )
            .await;
        } else {
            let service = hyper::service::service_fn(move |_req| {
                let respond = respond.clone();
                async move { Ok::<_, Infallible>(respond()) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        }
    });
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client.write_all(request).await.unwrap();
    let mut received = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), client.read_to_end(&mut received)).await;
    server.abort();
    received
}

type ProxyBodyForTest = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

impl Deferred for ProxyBodyForTest {}

fn full(text: &'static str) -> ProxyBodyForTest {
    Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync()
}

/// A body of unknown length: these pieces, then these trailers.
fn streamed(pieces: &'static [&'static str], trailers: &'static [(&'static str, &'static str)]) -> ProxyBodyForTest {
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> =
        pieces.iter().map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes())))).collect();
    if !trailers.is_empty() {
        let mut map = HeaderMap::new();
        for (name, value) in trailers {
            map.append(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        frames.push(Ok(Frame::trailers(map)));
    }
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
}

fn response(
    status: u16,
    headers: &[(&'static str, &'static str)],
    body: ProxyBodyForTest,
) -> Response<ProxyBodyForTest> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        r.headers_mut().append(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    r
}

/// The date line blanked: the two servers may write it a second apart.
fn without_date(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .split("\r\n")
        .map(|line| if line.starts_with("date: ") { "date: _" } else { line })
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[tokio::test]
async fn responses_are_written_as_hyper_writes_them() {
    type Case = (&'static [u8], fn() -> Response<ProxyBodyForTest>);
    let close: &[u8] = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
    let cases: Vec<Case> = vec![
        (close, || response(200, &[("content-type", "application/json")], full("{}"))),
        (close, || response(429, &[("retry-after", "3"), ("x-a", "1"), ("x-a", "2")], full("slow down"))),
        (close, || response(204, &[("content-length", "0")], full(""))),
        (close, || response(304, &[("etag", "\"x\"")], full(""))),
        (close, || response(200, &[], full(""))),
        (close, || response(200, &[("date", "Mon, 01 Jan 2024 00:00:00 GMT")], full("dated"))),
        (close, || response(200, &[("connection", "x-hop")], full("named"))),
        (close, || response(200, &[("content-length", "5")], streamed(&["he", "llo"], &[]))),
        (close, || response(200, &[], streamed(&["he", "", "llo"], &[]))),
        (close, || {
            response(
                200,
                &[("trailer", "x-sum, content-type")],
                streamed(&["a"], &[("x-sum", "1"), ("content-type", "no"), ("x-other", "2")]),
            )
        }),
        (b"GET / HTTP/1.1\r\nConnection: close\r\nTE: gzip, Trailers\r\n\r\n", || {
            response(
                200,
                &[("trailer", "x-sum, content-type")],
                streamed(&["a"], &[("x-sum", "1"), ("content-type", "no"), ("x-other", "2")]),
            )
        }),
        (b"HEAD / HTTP/1.1\r\nConnection: close\r\n\r\n", || response(200, &[("content-length", "42")], full(""))),
        (b"HEAD / HTTP/1.1\r\nConnection: close\r\n\r\n", || response(200, &[], full("dropped"))),
        (b"GET / HTTP/1.0\r\n\r\n", || response(200, &[], full("ten"))),
        (b"GET / HTTP/1.0\r\n\r\n", || response(200, &[], streamed(&["until", " close"], &[]))),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", || response(200, &[], streamed(&["until close"], &[]))),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", || {
            let mut r = response(502, &[], full("custom"));
            r.extensions_mut().insert(hyper::ext::ReasonPhrase::from_static(b"Upstream Went Away"));
            r
        }),
    ];
    for (request, respond) in cases {
        let theirs = exchange_over(false, request, respond).await;
        let ours = exchange_over(true, request, respond).await;
        assert_eq!(without_date(&ours), without_date(&theirs), "for {:?}", String::from_utf8_lossy(request));
        let text = String::from_utf8_lossy(&ours);
        assert!(text.contains("\r\ndate: ") || text.contains("Mon, 01 Jan 2024"), "a date: {text}");
    }
}

#[tokio::test]
async fn keep_alive_answers_match_hyper_s_for_each_version() {
    // The client closes its side once it has its answer: both servers then end the connection.
    for request in [&b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"[..], b"GET / HTTP/1.1\r\n\r\n"] {
        let respond = || response(200, &[], full("kept"));
        let read_one = |ours| async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            client.write_all(request).await.unwrap();
            let server = tokio::spawn(async move {
                let (mut stream, peer) = listener.accept().await.unwrap();
                if ours {
                    let (_tx, rx) = watch::channel(false);
                    let handle = move |_req, _peer: Peer| async move { respond() };
                    let mut unread = Bytes::new();
                    stream.readable().await.unwrap();
                    serve(
                        &mut stream,
                        &mut unread,
                        &Peer::uncapped(peer),
                        &handle,
                        &Activity::new(),
                        &rx,
                        std::time::Duration::from_secs(10),
                    )
                    .await
                } else {
                    let service = hyper::service::service_fn(move |_req| async move { Ok::<_, Infallible>(respond()) });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                    After::Closed
                }
            });
            let mut got = vec![0u8; 1024];
            let n = client.read(&mut got).await.unwrap();
            drop(client);
            let _ = server.await;
            got.truncate(n);
            got
        };
        let theirs = read_one(false).await;
        let ours = read_one(true).await;
        assert_eq!(without_date(&ours), without_date(&theirs));
    }
}

#[test]
fn a_transfer_coding_that_does_not_end_in_chunked_gets_chunked_after_it() {
    // hyper writes the `, chunked` after the next header it writes as well (`connection:
    // close, chunked`); the proxy strips this header from upstream responses anyway.
    let r = response(200, &[("transfer-encoding", "gzip"), ("x-a", "1")], full(""));
    let (parts, _) = r.into_parts();
    let exchange = Exchange {
        version: Version::HTTP_11,
        keep_alive: false,
        head: false,
        trailers: false,
        body: Framing::Empty,
        expect_continue: false,
        upgrade: false,
    };
    let mut dst = Vec::new();
    let fields = HeadFields { map: &parts.headers, read: None };
    let (encoder, last) = write_head(&parts, fields, None, Length::Unknown, exchange, &mut dst);
    assert_eq!((encoder, last), (Encoder::Chunked(Vec::new()), true));
    let text = without_date(&dst);
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\nx-a: 1\r\nconnection: close\r\ndate: _\r\n\r\n"
    );
}

#[tokio::test]
async fn a_request_behind_a_response_left_unsent_is_kept_for_later() {
    // Buffers too small for the response, and a client that reads nothing yet: the response
    // comes back unsent, and the request pipelined behind it must not be lost with it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    client.set_recv_buffer_size(2048).unwrap();
    client.connect(&listener.local_addr().unwrap().into()).unwrap();
    let mut client = std::net::TcpStream::from(client);
    let (mut stream, peer) = listener.accept().await.unwrap();
    socket2::SockRef::from(&stream).set_send_buffer_size(2048).unwrap();
    std::io::Write::write_all(&mut client, b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n").unwrap();
    let handle =
        |_req, _peer: Peer| async { response(200, &[], full(std::str::from_utf8(&[b'x'; COPY_DATA]).unwrap())) };
    let (_tx, rx) = watch::channel(false);
    let mut unread = Bytes::new();
    stream.readable().await.unwrap();
    let after = serve(
        &mut stream,
        &mut unread,
        &Peer::uncapped(peer),
        &handle,
        &Activity::new(),
        &rx,
        std::time::Duration::from_secs(10),
    )
    .await;
    assert!(matches!(after, After::Unsent { close: false, .. }), "{after:?}");
    assert_eq!(unread, "GET /b HTTP/1.1\r\n\r\n", "the request behind it, kept");
}

#[test]
fn chunk_sizes_are_hexadecimal() {
    for n in [0usize, 1, 15, 16, 255, 4096, 0xABCDEF] {
        let mut dst = Vec::new();
        write_hex(&mut dst, n);
        assert_eq!(String::from_utf8(dst).unwrap(), format!("{n:X}"));
    }
}

#[test]
fn fields_passed_on_as_read_are_written_as_the_same_fields_in_a_map() {
    // The heads an upstream sends, each field's values together as a map iterates them.
    let heads: &[&[(&str, &str)]] = &[
        &[
            ("server", "nginx"),
            ("date", "Thu, 03 Dec 2026 06:00:00 GMT"),
            ("content-type", "application/json"),
            ("content-length", "22"),
        ],
        &[("content-length", "5"), ("set-cookie", "a=1"), ("set-cookie", "b=2"), ("x-empty", "")],
        &[("connection", "close"), ("x-a", "1")],
        &[("connection", "x-hop"), ("connection", "close"), ("x-hop", "1")],
        &[("transfer-encoding", "gzip"), ("x-a", "1")],
        &[("transfer-encoding", "chunked"), ("trailer", "x-sum, content-type")],
        &[("content-length", "7"), ("content-length", "7")],
        &[("ratelimit-limit", "9"), ("retry-after", "1"), ("x-b", "\tobs\u{80}")],
        &[],
    ];
    let exchanges = [
        Exchange {
            version: Version::HTTP_11,
            keep_alive: true,
            head: false,
            trailers: true,
            body: Framing::Empty,
            expect_continue: false,
            upgrade: false,
        },
        Exchange {
            version: Version::HTTP_11,
            keep_alive: false,
            head: false,
            trailers: false,
            body: Framing::Empty,
            expect_continue: false,
            upgrade: false,
        },
        Exchange {
            version: Version::HTTP_10,
            keep_alive: true,
            head: false,
            trailers: false,
            body: Framing::Empty,
            expect_continue: false,
            upgrade: false,
        },
        Exchange {
            version: Version::HTTP_11,
            keep_alive: true,
            head: true,
            trailers: false,
            body: Framing::Empty,
            expect_continue: false,
            upgrade: false,
        },
    ];
    for head in heads {
        let mut bytes = Vec::new();
        let mut spans = Vec::new();
        let mut map = HeaderMap::new();
        for (name, value) in *head {
            spans.push((HeaderName::from_static(name), bytes.len(), value.len()));
            bytes.extend_from_slice(value.as_bytes());
            map.append(HeaderName::from_static(name), HeaderValue::from_bytes(value.as_bytes()).unwrap());
        }
        let mut read = Fields::new(Bytes::from(bytes), spans.len());
        for (name, start, len) in spans {
            read.push(name, start, len);
        }
        for status in [200, 204, 304, 404] {
            for version in [Version::HTTP_11, Version::HTTP_10] {
                let mut parts = Response::new(()).into_parts().0;
                parts.status = StatusCode::from_u16(status).unwrap();
                parts.version = version;
                for exchange in exchanges {
                    for length in [Length::Empty, Length::Known(5), Length::Unknown] {
                        let mut theirs = Vec::new();
                        let as_map = HeadFields { map: &map, read: None };
                        let (encoder, last) = write_head(&parts, as_map, None, length, exchange, &mut theirs);
                        let mut ours = Vec::new();
                        parts.headers = HeaderMap::new();
                        let as_read = HeadFields { map: &parts.headers, read: Some(&read) };
                        let written = write_head(&parts, as_read, None, length, exchange, &mut ours);
                        let case = format!("{head:?} {status} {version:?} {exchange:?} {length:?}");
                        assert_eq!(without_date(&ours), without_date(&theirs), "{case}");
                        assert_eq!(written, (encoder, last), "{case}");
                    }
                }
            }
        }
    }
}
