//! HTTP/1.1 that opbound reads and answers itself, for the usual request: a head that arrived
//! whole, with no body or a short body of a declared length that arrived with it.
//!
//! hyper's server connection (its dispatcher, its buffered I/O, a header timer per request, the
//! response body as frames through its encoder) cost more user time in the profile of `serve`
//! than everything the proxy does with a request. Here the head is parsed in place with httparse
//! (as hyper does), the response head is written into one buffer with the start of its body and
//! sent in one write, and a connection holds no buffer between requests.
//!
//! Anything else is hyper's, with every byte read so far handed over unconsumed: a head not yet
//! whole (so hyper's header timer bounds a slow one), an upgrade, `Expect`, `Transfer-Encoding`,
//! a body longer than [`MAX_WHOLE_BODY`] or not yet arrived, and every head that is malformed
//! (hyper answers those with its 400, 414 or 431). The response rules (framing, keep-alive by
//! version, `Date`) are hyper's own, ported (`write_head`).

use std::io;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Frame};
use smallvec::SmallVec;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::engine::headers::Pending;
use crate::server::facts::fields::Fields;
use crate::server::net::activity::Activity;
use crate::server::net::admission::Peer;
use crate::server::net::request_body::Deferred;
pub use crate::server::net::request_body::RequestBody;

/// The most header fields a request head may have here (hyper's limit; it answers more with 431).
const MAX_HEADERS: usize = 100;
/// The longest body read whole with its head; a longer one is streamed by hyper.
pub(crate) const MAX_WHOLE_BODY: usize = 16 * 1024;
/// The longest head looked for here: a longer one is hyper's (which allows about 400 KiB).
const MAX_HEAD: usize = 16 * 1024;
/// What a connection's buffer starts with, enough for the usual request.
const READ_SIZE: usize = 4096;
/// Body data up to this size is copied after the head (or after what waits to be written) and
/// sent with it; a larger piece is written on its own.
const COPY_DATA: usize = 16 * 1024;

/// How a request's exchange goes, from its head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The client's version, which the response speaks.
    pub version: Version,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// Whether it asked with HEAD: the response has no body, whatever its length says.
    pub head: bool,
    /// Whether it takes trailer fields (`TE: trailers`); hyper sends none to a client that
    /// did not say so.
    pub trailers: bool,
}

/// What the start of a connection's buffer holds.
#[allow(clippy::large_enum_variant, reason = "matched where it is made; a box would be an allocation per request")]
pub enum Head {
    /// A request answered here, taken out of the buffer with its body.
    Request(Request<RequestBody>, Exchange),
    /// Not all of it yet: its head, or its body.
    Partial,
    /// A request for hyper, left in the buffer untouched.
    Hyper,
}

/// Reads the request at the start of `buf` (see the module's documentation for which).
pub fn read_head(buf: &mut BytesMut) -> Head {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut parsed, buf, &mut fields) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Head::Hyper,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Hyper,
    };
    let (Some(method), Some(path), Some(minor)) = (parsed.method, parsed.path, parsed.version) else {
        return Head::Hyper;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return Head::Hyper };
    if method == Method::CONNECT {
        return Head::Hyper;
    }
    let version = if minor == 1 { Version::HTTP_11 } else { Version::HTTP_10 };
    let start = buf.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - start;
    let path = (offset(path.as_bytes()), path.len());
    let mut spans: SmallVec<[(usize, usize, usize, usize); 24]> = SmallVec::with_capacity(parsed.headers.len());
    let (mut close, mut keep_alive, mut trailers, mut length) = (false, false, false, None);
    for field in parsed.headers.iter() {
        let name = field.name.as_bytes();
        let special = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if special("transfer-encoding") || special("upgrade") || special("expect") {
            return Head::Hyper;
        }
        if special("content-length") {
            match (length, decimal(field.value)) {
                (None, Some(n)) if n <= MAX_WHOLE_BODY as u64 => length = Some(n as usize),
                // Twice, unreadable, or long: hyper judges or streams it.
                _ => return Head::Hyper,
            }
        } else if special("connection") {
            close |= has_token(field.value, b"close");
            keep_alive |= has_token(field.value, b"keep-alive");
        } else if special("te") {
            trailers |= has_token(field.value, b"trailers");
        }
        // An empty value need not point into the buffer: it is an empty span anywhere.
        let value = if field.value.is_empty() { 0 } else { offset(field.value) };
        spans.push((offset(name), name.len(), value, field.value.len()));
    }
    let length = length.unwrap_or(0);
    if buf.len() < len + length {
        return Head::Partial;
    }
    let exchange = Exchange {
        version,
        keep_alive: !close && (version == Version::HTTP_11 || keep_alive),
        head: method == Method::HEAD,
        trailers,
    };
    let head = buf.split_to(len).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(path.0..path.0 + path.1)) else {
        give_back(head, buf);
        return Head::Hyper;
    };
    let fields = match field_list(head, &spans) {
        Ok(fields) => fields,
        Err(head) => {
            give_back(head, buf);
            return Head::Hyper;
        }
    };
    let body = (length > 0).then(|| buf.split_to(length).freeze());
    let mut request = Request::new(RequestBody::Whole(body, Some(fields)));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    Head::Request(request, exchange)
}

