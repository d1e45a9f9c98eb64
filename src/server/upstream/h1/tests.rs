use bytes::BytesMut;
use http::header::{self, HeaderMap};
use http::{StatusCode, Version};

use super::conn::*;
use super::head::*;
use super::io::Io;
use super::write::*;
use crate::server::wire::chunked::*;
use crate::server::wire::framing::MAX_CHUNK_LINE;

fn head(text: &str, head_request: bool) -> Result<Option<Head>, Error> {
    parse_head(&mut BytesMut::from(text), head_request)
}

fn framed(text: &str) -> (Framing, bool) {
    let head = head(text, false).unwrap().unwrap();
    (head.framing, head.keep_alive)
}

#[test]
fn a_head_is_parsed_and_taken_off_the_buffer() {
    let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nX-A: 2\r\n\r\nhi");
    let head = parse_head(&mut buf, false).unwrap().unwrap();
    assert_eq!(&buf[..], b"hi");
    assert_eq!(head.parts.status, StatusCode::OK);
    assert_eq!(head.parts.version, Version::HTTP_11);
    assert!(head.parts.headers.is_empty(), "the fields are a list, not a map");
    let fields = head.fields.to_map();
    let values: Vec<_> = fields.get_all("x-a").iter().collect();
    assert_eq!(values, ["1", "2"]);
    assert!(head.fields.plain());
    assert_eq!((head.framing, head.keep_alive), (Framing::Length(2), true));
    assert!(head.parts.extensions.get::<hyper::ext::ReasonPhrase>().is_none(), "the usual phrase");
}

