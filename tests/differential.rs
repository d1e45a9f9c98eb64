//! A differential test of `serve`'s HTTP/1 (issue 49). One corpus of request heads and bodies,
//! valid, ambiguous and malformed, is sent pipelined through opbound to a real Node `http`
//! upstream and to a real Flask app under gunicorn, which record every request that reaches them.
//! Each entry says what it expects; the upstream must have seen exactly the requests opbound
//! counted (its request log), each once and whole, and the operation bound to one a day runs at
//! most once however its request is spelled. The other half is hostile upstream answers, from a
//! raw-TCP upstream written here: whatever one client's answer holds, the next client's response,
//! taken from the same upstream pool, is its own.
//!
//! Every entry that disagrees is reported, not only the first; `--nocapture` shows them all.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::apps::{App, Framework};
use common::{Opbound, TempSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Every request is counted by the route bound `all`; `/once` may run once a day (a token bucket,
/// so that no window boundary can fall inside a run and admit a second).
const SPEC: &str = r#"
openapi: 3.0.3
info: {title: differential tests, version: '1'}
x-rate-limit:
  - {name: all, per: address, limit: 1000000, window: PT1H}
paths:
  /echo/{entry}:
    parameters: [{name: entry, in: path, required: true, schema: {type: string}}]
    get: {operationId: echoGet}
    head: {operationId: echoHead}
    post: {operationId: echoPost}
  /once:
    post:
      operationId: once
      x-rate-limit: {per: route, algorithm: token-bucket, limit: 1, window: P1D}
"#;

/// The bound of 1, as `/counters` names it.
const ONCE_BOUND: &str = "once:0";

/// How long a connection may stay silent before its answers are taken as all there are.
const QUIET: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------------

/// What opbound answers a request with, and so what the upstream and the request log show of it.
#[derive(Clone, Debug, PartialEq)]
enum Answer {
    /// The upstream's answer: it saw the request once, whole, with this body; opbound counted it.
    Forwarded(Vec<u8>),
    /// opbound's 429 (the bound of 1 is spent): counted by no bound, never forwarded.
    Limited,
    /// A 400 for a head no reader may guess at: never judged, counted or forwarded.
    Malformed,
    /// A 400 for a chunked body found malformed after its head was judged: counted as judged at
    /// its head (the log says `allowed`, status 400); the upstream never gets the whole of it.
    MalformedBody,
    /// A WebSocket handshake, for the upstream to take or refuse (see [`Upstream::resolve`]).
    WebSocket,
    /// The upstream switched protocols: 101, counted, seen once.
    Switched,
    /// The upstream refused the request itself with this status: counted, seen once.
    RefusedUpstream(u16),
    /// Bytes sent after a WebSocket handshake: the tunnel's if the upstream switched, a request
    /// of their own if it did not (see [`Upstream::resolve`]).
    AfterWebSocket,
    /// Tunnel bytes, echoed back as they were sent: never a request.
    Tunneled,
    /// Sent after a request whose answer ends the connection: never read.
    NeverRead,
}

/// What the connection does after an entry's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Then {
    /// Reads the next request: the one pipelined behind, or one sent once the answer is read.
    GoesOn,
    /// Closes: what was sent behind is never read.
    Closes,
    /// Closes, or reads the rest of the body and discards it, then goes on: either way no byte
    /// of the body is ever read as a request.
    ClosesOrDiscards,
    /// The upstream decides (see [`Upstream::resolve`]).
    Upgrade,
    /// Carries a tunnel.
    Tunnels,
}

/// One request of the corpus: its bytes as sent, and what it expects.
#[derive(Clone, Debug)]
struct Entry {
    /// Unique in the corpus. The request's target carries it (`/echo/NAME`, `/once?as=NAME`), and
    /// so do the upstream's records and opbound's log lines.
    name: String,
    bytes: Vec<u8>,
    answer: Answer,
    then: Then,
}

impl Entry {
    /// `head` with `{name}` replaced, then `body`.
    fn new(name: &str, head: &str, body: &[u8], answer: Answer, then: Then) -> Entry {
        let mut bytes = head.replace("{name}", name).into_bytes();
        bytes.extend_from_slice(body);
        Entry { name: name.to_string(), bytes, answer, then }
    }

    fn is_head(&self) -> bool {
        self.method() == "HEAD"
    }

    /// The method, as sent: everything before the first space.
    fn method(&self) -> String {
        let end = self.bytes.iter().position(|&b| b == b' ').unwrap_or(0);
        String::from_utf8_lossy(&self.bytes[..end]).into_owned()
    }
}

/// A plain GET, forwarded with nothing after it.
fn get(name: &str) -> Entry {
    Entry::new(
        name,
        "GET /echo/{name} HTTP/1.1\r\nHost: api.test\r\n\r\n",
        b"",
        Answer::Forwarded(vec![]),
        Then::GoesOn,
    )
}

/// A request that keeps the connection and is forwarded with `body`.
fn forwarded(name: &str, head: &str, wire: &[u8], body: &[u8]) -> Entry {
    Entry::new(name, head, wire, Answer::Forwarded(body.to_vec()), Then::GoesOn)
}

/// A request for the bound of 1, after its one run: refused with a 429, the connection kept.
fn limited(name: &str, head: &str, wire: &[u8]) -> Entry {
    Entry::new(name, head, wire, Answer::Limited, Then::GoesOn)
}

/// A head refused with a 400 and the connection closed.
fn malformed(name: &str, head: &str, wire: &[u8]) -> Entry {
    Entry::new(name, head, wire, Answer::Malformed, Then::Closes)
}

/// A chunked body refused with a 400 once its head was judged, the connection closed.
fn malformed_body(name: &str, chunks: &[u8]) -> Entry {
    let head = "POST /echo/{name} HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n";
    // Closed: where such a body ends cannot be known.
    Entry::new(name, head, chunks, Answer::MalformedBody, Then::Closes)
}

/// A whole request for the bound of 1 named `name`, to hide in another's bytes: if any reader
/// took it for a request, the bound would be asked again, and the upstream would see it.
fn hidden(name: &str) -> Vec<u8> {
    format!("POST /once?as={name} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes()
}

/// A whole GET named `name`, to hide in the body of a request refused before its body was read:
/// read as a request, it would reach the upstream.
fn hidden_get(name: &str) -> Vec<u8> {
    format!("GET /echo/{name} HTTP/1.1\r\nHost: api.test\r\n\r\n").into_bytes()
}

/// `n` bytes of a body that is not text, different for every size.
fn body_of(n: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 7 + n) % 251) as u8).collect()
}

