//! A request's method, path and query as `serve` reads them from its own request line and as
//! `decide` reads them from what a gateway describes. The two must agree: a request that a
//! gateway asks about has to match the operation, and so the bounds, it would match if it came
//! to `serve` directly, or a client could step past a bound by how it spells the request. Public
//! (feature `fuzzing`) so the `request_reading` fuzz target can hold them equal.

use std::borrow::Cow;

use http::Uri;

use crate::router::canonical::{EscapedSlashes, canonical_path};

/// What a request is judged by: the method in upper case, the canonical path, the query as sent.
#[cfg(any(test, feature = "fuzzing"))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The method, upper case.
    pub method: String,
    /// The path, canonical.
    pub path: String,
    /// The query, as sent.
    pub query: Option<String>,
}

/// `serve`: a request line's method and target, read with the calls `Proxy::respond` makes
/// (`canonical_path` of the target's path, `canonical_method`, the target's query).
#[cfg(any(test, feature = "fuzzing"))]
pub fn served(method: &http::Method, target: &Uri, escaped_slashes: EscapedSlashes) -> Result<Read, Unreadable> {
    http_scheme(target)?;
    let path = canonical_path(target.path(), escaped_slashes)?;
    let method = canonical_method(method).unwrap_or_else(|| method.clone());
    Ok(Read { method: method.as_str().to_owned(), path: path.into_owned(), query: target.query().map(str::to_owned) })
}

/// A target in absolute form must name `http` or `https`, as `decide` requires: `ftp://h/a`, or
/// `://h/a` with no scheme at all, is not a request for this API, and the two refuse the same
/// targets (the `http` crate reads either as the path `/a` of a scheme it keeps as given).
pub(crate) fn http_scheme(target: &Uri) -> Result<(), Unreadable> {
    match target.scheme_str() {
        None | Some("http" | "https") => Ok(()),
        Some(other) => Err(Unreadable::Scheme(other.to_string())),
    }
}

/// `decide`: the bytes of the headers that carry the original method and target, read as
/// `Decider::handle` reads them (`method_text`, `escape_raw` of the target, `read_request`).
#[cfg(any(test, feature = "fuzzing"))]
pub fn described(method: &[u8], target: &[u8], escaped_slashes: EscapedSlashes) -> Result<Read, Unreadable> {
    let method = method_text(method)?;
    let target = escape_raw(target);
    let (method, path, query) = read_request(method, &target, escaped_slashes)?;
    Ok(Read { method: method.into_owned(), path: path.into_owned(), query: query.map(str::to_owned) })
}

/// The upper-case spelling of a method that is not already upper case (`get` → `GET`).
pub(crate) fn canonical_method(method: &http::Method) -> Option<http::Method> {
    let m = method.as_str();
    if !m.bytes().any(|b| b.is_ascii_lowercase()) {
        return None;
    }
    http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok()
}

