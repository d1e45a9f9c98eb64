//! A request's method, path and query as `serve` reads them from its own request line and as
//! `decide` reads them from what a gateway describes. The two must agree: a request that a
//! gateway asks about has to match the operation, and so the bounds, it would match if it came
//! to `serve` directly, or a client could step past a bound by how it spells the request. Public
//! so the `request_reading` fuzz target can hold them equal.

use http::{Method, Uri};

use crate::router::canonical::{EscapedSlashes, canonical_path};

/// What a request is judged by: the method in upper case, the canonical path, the query as sent.
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
pub fn served(method: &Method, target: &Uri, escaped_slashes: EscapedSlashes) -> Result<Read, String> {
    http_scheme(target)?;
    let path = canonical_path(target.path(), escaped_slashes).map_err(|e| e.to_string())?;
    let method = super::rewrite::canonical_method(method).unwrap_or_else(|| method.clone());
    Ok(Read { method: method.as_str().to_owned(), path: path.into_owned(), query: target.query().map(str::to_owned) })
}

/// A target in absolute form must name `http` or `https`, as `decide` requires: `ftp://h/a`, or
/// `://h/a` with no scheme at all, is not a request for this API, and the two refuse the same
/// targets (the `http` crate reads either as the path `/a` of a scheme it keeps as given).
pub(crate) fn http_scheme(target: &Uri) -> Result<(), String> {
    match target.scheme_str() {
        None | Some("http" | "https") => Ok(()),
        Some(other) => Err(format!("the request target names the scheme {other:?}, not http or https")),
    }
}

/// `decide`: the bytes of the headers that carry the original method and target, read as
/// `Decider::handle` reads them (`method_text`, `escape_raw` of the target, `read_request`).
pub fn described(method: &[u8], target: &[u8], escaped_slashes: EscapedSlashes) -> Result<Read, String> {
    let method = super::decide::method_text(method).map_err(|e| e.to_string())?;
    let target = super::decide::escape_raw(target);
    let (method, path, query) = super::decide::read_request(method, &target, escaped_slashes)?;
    Ok(Read { method: method.into_owned(), path: path.into_owned(), query: query.map(str::to_owned) })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(served.as_ref().is_err_and(|e| e.contains("scheme")), "{target}: {served:?}");
            assert!(described(b"GET", target.as_bytes(), keep).is_err(), "{target}");
        }
    }
}
