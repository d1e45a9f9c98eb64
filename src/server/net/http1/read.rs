//! A request head taken out of a connection's buffer, with its body when it came whole, and how
//! the rest of its body is to be read.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode, Uri, Version};
use smallvec::SmallVec;

use crate::server::facts::fields::Fields;
use crate::server::net::request_body::RequestBody;
use crate::server::wire::{Framing, FramingError, MAX_HEAD, MAX_HEADERS, framing, has_token};

/// The longest body read whole with its head; a longer one is streamed.
pub(crate) const MAX_WHOLE_BODY: usize = 16 * 1024;
/// What a connection's buffer starts with, enough for the usual request.
pub(super) const READ_SIZE: usize = 4096;
/// Body data up to this size is copied after the head (or after what waits to be written) and
/// sent with it; a larger piece is written on its own.
pub(super) const COPY_DATA: usize = 16 * 1024;

/// How a request's exchange goes, from its head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The client's version, which the response speaks.
    pub version: Version,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// Whether it asked with HEAD: the response has no body, whatever its length says.
    pub head: bool,
    /// Whether it takes trailer fields (`TE: trailers`); none are sent to a client that did
    /// not say so.
    pub trailers: bool,
    /// How the rest of its body is read from the connection: `Empty` when it had none, or it
    /// came whole with the head.
    pub body: Framing,
    /// Whether the client waits to be told to send its body (`Expect: 100-continue`).
    pub expect_continue: bool,
    /// Whether it asks to switch protocols (`Upgrade`): the connection may become a tunnel.
    pub upgrade: bool,
}

/// What the start of a connection's buffer holds.
#[allow(clippy::large_enum_variant, reason = "matched where it is made; a box would be an allocation per request")]
pub enum Head {
    /// A request, its head taken out of the buffer, and its body when it came whole.
    Request(Request<RequestBody>, Exchange),
    /// Not all of its head yet.
    Partial,
    /// Not a request that can be read: answered with this status, and the connection closed.
    Malformed(StatusCode),
}

/// Reads the request at the start of `buf`: its head, and its body when the body is declared
/// short and came with it (any other is read from the connection as the handler asks for it,
/// by `Exchange::body`).
pub fn read_head(buf: &mut BytesMut) -> Head {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut parsed, buf, &mut fields) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Complete(_)) => return Head::Malformed(too_large(buf)),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Head::Malformed(too_large(buf)),
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(httparse::Error::TooManyHeaders) => return Head::Malformed(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        Err(httparse::Error::Version) => return Head::Malformed(StatusCode::HTTP_VERSION_NOT_SUPPORTED),
        Err(_) => return Head::Malformed(StatusCode::BAD_REQUEST),
    };
    let (Some(method), Some(path), Some(minor)) = (parsed.method, parsed.path, parsed.version) else {
        return Head::Malformed(StatusCode::BAD_REQUEST);
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return Head::Malformed(StatusCode::BAD_REQUEST) };
    let version = if minor == 1 { Version::HTTP_11 } else { Version::HTTP_10 };
    let start = buf.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - start;
    let path = (offset(path.as_bytes()), path.len());
    let mut spans: SmallVec<[(usize, usize, usize, usize); 24]> = SmallVec::with_capacity(parsed.headers.len());
    let (mut close, mut keep_alive, mut trailers, mut expect_continue, mut upgrade) =
        (false, false, false, false, false);
    let mut codings: SmallVec<[&[u8]; 1]> = SmallVec::new();
    let mut lengths: SmallVec<[&[u8]; 1]> = SmallVec::new();
    for field in parsed.headers.iter() {
        let name = field.name.as_bytes();
        let special = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if special("content-length") {
            lengths.push(field.value);
        } else if special("transfer-encoding") {
            codings.push(field.value);
        } else if special("connection") {
            close |= has_token(field.value, b"close");
            keep_alive |= has_token(field.value, b"keep-alive");
        } else if special("te") {
            trailers |= has_token(field.value, b"trailers");
        } else if special("expect") {
            expect_continue |= has_token(field.value, b"100-continue");
        } else if special("upgrade") {
            upgrade = true;
        }
        // An empty value need not point into the buffer: it is an empty span anywhere.
        let value = if field.value.is_empty() { 0 } else { offset(field.value) };
        spans.push((offset(name), name.len(), value, field.value.len()));
    }
    let body = match framing::request(version, codings, lengths) {
        Ok(body) => body,
        Err(FramingError::UnknownCoding) => return Head::Malformed(StatusCode::NOT_IMPLEMENTED),
        Err(_) => return Head::Malformed(StatusCode::BAD_REQUEST),
    };
    // An HTTP/1.0 client cannot be told to go on, nor switch protocols (RFC 9110 §10.1.1, RFC
    // 9112 §9.9 for `Upgrade`: hyper ignores both from HTTP/1.0 too).
    let http11 = version == Version::HTTP_11;
    let expect_continue = expect_continue && http11;
    let upgrade = upgrade && http11;
    // A short body that came with its head is taken with it; any other is read as it comes,
    // under the handler's patience (a body that stalls is the handler's to answer).
    let whole = match body {
        Framing::Length(n) if n <= MAX_WHOLE_BODY as u64 && buf.len() - len >= n as usize => n as usize,
        _ => 0,
    };
    let exchange = Exchange {
        version,
        // A CONNECT's answer may make a tunnel of the connection at the client's end: none is
        // made here, so nothing after it is read as a request.
        keep_alive: !close && (http11 || keep_alive) && method != Method::CONNECT,
        head: method == Method::HEAD,
        trailers,
        body: if whole > 0 { Framing::Empty } else { body },
        expect_continue: expect_continue && whole == 0,
        upgrade,
    };
    let head = buf.split_to(len).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(path.0..path.0 + path.1)) else {
        return Head::Malformed(StatusCode::BAD_REQUEST);
    };
    let Ok(fields) = field_list(head, &spans) else { return Head::Malformed(StatusCode::BAD_REQUEST) };
    let body = (whole > 0).then(|| buf.split_to(whole).freeze());
    let mut request = if upgrade {
        // Whoever passes an upgrade on reads the request's map.
        let mut request = Request::new(RequestBody::Whole(body, None));
        fields.append_to(request.headers_mut());
        request
    } else {
        Request::new(RequestBody::Whole(body, Some(fields)))
    };
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    Head::Request(request, exchange)
}

/// The answer to a head longer than [`MAX_HEAD`]: its request line alone is too long (414), or
/// its fields are (431).
fn too_large(buf: &[u8]) -> StatusCode {
    if buf[..MAX_HEAD.min(buf.len())].contains(&b'\n') {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    } else {
        StatusCode::URI_TOO_LONG
    }
}

/// The header fields at `spans` of `head`, as a list sharing its bytes; an error when one is not
/// a field name. httparse checked each value by
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
