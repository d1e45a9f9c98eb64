//! A request head written for the upstream, from a request's parts or field by field.

use std::io::Write;

use http::header::{self, HeaderName};

use super::head::COPY_BODY;

/// Writes the head of a request for the upstream into `out`: its request line and header fields
/// (as they are, but for its framing), a `Content-Length` when `body` is not empty or the client
/// gave one, and `body` itself when it is small. Returns whether the body is still to be sent.
#[cfg(test)]
pub(crate) fn write_request(parts: &http::request::Parts, body: &[u8], had_length: bool, out: &mut Vec<u8>) -> bool {
    write_request_line(parts, out);
    write_fields(&parts.headers, out);
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

/// Writes the fields of a map but for those of its framing: whether one was `Content-Length`.
pub(crate) fn write_fields(headers: &http::HeaderMap, out: &mut Vec<u8>) -> bool {
    let mut had_length = false;
    for (name, value) in headers {
        if is_framing(name) {
            had_length |= name == header::CONTENT_LENGTH;
        } else {
            write_field(name, value.as_bytes(), out);
        }
    }
    had_length
}

/// Ends the head of a request whose body is streamed: its `Content-Length` when its `length` is
/// known, else `Transfer-Encoding: chunked`. Returns whether the body is sent as chunks.
pub(crate) fn end_streamed(length: Option<u64>, out: &mut Vec<u8>) -> bool {
    match length {
        Some(n) => {
            let _ = write!(out, "content-length: {n}\r\n\r\n");
            false
        }
        None => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            true
        }
    }
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
