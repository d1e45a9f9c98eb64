//! HTTP/1.1 to a plain-HTTP upstream, spoken in the request's own task.
//!
//! hyper's client connection runs as a task of its own: a request reaches it through a channel,
//! its response comes back through another, and the response body is read by that task and
//! handed over frame by frame. In the profile of `serve` under load, the upstream side (that
//! hand-off and hyper's general-purpose dispatch) cost more user time than the client side with
//! the limiter. For the common request (no body, or a body already read whole for a key) this
//! module writes the request head itself, reads the response head with httparse (hyper's own
//! parser) and streams the body by reading the socket where the client's connection polls it.
//! The connection has no task; an idle one is checked when it is taken (as Pingora does).
//!
//! Streamed request bodies, protocol switches and TLS upstreams stay with hyper (`pool.rs`).
//!
//! A connection is reused only when its response was framed beyond doubt (RFC 9112 §6.3) and
//! read to its exact end with nothing after it: a response misread on a reused connection would
//! hand one client's bytes to another.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};
use hyper::body::{Frame, SizeHint};
use smallvec::SmallVec;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::server::facts::fields::Fields;

/// The most header fields a response head or a trailer section may have (hyper's limit).
pub const MAX_HEADERS: usize = 100;

/// The longest response head or trailer section read; a longer one is refused.
pub const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size line, extensions included.
pub const MAX_CHUNK_LINE: usize = 4096;
/// How much is read from the socket at a time, at least.
const READ_SIZE: usize = 16 * 1024;
/// A body up to this size is written in one go with its head, copied after it.
const COPY_BODY: usize = 16 * 1024;

