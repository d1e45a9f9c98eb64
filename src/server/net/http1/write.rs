//! A response head written into one buffer, and its body framed (length or chunked), by hyper's
//! rules.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};
use hyper::body::Body;

use super::read::{COPY_DATA, Exchange};
use crate::engine::headers::Pending;
use crate::server::facts::fields::Fields;
use crate::server::wire::{content_length, has_token};

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
                    Length::Unknown => match content_length([value]) {
                        Ok(Some(n)) => n,
                        _ => continue,
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
    pub(super) fn done(&self) -> bool {
        matches!(self, Encoder::Length(0))
    }

    /// Frames `data` into `dst`, or, when it is large, returns what to write after `dst` (its
    /// framing already in `dst`). Data past a length is dropped, as hyper drops it.
    pub(super) fn data(&mut self, mut data: Bytes, dst: &mut Vec<u8>) -> Option<Bytes> {
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
    pub(super) fn end(&mut self, trailers: Option<&HeaderMap>, dst: &mut Vec<u8>) {
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
pub(super) fn write_hex(dst: &mut Vec<u8>, n: usize) {
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