/// The header fields at `spans` of `head`, as a list sharing its bytes; the head given back
/// when one is not a field name hyper would take. httparse checked each value by
/// `HeaderValue`'s rule.
fn field_list(head: Bytes, spans: &[(usize, usize, usize, usize)]) -> Result<Fields, Bytes> {
    let mut fields = Fields::new(head, spans.len());
    for &(name, name_len, value, value_len) in spans {
        let Some(name) = crate::server::facts::names::read(&fields.head()[name..name + name_len]) else {
            return Err(fields.into_head());
        };
        fields.push(name, value, value_len);
    }
    Ok(fields)
}

/// Puts a head taken out of `buf` back in front of it.
fn give_back(head: Bytes, buf: &mut BytesMut) {
    let mut whole = BytesMut::with_capacity(head.len() + buf.len());
    whole.extend_from_slice(&head);
    whole.extend_from_slice(buf);
    *buf = whole;
}

/// A field value that is one decimal number and nothing else.
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Whether a comma-separated field value holds `token`, in any case.
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// How long a response body is, as hyper reads it off the body before writing the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Length {
    /// Nothing to send: the body is over before it started.
    Empty,
    Known(u64),
    Unknown,
}

impl Length {
    pub(crate) fn of<B: Body>(body: &B) -> Length {
        if body.is_end_stream() {
            return Length::Empty;
        }
        body.size_hint().exact().map_or(Length::Unknown, Length::Known)
    }
}

/// How a response body is framed on the wire.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Encoder {
    /// This many bytes still to send (none for a body-less response).
    Length(u64),
    /// Chunked, with the trailer fields the `Trailer` header declared.
    Chunked(Vec<HeaderName>),
    /// Until the connection closes.
    Close,
}

/// A response head's fields: its map's, then, for a proxied response, the upstream's as they
/// were read (see [`Fields`]).
#[derive(Clone, Copy)]
pub(crate) struct HeadFields<'a> {
    pub map: &'a HeaderMap,
    pub read: Option<&'a Fields>,
}

impl<'a> HeadFields<'a> {
    fn len(self) -> usize {
        self.map.len() + self.read.map_or(0, Fields::len)
    }

    fn iter(self) -> impl Iterator<Item = (&'a HeaderName, &'a [u8])> {
        let read = self.read.into_iter().flat_map(Fields::iter);
        self.map.iter().map(|(name, value)| (name, value.as_bytes())).chain(read)
    }