/// `body` as two chunks split in its middle, then the last chunk.
fn two_chunks(body: &[u8]) -> Vec<u8> {
    let (a, b) = body.split_at(body.len() / 2);
    let mut out = format!("{:x}\r\n", a.len()).into_bytes();
    out.extend_from_slice(a);
    out.extend_from_slice(format!("\r\n{:x}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n0\r\n\r\n");
    out
}

/// Body sizes either side of the buffers on the way: opbound's first read (4 KiB), hyper's and
/// its own (8 and 16 KiB, the longest body opbound reads whole), a socket's (64 KiB), and hyper's
/// largest buffer (about 400 KiB).
const SIZES: &[usize] =
    &[4095, 4096, 4097, 8191, 8192, 8193, 16383, 16384, 16385, 65535, 65536, 65537, 409_599, 409_600, 409_601];

/// Head sizes either side of opbound's first read and hyper's first buffer.
const HEAD_SIZES: &[usize] = &[4095, 4096, 4097, 8191, 8192, 8193];

/// The pipelines of the corpus, each sent on a connection of its own in one write. An entry
/// whose answer ends the connection (or may) is followed by one that must never be read.
fn corpus() -> Vec<Vec<Entry>> {
    let mut pipelines = Vec::new();
    let post = |name: &str, fields: &str| format!("POST /echo/{name} HTTP/1.1\r\nHost: api.test\r\n{fields}\r\n");
    let chunked = "Transfer-Encoding: chunked\r\n";

    // Everything that keeps the connection, in one pipeline: valid requests, requests a reader
    // may take more than one way, and the bound of 1 spelled every way that reaches it.
    let mut one = vec![
        get("get"),
        Entry::new("head", "HEAD /echo/{name} HTTP/1.1\r\nHost: api.test\r\n\r\n", b"", Answer::Forwarded(vec![]), Then::GoesOn),
        // The bound of 1's one run. Every later request for it is refused, however spelled.
        forwarded("once", "POST /once?as={name} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n", b"{}", b"{}"),
        forwarded("length", &post("length", "Content-Length: 5\r\n"), b"hello", b"hello"),
        forwarded("length-leading-zeros", &post("length-leading-zeros", "Content-Length: 0005\r\n"), b"hello", b"hello"),
        forwarded(
            "length-twice-same",
            &post("length-twice-same", "Content-Length: 5\r\nContent-Length: 5\r\n"),
            b"hello",
            b"hello",
        ),
        forwarded("length-tabs", &post("length-tabs", "Content-Length:\t5\t\r\n"), b"hello", b"hello"),
        forwarded("chunked", &post("chunked", chunked), b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
        // Chunk extensions, one quoting a request line: they are framing, never data or requests.
        forwarded(
            "chunk-extensions",
            &post("chunk-extensions", chunked),
            b"5;name=value\r\nhello\r\n6 ; quoted=\"POST /once?as=chunk-extensions.hidden HTTP/1.1\"\r\n world\r\n0;last\r\n\r\n",
            b"hello world",
        ),
        forwarded(
            "chunk-trailers",
            &post("chunk-trailers", chunked),
            b"5\r\nhello\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n",
            b"hello",
        ),
        forwarded(
            "chunk-size-spellings",
            &post("chunk-size-spellings", chunked),
            b"0005\r\nhello\r\nA\r\n helloworl\r\n0000\r\n\r\n",
            b"hello helloworl",
        ),
        forwarded("coding-upper-case", &post("coding-upper-case", "TRANSFER-ENCODING: CHUNKED\r\n"), b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
        forwarded("coding-tab", &post("coding-tab", "Transfer-Encoding:\tchunked\r\n"), b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
        Entry::new(
            "absolute-form",
            "GET http://api.test/echo/{name} HTTP/1.1\r\nHost: api.test\r\n\r\n",
            b"",
            Answer::Forwarded(vec![]),
            Then::GoesOn,
        ),
        forwarded(
            "absolute-form-other-host",
            "POST http://elsewhere.example/echo/{name} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\n\r\n",
            b"hello",
            b"hello",
        ),
        Entry::new("bare-lf", "GET /echo/{name} HTTP/1.1\nHost: api.test\n\n", b"", Answer::Forwarded(vec![]), Then::GoesOn),
        forwarded("bare-lf-body", "POST /echo/{name} HTTP/1.1\nHost: api.test\nContent-Length: 5\n\n", b"hello", b"hello"),
        forwarded(
            "http10-keep-alive",
            "POST /echo/{name} HTTP/1.0\r\nHost: api.test\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\n",
            b"hello",
            b"hello",
        ),
        // The body follows at once, as a client that does not wait for 100 Continue sends it.
        forwarded("expect-continue", &post("expect-continue", "Expect: 100-continue\r\nContent-Length: 5\r\n"), b"hello", b"hello"),
        forwarded(
            "expect-continue-chunked",
            &post("expect-continue-chunked", "Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n"),
            b"5\r\nhello\r\n0\r\n\r\n",
            b"hello",
        ),
        limited("once-again", "POST /once?as={name} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n", b"{}"),
        limited("once-chunked", "POST /once?as={name} HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n", b"2\r\n{}\r\n0\r\n\r\n"),
        limited("once-absolute-form", "POST http://api.test/once?as={name} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n", b"{}"),
        limited(
            "once-http10",
            "POST /once?as={name} HTTP/1.0\r\nHost: api.test\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
            b"{}",
        ),
        limited("once-bare-lf", "POST /once?as={name} HTTP/1.1\nHost: api.test\nContent-Length: 2\n\n", b"{}"),
        limited(
            "once-expect-continue",
            "POST /once?as={name} HTTP/1.1\r\nHost: api.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
            b"{}",
        ),
        limited("once-leading-zeros", "POST /once?as={name} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 002\r\n\r\n", b"{}"),
        limited("once-lower-case", "POST /once?as={name} HTTP/1.1\r\nhost: api.test\r\ncontent-length: 2\r\n\r\n", b"{}"),
    ];
    for &n in SIZES {
        let body = body_of(n);
        let length = format!("length-{n}");
        one.push(forwarded(&length, &post(&length, &format!("Content-Length: {n}\r\n")), &body, &body));
        let chunked_name = format!("chunked-{n}");
        one.push(forwarded(&chunked_name, &post(&chunked_name, chunked), &two_chunks(&body), &body));
    }
    for &n in HEAD_SIZES {
        let name = format!("head-{n}");
        let start = format!("GET /echo/{name} HTTP/1.1\r\nHost: api.test\r\nX-Pad: ");
        let pad = "p".repeat(n - start.len() - "\r\n\r\n".len());
        one.push(Entry::new(&name, &format!("{start}{pad}\r\n\r\n"), b"", Answer::Forwarded(vec![]), Then::GoesOn));
    }
    pipelines.push(one);

    // One pipeline each for what ends a connection, or may: a request before it, and one after
    // it that must never be read.
    let ending = vec![
        malformed("length-plus", &post("length-plus", "Content-Length: +5\r\n"), b"hello"),
        malformed("length-negative", &post("length-negative", "Content-Length: -1\r\n"), b""),
        malformed(
            "length-twice-differ",
            &post("length-twice-differ", "Content-Length: 5\r\nContent-Length: 6\r\n"),
            b"hello!",
        ),
        // A list of equal lengths could be taken as one; refusing it is allowed too, and a reader
        // that took its first value while another refused it is how requests get smuggled.
        malformed("length-list", &post("length-list", "Content-Length: 5, 5\r\n"), b"hello"),
        malformed("length-overflow", &post("length-overflow", "Content-Length: 99999999999999999999999\r\n"), b"hello"),
        malformed(
            "coding-chunked-identity",
            &post("coding-chunked-identity", "Transfer-Encoding: chunked, identity\r\n"),
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
        malformed(
            "coding-twice",
            &post("coding-twice", "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n"),
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
        malformed(
            "coding-space-before-colon",
            &post("coding-space-before-colon", "Transfer-Encoding : chunked\r\n"),
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
        malformed(
            "http10-chunked",
            "POST /echo/{name} HTTP/1.0\r\nHost: api.test\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
        malformed("obs-fold", "GET /echo/{name} HTTP/1.1\r\nHost: api.test\r\nX-Folded: a\r\n b\r\n\r\n", b""),
        malformed("nul-in-field", "GET /echo/{name} HTTP/1.1\r\nHost: api.test\r\nX-Nul: a\0b\r\n\r\n", b""),
        malformed("nul-in-target", "GET /echo/{name}\0x HTTP/1.1\r\nHost: api.test\r\n\r\n", b""),
        malformed_body("chunk-size-overflow", b"fffffffffffffffff1\r\nhello\r\n0\r\n\r\n"),
        malformed_body("chunk-size-negative", b"-5\r\nhello\r\n0\r\n\r\n"),
        malformed_body("chunk-size-0x", b"0x5\r\nhello\r\n0\r\n\r\n"),
        malformed_body("chunk-size-bare-lf", b"5\nhello\r\n0\r\n\r\n"),
        malformed_body("chunk-data-overrun", b"3\r\nhello\r\n0\r\n\r\n"),
        malformed_body("chunk-extension-newline", b"5;a\nb\r\nhello\r\n0\r\n\r\n"),
        // Both lengths: refused, as nginx refuses them (RFC 9112 §6.3: "ought to be handled as an
        // error"), and the connection closed, so the request hidden past the chunked end, inside
        // the length, is never read; with the length taken instead, the upstream would get it as
        // a body.
        {
            let inside = hidden("length-and-chunked.hidden");
            let head = post("length-and-chunked", &format!("Content-Length: {}\r\n{chunked}", 5 + inside.len()));
            let mut wire = b"0\r\n\r\n".to_vec();
            wire.extend_from_slice(&inside);
            Entry::new("length-and-chunked", &head, &wire, Answer::Malformed, Then::Closes)
        },
        malformed(
            "chunked-and-length",
            &post("chunked-and-length", &format!("{chunked}Content-Length: 3\r\n")),
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
        malformed(
            "once-length-and-chunked",
            &format!("POST /once?as={{name}} HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n{chunked}\r\n"),
            b"2\r\n{}\r\n0\r\n\r\n",
        ),
        Entry::new(
            "http10",
            "GET /echo/{name} HTTP/1.0\r\nHost: api.test\r\n\r\n",
            b"",
            Answer::Forwarded(vec![]),
            Then::Closes,
        ),
        // The client asks to close, on requests the other reader takes (a coding, an expectation,
        // a long body): none is read after.
        Entry::new(
            "chunked-close",
            &post("chunked-close", &format!("{chunked}Connection: close\r\n")),
            b"5\r\nhello\r\n0\r\n\r\n",
            Answer::Forwarded(b"hello".to_vec()),
            Then::Closes,
        ),
        Entry::new(
            "expect-continue-close",
            &post("expect-continue-close", "Expect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n"),
            b"hello",
            Answer::Forwarded(b"hello".to_vec()),
            Then::Closes,
        ),
        Entry::new(
            "http10-expect-continue",
            "POST /echo/{name} HTTP/1.0\r\nHost: api.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
            b"hello",
            Answer::Forwarded(b"hello".to_vec()),
            Then::Closes,
        ),
        {
            let body = body_of(20_000);
            let head = post("long-body-close", "Content-Length: 20000\r\nConnection: close\r\n");
            Entry::new("long-body-close", &head, &body, Answer::Forwarded(body.clone()), Then::Closes)
        },
        // Refused before its body was read: the body must be read and dropped, or the
        // connection closed; a request inside it is never a request.
        {
            let inside = hidden_get("once-long-body.hidden");
            let padding = b"\r\n".repeat(10_000);
            let head = format!(
                "POST /once?as={{name}} HTTP/1.1\r\nHost: api.test\r\nContent-Length: {}\r\n\r\n",
                padding.len() + inside.len()
            );
            Entry::new("once-long-body", &head, &[padding, inside].concat(), Answer::Limited, Then::ClosesOrDiscards)
        },
        // The same, from a client that asked to close: nothing may be read after the answer.
        {
            let inside = hidden_get("once-long-body-close.hidden");
            let padding = b"\r\n".repeat(10_000);
            let head = format!(
                "POST /once?as={{name}} HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                padding.len() + inside.len()
            );
            Entry::new("once-long-body-close", &head, &[padding, inside].concat(), Answer::Limited, Then::Closes)
        },
        {
            let inside = hidden_get("once-long-chunk.hidden");
            let data = [b"\r\n".repeat(10_000), inside].concat();
            let head = format!("POST /once?as={{name}} HTTP/1.1\r\nHost: api.test\r\n{chunked}\r\n");
            let wire = [format!("{:x}\r\n", data.len()).into_bytes(), data, b"\r\n0\r\n\r\n".to_vec()].concat();
            Entry::new("once-long-chunk", &head, &wire, Answer::Limited, Then::ClosesOrDiscards)
        },
        {
            let inside = hidden_get("once-expect-chunked.hidden");
            let head =
                format!("POST /once?as={{name}} HTTP/1.1\r\nHost: api.test\r\nExpect: 100-continue\r\n{chunked}\r\n");
            let wire = [format!("{:x}\r\n", inside.len()).into_bytes(), inside, b"\r\n0\r\n\r\n".to_vec()].concat();
            Entry::new("once-expect-chunked", &head, &wire, Answer::Limited, Then::ClosesOrDiscards)
        },
    ];
    for entry in ending {
        let behind = after(&entry);
        pipelines.push(vec![get(&format!("{}.before", entry.name)), entry, behind]);
    }

    // A client that asks to switch protocols waits for the answer before it sends more. h2c and
    // protocols the operator did not allow are forwarded as ordinary requests, the connection
    // going on in HTTP/1.1; a WebSocket handshake is the upstream's to take.
    let upgrade = |name: &str, fields: &str, body: &[u8]| {
        let head =
            format!("POST /echo/{name} HTTP/1.1\r\nHost: api.test\r\n{fields}Content-Length: {}\r\n\r\n", body.len());
        Entry::new(name, &head, body, Answer::Forwarded(body.to_vec()), Then::GoesOn)
    };
    let h2c = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n";
    for entry in [
        upgrade("h2c", h2c, b""),
        upgrade("h2c-with-body", h2c, b"hello"),
        upgrade("upgrade-not-allowed", "Connection: upgrade\r\nUpgrade: foo/2\r\n", b""),
    ] {
        pipelines.push(vec![get(&format!("{}.before", entry.name)), entry]);
    }
    let websocket = Entry::new(
        "websocket",
        "GET /echo/{name} HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        b"",
        Answer::WebSocket,
        Then::Upgrade,
    );
    let mut behind = get("websocket.behind");
    behind.answer = Answer::AfterWebSocket;
    pipelines.push(vec![get("websocket.before"), websocket, behind]);
    pipelines
}

/// The request sent behind an entry that ends its connection, or may: never read, or (when the
/// entry may go on) answered in its turn.
fn after(entry: &Entry) -> Entry {
    let mut behind = get(&format!("{}.after", entry.name));
    if entry.then == Then::Closes {
        behind.answer = Answer::NeverRead;
    }
    behind
}

// ---------------------------------------------------------------------------------------------
// The upstreams
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Upstream {
    Node,
    Flask,
}

const NODE: Framework = Framework {
    name: "node http",
    program: "node",
    dir: "tests/frameworks",
    args: &["recorder.js"],
    check: &["-e", "require('http')"],
    missing: "node is not installed; the README's test command (.ci/test) installs it with apt-get",
};

const FLASK: Framework = Framework {
    name: "flask under gunicorn",
    program: "python3",
    dir: "tests/frameworks",
    args: &["recorder_flask.py"],
    check: &["-c", "import flask, gunicorn"],
    missing: "flask or gunicorn is not installed for python3; the README's test command (.ci/test) installs them with pip",
};

impl Upstream {
    fn framework(self) -> &'static Framework {
        match self {
            Upstream::Node => &NODE,
            Upstream::Flask => &FLASK,
        }
    }

    /// An entry's answer and what follows it, behind this upstream: Node's recorder switches to
    /// WebSocket, and a Flask app with no WebSocket route refuses the handshake with a 400 (the
    /// connection then goes on in HTTP/1.1, and what was sent behind is a request).
    fn resolve(self, entry: &Entry) -> (Answer, Then) {
        match (&entry.answer, self) {
            (Answer::WebSocket, Upstream::Node) => (Answer::Switched, Then::Tunnels),
            (Answer::WebSocket, Upstream::Flask) => (Answer::RefusedUpstream(400), Then::GoesOn),
            (Answer::AfterWebSocket, Upstream::Node) => (Answer::Tunneled, Then::Tunnels),
            (Answer::AfterWebSocket, Upstream::Flask) => (Answer::Forwarded(vec![]), Then::GoesOn),
            (answer, _) => (answer.clone(), entry.then),
        }
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.framework().name)
    }
}

/// What an upstream recorded of one request.
#[derive(Debug)]
struct Record {
    method: String,
    target: String,
    complete: bool,
    length: u64,
    sha256: Option<String>,
    upgrade: Option<String>,
}

impl From<&Value> for Record {
    fn from(v: &Value) -> Record {
        let text = |field: &str| v[field].as_str().map(str::to_string);
        Record {
            method: text("method").unwrap_or_default(),
            target: text("target").unwrap_or_default(),
            complete: v["complete"].as_bool().unwrap_or(false),
            length: v["length"].as_u64().unwrap_or(0),
            sha256: text("sha256"),
            upgrade: text("upgrade"),
        }
    }
}

/// One line of opbound's request log.
#[derive(Debug)]
struct Logged {
    target: String,
    status: Option<u64>,
    outcome: String,
}

/// The entry a target names: `/echo/NAME` or `/once?as=NAME` (in any form of target).
fn entry_of(target: &str) -> Option<&str> {
    if let Some(at) = target.find("/echo/") {
        return target[at + "/echo/".len()..].split(['?', '#']).next();
    }
    let query = target.split_once('?')?.1;
    query.split('&').find_map(|pair| pair.strip_prefix("as="))
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------
// Reading answers off the wire
// ---------------------------------------------------------------------------------------------

/// A response as read off the wire.
#[derive(Clone, Debug)]
struct Response {
    status: u16,
    /// Its head as text, for reports.
    head: String,
    body: Vec<u8>,
    /// Interim answers before it (101 is a final one here).
    interim: Vec<u16>,
}

impl Response {
    /// The upstream's echo of the request it answered, when the body is one.
    fn echo(&self) -> Option<Value> {
        serde_json::from_slice::<Value>(&self.body).ok().filter(|v| v.get("upstream").is_some())
    }

    fn short(&self) -> String {
        let body = String::from_utf8_lossy(&self.body);
        let body: String = body.chars().take(160).collect();
        format!("{} {body:?}", self.status)
    }
}

enum Parsed {
    Whole(Response, usize),
    Partial,
    Bad(String),
}

/// The response at the start of `buf` (its interim answers skipped), framed as RFC 9112 §6.3
/// says for an answer to a HEAD or not; `eof` when nothing more will come.
fn parse_response(buf: &[u8], head_request: bool, eof: bool) -> Parsed {
    let mut at = 0;
    let mut interim = Vec::new();
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut fields);
        let len = match parsed.parse(&buf[at..]) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Parsed::Partial,
            Err(e) => return Parsed::Bad(format!("not a response ({e}): {:?}", lossy(&buf[at..], 120))),
        };
        let status = parsed.code.unwrap_or(0);
        let values = |name: &str| -> Vec<String> {
            parsed
                .headers
                .iter()
                .filter(|f| f.name.eq_ignore_ascii_case(name))
                .map(|f| String::from_utf8_lossy(f.value).trim().to_ascii_lowercase())
                .collect()
        };
        let (codings, lengths) = (values("transfer-encoding"), values("content-length"));
        let head = String::from_utf8_lossy(&buf[at..at + len]).into_owned();
        at += len;
        if (100..200).contains(&status) && status != 101 {
            interim.push(status);
            continue;
        }
        let response = |body: Vec<u8>, interim: Vec<u16>| Response { status, head: head.clone(), body, interim };
        if status == 101 || head_request || status == 204 || status == 304 {
            return Parsed::Whole(response(Vec::new(), interim), at);
        }
        if codings.iter().any(|c| c.ends_with("chunked")) {
            return match dechunk(&buf[at..]) {
                Ok(Some((body, used))) => Parsed::Whole(response(body, interim), at + used),
                Ok(None) => Parsed::Partial,
                Err(e) => Parsed::Bad(e),
            };
        }
        if let Some(length) = lengths.first() {
            let Ok(length) = length.parse::<usize>() else {
                return Parsed::Bad(format!("a response's Content-Length is {length:?}"));
            };
            if buf.len() - at < length {
                return Parsed::Partial;
            }
            return Parsed::Whole(response(buf[at..at + length].to_vec(), interim), at + length);
        }
        // Delimited by the close.
        if !eof {
            return Parsed::Partial;
        }
        return Parsed::Whole(response(buf[at..].to_vec(), interim), buf.len());
    }
}

/// A chunked body at the start of `buf`: its data and the bytes it took, `None` when it is not
/// all there yet.
fn dechunk(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let line = |from: usize| buf[from..].windows(2).position(|w| w == b"\r\n").map(|end| (from, from + end));
    let mut at = 0;
    let mut data = Vec::new();
    loop {
        let Some((start, end)) = line(at) else { return Ok(None) };
        let size = String::from_utf8_lossy(&buf[start..end]);
        let size = size.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|e| format!("a chunk size of {size:?} ({e})"))?;
        at = end + 2;
        if size == 0 {
            // The trailer section, up to its empty line.
            loop {
                let Some((start, end)) = line(at) else { return Ok(None) };
                at = end + 2;
                if start == end {
                    return Ok(Some((data, at)));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        data.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

fn lossy(bytes: &[u8], most: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(most)]).into_owned()
}

/// What came back for one entry.
#[derive(Debug)]
enum Got {
    Response(Response),
    /// Bytes of a tunnel.
    Tunnel(Vec<u8>),
    /// Nothing: the connection had ended, or went silent, before.
    Nothing,
    /// Bytes that are not a response.
    Garbage(String),
}

/// What came back on one connection for `expected` (entries, resolved), as far as `buf` holds
/// it; and whether that is all that will come: every answer whole, the end read where one
/// closes the connection.
fn walk(expected: &[(&Entry, Answer, Then)], buf: &[u8], eof: bool) -> (Vec<Got>, bool) {
    let mut at = 0;
    let mut got = Vec::new();
    let mut all_there = true;
    let mut tunnel = false;
    for (entry, answer, _) in expected {
        if tunnel || *answer == Answer::Tunneled {
            let want = entry.bytes.len();
            let have = buf.len() - at;
            all_there &= have >= want || eof;
            let take = have.min(want);
            got.push(Got::Tunnel(buf[at..at + take].to_vec()));
            at += take;
            continue;
        }
        if at == buf.len() {
            // Nothing (more) came: all there is, if the connection ended or none was due.
            all_there &= eof;
            got.push(Got::Nothing);
            continue;
        }
        match parse_response(&buf[at..], entry.is_head(), eof) {
            Parsed::Whole(response, used) => {
                at += used;
                tunnel = response.status == 101;
                got.push(Got::Response(response));
            }
            Parsed::Partial => {
                all_there &= eof;
                got.push(if eof {
                    Got::Garbage(format!("a response cut short: {:?}", lossy(&buf[at..], 200)))
                } else {
                    Got::Nothing
                });
                at = buf.len();
            }
            Parsed::Bad(why) => {
                got.push(Got::Garbage(why));
                at = buf.len();
            }
        }
    }
    // Bytes past every expected answer: more answers than requests.
    if at < buf.len() {
        got.push(Got::Garbage(format!("more than was asked: {:?}", lossy(&buf[at..], 200))));
    }
    (got, all_there)
}

/// Writes `bytes` to `stream` from another thread (a large pipeline must not wait on its own
/// answers) and reads until `all_there` says the answers are whole, the connection ends, or it
/// stays silent for [`QUIET`]. Returns what was read and whether the connection ended.
fn converse(stream: &TcpStream, bytes: Vec<u8>, all_there: impl Fn(&[u8], bool) -> bool) -> (Vec<u8>, bool) {
    let mut writer = stream.try_clone().expect("a second handle on the socket");
    // A write that fails has met a connection opbound closed, which entries may expect.
    std::thread::spawn(move || writer.write_all(&bytes));
    let mut reader = stream.try_clone().expect("a second handle on the socket");
    reader.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let (mut buf, mut eof) = (Vec::new(), false);
    let mut last = Instant::now();
    let mut chunk = vec![0u8; 64 * 1024];
    while !eof && !all_there(&buf, eof) && last.elapsed() < QUIET {
        match reader.read(&mut chunk) {
            Ok(0) => eof = true,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            // Reset: opbound closed with bytes unread, which is its end too.
            Err(_) => eof = true,
        }
    }
    (buf, eof)
}

// ---------------------------------------------------------------------------------------------
// The runner
// ---------------------------------------------------------------------------------------------

/// One entry as the run went: what it expected behind this upstream, and what came back.
struct Outcome {
    entry: Entry,
    answer: Answer,
    got: Got,
    /// Problems seen on the wire, before the upstream's records and the log are read.
    wrong: Vec<String>,
}

/// Sends every pipeline, one connection each, and returns each entry's outcome.
fn send_corpus(opbound: SocketAddr, upstream: Upstream) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for pipeline in corpus() {
        let mut expected: Vec<(&Entry, Answer, Then)> = pipeline
            .iter()
            .map(|e| {
                let (answer, then) = upstream.resolve(e);
                (e, answer, then)
            })
            .collect();
        let stream = TcpStream::connect(opbound).expect("opbound accepts");
        let bytes: Vec<u8> = pipeline.iter().flat_map(|e| e.bytes.clone()).collect();
        let (buf, eof) = converse(&stream, bytes, |buf, eof| walk(&expected, buf, eof).1);
        let (mut got, _) = walk(&expected, &buf, eof);
        let extra = (got.len() > expected.len()).then(|| got.pop().unwrap());

        // A connection that goes on after the last answer is asked once more, once it is read.
        let next = get(&format!("{}.next", pipeline.last().unwrap().name));
        // (Not after an entry that may have closed it: that one is judged by what came behind.)
        let goes_on =
            expected.last().is_some_and(|(_, answer, then)| *then == Then::GoesOn && *answer != Answer::NeverRead)
                && !expected.iter().any(|(_, _, then)| *then == Then::ClosesOrDiscards);
        if goes_on && extra.is_none() {
            expected.push((&next, next.answer.clone(), Then::GoesOn));
            let alone = &expected[expected.len() - 1..];
            let (buf, eof) = converse(&stream, next.bytes.clone(), |buf, eof| walk(alone, buf, eof).1);
            got.extend(walk(alone, &buf, eof).0);
        }
        let _ = stream.shutdown(Shutdown::Both);

        let mut previous: Option<(String, String)> = None;
        for (i, ((entry, answer, _), got)) in expected.iter().zip(got).enumerate() {
            let mut answer = answer.clone();
            // What follows a request that may close its connection is read only if it did not.
            if i > 0 && expected[i - 1].2 == Then::ClosesOrDiscards && matches!(got, Got::Nothing) && eof {
                answer = Answer::NeverRead;
            }
            let previous_name = previous.as_ref().map_or("", |(name, _)| name.as_str());
            let mut wrong = check_answer(entry, previous_name, &answer, &got);
            if let Some((name, head)) = &previous {
                if answer == Answer::NeverRead && matches!(got, Got::Nothing) && !eof {
                    wrong.push(format!("the connection stayed open after {name}'s answer, which should have ended it"));
                }
                if entry.name.ends_with(".next") && matches!(got, Got::Nothing) {
                    wrong.push(format!(
                        "the connection ended once {name}'s answer was read, which did not say it would: {head:?}"
                    ));
                }
            }
            let head = match &got {
                Got::Response(r) => r.head.clone(),
                _ => String::new(),
            };
            previous = Some((entry.name.clone(), head));
            outcomes.push(Outcome { entry: (*entry).clone(), answer, got, wrong });
        }
        if let Some(Got::Garbage(extra)) = extra {
            let last = outcomes.last_mut().unwrap();
            last.wrong.push(format!("then the connection carried {extra}"));
        }
    }
    outcomes
}

/// What is wrong with what came back for `entry`, sent behind `previous`, given its answer.
fn check_answer(entry: &Entry, previous: &str, answer: &Answer, got: &Got) -> Vec<String> {
    let response = match (answer, got) {
        (Answer::NeverRead, Got::Nothing) => return vec![],
        (Answer::NeverRead, _) => {
            return vec![format!(
                "opbound read on past {previous}'s answer, which should have ended the connection, and answered {}",
                describe(got)
            )];
        }
        (Answer::Tunneled, Got::Tunnel(bytes)) if *bytes == entry.bytes => return vec![],
        (Answer::Tunneled, _) => return vec![format!("did not come back through the tunnel: {}", describe(got))],
        (_, Got::Response(response)) => response,
        (_, got) => return vec![format!("no answer: {}", describe(got))],
    };
    let status = |want: u16| {
        if response.status == want { vec![] } else { vec![format!("answered {}, not {want}", response.short())] }
    };
    match answer {
        Answer::Forwarded(body) => {
            let mut wrong = status(200);
            if entry.is_head() || !wrong.is_empty() {
                return wrong;
            }
            match response.echo() {
                Some(echo) => {
                    let target = echo["target"].as_str().unwrap_or("");
                    if entry_of(target) != Some(entry.name.as_str()) {
                        wrong.push(format!("got the answer to another request: {target}"));
                    }
                    if echo["length"].as_u64() != Some(body.len() as u64)
                        || echo["sha256"].as_str() != Some(sha256_hex(body).as_str())
                    {
                        wrong.push(format!("the upstream answered for another body: {}", response.short()));
                    }
                }
                None => wrong.push(format!("not the upstream's echo: {}", response.short())),
            }
            wrong
        }
        Answer::Limited => status(429),
        Answer::Malformed | Answer::MalformedBody => status(400),
        Answer::Switched => status(101),
        Answer::RefusedUpstream(code) => status(*code),
        Answer::WebSocket | Answer::AfterWebSocket | Answer::Tunneled | Answer::NeverRead => {
            unreachable!("resolved or matched above")
        }
    }
}

fn describe(got: &Got) -> String {
    match got {
        Got::Response(r) => r.short(),
        Got::Tunnel(bytes) => format!("tunnel bytes {:?}", lossy(bytes, 120)),
        Got::Nothing => "nothing".to_string(),
        Got::Garbage(why) => why.clone(),
    }
}

/// What is wrong with the upstream's records and opbound's log lines of one entry, given its
/// answer: who saw it, how often, and whole or not; the logged statuses too, with `statuses`.
fn check_accounts(
    entry: &Entry,
    answer: &Answer,
    records: &[&Record],
    logged: &[&Logged],
    statuses: bool,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let seen = records.len();
    let whole = records.iter().filter(|r| r.complete).count();
    let outcomes: Vec<String> = logged
        .iter()
        .map(|l| match l.status {
            Some(status) if statuses => format!("{} {status}", l.outcome),
            None if statuses => format!("{} -", l.outcome),
            _ => l.outcome.clone(),
        })
        .collect();
    let counted = logged.iter().filter(|l| l.outcome == "allowed").count();
    let mut expect_log = |want: &[&str]| {
        let want: Vec<&str> =
            want.iter().map(|w| if statuses { *w } else { w.split(' ').next().unwrap_or(w) }).collect();
        if outcomes != want {
            wrong.push(format!("opbound logged {outcomes:?}, not {want:?}"));
        }
    };
    match answer {
        Answer::Forwarded(body) => {
            expect_log(&["allowed 200"]);
            if seen != 1 || whole != 1 {
                wrong.push(format!("the upstream saw it {seen} times ({whole} whole), not once"));
            } else if records[0].method != entry.method() {
                wrong.push(format!("the upstream saw a {}, not a {}", records[0].method, entry.method()));
            } else if !entry.is_head()
                && (records[0].length != body.len() as u64 || records[0].sha256.as_deref() != Some(&sha256_hex(body)))
            {
                let got = records[0].sha256.as_deref().unwrap_or("none");
                wrong.push(format!(
                    "the upstream got another body: {} bytes of SHA-256 {got}, for {} sent",
                    records[0].length,
                    body.len()
                ));
            }
            if let Some(upgrade) = records.first().and_then(|r| r.upgrade.as_deref()) {
                wrong.push(format!("the upstream was asked to switch to {upgrade}"));
            }
        }
        Answer::Limited => {
            expect_log(&["limited 429"]);
            if seen > 0 {
                wrong.push(format!("refused, yet the upstream saw it {seen} times"));
            }
        }
        Answer::Malformed | Answer::NeverRead | Answer::Tunneled => {
            expect_log(&[]);
            if seen > 0 {
                wrong.push(format!("the upstream saw it {seen} times"));
            }
        }
        Answer::MalformedBody => {
            expect_log(&["allowed 400"]);
            if whole > 0 {
                wrong.push(format!("the upstream ran it whole {whole} times"));
            }
        }
        Answer::Switched => {
            expect_log(&["allowed 101"]);
            if seen != 1 {
                wrong.push(format!("the upstream saw it {seen} times, not once"));
            }
        }
        Answer::RefusedUpstream(code) => {
            expect_log(&[format!("allowed {code}").as_str()]);
            if seen != 1 {
                wrong.push(format!("the upstream saw it {seen} times, not once"));
            }
        }
        Answer::WebSocket | Answer::AfterWebSocket => unreachable!("resolved"),
    }
    if seen > counted {
        wrong.push(format!("the upstream saw it {seen} times, opbound counted it {counted}"));
    }
    wrong
}

/// Runs the corpus through opbound to `upstream` and reports every entry that disagrees.
fn run(upstream: Upstream) {
    let app = App::start(upstream.framework());
    let spec = TempSpec::new(&format!("differential-{upstream:?}"), SPEC);
    let log = spec.dir().join("requests.log");
    let mut opbound = Opbound::start(&[
        "serve",
        "--spec",
        spec.arg(),
        "--upstream",
        &app.url(),
        "--workers",
        "1",
        "--admin",
        "127.0.0.1:0",
        "--request-log",
        log.to_str().unwrap(),
    ]);
    let started = Instant::now();
    let mut outcomes = send_corpus(opbound.addr, upstream);

    // What opbound counted of the bound of 1, what the upstream saw, and every request opbound
    // judged: its log, whole once it has stopped.
    let admin = opbound.admin().expect("the admin listener's address is logged");
    let once = http_get(admin, &format!("/counters?bound={ONCE_BOUND}&key="));
    let seen: Vec<Value> = serde_json::from_slice(&http_get(app.addr, "/_seen")).expect("/_seen is JSON");
    let records: Vec<Record> = seen.iter().map(Record::from).collect();
    opbound.terminate();
    let _ = opbound.child.wait();
    let text = std::fs::read_to_string(&log).expect("the request log is written");
    let logged: Vec<Logged> = text
        .lines()
        .map(|line| {
            let v: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}"));
            Logged {
                target: v["target"].as_str().unwrap_or_default().to_string(),
                status: v["status"].as_u64(),
                outcome: v["outcome"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect();

    let mut by_name: BTreeMap<&str, (Vec<&Record>, Vec<&Logged>)> = BTreeMap::new();
    for r in &records {
        by_name.entry(entry_of(&r.target).unwrap_or(&r.target)).or_default().0.push(r);
    }
    for l in &logged {
        by_name.entry(entry_of(&l.target).unwrap_or(&l.target)).or_default().1.push(l);
    }
    let mut failures = Vec::new();
    for outcome in &mut outcomes {
        let (records, logged) = by_name.remove(outcome.entry.name.as_str()).unwrap_or_default();
        let mut wrong = std::mem::take(&mut outcome.wrong);
        if matches!(outcome.got, Got::Nothing) && !wrong.is_empty() {
            // Never answered: the wire says it all, unless it was counted or seen all the same.
            if !records.is_empty() || !logged.is_empty() {
                wrong.push(format!("unanswered, yet seen {} times and logged {} times", records.len(), logged.len()));
            }
        } else {
            // A wrong answer may have been cut off by the test itself: then only outcomes count.
            let statuses = wrong.is_empty();
            wrong.extend(check_accounts(&outcome.entry, &outcome.answer, &records, &logged, statuses));
        }
        let line = format!(
            "{upstream}: {:<28} {:<24} got {:<40} upstream saw {}, opbound logged {:?}",
            outcome.entry.name,
            short_answer(&outcome.answer),
            describe_status(&outcome.got),
            records.len(),
            logged.iter().map(|l| l.outcome.as_str()).collect::<Vec<_>>(),
        );
        println!("{line}");
        if !wrong.is_empty() {
            failures.push(format!(
                "{line}\n    {}\n    sent: {:?}",
                wrong.join("\n    "),
                lossy(&outcome.entry.bytes, 300)
            ));
        }
    }
    // Requests no entry sent as requests: hidden in a body, an extension, past a framing.
    for (name, (records, logged)) in &by_name {
        let outcomes: Vec<&str> = logged.iter().map(|l| l.outcome.as_str()).collect();
        let carrier = name.strip_suffix(".hidden").map_or("another request".to_string(), |c| c.to_string());
        failures.push(format!(
            "{upstream}: {name:?} was sent inside {carrier}'s bytes, never as a request, yet was read as one: \
             opbound judged it {outcomes:?}, the upstream saw it {} times",
            records.len()
        ));
    }
    // The bound of 1: once, however spelled, by the upstream's count and by opbound's.
    let ran_once: Vec<&Record> = records.iter().filter(|r| r.target.starts_with("/once")).collect();
    if ran_once.len() > 1 {
        let targets: Vec<&str> = ran_once.iter().map(|r| r.target.as_str()).collect();
        failures.push(format!("{upstream}: the bound of 1 ran {} times: {targets:?}", ran_once.len()));
    }
    let once: Value = serde_json::from_slice(&once).unwrap_or_default();
    if once["tracked"] != true || once["remaining"] != 0 {
        failures.push(format!("{upstream}: /counters for {ONCE_BOUND} says {once}, not spent"));
    }
    println!(
        "{upstream}: {} entries, {} records upstream, {} log lines, in {:.1?}",
        outcomes.len(),
        records.len(),
        logged.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} disagreements between what was sent, what {upstream} saw and what opbound counted:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn short_answer(answer: &Answer) -> String {
    match answer {
        Answer::Forwarded(body) => format!("forwarded ({} B)", body.len()),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn describe_status(got: &Got) -> String {
    match got {
        Got::Response(r) => {
            let interim: String = r.interim.iter().map(|s| format!("{s}, ")).collect();
            format!("{interim}{}", r.status)
        }
        Got::Tunnel(bytes) => format!("tunnel ({} B)", bytes.len()),
        Got::Nothing => "nothing".to_string(),
        Got::Garbage(_) => "garbage".to_string(),
    }
}

/// A GET on its own connection, answered with `Connection: close`: its body.
fn http_get(addr: SocketAddr, target: &str) -> Vec<u8> {
    let stream = TcpStream::connect(addr).expect("the server accepts");
    let request = format!("GET {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").into_bytes();
    let (buf, eof) = converse(&stream, request, |_, eof| eof);
    match parse_response(&buf, false, eof) {
        Parsed::Whole(response, _) if response.status == 200 => response.body,
        _ => panic!("GET {target} on {addr}: {}", lossy(&buf, 500)),
    }
}

#[test]
fn node_http_sees_exactly_what_opbound_counted() {
    run(Upstream::Node);
}

#[test]
fn flask_under_gunicorn_sees_exactly_what_opbound_counted() {
    run(Upstream::Flask);
}

// ---------------------------------------------------------------------------------------------
// Hostile upstream answers
// ---------------------------------------------------------------------------------------------

const HOSTILE_SPEC: &str = r#"
openapi: 3.0.3
info: {title: hostile upstream tests, version: '1'}
x-rate-limit:
  - {per: address, limit: 1000000, window: PT1H}
paths:
  /h/{answer}/{how}:
    parameters:
      - {name: answer, in: path, required: true, schema: {type: string}}
      - {name: how, in: path, required: true, schema: {type: string}}
    get: {operationId: hostileGet}
    head: {operationId: hostileHead}
    post: {operationId: hostilePost}
  /n/{answer}/{how}:
    parameters:
      - {name: answer, in: path, required: true, schema: {type: string}}
      - {name: how, in: path, required: true, schema: {type: string}}
    get: {operationId: nextGet}
    post: {operationId: nextPost}
"#;

/// A response nobody asked for, planted behind an answer: read as the next answer on its
/// connection, it would reach whichever client is sent there next.
fn planted() -> String {
    let body = "PLANTED: not your response";
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

/// What the client that asked gets for a hostile answer.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// This status and body, whole.
    Whole(u16, &'static str),
    /// A 502, or a response that breaks off: never a part passed off as whole.
    Refused,
    /// A repaired answer or a 502 (RFC 9112 allows either): only the next client matters here.
    Either,
}

/// One hostile answer to `/h/NAME/...`.
struct Hostile {
    name: &'static str,
    bytes: String,
    /// The upstream closes the connection after it.
    close: bool,
    fate: Fate,
    /// Bytes follow the answer on its connection, which must then carry no other request.
    junk_behind: bool,
    /// Asked for with HEAD (its answer has no body, whatever it says).
    head: bool,
}

fn hostile_answers() -> Vec<Hostile> {
    let planted = planted();
    let answer =
        |name, bytes: String, fate, junk_behind| Hostile { name, bytes, close: false, fate, junk_behind, head: false };
    let closing =
        |name, bytes: String, fate| Hostile { name, bytes, close: true, fate, junk_behind: false, head: false };
    vec![
        answer("bytes-after-length", format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi{planted}"), Fate::Whole(200, "hi"), true),
        closing("short-body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part of it".to_string(), Fate::Refused),
        closing("short-body-then-a-response", format!("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nx{planted}"), Fate::Refused),
        closing("short-chunked-body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly part".to_string(), Fate::Refused),
        answer(
            "no-content-with-body",
            format!("HTTP/1.1 204 No Content\r\nContent-Length: {}\r\n\r\n{planted}", planted.len()),
            Fate::Whole(204, ""),
            true,
        ),
        answer("no-content-then-a-response", format!("HTTP/1.1 204 No Content\r\n\r\n{planted}"), Fate::Whole(204, ""), true),
        answer(
            "not-modified-with-body",
            format!("HTTP/1.1 304 Not Modified\r\nContent-Length: {}\r\n\r\n{planted}", planted.len()),
            Fate::Whole(304, ""),
            true,
        ),
        answer(
            "interim-then-final",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal"
                .to_string(),
            Fate::Whole(200, "final"),
            false,
        ),
        answer(
            "interim-after-final",
            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 100 Continue\r\n\r\n{planted}"),
            Fate::Whole(200, "hi"),
            true,
        ),
        answer(
            "length-and-chunked",
            format!("HTTP/1.1 200 OK\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n{planted}"),
            Fate::Whole(200, "hi"),
            true,
        ),
        // Both lengths, the chunked body the longer: a reader that took the length would pass a
        // part off as the whole.
        answer(
            "length-shorter-than-chunks",
            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n{planted}"),
            Fate::Whole(200, "hello"),
            true,
        ),
        answer(
            "chunked-and-length",
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n2\r\nhi\r\n0\r\n\r\n{planted}"),
            Fate::Whole(200, "hi"),
            true,
        ),
        answer(
            "trailers-then-junk",
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n{planted}"
            ),
            Fate::Whole(200, "hello"),
            true,
        ),
        answer(
            "two-lengths",
            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: {}\r\n\r\nhi{planted}", planted.len() + 2),
            Fate::Refused,
            true,
        ),
        answer("plus-length", format!("HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nhi{planted}"), Fate::Refused, true),
        answer(
            "switch-unasked",
            format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n{planted}"),
            Fate::Refused,
            true,
        ),
        answer(
            "bad-chunk-size",
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n{planted}"),
            Fate::Refused,
            true,
        ),
        answer("obs-fold", format!("HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\nhi{planted}"), Fate::Either, true),
        answer("nul-in-field", format!("HTTP/1.1 200 OK\r\nX-Nul: a\0b\r\nContent-Length: 2\r\n\r\nhi{planted}"), Fate::Refused, true),
        answer("bare-lf", format!("HTTP/1.1 200 OK\nContent-Length: 2\n\nhi{planted}"), Fate::Either, true),
        closing("until-close", "HTTP/1.1 200 OK\r\n\r\nall of it".to_string(), Fate::Whole(200, "all of it")),
        Hostile {
            name: "head-with-body",
            bytes: format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{planted}", planted.len()),
            close: false,
            fate: Fate::Whole(200, ""),
            junk_behind: true,
            head: true,
        },
    ]
}

/// A raw-TCP upstream that answers `/h/NAME/...` with the hostile answer NAME and anything else
/// with `own TARGET`, recording on which of its connections each request came.
struct HostileUpstream {
    addr: SocketAddr,
    /// (connection, from 1; request target), in arrival order.
    seen: Arc<Mutex<Vec<(usize, String)>>>,
    /// Runs the upstream; dropped with it.
    _runtime: tokio::runtime::Runtime,
}

impl HostileUpstream {
    fn start() -> HostileUpstream {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
        let record = seen.clone();
        runtime.spawn(async move {
            for connection in 1.. {
                let Ok((stream, _)) = listener.accept().await else { return };
                tokio::spawn(answer_hostilely(stream, connection, record.clone()));
            }
        });
        HostileUpstream { addr, seen, _runtime: runtime }
    }

    fn seen(&self) -> Vec<(usize, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves one upstream connection: reads each request whole (head, then body by its length or
/// its chunks) and writes its answer in one write, so that junk behind an answer is already on
/// the connection when the next request could come.
async fn answer_hostilely(
    mut stream: tokio::net::TcpStream,
    connection: usize,
    seen: Arc<Mutex<Vec<(usize, String)>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut more = vec![0u8; 16 * 1024];
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut more).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&more[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let lower = head.to_ascii_lowercase();
        let length = lower.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
        let body_end = |buf: &[u8]| -> Option<usize> {
            if lower.contains("transfer-encoding: chunked") {
                // The test's bodies hold no such bytes but at their end.
                let end = if buf.starts_with(b"0\r\n\r\n") {
                    Some(0)
                } else {
                    buf.windows(7).position(|w| w == b"\r\n0\r\n\r\n").map(|at| at + 2)
                };
                end.map(|at| at + 5)
            } else {
                length.filter(|n| buf.len() >= *n).or(length.is_none().then_some(0))
            }
        };
        let body = loop {
            if let Some(end) = body_end(&buf) {
                break end;
            }
            match stream.read(&mut more).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&more[..n]),
            }
        };
        buf.drain(..body);
        let target = head.split(' ').nth(1).unwrap_or("").to_string();
        seen.lock().unwrap().push((connection, target.clone()));
        let hostile = target.strip_prefix("/h/").and_then(|rest| {
            let name = rest.split('/').next()?;
            hostile_answers().into_iter().find(|h| h.name == name)
        });
        let (bytes, close) = match hostile {
            Some(h) => (h.bytes.into_bytes(), h.close),
            None => {
                let body = format!("own {target}");
                (format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(), false)
            }
        };
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
        if close {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// Sends one request on a connection of its own (it says `Connection: close`) and returns the
/// response, or what came instead.
fn ask(addr: SocketAddr, request: &str, head: bool) -> Got {
    let stream = TcpStream::connect(addr).expect("opbound accepts");
    let (buf, eof) = converse(&stream, request.as_bytes().to_vec(), |_, eof| eof);
    if buf.is_empty() {
        return Got::Nothing;
    }
    match parse_response(&buf, head, eof) {
        Parsed::Whole(response, _) => Got::Response(response),
        Parsed::Partial => Got::Garbage(format!("a response cut short: {:?}", lossy(&buf, 200))),
        Parsed::Bad(why) => Got::Garbage(why),
    }
}

#[test]
fn hostile_upstream_answers_never_reach_another_client() {
    let upstream = HostileUpstream::start();
    let spec = TempSpec::new("differential-hostile", HOSTILE_SPEC);
    // One worker: one pool of upstream connections, which both clients draw from.
    let url = format!("http://{}", upstream.addr);
    let opbound = Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &url, "--workers", "1"]);
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut cases = 0;
    for hostile in hostile_answers() {
        // Read by opbound's own upstream reader (no body), and by hyper's client (a streamed one).
        let ways: &[&str] = if hostile.head { &["head"] } else { &["get", "streamed"] };
        for &how in ways {
            cases += 1;
            // The next client asks the same way, so that it draws from the same idle connections.
            let request = |method: &str, target: &str| match method {
                "POST" => format!(
                    "POST {target} HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
                     5\r\nhello\r\n0\r\n\r\n"
                ),
                _ => format!("{method} {target} HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n"),
            };
            let (method, next_method) = match how {
                "head" => ("HEAD", "GET"),
                "get" => ("GET", "GET"),
                _ => ("POST", "POST"),
            };
            let target = format!("/h/{}/{how}", hostile.name);
            let first = ask(opbound.addr, &request(method, &target), hostile.head);
            let next_target = format!("/n/{}/{how}", hostile.name);
            let next = ask(opbound.addr, &request(next_method, &next_target), false);

            let mut wrong = Vec::new();
            let whole = |got: &Got| match got {
                Got::Response(r) => Some(r.clone()),
                _ => None,
            };
            match (hostile.fate, whole(&first)) {
                (Fate::Whole(status, body), Some(r)) if r.status == status && r.body == body.as_bytes() => {}
                (Fate::Whole(status, body), _) => {
                    wrong.push(format!("the client that asked got {}, not {status} {body:?}", describe(&first)))
                }
                (Fate::Refused, Some(r)) if r.status != 502 => {
                    wrong.push(format!("the client that asked got {} passed off as whole, not a 502", r.short()))
                }
                (Fate::Refused | Fate::Either, _) => {}
            }
            match whole(&next) {
                Some(r) if r.status == 200 && r.body == format!("own {next_target}").as_bytes() => {}
                _ => wrong.push(format!("the next client got {}, not its own answer", describe(&next))),
            }
            let seen = upstream.seen();
            let on = |t: &str| seen.iter().filter(|(_, target)| target == t).map(|(c, _)| *c).collect::<Vec<_>>();
            let (first_on, next_on) = (on(&target), on(&next_target));
            if first_on.len() != 1 {
                wrong.push(format!("the upstream was asked {} times for the first request, not once", first_on.len()));
            }
            if hostile.junk_behind && !first_on.is_empty() && first_on.first() == next_on.first() {
                wrong.push(format!(
                    "the next request went on upstream connection {}, which had bytes behind the hostile answer",
                    first_on[0]
                ));
            }
            let line = format!(
                "hostile {:<28} {how:<8} first got {:<16} next got {}",
                hostile.name,
                describe_status(&first),
                describe_status(&next)
            );
            println!("{line}");
            if !wrong.is_empty() {
                failures.push(format!("{line}\n    {}", wrong.join("\n    ")));
            }
        }
    }
    println!("hostile: {cases} answers in {:.1?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {cases} hostile answers reached another client or passed for what they were not:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
