//! How a message's body is delimited (RFC 9112 §6.3), for a request and for a response, and the
//! one reading of `Content-Length`.

use http::{StatusCode, Version};

/// The most header fields a head or a trailer section may have (hyper's limit).
pub(crate) const MAX_HEADERS: usize = 100;
/// The longest head or trailer section read; a longer one is refused.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size line, extensions included.
pub(crate) const MAX_CHUNK_LINE: usize = 4096;

/// How a message's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body: a request without framing fields, the answer to a HEAD, a 204, a 304.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the sender closes the connection (responses only).
    UntilClose,
}

/// Why a message's framing cannot be believed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// A `Content-Length` item that is not one decimal number.
    Length(String),
    /// Two different `Content-Length` values.
    TwoLengths,
    /// `chunked` named more than once.
    ChunkedTwice,
    /// A request with both `Content-Length` and `Transfer-Encoding`.
    LengthAndCoding,
    /// A request whose last transfer coding is not `chunked`, or that has one from HTTP/1.0.
    NotChunked,
    /// A request with a transfer coding other than `chunked`, which is not decoded here.
    UnknownCoding,
}

impl std::fmt::Display for FramingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FramingError::Length(item) => write!(f, "Content-Length {item:?}"),
            FramingError::TwoLengths => f.write_str("two different Content-Length values"),
            FramingError::ChunkedTwice => f.write_str("chunked twice"),
            FramingError::LengthAndCoding => f.write_str("both Content-Length and Transfer-Encoding"),
            FramingError::NotChunked => f.write_str("a transfer coding that does not end with chunked"),
            FramingError::UnknownCoding => f.write_str("a transfer coding other than chunked"),
        }
    }
}

impl std::error::Error for FramingError {}

/// The `Content-Length` of a message from all its values: every value (and every item of a
/// list) one and the same decimal number. `None` when there is none.
pub(crate) fn content_length<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Option<u64>, FramingError> {
    let mut length = None;
    for value in values {
        for item in value.split(|&b| b == b',') {
            let item = item.trim_ascii();
            let n = (!item.is_empty() && item.len() <= 19 && item.iter().all(u8::is_ascii_digit))
                .then(|| item.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
                .ok_or_else(|| FramingError::Length(String::from_utf8_lossy(item).into_owned()))?;
            if length.is_some_and(|l| l != n) {
                return Err(FramingError::TwoLengths);
            }
            length = Some(n);
        }
    }
    Ok(length)
}

/// How a request's body is delimited, from its version and the values of its
/// `Transfer-Encoding` and `Content-Length` fields. Stricter than for a response, as a request
/// read wrongly is a request smuggled past the bounds: both fields, a coding from HTTP/1.0, a
/// last coding other than `chunked`, and any coding but `chunked` are refused (RFC 9112 §6.1,
/// §6.3), as nginx refuses them.
pub(crate) fn request<'a>(
    version: Version,
    codings: impl IntoIterator<Item = &'a [u8]>,
    lengths: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Framing, FramingError> {
    let mut codings = codings.into_iter().flat_map(items).peekable();
    let mut lengths = lengths.into_iter().peekable();
    if codings.peek().is_some() {
        if lengths.peek().is_some() {
            return Err(FramingError::LengthAndCoding);
        }
        if version != Version::HTTP_11 {
            return Err(FramingError::NotChunked);
        }
        let mut chunked = 0;
        let mut last_chunked = false;
        for coding in codings {
            last_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if !last_chunked {
                return Err(if chunked > 0 { FramingError::NotChunked } else { FramingError::UnknownCoding });
            }
            chunked += 1;
        }
        return match chunked {
            1 if last_chunked => Ok(Framing::Chunked),
            _ => Err(FramingError::ChunkedTwice),
        };
    }
    // A list in one field ("5, 5") is refused too, as hyper and nginx refuse it: two fields
    // with one value each are the same length said twice.
    let lengths: smallvec::SmallVec<[&[u8]; 1]> = lengths.collect();
    if let Some(list) = lengths.iter().find(|v| v.contains(&b',')) {
        return Err(FramingError::Length(String::from_utf8_lossy(list).into_owned()));
    }
    Ok(match content_length(lengths)? {
        Some(0) | None => Framing::Empty,
        Some(n) => Framing::Length(n),
    })
}

/// How a final response's body is delimited, and whether the connection outlives it (RFC 9112
/// §6.3 and §9.3), from the request's method (`head_request`), the response's status and version,
/// whether a `Connection` field said `close`, and the values of its `Transfer-Encoding` and
/// `Content-Length` fields.
pub(crate) fn response<'a>(
    head_request: bool,
    status: StatusCode,
    version: Version,
    close: bool,
    codings: impl IntoIterator<Item = &'a [u8]>,
    lengths: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(Framing, bool), FramingError> {
    let mut keep_alive = version == Version::HTTP_11 && !close;
    if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((Framing::Empty, keep_alive));
    }
    let codings: smallvec::SmallVec<[&[u8]; 2]> = codings.into_iter().flat_map(items).collect();
    let mut lengths = lengths.into_iter().peekable();
    if !codings.is_empty() {
        let chunked = |c: &[u8]| c.eq_ignore_ascii_case(b"chunked");
        if codings.iter().filter(|c| chunked(c)).count() > 1 {
            return Err(FramingError::ChunkedTwice);
        }
        // A message with both lengths, or a transfer coding from HTTP/1.0, may have been framed
        // otherwise by whoever sent it: read this one, then close the connection.
        if version != Version::HTTP_11 || lengths.peek().is_some() {
            keep_alive = false;
        }
        return Ok(match codings.last() {
            Some(last) if chunked(last) && version == Version::HTTP_11 => (Framing::Chunked, keep_alive),
            _ => (Framing::UntilClose, false),
        });
    }
    match content_length(lengths)? {
        Some(length) => Ok((Framing::Length(length), keep_alive)),
        None => Ok((Framing::UntilClose, false)),
    }
}