    fn get_all(self, name: &'a HeaderName) -> impl DoubleEndedIterator<Item = &'a [u8]> {
        let read = self.read.into_iter().flat_map(move |f| f.get_all(name));
        self.map.get_all(name).into_iter().map(HeaderValue::as_bytes).chain(read)
    }
}

/// Writes the head of `parts` (its fields those of `fields`) into `dst` for `exchange`, by
/// hyper's rules: its framing from the body's `length` (a given `Content-Length` kept when the
/// body's length is unknown or it answers a HEAD), `Connection` fixed for the client's version,
/// and a `Date` when there is none. The `rate` fields replace any of their names in `fields`.
/// Returns the body's framing and whether the connection closes after this response.
pub(crate) fn write_head(
    parts: &http::response::Parts,
    fields: HeadFields<'_>,
    rate: Option<&Pending>,
    length: Length,
    exchange: Exchange,
    dst: &mut Vec<u8>,
) -> (Encoder, bool) {
    let status = parts.status;
    let no_content =
        status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let can_have_body = !no_content && !exchange.head;
    let http10 = exchange.version == Version::HTTP_10;
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if !http10 && status == StatusCode::OK && reason.is_none() {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        dst.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
        dst.extend_from_slice(status.as_str().as_bytes());
        dst.push(b' ');
        match reason {
            Some(reason) => dst.extend_from_slice(reason.as_bytes()),
            None => dst.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
        }
        dst.extend_from_slice(b"\r\n");
    }

    // Room for the usual head without growing on the way.
    dst.reserve(256 + 48 * fields.len());
    let connection = || fields.get_all(&header::CONNECTION);
    let mut last = !exchange.keep_alive || connection().any(|v| has_token(v, b"close"));
    // The client's version decides: an HTTP/1.0 client keeps the connection only when told so,
    // an HTTP/1.1 one is told when it will not be kept.
    let mut add = None;
    if http10 {
        if !connection().any(|v| has_token(v, b"keep-alive")) {
            if parts.version == Version::HTTP_10 {
                last = true;
            } else if exchange.keep_alive {
                add = Some("keep-alive");
            }
        }
    } else if !exchange.keep_alive && !connection().any(|v| has_token(v, b"close")) {
        add = Some("close");
    }

    let mut encoder = Encoder::Length(0);
    let mut wrote_len = false;
    let mut wrote_date = false;
    let mut allowed_trailers = Vec::new();
    let (mut saw_length, mut saw_connection, mut saw_coding, mut saw_trailer) = (false, false, false, false);
    for (name, value) in fields.iter() {
        // The RateLimit names (and `Retry-After`) all start with an `r`: most fields pass on that.
        if let Some(rate) = rate
            && name.as_str().as_bytes().first() == Some(&b'r')
            && rate.sets(name)
        {
            continue;
        }
        match *name {
            header::CONTENT_LENGTH => {
                if std::mem::replace(&mut saw_length, true) || saw_coding {
                    continue;
                }
                let n = match length {
                    Length::Known(n) => n,
                    Length::Unknown => match decimal(value) {
                        Some(n) => n,
                        None => continue,
                    },
                    // No body to send: a length is the answer to a HEAD's, or a stray `0`.
                    Length::Empty if exchange.head => 0,
                    Length::Empty => continue,
                };
                encoder = Encoder::Length(n);
                wrote_len = true;
            }
            header::TRANSFER_ENCODING => {
                if http10 || !can_have_body || std::mem::replace(&mut saw_coding, true) {
                    continue;
                }
                write_line(dst, name, fields.get_all(&header::TRANSFER_ENCODING), None);
                let chunked_last = fields.get_all(&header::TRANSFER_ENCODING).next_back().is_some_and(|v| {
                    v.rsplit(|&b| b == b',').next().is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"))
                });
                if !chunked_last {
                    dst.truncate(dst.len() - 2);
                    dst.extend_from_slice(b", chunked\r\n");
                }
                encoder = Encoder::Chunked(Vec::new());
                wrote_len = true;
                continue;
            }
            header::CONNECTION => {
                if !std::mem::replace(&mut saw_connection, true) {
                    write_line(dst, name, connection(), add.take());
                }
                continue;
            }
            header::TRAILER => {
                if http10 || !can_have_body || std::mem::replace(&mut saw_trailer, true) {
                    continue;
                }
                write_line(dst, name, fields.get_all(&header::TRAILER), None);
                if !exchange.trailers {
                    continue;
                }
                allowed_trailers = fields
                    .get_all(&header::TRAILER)
                    // `HeaderValue::to_str`'s rule: visible ASCII and tabs only.
                    .filter(|v| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)))
                    .filter_map(|v| std::str::from_utf8(v).ok())
                    .flat_map(|v| v.split(','))
                    .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
                    .collect();
                continue;
            }
            header::DATE => wrote_date = true,
            _ => {}
        }
        write_line(dst, name, std::iter::once(value), None);
    }
    if let Some(rate) = rate {
        rate.write(dst);
    }
    if let Some(add) = add {
        dst.extend_from_slice(b"connection: ");
        dst.extend_from_slice(add.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    let can_have_length = !no_content;
    if !wrote_len {
        encoder = match length {
            Length::Unknown if http10 || !can_have_body => Encoder::Close,
            Length::Unknown => {
                dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
                Encoder::Chunked(Vec::new())
            }
            Length::Empty | Length::Known(0) => {
                if can_have_length && !exchange.head {
                    dst.extend_from_slice(b"content-length: 0\r\n");
                }
                Encoder::Length(0)
            }
            Length::Known(n) if can_have_length => {
                dst.extend_from_slice(b"content-length: ");
                dst.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                dst.extend_from_slice(b"\r\n");
                Encoder::Length(n)
            }
            Length::Known(_) => Encoder::Length(0),
        };
    }
    if !can_have_body {
        encoder = Encoder::Length(0);
    }
    if !wrote_date {
        dst.extend_from_slice(b"date: ");
        date::extend(dst);
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    match &mut encoder {
        Encoder::Chunked(allowed) => *allowed = allowed_trailers,
        Encoder::Close => last = true,
        Encoder::Length(_) => {}
    }
    (encoder, last)
}

/// One header line: `name`, then `values` joined by commas (and `extra` after them).
fn write_line<'a>(
    dst: &mut Vec<u8>,
    name: &HeaderName,
    values: impl Iterator<Item = &'a [u8]>,
    extra: Option<&'a str>,
) {
    dst.extend_from_slice(name.as_str().as_bytes());
    dst.extend_from_slice(b": ");
    let mut first = true;
    for value in values.chain(extra.map(str::as_bytes)) {
        if !std::mem::replace(&mut first, false) {
            dst.extend_from_slice(b", ");
        }
        dst.extend_from_slice(value);
    }
    dst.extend_from_slice(b"\r\n");
}

/// Trailer fields a response may not carry (hyper's list).
const NOT_TRAILERS: [HeaderName; 12] = [
    header::AUTHORIZATION,
    header::CACHE_CONTROL,
    header::CONTENT_ENCODING,
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::CONTENT_TYPE,
    header::HOST,
    header::MAX_FORWARDS,
    header::SET_COOKIE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::TE,
];

impl Encoder {
    /// Whether nothing (more) of the body is sent.
    fn done(&self) -> bool {
        matches!(self, Encoder::Length(0))
    }

    /// Frames `data` into `dst`, or, when it is large, returns what to write after `dst` (its
    /// framing already in `dst`). Data past a length is dropped, as hyper drops it.
    fn data(&mut self, mut data: Bytes, dst: &mut Vec<u8>) -> Option<Bytes> {
        match self {
            Encoder::Length(left) => {
                let n = (*left).min(data.len() as u64);
                *left -= n;
                data.truncate(n as usize);
            }
            Encoder::Chunked(_) => {
                if data.is_empty() {
                    return None;
                }
                write_hex(dst, data.len());
                dst.extend_from_slice(b"\r\n");
            }
            Encoder::Close => {}
        }
        let chunked = matches!(self, Encoder::Chunked(_));
        let rest = if data.len() <= COPY_DATA {
            dst.extend_from_slice(&data);
            None
        } else {
            Some(data)
        };
        if chunked {
            // After the data, which the caller writes after `dst` when it is returned.
            if rest.is_none() {
                dst.extend_from_slice(b"\r\n");
            }
        }
        rest
    }

    /// Ends a chunked body, with those of `trailers` its head declared.
    fn end(&mut self, trailers: Option<&HeaderMap>, dst: &mut Vec<u8>) {
        let Encoder::Chunked(allowed) = self else { return };
        dst.extend_from_slice(b"0\r\n");
        for (name, value) in trailers.into_iter().flatten() {
            if allowed.contains(name) && !NOT_TRAILERS.contains(name) {
                write_line(dst, name, std::iter::once(value.as_bytes()), None);
            }
        }
        dst.extend_from_slice(b"\r\n");
        *self = Encoder::Length(0);
    }
}

/// `n` in upper-case hexadecimal, as a chunk's size.
fn write_hex(dst: &mut Vec<u8>, n: usize) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = DIGITS[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    dst.extend_from_slice(&digits[at..]);
}

/// What serving requests here left a connection in.
#[derive(Debug)]
pub(crate) enum After {
    /// Every request read so far is answered and the client sent nothing more yet.
    Waiting,
    /// A request for hyper's connection, whose bytes are in `unread`.
    Hyper,
    /// The connection is over.
    Closed,
    /// The last response is whole but for these bytes, which the client has not taken yet;
    /// then the connection closes if `close`, or goes on with `unread` (a request the client
    /// sent behind it). Nothing is in flight.
    Unsent { bytes: Vec<u8>, close: bool },
}

/// Serves the requests at the start of `unread` and those the socket already holds, one after
/// another, with `handle`, until one is for hyper, the client sends no more for now, or the
/// connection ends. Each is in flight on `activity` from its head to its response's last frame.
/// Once `stopping`, no further request is read and the response in flight says it closes.
pub(crate) async fn serve<H, F, B>(
    stream: &mut TcpStream,
    unread: &mut Bytes,
    peer: &Peer,
    handle: &H,
    activity: &Arc<Activity>,
    stopping: &watch::Receiver<bool>,
) -> After
where
    H: Fn(Request<RequestBody>, Peer) -> F,
    F: Future<Output = Response<B>>,
    B: Body<Data = Bytes> + Deferred + Unpin,
{
    let mut buf = crate::server::buffers::take_read(READ_SIZE.max(unread.len()));
    buf.extend_from_slice(unread);
    *unread = Bytes::new();
    let mut out = crate::server::buffers::take(0);
    loop {
        if *stopping.borrow() {
            return After::Closed;
        }
        let (request, exchange) = loop {
            // Nothing read yet is nothing to parse (the usual case, between requests).
            let head = if buf.is_empty() { Head::Partial } else { read_head(&mut buf) };
            match head {
                Head::Request(request, exchange) => break (request, exchange),
                Head::Hyper => {
                    // Copied: a view would keep the whole buffer alive while hyper's connection
                    // lives, and hyper reads it out at once.
                    *unread = Bytes::copy_from_slice(&buf);
                    return After::Hyper;
                }
                Head::Partial => match fill_now(stream, &mut buf).await {
                    Ok(true) => {}
                    Ok(false) if buf.is_empty() => {
                        crate::server::buffers::give_read(buf);
                        return After::Waiting;
                    }
                    // The rest is not here yet: hyper waits for it under its header timer.
                    Ok(false) => {
                        *unread = Bytes::copy_from_slice(&buf);
                        return After::Hyper;
                    }
                    Err(_) => return After::Closed,
                },
            }
        };
        let in_flight = activity.begin();
        // Boxed: a proxy's future is kilobytes, and the connection's task is what a waiting
        // connection costs. The box is taken before the future is made, so that the future is
        // written into it: made first, all of it was copied in, the room for what it awaits
        // included, though only its captures were set.
        let answer = Box::into_pin(Box::write(Box::new_uninit(), handle(request, peer.clone())));
        let response = tokio::select! {
            biased;
            response = answer => response,
            () = client_left(stream, &mut buf) => return After::Closed,
        };
        let (parts, mut body) = response.into_parts();
        let exchange = Exchange { keep_alive: exchange.keep_alive && !*stopping.borrow(), ..exchange };
        out.clear();
        let rate = body.take_rate();
        let read = body.take_fields();
        let fields = HeadFields { map: &parts.headers, read: read.as_ref() };
        let (mut encoder, last) = write_head(&parts, fields, rate.as_ref(), Length::of(&body), exchange, &mut out);
        drop(read);
        crate::server::buffers::give_map(parts.headers);
        if !encoder.done() {
            match send_body(stream, &mut buf, &mut body, &mut encoder, &mut out).await {
                Ok(true) => {}
                // The body failed, or ended short of its length: the client must not take what it
                // got for the whole.
                Ok(false) | Err(_) => return After::Closed,
            }
        }
        drop(body);
        drop(in_flight);
        match write_now(stream, &out) {
            Ok(n) if n == out.len() => {}
            Ok(n) => {
                // A request the client sent behind this one waits for the rest to be taken.
                if !last && !buf.is_empty() {
                    *unread = Bytes::copy_from_slice(&buf);
                }
                return After::Unsent { bytes: out.split_off(n), close: last };
            }
            Err(_) => return After::Closed,
        }
        if last {
            let _ = tokio::io::AsyncWriteExt::shutdown(stream).await;
            return After::Closed;
        }
    }
}

/// Sends `body` framed by `encoder`, after `out` (the head); leaves in `out` what is still to be
/// written at its end. `Ok(false)` when the body failed or ended short.
async fn send_body<B>(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    body: &mut B,
    encoder: &mut Encoder,
    out: &mut Vec<u8>,
) -> io::Result<bool>
where
    B: Body<Data = Bytes> + Unpin,
{
    loop {
        let polled = {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            std::pin::Pin::new(&mut *body).poll_frame(&mut cx).map(Step::from)
        };
        let step = match polled {
            Poll::Ready(step) => step,
            Poll::Pending => {
                // Nothing more for now: what there is goes out while the rest comes.
                write_all(stream, out).await?;
                out.clear();
                tokio::select! {
                    biased;
                    frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)) => Step::from(frame),
                    () = client_left(stream, buf) => return Ok(false),
                }
            }
        };
        match step {
            Step::End => {
                if let Encoder::Length(left) = encoder
                    && *left > 0
                {
                    return Ok(false);
                }
                encoder.end(None, out);
                return Ok(true);
            }
            Step::Failed => return Ok(false),
            Step::Trailers(trailers) => {
                encoder.end(Some(&trailers), out);
                return Ok(true);
            }
            Step::Data(data) => {
                if let Some(large) = encoder.data(data, out) {
                    write_all(stream, out).await?;
                    out.clear();
                    write_all(stream, &large).await?;
                    if matches!(encoder, Encoder::Chunked(_)) {
                        out.extend_from_slice(b"\r\n");
                    }
                }
                if encoder.done() {
                    return Ok(true);
                }
                if out.len() > COPY_DATA {
                    write_all(stream, out).await?;
                    out.clear();
                }
            }
        }
    }
}