/// Why an upstream exchange failed.
#[derive(Debug)]
pub enum Error {
    /// Reading or writing the socket failed.
    Io(io::Error),
    /// The upstream closed the connection before a whole response head.
    Closed,
    /// The response head cannot be read.
    Head(String),
    /// The response head is longer than [`MAX_HEAD`].
    HeadTooLarge,
    /// The response's framing (`Content-Length`, `Transfer-Encoding`) cannot be believed.
    Framing(String),
    /// A chunk of a chunked body is malformed.
    Chunk(&'static str),
    /// The upstream closed the connection before the body's end.
    CutShort,
    /// The upstream switched protocols (101) although no switch was asked for.
    Switch,
    /// No response head came within this long (`--upstream-timeout`).
    TimedOut(std::time::Duration),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Closed => f.write_str("the upstream closed the connection before a response"),
            Error::Head(why) => write!(f, "the upstream's response head is malformed: {why}"),
            Error::HeadTooLarge => write!(f, "the upstream's response head is longer than {MAX_HEAD} bytes"),
            Error::Framing(why) => write!(f, "the upstream's response framing is malformed: {why}"),
            Error::Chunk(why) => write!(f, "the upstream's chunked body is malformed: {why}"),
            Error::CutShort => f.write_str("the upstream closed the connection before the body's end"),
            Error::Switch => f.write_str("the upstream switched protocols unasked"),
            Error::TimedOut(after) => write!(f, "the upstream did not answer within {after:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// How a response's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body: the answer to a HEAD, a 204, a 304.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the upstream closes the connection.
    UntilClose,
}

/// A final response head, read whole.
#[derive(Debug)]
pub struct Head {
    /// Status, version (and a reason phrase that is not the usual one); its header map is
    /// empty: the fields are in `fields`.
    pub parts: http::response::Parts,
    /// The header fields, in their order, but for a `Connection` naming nothing but
    /// `keep-alive` or `close`.
    pub fields: Fields,
    /// How its body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another request once the body has been read.
    pub keep_alive: bool,
}

/// Parses the response head at the start of `buf`, the answer to a HEAD request when
/// `head_request`, and removes it from `buf`. Interim (1xx) responses before it are removed and
/// skipped. `Ok(None)` when the head has not arrived whole yet.
pub fn parse_head(buf: &mut BytesMut, head_request: bool) -> Result<Option<Head>, Error> {
    loop {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut fields);
        let len = match response.parse(&buf[..]) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err(Error::HeadTooLarge),
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Error::Head(format!("more than {MAX_HEADERS} header fields")));
            }
            Err(e) => return Err(Error::Head(e.to_string())),
        };
        if len > MAX_HEAD {
            return Err(Error::HeadTooLarge);
        }
        let code = response.code.unwrap_or_default();
        let status = StatusCode::from_u16(code).map_err(|_| Error::Head(format!("status {code}")))?;
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(Error::Switch);
            }
            // 100 Continue, 103 Early Hints: the final response follows.
            buf.advance(len);
            continue;
        }
        let version = if response.version == Some(1) { Version::HTTP_11 } else { Version::HTTP_10 };
        // Where each name and value lies, so that the values can share the head's bytes.
        // An empty slice need not point into the buffer (httparse gives a static one for an
        // empty reason phrase): it is an empty span anywhere.
        let start = buf.as_ptr() as usize;
        let offset = |s: &[u8]| if s.is_empty() { 0 } else { s.as_ptr() as usize - start };
        let spans: SmallVec<[(usize, usize, usize, usize); 24]> = response
            .headers
            .iter()
            .map(|h| (offset(h.name.as_bytes()), h.name.len(), offset(h.value), h.value.len()))
            .collect();
        let reason = response
            .reason
            .filter(|r| !r.is_empty() && Some(*r) != status.canonical_reason())
            .map(|r| (offset(r.as_bytes()), r.len()));
        let head = buf.split_to(len).freeze();
        let mut fields = Fields::new(head.clone(), spans.len());
        let mut present = Present::default();
        for (name, name_len, value, value_len) in spans {
            let name = crate::server::facts::names::read(&head[name..name + name_len])
                .ok_or_else(|| Error::Head("a field name is not a token".to_string()))?;
            if name == header::CONNECTION && present.connection_only_hop_by_hop(&head[value..value + value_len])? {
                // The usual `Connection: keep-alive` names no field but itself and `Keep-Alive`,
                // both hop-by-hop: stripped here, not put in the map to be found and removed
                // again before the client's head is written (1,400 instructions a response).
                continue;
            }
            // Not checked again, as a map's value would be: httparse's rule for a value is
            // `HeaderValue`'s (a tab, visible ASCII, obs-text), which the fuzz target
            // `upstream_response` holds it to.
            present.note(&name);
            fields.push(name, value, value_len);
        }
        let (framing, keep_alive) = framing(head_request, status, version, &fields, present)?;
        if present.length && matches!(framing, Framing::Chunked | Framing::UntilClose) {
            // A length beside a transfer coding is not the body's: passed on, it would frame the
            // client's response wrongly.
            fields.remove(&header::CONTENT_LENGTH);
        }
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = status;
        parts.version = version;
        if let Some((at, len)) = reason
            && let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(head.slice(at..at + len))
        {
            parts.extensions.insert(phrase);
        }
        return Ok(Some(Head { parts, fields, framing, keep_alive }));
    }
}

/// Which of the fields that frame a response a head has, noted as its fields are read: the
/// framing then looks up only those there (a look-up hashes the name, even for nothing).
#[derive(Clone, Copy, Debug, Default)]
struct Present {
    coding: bool,
    length: bool,
    /// A `Connection` field said `close`.
    close: bool,
}

impl Present {
    /// Notes a `Connection` field's `close`, and whether the field names nothing but
    /// `keep-alive` and `close`: then it can be dropped at once, since what it names is stripped
    /// as hop-by-hop anyway. An invalid value is refused as any field's would be.
    fn connection_only_hop_by_hop(&mut self, value: &[u8]) -> Result<bool, Error> {
        if value.iter().any(control) {
            return Err(Error::Head("the value of connection holds a control character".to_string()));
        }
        let mut only = true;
        for token in items(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                only = false;
            }
        }
        Ok(only)
    }

    fn note(&mut self, name: &HeaderName) {
        // Standard names compare by their index: no bytes are looked at.
        if *name == header::TRANSFER_ENCODING {
            self.coding = true;
        } else if *name == header::CONTENT_LENGTH {
            self.length = true;
        }
    }
}

