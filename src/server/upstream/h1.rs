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
mod tests {
    use super::*;

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
        let named =
            head("HTTP/1.1 200 OK\r\nConnection: close, X-Trace\r\nX-Trace: 1\r\nContent-Length: 0\r\n\r\n", false);
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
    fn decode(wire: &[u8], step: usize) -> Result<Body, Error> {
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
        assert!(matches!(decode(long.as_bytes(), 7), Err(Error::Chunk(_))));
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
}
