//! Headers on the way through the proxy: methods upper-cased, hop-by-hop headers stripped (an
//! upgrade's kept), and `X-Forwarded-*` set.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

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
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in named {
            if keep_upgrade.is_none() || name != header::UPGRADE {
                headers.remove(name);
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
    use std::fmt::Write;
    let mut value = String::with_capacity(48);
    for previous in headers.get_all(&X_FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()) {
        value.push_str(previous);
        value.push_str(", ");
    }
    let _ = write!(value, "{}", super::address::canonical(peer.ip()));
    if let Ok(v) = HeaderValue::try_from(value) {
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