/// The comma-separated items of one value, trimmed, empty ones left out.
pub(crate) fn items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty())
}

/// Whether a comma-separated field value holds `token`, in any case.
pub(crate) fn has_token(value: &[u8], token: &[u8]) -> bool {
    items(value).any(|t| t.eq_ignore_ascii_case(token))
}

/// A byte no field value or chunk extension may hold (`HeaderValue`'s rule: anything below a
/// space but a tab, and DEL).
pub(crate) fn control(&b: &u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: Version, te: &[&str], cl: &[&str]) -> Result<Framing, FramingError> {
        request(version, te.iter().map(|v| v.as_bytes()), cl.iter().map(|v| v.as_bytes()))
    }

    #[test]
    fn a_length_is_one_decimal_number_however_often_it_is_said() {
        let len = |values: &[&str]| content_length(values.iter().map(|v| v.as_bytes()));
        assert_eq!(len(&[]), Ok(None));
        assert_eq!(len(&["42"]), Ok(Some(42)));
        assert_eq!(len(&["42", "42"]), Ok(Some(42)));
        assert_eq!(len(&["42, 42"]), Ok(Some(42)));
        assert_eq!(len(&["007"]), Ok(Some(7)));
        assert_eq!(len(&["42", "43"]), Err(FramingError::TwoLengths));
        for bad in ["", "+1", "-1", "1 2", "0x10", "1.0", "99999999999999999999", " ,", "1,"] {
            assert!(matches!(len(&[bad]), Err(FramingError::Length(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_request_is_chunked_only_when_that_is_beyond_doubt() {
        let v11 = Version::HTTP_11;
        assert_eq!(req(v11, &[], &[]), Ok(Framing::Empty));
        assert_eq!(req(v11, &[], &["0"]), Ok(Framing::Empty));
        assert_eq!(req(v11, &[], &["5"]), Ok(Framing::Length(5)));
        assert_eq!(req(v11, &[], &["5", "5"]), Ok(Framing::Length(5)));
        assert!(matches!(req(v11, &[], &["5, 5"]), Err(FramingError::Length(_))), "a list in a request");
        assert_eq!(req(v11, &["chunked"], &[]), Ok(Framing::Chunked));
        assert_eq!(req(v11, &["Chunked"], &[]), Ok(Framing::Chunked));
        assert_eq!(req(v11, &["chunked"], &["5"]), Err(FramingError::LengthAndCoding));
        assert_eq!(req(Version::HTTP_10, &["chunked"], &[]), Err(FramingError::NotChunked));
        assert_eq!(req(v11, &["chunked, identity"], &[]), Err(FramingError::NotChunked));
        assert_eq!(req(v11, &["gzip, chunked"], &[]), Err(FramingError::UnknownCoding));
        assert_eq!(req(v11, &["chunked", "chunked"], &[]), Err(FramingError::ChunkedTwice));
        assert_eq!(req(v11, &["chunked, chunked"], &[]), Err(FramingError::ChunkedTwice));
        assert_eq!(req(v11, &["identity"], &[]), Err(FramingError::UnknownCoding));
    }

    #[test]
    fn a_response_falls_back_to_the_close_and_never_keeps_a_doubtful_connection() {
        let res = |version, te: &[&str], cl: &[&str]| {
            response(
                false,
                StatusCode::OK,
                version,
                false,
                te.iter().map(|v| v.as_bytes()),
                cl.iter().map(|v| v.as_bytes()),
            )
        };
        let v11 = Version::HTTP_11;
        assert_eq!(res(v11, &[], &["3"]), Ok((Framing::Length(3), true)));
        assert_eq!(res(v11, &["chunked"], &[]), Ok((Framing::Chunked, true)));
        assert_eq!(res(v11, &["chunked"], &["3"]), Ok((Framing::Chunked, false)));
        assert_eq!(res(v11, &["gzip"], &[]), Ok((Framing::UntilClose, false)));
        assert_eq!(res(Version::HTTP_10, &["chunked"], &[]), Ok((Framing::UntilClose, false)));
        assert_eq!(res(v11, &[], &[]), Ok((Framing::UntilClose, false)));
        assert_eq!(res(v11, &["chunked, chunked"], &[]), Err(FramingError::ChunkedTwice));
        let head = response(true, StatusCode::OK, v11, true, [], [&b"9"[..]]);
        assert_eq!(head, Ok((Framing::Empty, false)));
    }
}
