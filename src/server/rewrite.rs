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

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// Removes hop-by-hop headers (and those the `Connection` header names). For an upgrade, the
/// `Upgrade` header and `Connection: upgrade` are kept.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: Option<&str>) {
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
    for name in HOP_BY_HOP {
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

/// Appends the peer to `X-Forwarded-For`; sets `X-Forwarded-Proto` and `-Host` unless a trusted
/// proxy already did.
pub(super) fn forwarded_headers(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    host: Option<HeaderValue>,
    peer_trusted: bool,
) {
    let peer_ip = super::address::canonical(peer.ip()).to_string();
    let xff = HeaderName::from_static("x-forwarded-for");
    let previous: Vec<String> =
        headers.get_all(&xff).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect();
    let value = if previous.is_empty() { peer_ip } else { format!("{}, {peer_ip}", previous.join(", ")) };
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(xff, v);
    }
    let proto = HeaderName::from_static("x-forwarded-proto");
    if !peer_trusted || !headers.contains_key(&proto) {
        headers.insert(proto, HeaderValue::from_static("http"));
    }
    let fwd_host = HeaderName::from_static("x-forwarded-host");
    if (!peer_trusted || !headers.contains_key(&fwd_host))
        && let Some(h) = host
    {
        headers.insert(fwd_host, h);
    }
}