/// How a final response's body is delimited, and whether the connection outlives it
/// (RFC 9112 §6.3 and §9.3). `present` says which framing fields `headers` has.
fn framing(
    head_request: bool,
    status: StatusCode,
    version: Version,
    fields: &Fields,
    present: Present,
) -> Result<(Framing, bool), Error> {
    let mut keep_alive = version == Version::HTTP_11 && !present.close;
    if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((Framing::Empty, keep_alive));
    }
    if present.coding {
        let codings: Vec<&[u8]> = fields.get_all(&header::TRANSFER_ENCODING).flat_map(items).collect();
        let chunked = |c: &[u8]| c.eq_ignore_ascii_case(b"chunked");
        if codings.iter().filter(|c| chunked(c)).count() > 1 {
            return Err(Error::Framing("chunked twice".to_string()));
        }
        // A message with both lengths, or a transfer coding from HTTP/1.0, may have been framed
        // otherwise by whoever sent it: read this one, then close the connection.
        if version != Version::HTTP_11 || present.length {
            keep_alive = false;
        }
        return Ok(match codings.last() {
            Some(last) if chunked(last) && version == Version::HTTP_11 => (Framing::Chunked, keep_alive),
            _ => (Framing::UntilClose, false),
        });
    }
    if !present.length {
        return Ok((Framing::UntilClose, false));
    }
    match content_length(fields)? {
        Some(length) => Ok((Framing::Length(length), keep_alive)),
        None => Ok((Framing::UntilClose, false)),
    }
}

/// The `Content-Length`: every value (and every item of a list) one and the same decimal number.
fn content_length(fields: &Fields) -> Result<Option<u64>, Error> {
    let mut length = None;
    for value in fields.get_all(&header::CONTENT_LENGTH) {
        for item in value.split(|&b| b == b',') {
            let item = item.trim_ascii();
            let n = std::str::from_utf8(item)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Error::Framing(format!("Content-Length {:?}", String::from_utf8_lossy(item))))?;
            if length.is_some_and(|l| l != n) {
                return Err(Error::Framing("two different Content-Length values".to_string()));
            }
            length = Some(n);
        }
    }
    Ok(length)
}

/// The comma-separated items of one value, trimmed, empty ones left out.
fn items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty())
}

/// A byte no field value or chunk extension may hold (`HeaderValue`'s rule: anything below a
/// space but a tab, and DEL).
fn control(&b: &u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// What a chunked body decoder found in its buffer.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// Some of a chunk's data.
    Data(Bytes),
    /// The trailer section, after the last chunk.
    Trailers(HeaderMap),
    /// The body's end (after the trailers, if any).
    End,
    /// More bytes are needed.
    More,
}

/// A decoder of the chunked transfer coding (RFC 9112 §7.1), strict: sizes of at most 16 hex
/// digits, every line ended by CRLF, no control character in an extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct Chunked {
    state: ChunkState,
}

#[derive(Clone, Copy, Debug, Default)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

