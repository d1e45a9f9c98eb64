//! Headers on the way through the proxy: methods upper-cased, hop-by-hop headers stripped (an
//! upgrade's kept), and `X-Forwarded-*` set.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// The upper-case spelling of a method that is not already upper case (`get` → `GET`).
pub(super) fn canonical_method(method: &http::Method) -> Option<http::Method> {
    let m = method.as_str();
    if !m.bytes().any(|b| b.is_ascii_lowercase()) {
        return None;
    }
    http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok()
}

pub(super) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Names, not strings: a string is parsed into a name on every lookup.
/// `Trailer` is not among them (RFC 9110 §6.6.2 makes it end to end): hyper sends a chunked
/// response's trailer fields only when the header declares them, so a response keeps it. A
/// request loses it (`Proxy::forward`): its trailers could carry what its header section may not.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers (and those the `Connection` header names). For an upgrade, the
/// `Upgrade` header and `Connection: upgrade` are kept.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: Option<&str>) {
    if headers.contains_key(header::CONNECTION) {
        // The values are cloned (a reference count; they share the head's bytes) so that the
        // fields they name can be removed by name, parsed on the stack: no allocation.
        let named: SmallVec<[HeaderValue; 2]> = headers.get_all(header::CONNECTION).iter().cloned().collect();
        for token in named.iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim) {
            if !token.is_empty() && (keep_upgrade.is_none() || !token.eq_ignore_ascii_case("upgrade")) {
                headers.remove(token);
            }
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    match keep_upgrade {
        Some(_) => {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
        None => {
            headers.remove(header::UPGRADE);
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Appends the peer to `X-Forwarded-For`; sets `X-Forwarded-Proto` and `-Host` unless a trusted
/// proxy already did.
pub(super) fn forwarded_headers(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    host: Option<HeaderValue>,
    peer_trusted: bool,
) {
    use std::io::Write;
    // The address is written on the stack; the value is then one allocation, of its exact size.
    let mut address = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut address[..]);
    let _ = write!(cursor, "{}", super::address::canonical(peer.ip()));
    let written = cursor.position() as usize;
    let address = &address[..written];
    let value = if headers.contains_key(&X_FORWARDED_FOR) {
        let mut value = Vec::with_capacity(64);
        for previous in headers.get_all(&X_FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()) {
            value.extend_from_slice(previous.as_bytes());
            value.extend_from_slice(b", ");
        }
        value.extend_from_slice(address);
        HeaderValue::from_bytes(&value)
    } else {
        HeaderValue::from_bytes(address)
    };
    if let Ok(v) = value {
        headers.insert(X_FORWARDED_FOR, v);
    }
    if !peer_trusted || !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
    let fwd_host = X_FORWARDED_HOST;
    if (!peer_trusted || !headers.contains_key(&fwd_host))
        && let Some(h) = host
    {
        headers.insert(fwd_host, h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn names(map: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_removed() {
        let fields = [
            ("connection", "close, X-Internal"),
            ("connection", " upgrade ,, Keep-Alive"),
            ("x-internal", "a"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic x"),
            ("trailer", "X-Sum"),
            ("x-kept", "b"),
        ];
        let mut plain = headers(&fields);
        strip_hop_by_hop(&mut plain, None);
        assert_eq!(names(&plain), ["trailer", "x-kept"]);

        let mut upgrade = headers(&fields);
        strip_hop_by_hop(&mut upgrade, Some("upgrade"));
        assert_eq!(names(&upgrade), ["connection", "trailer", "upgrade", "x-kept"]);
        assert_eq!(upgrade[header::CONNECTION], "upgrade");
        assert_eq!(upgrade[header::UPGRADE], "websocket");
    }

    #[test]
    fn the_peer_is_appended_to_x_forwarded_for() {
        let peer: SocketAddr = "[::ffff:192.0.2.7]:4000".parse().unwrap();
        let mut fresh = HeaderMap::new();
        forwarded_headers(&mut fresh, peer, None, false);
        assert_eq!(fresh[&X_FORWARDED_FOR], "192.0.2.7");

        let mut chained = headers(&[("x-forwarded-for", "203.0.113.1"), ("x-forwarded-for", "198.51.100.2")]);
        let v6: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
        forwarded_headers(&mut chained, v6, None, true);
        assert_eq!(chained[&X_FORWARDED_FOR], "203.0.113.1, 198.51.100.2, 2001:db8::1");
    }
}
