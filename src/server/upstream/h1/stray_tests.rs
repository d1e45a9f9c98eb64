//! Stray bytes from the upstream: after a framed body, on a `HEAD`, `204` or `304`, before a
//! request, as a flood of interim responses. None may be read as the next request's answer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use http::header;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::*;
use super::head::*;
use super::io::Io;

/// An idle list that keeps what it is given, to see whether a connection went home.
#[derive(Default)]
struct Keep(Mutex<Vec<Conn>>);

impl IdleList for Keep {
    fn take_back(self: Arc<Self>, conn: Conn) {
        self.0.lock().unwrap().push(conn);
    }
}

/// A connection to a loopback upstream that reads one request head and writes `answer` in one
/// write; and the upstream's task, which keeps its socket open until the client closes it.
async fn answered_once(answer: Vec<u8>, before_request: bool) -> Conn {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (written, wrote) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut read = Vec::new();
        let mut buf = [0u8; 4096];
        if before_request {
            socket.write_all(&answer).await.unwrap();
            let _ = written.send(());
        }
        while !read.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&buf[..n]),
            }
        }
        if !before_request {
            socket.write_all(&answer).await.unwrap();
        }
        while let Ok(n) = socket.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    });
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    if before_request {
        wrote.await.unwrap();
    }
    Conn::new(Io::Plain(stream))
}

/// Sends a GET (or HEAD) on `conn`, reads the answer to its end, and says whether the connection
/// went home, with the body read.
async fn exchange_and_read(mut conn: Conn, head_request: bool) -> (bool, Vec<u8>) {
    let request: &[u8] = if head_request { b"HEAD / HTTP/1.1\r\n\r\n" } else { b"GET / HTTP/1.1\r\n\r\n" };
    let asked = Asked { head: head_request, ..Asked::default() };
    let Ok(head) = conn.exchange(request, None, asked, Duration::from_secs(10)).await else {
        panic!("the upstream answered")
    };
    let keep = Arc::new(Keep::default());
    let home = Home(Arc::downgrade(&keep) as std::sync::Weak<dyn IdleList>);
    let mut body = Body::new(conn, &head, home);
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        got.extend_from_slice(&frame.unwrap().into_data().unwrap_or_default());
    }
    let went_home = !keep.0.lock().unwrap().is_empty();
    (went_home, got)
}

/// A response whose head and body are `total` bytes long.
fn response_of(total: usize, extra_head: usize) -> Vec<u8> {
    let head_without_length =
        format!("HTTP/1.1 200 OK\r\nX-Pad: {}\r\nContent-Length: \r\n\r\n", "p".repeat(extra_head));
    // The length's digits count too: try the widths until the sum fits.
    for digits in 1..8 {
        let body = total.saturating_sub(head_without_length.len() + digits);
        if body.to_string().len() == digits {
            let head =
                format!("HTTP/1.1 200 OK\r\nX-Pad: {}\r\nContent-Length: {body}\r\n\r\n", "p".repeat(extra_head));
            let mut out = head.into_bytes();
            out.resize(total, b'b');
            return out;
        }
    }
    unreachable!("some width fits")
}

#[tokio::test]
async fn junk_after_a_body_is_never_kept_wherever_a_read_ends() {
    // Regression: a body ending exactly where a read of the buffer ended left the junk behind it
    // in the socket, and the connection was pooled; the next request read the junk as its answer.
    let junk = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nFAKE!".to_vec();
    for boundary in [16 * 1024, 32 * 1024, 48 * 1024, 64 * 1024] {
        for total in boundary - 8..=boundary + 8 {
            let mut answer = response_of(total, 0);
            let body_len = answer.len() - answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() - 4;
            answer.extend_from_slice(&junk);
            let (went_home, body) = exchange_and_read(answered_once(answer, false).await, false).await;
            assert_eq!(body.len(), body_len, "the body is passed whole ({total} bytes)");
            assert!(body.iter().all(|&b| b == b'b'), "nothing of the junk reaches the body ({total} bytes)");
            assert!(!went_home, "a connection with junk behind a {total}-byte response is not reused");
        }
    }
}

#[tokio::test]
async fn a_body_on_a_head_204_or_304_closes_the_connection() {
    for (status, head_request) in [(200, true), (204, false), (304, false)] {
        for head_size in [100, 16 * 1024 - 40, 32 * 1024 - 40] {
            let head = format!("HTTP/1.1 {status} X\r\nX-Pad: {}\r\nContent-Length: 5\r\n\r\n", "p".repeat(head_size));
            let mut answer = head.into_bytes();
            answer.extend_from_slice(b"hello");
            let (went_home, body) = exchange_and_read(answered_once(answer, false).await, head_request).await;
            assert!(body.is_empty(), "{status} has no body");
            assert!(!went_home, "the body of a {status} (head of about {head_size} bytes) is stray");
        }
    }
}

#[tokio::test]
async fn a_response_exactly_framed_goes_home() {
    // The other side of the tests above: without stray bytes, reuse is kept.
    for total in [200, 16 * 1024, 16 * 1024 + 1, 40_000] {
        let (went_home, _) = exchange_and_read(answered_once(response_of(total, 0), false).await, false).await;
        assert!(went_home, "a {total}-byte response read to its end, nothing after it");
    }
}

#[tokio::test]
async fn an_answer_before_the_request_is_never_taken_for_its_answer() {
    let conn = answered_once(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nFAKE".to_vec(), true).await;
    let mut conn = conn;
    // Let the early bytes reach the socket's queue.
    let answered = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", None, Asked::default(), Duration::from_secs(10)).await;
    let Err(failed) = answered else { panic!("bytes before the request are not its answer") };
    assert!(matches!(failed.error, Error::Unasked), "{}", failed.error);
    assert!(!failed.retryable && !failed.unsent, "a new connection that speaks first is not tried again");
}

#[test]
fn a_flood_of_interim_responses_is_refused() {
    let flood =
        "HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_INTERIM + 1) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let mut buf = BytesMut::from(flood.as_str());
    assert!(matches!(parse_head(&mut buf, false), Err(Error::Head(why)) if why.contains("interim")));
    let hints = "HTTP/1.1 103 Early Hints\r\n\r\n".repeat(MAX_INTERIM) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let head = parse_head(&mut BytesMut::from(hints.as_str()), false).unwrap().unwrap();
    assert_eq!(head.parts.status, 200, "as many hints as allowed, then the answer");
}

#[test]
fn lengths_that_agree_reach_the_client_as_one() {
    for text in [
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
    ] {
        let head = parse_head(&mut BytesMut::from(text), false).unwrap().unwrap();
        assert_eq!(head.framing, Framing::Length(5), "{text:?}");
        let lengths: Vec<&[u8]> = head.fields.get_all(&header::CONTENT_LENGTH).collect();
        assert_eq!(lengths, [b"5"], "{text:?}");
    }
    let differ = parse_head(&mut BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n"), false);
    assert!(matches!(differ, Err(Error::Framing(_))), "lengths that differ are a 502");
}

#[test]
fn the_pool_never_hands_a_request_bytes_written_before_it() {
    // The scripted upstream (`desync`) over inputs drawn from a fixed seed; the fuzz target
    // `upstream_desync` runs the same checks on inputs the fuzzer finds.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..1500 {
        let len = (next() % 400) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        super::desync::run(&input);
    }
}
