//! A request head taken out of a connection's buffer, with its body when it came whole.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Uri, Version};
use smallvec::SmallVec;

use crate::server::facts::fields::Fields;
use crate::server::net::request_body::RequestBody;
use crate::server::wire::has_token;

/// The most header fields a request head may have here (hyper's limit; it answers more with 431).
pub(super) const MAX_HEADERS: usize = 100;
/// The longest body read whole with its head; a longer one is streamed by hyper.
pub(crate) const MAX_WHOLE_BODY: usize = 16 * 1024;
/// The longest head looked for here: a longer one is hyper's (which allows about 400 KiB).
const MAX_HEAD: usize = 16 * 1024;
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
            match (length, crate::server::wire::content_length([field.value])) {
                (None, Ok(Some(n))) if n <= MAX_WHOLE_BODY as u64 => length = Some(n as usize),
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