/// Why a request's method and target cannot be read, by `serve` from its request line or by
/// `decide` from what a gateway describes. It is refused, never replaced by something else: a
/// target read from the wrong place matches the wrong bounds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// The peer is not a trusted proxy, so nothing it says about the request is believed.
    #[error("the decision request did not come from a --trusted-proxy")]
    Untrusted,
    /// The gateway did not send the header that carries the method or the target.
    #[error("the gateway sent no {0} header")]
    Missing(&'static str),
    /// The gateway sent the header more than once.
    #[error("the {0} header came more than once")]
    Repeated(&'static str),
    /// The target is neither a path nor an `http(s)` URL.
    #[error("the original target {0:?} is neither a path nor an http(s) URL")]
    Target(String),
    /// The method is not a token.
    #[error("the original method {0:?} is not an HTTP method")]
    Method(String),
    /// An absolute-form target names a scheme other than `http` or `https`.
    #[error("the request target names the scheme {0:?}, not http or https")]
    Scheme(String),
    /// The path cannot be made canonical.
    #[error(transparent)]
    Path(#[from] crate::router::canonical::PathError),
}

/// A request read from a method and target: the method (upper case), the canonical path, the query.
pub(crate) type ReadParts<'m, 't> = (Cow<'m, str>, Cow<'t, str>, Option<&'t str>);

/// A method and target a gateway describes, read as `serve` reads its own request line: the
/// method a token, upper-cased; the target split into path and query, the path canonical.
/// `Err` says why it cannot be read.
pub(crate) fn read_request<'m, 't>(
    method: &'m str,
    target: &'t str,
    escaped_slashes: EscapedSlashes,
) -> Result<ReadParts<'m, 't>, Unreadable> {
    if method.is_empty() || !method.bytes().all(is_token_char) {
        return Err(Unreadable::Method(method.to_string()));
    }
    let (raw_path, query) = split_target(target).ok_or_else(|| Unreadable::Target(target.to_string()))?;
    let path = canonical_path(raw_path, escaped_slashes)?;
    // Gateways send methods as clients spelled them: nearly always upper case already.
    let method = if method.bytes().any(|b| b.is_ascii_lowercase()) {
        Cow::Owned(method.to_ascii_uppercase())
    } else {
        Cow::Borrowed(method)
    };
    Ok((method, path, query))
}

/// A method header's bytes as text: a token, or unreadable. Never percent-encoded as a target
/// is: `%` is a token character, so `G T` would become the method `G%20T`, where a server
/// reading the request line refuses it.
pub(crate) fn method_text(bytes: &[u8]) -> Result<&str, Unreadable> {
    match std::str::from_utf8(bytes) {
        Ok(method) if !method.is_empty() && method.bytes().all(is_token_char) => Ok(method),
        _ => Err(Unreadable::Method(escape_raw(bytes).into_owned())),
    }
}

/// A target's bytes as text: those that are not printable ASCII (a client's `é`, sent raw)
/// percent-encoded, as a server reading the request line would. Borrowed when there are none.
pub(crate) fn escape_raw(bytes: &[u8]) -> Cow<'_, str> {
    if bytes.iter().all(u8::is_ascii_graphic) {
        // Printable ASCII is UTF-8.
        if let Ok(text) = std::str::from_utf8(bytes) {
            return Cow::Borrowed(text);
        }
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut text = String::with_capacity(bytes.len() + 16);
    for &b in bytes {
        if b.is_ascii_graphic() {
            text.push(char::from(b));
        } else {
            text.push('%');
            text.push(char::from(HEX[usize::from(b >> 4)]));
            text.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    Cow::Owned(text)
}

/// RFC 9110 `tchar`.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Splits a request target into path and query: origin form (`/a?q`), or absolute form
/// (`http://host/a?q`, which a client may send and nginx passes on in `$request_uri`). Anything
/// else cannot be read. `://` later in the target is just text: `/a?r=http://x/y` is `/a`.
pub(crate) fn split_target(target: &str) -> Option<(&str, Option<&str>)> {
    let target = target.split('#').next().unwrap_or(target);
    let path_and_query = if target.starts_with('/') {
        target
    } else {
        let (scheme, rest) = target.split_once("://")?;
        if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
            return None;
        }
        match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
            Some(i) => return Some(("/", Some(&rest[i + 1..]))),
            None => "/",
        }
    };
    Some(match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn read(method: &str, path: &str, query: Option<&str>) -> Read {
        Read { method: method.into(), path: path.into(), query: query.map(Into::into) }
    }

    #[test]
    fn serve_and_decide_read_a_request_alike() {
        let keep = EscapedSlashes::Keep;
        for (method, target) in [
            ("GET", "/a/./b/../c//d?x=1"),
            ("get", "/%61pi/limited/"),
            ("POST", "http://h:8080/a%2fb?q"),
            ("PATCH", "/caf%c3%a9?x=%41"),
        ] {
            let uri: Uri = target.parse().unwrap();
            let served = served(&Method::from_bytes(method.as_bytes()).unwrap(), &uri, keep).unwrap();
            assert_eq!(described(method.as_bytes(), target.as_bytes(), keep), Ok(served), "{method} {target}");
        }
        assert_eq!(described(b"get", b"/%61pi/x/../y?z", keep), Ok(read("GET", "/api/y", Some("z"))));
        // Raw bytes a gateway passes on are read as a server reading the request line would.
        assert_eq!(described(b"GET", "/caf\u{e9}".as_bytes(), keep), Ok(read("GET", "/caf%C3%A9", None)));
        assert!(described(b"G T", b"/", keep).is_err());
        assert!(described(b"GET", b"a/b", keep).is_err());
    }

    #[test]
    fn serve_and_decide_refuse_the_same_absolute_forms() {
        let keep = EscapedSlashes::Keep;
        let get = Method::GET;
        for target in ["HTTP://h/a", "https://h/a?q", "http://h"] {
            let uri: Uri = target.parse().unwrap();
            let served = served(&get, &uri, keep);
            assert!(served.is_ok(), "{target}: {served:?}");
            assert_eq!(described(b"GET", target.as_bytes(), keep), served, "{target}");
        }
        for target in ["://h/a", "ftp://h/a", "ws://h/a"] {
            // The `http` crate reads each of these as the path /a.
            let uri: Uri = target.parse().unwrap();
            assert_eq!(uri.path(), "/a", "{target}");
            let served = served(&get, &uri, keep);
            assert!(matches!(served, Err(Unreadable::Scheme(_))), "{target}: {served:?}");
            assert!(described(b"GET", target.as_bytes(), keep).is_err(), "{target}");
        }
    }
}