#[test]
fn an_empty_reason_phrase_after_blank_lines_is_read() {
    // Found by fuzzing: httparse's empty reason phrase is not a slice of the buffer.
    let blank = head("\n\n\nHTTP/1.0 883\n\n", false).unwrap().unwrap();
    assert_eq!(blank.parts.status.as_u16(), 883);
    assert!(blank.parts.extensions.get::<hyper::ext::ReasonPhrase>().is_none());
    let empty = head("HTTP/1.1 299 \r\nX-Empty:\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
    assert_eq!(empty.fields.to_map()["x-empty"], "");
}

#[test]
fn an_unusual_reason_phrase_is_kept() {
    let head = head("HTTP/1.1 200 Fine Thanks\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
    let phrase = head.parts.extensions.get::<hyper::ext::ReasonPhrase>().unwrap();
    assert_eq!(phrase.as_bytes(), b"Fine Thanks");
}

#[test]
fn a_head_not_yet_whole_asks_for_more_up_to_a_limit() {
    for part in ["", "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"] {
        assert!(head(part, false).unwrap().is_none(), "{part:?}");
    }
    let endless = format!("HTTP/1.1 200 OK\r\n{}", "X-Filler: 0123456789\r\n".repeat(MAX_HEAD / 20));
    assert!(matches!(head(&endless, false), Err(Error::HeadTooLarge) | Err(Error::Head(_))));
    let long_value = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n", "a".repeat(MAX_HEAD + 1));
    assert!(matches!(head(&long_value, false), Err(Error::HeadTooLarge)));
}

#[test]
fn interim_responses_are_skipped_and_an_unasked_switch_refused() {
    let text = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(head(text, false).unwrap().unwrap().parts.status, StatusCode::CREATED);
    assert!(head("HTTP/1.1 100 Continue\r\n\r\n", false).unwrap().is_none(), "the final head is still to come");
    assert!(matches!(head("HTTP/1.1 101 Switching Protocols\r\n\r\n", false), Err(Error::Switch)));
}

#[test]
fn malformed_heads_are_errors() {
    for text in [
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 Low\r\n\r\n",
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n",
        "SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        assert!(head(text, false).is_err(), "{text:?}");
    }
    let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "X: 1\r\n".repeat(MAX_HEADERS + 1));
    assert!(matches!(head(&many, false), Err(Error::Head(_))));
}

#[test]
fn framing_follows_rfc_9112() {
    // No body whatever the fields say: a HEAD's answer, 204, 304.
    let with_length = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(head(with_length, true).unwrap().unwrap().framing, Framing::Empty);
    assert_eq!(framed("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"), (Framing::Empty, true));
    assert_eq!(framed("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"), (Framing::Empty, true));
    // Lengths: repeated or listed, one and the same number.
    assert_eq!(framed("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), (Framing::Length(5), true));
    assert_eq!(
        framed("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n"),
        (Framing::Length(5), true)
    );
    for bad in ["5, 6", "-1", "+5", "0x5", "5 5", "", "18446744073709551616"] {
        let text = format!("HTTP/1.1 200 OK\r\nContent-Length: {bad}\r\n\r\n");
        assert!(matches!(head(&text, false), Err(Error::Framing(_))), "{bad:?}");
    }
    let two = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n";
    assert!(matches!(head(two, false), Err(Error::Framing(_))));
    // Chunked wins over a length, and then the connection is not trusted again.
    assert_eq!(framed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), (Framing::Chunked, true));
    assert_eq!(framed("HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n"), (Framing::Chunked, true));
    assert_eq!(framed("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), (Framing::Chunked, true));
    let both = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", false);
    let both = both.unwrap().unwrap();
    assert_eq!((both.framing, both.keep_alive), (Framing::Chunked, false));
    assert!(!both.fields.to_map().contains_key("content-length"), "the length is not the body's");
    // Chunked not last, a coding from HTTP/1.0, or no length at all: read until the close.
    assert_eq!(framed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"), (Framing::UntilClose, false));
    assert_eq!(framed("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), (Framing::UntilClose, false));
    assert_eq!(framed("HTTP/1.1 200 OK\r\n\r\n"), (Framing::UntilClose, false));
    let twice = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert!(matches!(head(twice, false), Err(Error::Framing(_))));
    // Keep-alive: HTTP/1.1 unless the upstream says close; never HTTP/1.0.
    assert!(!framed("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n").1);
    assert!(!framed("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n").1);
}

#[test]
fn a_connection_field_naming_only_itself_is_dropped_and_any_other_kept() {
    // `keep-alive` and `close` name only fields the proxy strips anyway: not put in the map.
    for (text, keep_alive) in [
        ("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true),
        ("HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n", true),
        ("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: CLOSE\r\nContent-Length: 0\r\n\r\n", false),
    ] {
        let head = head(text, false).unwrap().unwrap();
        assert!(!head.fields.to_map().contains_key(header::CONNECTION), "{text:?}");
        assert_eq!(head.keep_alive, keep_alive, "{text:?}");
    }
    // One that names another field is kept, for the hop-by-hop strip to find what it names;
    // its `close` still closes.
    let named = head("HTTP/1.1 200 OK\r\nConnection: close, X-Trace\r\nX-Trace: 1\r\nContent-Length: 0\r\n\r\n", false);
    let named = named.unwrap().unwrap();
    assert_eq!(named.fields.to_map()[header::CONNECTION], "close, X-Trace");
    assert!(!named.keep_alive);
    assert!(!named.fields.plain(), "a field to strip: made a map before it is passed on");
    let mut headers = named.fields.to_map();
    crate::server::proxy::rewrite::strip_hop_by_hop(&mut headers, None);
    assert!(headers.get(header::CONNECTION).is_none() && headers.get("x-trace").is_none());
    // A dropped field is still checked as every value is.
    assert!(matches!(head("HTTP/1.1 200 OK\r\nConnection: keep-alive\x01\r\n\r\n", false), Err(Error::Head(_))));
}

/// The data, the trailers, whether the body ended, and what was left after its end.
type Body = (Vec<u8>, Option<HeaderMap>, bool, Vec<u8>);

/// Decodes `wire` fed in pieces of `step` bytes.
fn decode(wire: &[u8], step: usize) -> Result<Body, ChunkError> {
    let mut decoder = Chunked::default();
    let (mut data, mut trailers, mut buf) = (Vec::new(), None, BytesMut::new());
    let mut pieces = wire.chunks(step);
    loop {
        match decoder.decode(&mut buf)? {
            Decoded::Data(d) => data.extend_from_slice(&d),
            Decoded::Trailers(t) => trailers = Some(t),
            Decoded::End => return Ok((data, trailers, true, buf.to_vec())),
            Decoded::More => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => return Ok((data, trailers, false, buf.to_vec())),
            },
        }
    }
}

#[test]
fn chunked_bodies_decode_alike_however_they_arrive() {
    let wire = b"5\r\nhello\r\n7;name=value\r\n, world\r\nA \t; x\r\n0123456789\r\n0\r\nX-Sum: 42\r\n\r\nNEXT";
    for step in 1..=wire.len() {
        let (data, trailers, ended, rest) = decode(wire, step).unwrap();
        assert_eq!(data, b"hello, world0123456789", "step {step}");
        assert_eq!(trailers.unwrap()["x-sum"], "42");
        assert!(ended);
        // What follows the body stays in the buffer (pieces not yet fed aside).
        assert!(b"NEXT".starts_with(&rest), "{rest:?}");
    }
    let (data, trailers, ended, _) = decode(b"0\r\n\r\n", 1).unwrap();
    assert_eq!((data.len(), trailers, ended), (0, None, true));
    let (_, _, ended, _) = decode(b"5\r\nhel", 2).unwrap();
    assert!(!ended, "cut short is not an end");
}

#[test]
fn malformed_chunks_are_errors() {
    for wire in [
        &b"\r\n"[..],
        b"g\r\n",
        b"-1\r\n",
        b"5\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloXX0\r\n\r\n",
        b"5 5\r\nhello\r\n",
        b"5;a\nb\r\nhello\r\n",
        b"5;a\x01\r\nhello\r\n",
        b"11111111111111111\r\n",
        b"0\r\nBad Trailer\r\n\r\n",
    ] {
        assert!(decode(wire, wire.len()).is_err(), "{:?}", String::from_utf8_lossy(wire));
    }
    assert!(decode(b"ffffffffffffffff\r\n", 64).is_ok(), "sixteen digits are a size");
    let long = format!("1;{}\r\n", "x".repeat(MAX_CHUNK_LINE));
    assert!(matches!(decode(long.as_bytes(), 7), Err(ChunkError(_))));
}

#[test]
fn a_request_is_written_with_its_framing_and_no_more() {
    let request = http::Request::post("/login?next=%2F")
        .header("host", "upstream:8080")
        .header("content-type", "application/json")
        .header("content-length", "999")
        .header("expect", "100-continue")
        .header("x-twice", "1")
        .header("x-twice", "2")
        .body(())
        .unwrap();
    let (parts, ()) = request.into_parts();
    let mut out = Vec::new();
    assert!(!write_request(&parts, b"{}", true, &mut out), "a small body goes with the head");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /login?next=%2F HTTP/1.1\r\nhost: upstream:8080\r\ncontent-type: application/json\r\nx-twice: 1\r\nx-twice: 2\r\ncontent-length: 2\r\n\r\n{}"
    );
    let (parts, ()) = http::Request::get("/items/1").body(()).unwrap().into_parts();
    let mut out = Vec::new();
    write_request(&parts, b"", false, &mut out);
    assert_eq!(out, b"GET /items/1 HTTP/1.1\r\n\r\n");
    let mut out = Vec::new();
    write_request(&parts, b"", true, &mut out);
    assert_eq!(out, b"GET /items/1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n", "a stated empty length stays");
    let big = vec![b'x'; COPY_BODY + 1];
    let mut out = Vec::new();
    assert!(write_request(&parts, &big, false, &mut out), "a large body is sent after");
    assert!(out.ends_with(format!("content-length: {}\r\n\r\n", big.len()).as_bytes()));
}

/// A connection to a fake upstream on loopback that reads a request head and answers `answer`
/// at once, then keeps the socket open; and what it read, sent back once it closes.
async fn answering(answer: &'static [u8]) -> (Conn, tokio::task::JoinHandle<Vec<u8>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let upstream = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut read = Vec::new();
        let mut buf = [0u8; 4096];
        while !read.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            read.extend_from_slice(&buf[..n]);
        }
        socket.write_all(answer).await.unwrap();
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return read,
                Ok(n) => read.extend_from_slice(&buf[..n]),
            }
        }
    });
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    (Conn::new(Io::Plain(stream)), upstream)
}

#[tokio::test]
async fn an_upstream_that_answers_before_the_whole_body_stops_the_sending_and_is_not_reused() {
    let (mut conn, _upstream) = answering(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n").await;
    // A body that sends one piece and then never ends.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>>(1);
    tx.send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(b"part")))).await.unwrap();
    let mut body = http_body_util::StreamBody::new(tokio_stream_from(rx));
    let head = b"POST /upload HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
    let answered = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        conn.exchange_streamed(head, &mut body, true, Asked::default()),
    )
    .await
    .expect("the early answer ends the exchange");
    let head = answered.ok().expect("a response head");
    assert_eq!(head.parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(!head.keep_alive, "the upstream's reading of the rest is unknown: the connection is not reused");
    drop(tx);
}

#[tokio::test]
async fn a_switch_asked_for_makes_a_tunnel_with_what_came_after_the_head() {
    use tokio::io::AsyncReadExt;
    let (mut conn, _upstream) =
        answering(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\nhello").await;
    let head = b"GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n";
    let asked = Asked { switch: true, ..Asked::default() };
    let timeout = std::time::Duration::from_secs(10);
    let Ok(head) = conn.exchange(head, None, asked, timeout).await else { panic!("a 101 asked for is an answer") };
    assert!(head.tunnel && !head.keep_alive);
    let home = Home(std::sync::Weak::<Discard>::new());
    let mut tunnel = super::conn::Body::new(conn, &head, home).into_tunnel().expect("the connection is the tunnel's");
    let mut first = [0u8; 5];
    tunnel.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"hello", "bytes behind the 101 are the tunnel's first");
}

/// An idle list that keeps nothing.
struct Discard;

impl IdleList for Discard {
    fn take_back(self: std::sync::Arc<Self>, _conn: Conn) {}
}

/// The receiver as a stream of frames.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Unpin {
    Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}
