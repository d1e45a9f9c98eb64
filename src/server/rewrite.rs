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

/// Whether `name` is one of [`HOP_BY_HOP`]: by its spelling, one comparison of lengths and bytes
/// instead of seven of names.
pub(super) fn is_hop_by_hop(name: &HeaderName) -> bool {
    let is = matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "transfer-encoding"
    );
    debug_assert_eq!(is, HOP_BY_HOP.contains(name));
    is
}

/// Removes hop-by-hop headers (and those the `Connection` header names). For an upgrade, the
/// `Upgrade` header and `Connection: upgrade` are kept.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: Option<&str>) {
    // The names present, found in one look at each: a message carries one hop-by-hop field or
    // none (an upstream's `Connection: keep-alive`), and hashing all eight names to remove them
    // cost more than the rest of a response head's handling.
    let mut found: SmallVec<[HeaderName; 4]> = SmallVec::new();
    for name in headers.keys() {
        if is_hop_by_hop(name) || (*name == header::UPGRADE && keep_upgrade.is_none()) {
            found.push(name.clone());
        }
    }
    if found.contains(&header::CONNECTION) {
        let tokens = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|t| !t.is_empty() && (keep_upgrade.is_none() || !t.eq_ignore_ascii_case("upgrade")));
        let mut named: SmallVec<[HeaderName; 2]> = SmallVec::new();
        for token in tokens {
            // Names are lower case: a token names a field when it matches one in any case. One
            // that is hop-by-hop anyway (the usual `keep-alive`) is already found.
            if let Some(name) = headers.keys().find(|name| name.as_str().eq_ignore_ascii_case(token))
                && !is_hop_by_hop(name)
            {
                named.push(name.clone());
            }
        }
        found.extend(named);
    }
    for name in &found {
        headers.remove(name);
    }
    if keep_upgrade.is_some() {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
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
    // The address is written on the stack; the value is then one allocation, of its exact size.
    let mut address = [0u8; 64];
    let written = write_address(super::address::canonical(peer.ip()), &mut address);
    let address = &address[..written];
    // Each name looked up once: an entry both tells whether it is there and sets it.
    match headers.entry(X_FORWARDED_FOR) {
        header::Entry::Occupied(mut previous) => {
            let mut value = Vec::with_capacity(64);
            for earlier in previous.iter().filter_map(|v| v.to_str().ok()) {
                value.extend_from_slice(earlier.as_bytes());
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(address);
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                previous.insert(v);
            }
        }
        header::Entry::Vacant(fresh) => {
            if let Ok(v) = HeaderValue::from_bytes(address) {
                fresh.insert(v);
            }
        }
    }
    let proto = HeaderValue::from_static("http");
    if peer_trusted {
        headers.entry(X_FORWARDED_PROTO).or_insert(proto);
    } else {
        headers.insert(X_FORWARDED_PROTO, proto);
    }
    if let Some(h) = host {
        if peer_trusted {
            headers.entry(X_FORWARDED_HOST).or_insert(h);
        } else {
            headers.insert(X_FORWARDED_HOST, h);
        }
    }
}

/// Writes `ip` as text into `out` (room for any address): how many bytes. An IPv4 address, the
/// usual, without the formatting machinery.
fn write_address(ip: std::net::IpAddr, out: &mut [u8; 64]) -> usize {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut at = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out[at] = b'.';
                    at += 1;
                }
                let mut buffer = itoa::Buffer::new();
                let digits = buffer.format(octet).as_bytes();
                out[at..at + digits.len()].copy_from_slice(digits);
                at += digits.len();
            }
            at
        }
        std::net::IpAddr::V6(_) => {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut out[..]);
            let _ = write!(cursor, "{ip}");
            cursor.position() as usize
        }
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
    fn addresses_are_written_as_they_display() {
        for ip in ["0.0.0.0", "192.0.2.7", "10.200.3.45", "255.255.255.255", "2001:db8::1", "::1"] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            let mut out = [0u8; 64];
            let n = write_address(ip, &mut out);
            assert_eq!(std::str::from_utf8(&out[..n]).unwrap(), ip.to_string());
        }
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