impl Chunked {
    /// Decodes what it can from the start of `buf`, removing what it used.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, Error> {
        loop {
            match self.state {
                ChunkState::Size => {
                    let Some(newline) = buf.iter().take(MAX_CHUNK_LINE).position(|&b| b == b'\n') else {
                        if buf.len() >= MAX_CHUNK_LINE {
                            return Err(Error::Chunk("a chunk-size line is too long"));
                        }
                        return Ok(Decoded::More);
                    };
                    let line = buf[..newline].strip_suffix(b"\r").ok_or(Error::Chunk("a bare LF"))?;
                    let size = chunk_size(line)?;
                    buf.advance(newline + 1);
                    self.state = if size == 0 { ChunkState::Trailers } else { ChunkState::Data(size) };
                }
                ChunkState::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let n = left.min(buf.len() as u64);
                    let data = buf.split_to(n as usize).freeze();
                    self.state = if n == left { ChunkState::DataEnd } else { ChunkState::Data(left - n) };
                    return Ok(Decoded::Data(data));
                }
                ChunkState::DataEnd => match buf.get(..2) {
                    None if buf.first().is_none_or(|&b| b == b'\r') => return Ok(Decoded::More),
                    Some([b'\r', b'\n']) => {
                        buf.advance(2);
                        self.state = ChunkState::Size;
                    }
                    _ => return Err(Error::Chunk("a chunk's data is not followed by CRLF")),
                },
                ChunkState::Trailers => {
                    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let (len, found) = match httparse::parse_headers(buf, &mut fields) {
                        Ok(httparse::Status::Complete(found)) => found,
                        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                            return Err(Error::Chunk("the trailer section is too long"));
                        }
                        Ok(httparse::Status::Partial) => return Ok(Decoded::More),
                        Err(_) => return Err(Error::Chunk("the trailer section is malformed")),
                    };
                    let mut trailers = HeaderMap::with_capacity(found.len());
                    for field in found {
                        let name = HeaderName::from_bytes(field.name.as_bytes())
                            .map_err(|_| Error::Chunk("a trailer name is not a token"))?;
                        let value = HeaderValue::from_bytes(field.value)
                            .map_err(|_| Error::Chunk("a trailer value holds a control character"))?;
                        trailers.append(name, value);
                    }
                    buf.advance(len);
                    self.state = ChunkState::Done;
                    if !trailers.is_empty() {
                        return Ok(Decoded::Trailers(trailers));
                    }
                }
                ChunkState::Done => return Ok(Decoded::End),
            }
        }
    }
}

/// A chunk-size line without its CRLF: 1 to 16 hex digits, then optionally whitespace and
/// extensions (ignored) with no control characters.
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(Error::Chunk("a chunk size is not 1 to 16 hex digits"));
    }
    let hex = std::str::from_utf8(&line[..digits]).expect("hex digits are ASCII");
    let size = u64::from_str_radix(hex, 16).expect("16 hex digits fit in 64 bits");
    let rest = line[digits..].trim_ascii_start();
    if !rest.is_empty() && (rest[0] != b';' || rest.iter().any(control)) {
        return Err(Error::Chunk("a chunk size is followed by something other than an extension"));
    }
    Ok(size)
}

/// Writes the head of a request for the upstream into `out`: its request line and header fields
/// (as they are, but for its framing), a `Content-Length` when `body` is not empty or the client
/// gave one, and `body` itself when it is small. Returns whether the body is still to be sent.
pub fn write_request(parts: &http::request::Parts, body: &[u8], had_length: bool, out: &mut Vec<u8>) -> bool {
    write_request_line(parts, out);
    for (name, value) in &parts.headers {
        if !is_framing(name) {
            write_field(name, value.as_bytes(), out);
        }
    }
    end_request(body, had_length, out)
}