/// A body's next frame, as the writer takes it.
enum Step {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body ended.
    End,
    /// Reading it failed.
    Failed,
}

impl<E> From<Option<Result<Frame<Bytes>, E>>> for Step {
    fn from(frame: Option<Result<Frame<Bytes>, E>>) -> Step {
        match frame {
            None => Step::End,
            Some(Err(_)) => Step::Failed,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Step::Data(data),
                Err(frame) => frame.into_trailers().map_or(Step::End, Step::Trailers),
            },
        }
    }
}

/// One read into `buf` through `AsyncRead`, which marks the socket drained when a read comes
/// back shorter than the room it was given: the next look then waits for the runtime's word
/// instead of asking the kernel for nothing (`try_read` would, once per request).
fn poll_fill(stream: &mut TcpStream, buf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < READ_SIZE / 4 {
        buf.reserve(READ_SIZE);
    }
    std::pin::pin!(tokio::io::AsyncReadExt::read_buf(stream, buf)).poll(cx)
}

/// Reads what the socket holds now into `buf`, without waiting: whether anything came. A closed
/// socket is an error.
async fn fill_now(stream: &mut TcpStream, buf: &mut BytesMut) -> io::Result<bool> {
    std::future::poll_fn(|cx| match poll_fill(stream, buf, cx) {
        Poll::Ready(Ok(0)) => Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
        Poll::Ready(Ok(_)) => Poll::Ready(Ok(true)),
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Ready(Ok(false)),
    })
    .await
}

