//! A response head read from the upstream's bytes, and the framing of its body decided by RFC
//! 9112 §6.3: the one place an upstream's `Content-Length` is read.

use std::io;

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderName};
use http::{StatusCode, Version};
use smallvec::SmallVec;

use crate::server::facts::fields::Fields;

use crate::server::wire::{ChunkError, FramingError, control, framing, items};
pub(crate) use crate::server::wire::{Framing, MAX_HEAD, MAX_HEADERS};
/// How much is read from the socket at a time, at least.
pub(super) const READ_SIZE: usize = 16 * 1024;
/// A body up to this size is written in one go with its head, copied after it.
pub(super) const COPY_BODY: usize = 16 * 1024;
/// The most interim (1xx) responses read before a final one: more is a flood, not hints.
pub(crate) const MAX_INTERIM: usize = 32;

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
    Framing(FramingError),
    /// A chunk of a chunked body is malformed.
    Chunk(ChunkError),
    /// The upstream closed the connection before the body's end.
    CutShort,
    /// The upstream switched protocols (101) although no switch was asked for.
    Switch,
    /// An idle connection had bytes on it that nobody asked for: closed, and the request sent
    /// on another.
    Stray,
    /// The upstream sent bytes on a new connection before it was asked anything.
    Unasked,
    /// No response head came within this long (`--upstream-timeout`).
    TimedOut(std::time::Duration),
    /// The client's request body failed on its way (why, as its reader said).
    Body(String),
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
            Error::Stray => f.write_str("an idle upstream connection had bytes nobody asked for"),
            Error::Unasked => f.write_str("the upstream sent bytes before it was asked anything"),
            Error::TimedOut(after) => write!(f, "the upstream did not answer within {after:?}"),
            Error::Body(why) => write!(f, "the request body could not be sent: {why}"),
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
    /// Whether the connection is a tunnel from here on (a `101`, a CONNECT's 2xx).
    pub tunnel: bool,
}

/// What a request asked for, as far as its response's reading depends on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// A HEAD: the response has no body, whatever it says.
    pub head: bool,
    /// A CONNECT: a 2xx answer makes a tunnel of the connection, and has no body.
    pub connect: bool,
    /// A protocol switch (`Upgrade`): a `101` is its final answer, and the connection becomes
    /// the tunnel's. Unasked, a `101` is refused.
    pub switch: bool,
}

/// Parses the response head at the start of `buf`, the answer to a HEAD request when
/// `head_request`, and removes it from `buf`. Interim (1xx) responses before it are removed and
/// skipped. `Ok(None)` when the head has not arrived whole yet.
#[cfg(any(test, feature = "fuzzing"))]
pub fn parse_head(buf: &mut BytesMut, head_request: bool) -> Result<Option<Head>, Error> {
    parse_head_for(buf, Asked { head: head_request, ..Asked::default() }, &mut 0)
}

/// Parses the response head to a request that asked `asked`, as `parse_head` does; `interim`
/// counts the interim responses skipped for this request so far, across calls.
pub(super) fn parse_head_for(buf: &mut BytesMut, asked: Asked, interim: &mut usize) -> Result<Option<Head>, Error> {
    let head_request = asked.head;
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
        let switched = status == StatusCode::SWITCHING_PROTOCOLS;
        if switched && !asked.switch {
            return Err(Error::Switch);
        }
        if status.is_informational() && !switched {
            // 100 Continue, 103 Early Hints: the final response follows.
            *interim += 1;
            if *interim > MAX_INTERIM {
                return Err(Error::Head(format!("more than {MAX_INTERIM} interim (1xx) responses")));
            }
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
                // again before the client's head is written.
                continue;
            }
            // Not checked again, as a map's value would be: httparse's rule for a value is
            // `HeaderValue`'s (a tab, visible ASCII, obs-text), which the fuzz target
            // `upstream_response` holds it to.
            present.note(&name);
            fields.push(name, value, value_len);
        }
        // What follows a switch, or a CONNECT's success, is the tunnel's, not a body; the
        // connection is never used for another request.
        let tunnel = switched || (asked.connect && status.is_success());
        let (framing, keep_alive) = if tunnel {
            (Framing::Empty, false)
        } else {
            framing::response(
                head_request,
                status,
                version,
                present.close,
                present.coding.then(|| fields.get_all(&header::TRANSFER_ENCODING)).into_iter().flatten(),
                present.length.then(|| fields.get_all(&header::CONTENT_LENGTH)).into_iter().flatten(),
            )
            .map_err(Error::Framing)?
        };
        if present.length && matches!(framing, Framing::Chunked | Framing::UntilClose) {
            // A length beside a transfer coding is not the body's: passed on, it would frame the
            // client's response wrongly.
            fields.remove(&header::CONTENT_LENGTH);
        } else if present.length {
            one_length(&mut fields, &head);
        }
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = status;
        parts.version = version;
        if let Some((at, len)) = reason
            && let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(head.slice(at..at + len))
        {
            parts.extensions.insert(phrase);
        }
        return Ok(Some(Head { parts, fields, framing, keep_alive, tunnel }));
    }
}

/// Leaves one `Content-Length` of a response whose lengths all agree (`5, 5`, or the field twice,
/// which the framing accepted): the first of them, as RFC 9110 §8.6 lets a recipient do, so that
/// whoever reads the answer next does not have to decide the same again.
fn one_length(fields: &mut Fields, head: &bytes::Bytes) {
    let (start, len) = {
        let mut values = fields.get_all(&header::CONTENT_LENGTH);
        let Some(first) = values.next() else { return };
        if values.next().is_none() && !first.contains(&b',') {
            return;
        }
        let Some(item) = items(first).next() else { return };
        (item.as_ptr() as usize - head.as_ptr() as usize, item.len())
    };
    fields.remove(&header::CONTENT_LENGTH);
    fields.push(header::CONTENT_LENGTH, start, len);
}

/// Which of the fields that frame a response a head has, noted as its fields are read: the
/// framing then looks up only those there (a look-up hashes the name, even for nothing).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Present {
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