/// Writes a request's line, for the upstream: its method, its target, HTTP/1.1.
pub(crate) fn write_request_line(parts: &http::request::Parts, out: &mut Vec<u8>) {
    let target = parts.uri.path_and_query().map_or("/", |t| t.as_str());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Whether a field is one of a request's framing, which [`end_request`] writes afresh: the body
/// is whole, its length is known, and nothing is left to continue with.
pub(crate) fn is_framing(name: &HeaderName) -> bool {
    name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING || name == header::EXPECT
}

/// Writes one field.
pub(crate) fn write_field(name: &HeaderName, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Ends a request's head written by [`write_request_line`] and [`write_field`]: a
/// `Content-Length` when `body` is not empty or the client gave one, and `body` itself when it
/// is small. Returns whether the body is still to be sent.
pub(crate) fn end_request(body: &[u8], had_length: bool, out: &mut Vec<u8>) -> bool {
    if !body.is_empty() || had_length {
        let _ = write!(out, "content-length: {}\r\n", body.len());
    }
    out.extend_from_slice(b"\r\n");
    if body.len() <= COPY_BODY {
        out.extend_from_slice(body);
        return false;
    }
    true
}

/// Where a connection read in the request's task goes back to once its response has been read
/// whole: its worker's idle list.
pub(crate) struct Home(pub(crate) std::sync::Weak<dyn IdleList>);

impl Home {
    pub(crate) fn give_back(&self, conn: Conn) {
        if let Some(pool) = self.0.upgrade() {
            pool.take_back(conn);
        }
    }
}

/// A list of idle connections a connection can be given back to.
pub(crate) trait IdleList: Send + Sync {
    /// Keeps `conn` for the next request (or closes it, when the list has no room).
    fn take_back(self: std::sync::Arc<Self>, conn: Conn);
}

/// A connection to the upstream, with what was read from it and not yet used.
pub(crate) struct Conn {
    io: TcpStream,
    buf: BytesMut,
    /// The response timeout's timer, kept from one exchange to the next (see [`Conn::exchange`]).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// An exchange that failed, and whether the request can be sent again on another connection:
/// nothing came back, so the upstream closed this one (an idle connection's usual end) rather
/// than answer.
pub(crate) struct Failed {
    pub error: Error,
    pub retryable: bool,
}

impl Conn {
    pub(crate) fn new(io: TcpStream) -> Conn {
        Conn { io, buf: BytesMut::new(), timer: None }
    }

    /// Whether an idle connection can carry a request: nothing arrived on it and it was not
    /// closed, as far as the runtime has seen. Costs a system call only when the socket was
    /// reported readable.
    pub(crate) fn is_reusable(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.io.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            // Readable: closed (0), sent something unasked (a byte), or a stale report.
            Poll::Ready(Ok(())) => {
                matches!(self.io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Reads what the socket has into the buffer; `Ok(0)` at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        loop {
            ready!(self.io.poll_read_ready(cx))?;
            match self.io.try_read_buf(&mut self.buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    /// Sends a request (`head`, then `body` when the head did not carry it) and reads the
    /// response head, the answer to a HEAD request when `head_request`, within `timeout`.
    ///
    /// The timer is the connection's, re-armed only once it has fired (nginx's lazy timers do
    /// the same): armed for an earlier exchange, it fires before this one's deadline, which is
    /// then looked at and the timer set to it if the response is still awaited. A timer set per
    /// request, inserted into the runtime's wheel and taken out again, was a few percent of
    /// serve's user time.
    pub(crate) async fn exchange(
        &mut self,
        head: &[u8],
        body: Option<&[u8]>,
        head_request: bool,
        timeout: std::time::Duration,
    ) -> Result<Head, Failed> {
        let now = tokio::time::Instant::now();
        let deadline = now + timeout;
        let mut timer = self.timer.take().unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() <= now || timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
        let answered = {
            let mut exchange = std::pin::pin!(self.send_and_read(head, body, head_request));
            std::future::poll_fn(|cx| {
                if let Poll::Ready(answered) = exchange.as_mut().poll(cx) {
                    return Poll::Ready(answered);
                }
                while timer.as_mut().poll(cx).is_ready() {
                    if tokio::time::Instant::now() >= deadline {
                        return Poll::Ready(Err(Failed { error: Error::TimedOut(timeout), retryable: false }));
                    }
                    timer.as_mut().reset(deadline);
                }
                Poll::Pending
            })
            .await
        };
        self.timer = Some(timer);
        answered
    }

    async fn send_and_read(&mut self, head: &[u8], body: Option<&[u8]>, head_request: bool) -> Result<Head, Failed> {
        // Sent after the worker's other ready requests have been read and judged: written in one
        // burst, they reach the upstream together and it answers them in one wake-up. Written
        // as each is judged, the upstream was woken about once per request (nginx: 0.65 context
        // switches per request, against 0.22 this way), and serve did 10% fewer requests.
        tokio::task::yield_now().await;
        let mut written = self.io.write_all(head).await;
        if let (Ok(()), Some(body)) = (&written, body) {
            written = self.io.write_all(body).await;
        }
        if let Err(e) = written {
            return Err(Failed { error: Error::Io(e), retryable: true });
        }
        let mut received = false;
        loop {
            if !self.buf.is_empty()
                && let Some(head) =
                    parse_head(&mut self.buf, head_request).map_err(|error| Failed { error, retryable: false })?
            {
                return Ok(head);
            }
            match std::future::poll_fn(|cx| self.poll_fill(cx)).await {
                Ok(0) => return Err(Failed { error: Error::Closed, retryable: !received }),
                Ok(_) => received = true,
                Err(e) => {
                    let reset = matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe
                    );
                    return Err(Failed { error: Error::Io(e), retryable: reset && !received });
                }
            }
        }
    }
}

/// A response body read from the upstream's connection as the client's connection polls it. The
/// connection goes home as soon as the body's last byte has been read, if it may carry another
/// request; otherwise, or if the body is dropped before, it is closed.
pub struct Body {
    conn: Option<Conn>,
    state: BodyState,
    keep_alive: bool,
    home: Home,
}

enum BodyState {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

impl Body {
    /// The body of the response `head` read from `conn`; `home` takes the connection back.
    pub(crate) fn new(conn: Conn, head: &Head, home: Home) -> Body {
        let state = match head.framing {
            Framing::Empty => BodyState::Length(0),
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(Chunked::default()),
            Framing::UntilClose => BodyState::UntilClose,
        };
        let mut body = Body { conn: Some(conn), state, keep_alive: head.keep_alive, home };
        if matches!(body.state, BodyState::Length(0)) {
            body.finish();
        }
        body
    }

    /// The body has been read to its end: the connection goes home if nothing follows it.
    fn finish(&mut self) {
        self.state = BodyState::Done;
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.buf.is_empty()
        {
            // The runtime still reports the socket readable for the response just read. Cleared,
            // so that taking the connection costs no read to find out; an event that came since
            // is newer and stays (tokio clears only the readiness it reported).
            let _ = conn.io.try_io(Interest::READABLE, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
            self.home.give_back(conn);
        }
    }

    fn fail(&mut self, error: Error) -> Error {
        self.state = BodyState::Done;
        self.conn = None;
        error
    }
}

type Polled = Poll<Option<Result<Frame<Bytes>, Error>>>;

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else { return Poll::Ready(None) };
            match &mut this.state {
                BodyState::Done => return Poll::Ready(None),
                BodyState::Length(left) if !conn.buf.is_empty() => {
                    let n = (*left).min(conn.buf.len() as u64);
                    let data = conn.buf.split_to(n as usize).freeze();
                    *left -= n;
                    if *left == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                BodyState::Chunked(decoder) if !conn.buf.is_empty() => match decoder.decode(&mut conn.buf) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::Trailers(trailers)) => {
                        this.finish();
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Ok(Decoded::End) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::More) => {}
                    Err(e) => return Poll::Ready(Some(Err(this.fail(e)))),
                },
                BodyState::UntilClose if !conn.buf.is_empty() => {
                    let data = conn.buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                _ => {}
            }
            // Nothing (usable) buffered: read more.
            let conn = this.conn.as_mut().expect("checked above");
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.state, BodyState::UntilClose) => {
                    this.state = BodyState::Done;
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return Poll::Ready(Some(Err(this.fail(Error::CutShort)))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(this.fail(Error::Io(e))))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            BodyState::Length(n) => SizeHint::with_exact(n),
            BodyState::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