/// Resolves when the client closes its connection (or it fails) while its request is answered,
/// as hyper's does: bytes that come meanwhile (the next request) are kept in `buf`, and once
/// some have come, nothing more is read until this request is over.
async fn client_left(stream: &mut TcpStream, buf: &mut BytesMut) {
    std::future::poll_fn(|cx| {
        if !buf.is_empty() {
            return Poll::Pending;
        }
        match poll_fill(stream, buf, cx) {
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) | Poll::Pending => Poll::Pending,
        }
    })
    .await;
}

/// Writes what the socket takes now: how much.
fn write_now(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<usize> {
    let total = bytes.len();
    while !bytes.is_empty() {
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total - bytes.len())
}

/// Writes all of `bytes`, waiting for the client to take them.
pub(crate) async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    loop {
        let n = write_now(stream, bytes)?;
        bytes = &bytes[n..];
        if bytes.is_empty() {
            return Ok(());
        }
        stream.writable().await?;
    }
}

/// The `Date` of responses, formatted once a second per thread (as hyper does).
mod date {
    use std::cell::RefCell;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// `Sun, 06 Nov 1994 08:49:37 GMT`.
    const LENGTH: usize = 29;

    struct Cached {
        bytes: [u8; LENGTH],
        next: SystemTime,
    }

    thread_local!(static CACHED: RefCell<Cached> = const { RefCell::new(Cached { bytes: [0; LENGTH], next: UNIX_EPOCH }) });

    /// Appends the current date to `dst`.
    pub(super) fn extend(dst: &mut Vec<u8>) {
        CACHED.with(|cached| {
            let mut cached = cached.borrow_mut();
            let now = SystemTime::now();
            if now >= cached.next {
                let text = httpdate::fmt_http_date(now);
                if text.len() == LENGTH {
                    cached.bytes.copy_from_slice(text.as_bytes());
                }
                let nanos = now.duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
                cached.next = now + Duration::from_secs(1) - Duration::from_nanos(u64::from(nanos));
            }
            dst.extend_from_slice(&cached.bytes);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, Full, StreamBody};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::server::facts::fields::Headers;

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
        assert_eq!(exchange, Exchange { version: Version::HTTP_11, keep_alive: true, head: false, trailers: false });
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
    fn what_is_not_whole_waits_and_what_is_unusual_or_malformed_is_hyper_s_untouched() {
        let partial = ["GET / HTTP/1.1\r\nHost: t\r\n", "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel", ""];
        for text in partial {
            let (head, rest) = read(text);
            assert!(matches!(head, Head::Partial), "{text:?}");
            assert_eq!(rest, text, "nothing taken");
        }
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X-A: 1\r\n".repeat(MAX_HEADERS + 1));
        let long = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_WHOLE_BODY + 1);
        let hyper_s = [
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "GET /ws HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            "CONNECT t:443 HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
            "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na",
            "GE(T / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nbad name: x\r\n\r\n",
            "GET /\x7f HTTP/1.1\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            // httparse takes these; http's URI parser does not, once the head is taken apart.
            "GET http://[::1/ HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            "GET http:/// HTTP/1.1\r\n\r\n",
            &many,
            &long,
        ];
        for text in hyper_s {
            let (head, rest) = read(text);
            assert!(matches!(head, Head::Hyper), "{text:?}");
            assert_eq!(rest, text, "nothing taken");
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
                serve(&mut stream, &mut unread, &Peer::uncapped(peer), &handle, &activity, &rx).await;
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
    fn streamed(
        pieces: &'static [&'static str],
        trailers: &'static [(&'static str, &'static str)],
    ) -> ProxyBodyForTest {
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
            (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", || {
                response(200, &[], streamed(&["until close"], &[]))
            }),
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
                        serve(&mut stream, &mut unread, &Peer::uncapped(peer), &handle, &Activity::new(), &rx).await
                    } else {
                        let service =
                            hyper::service::service_fn(move |_req| async move { Ok::<_, Infallible>(respond()) });
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
        let exchange = Exchange { version: Version::HTTP_11, keep_alive: false, head: false, trailers: false };
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
        let after = serve(&mut stream, &mut unread, &Peer::uncapped(peer), &handle, &Activity::new(), &rx).await;
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
            Exchange { version: Version::HTTP_11, keep_alive: true, head: false, trailers: true },
            Exchange { version: Version::HTTP_11, keep_alive: false, head: false, trailers: false },
            Exchange { version: Version::HTTP_10, keep_alive: true, head: false, trailers: false },
            Exchange { version: Version::HTTP_11, keep_alive: true, head: true, trailers: false },
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
}
