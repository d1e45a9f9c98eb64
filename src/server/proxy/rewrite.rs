//! Headers on the way through the proxy: methods upper-cased, hop-by-hop headers stripped (an
//! allowed upgrade's kept), and `X-Forwarded-*` set.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::server::facts::fields::{Fields, Headers, is_hop_by_hop};
use crate::server::facts::identity::IdentityHeaders;

/// Whether a request asks to switch protocols: an `Upgrade` field, and `Connection: upgrade`.
fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The protocols a client may switch to through the proxy (`--allow-upgrade`; `websocket` unless
/// told). `h2c` is never among them: requests inside an h2c tunnel would reach the upstream
/// unjudged, and a client that wants HTTP/2 speaks it to opbound directly (RFC 9113 deprecated
/// the upgrade; Envoy drops it unless told otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Upgrades(Arc<[String]>);

impl Default for Upgrades {
    fn default() -> Upgrades {
        Upgrades(Arc::new(["websocket".to_string()]))
    }
}

impl Upgrades {
    /// These protocols (names as in `Upgrade`, without a version); none for no switch at all.
    pub(crate) fn new(protocols: Vec<String>) -> Result<Upgrades, String> {
        for p in &protocols {
            if p.eq_ignore_ascii_case("h2c") {
                return Err("h2c cannot be allowed: requests inside an h2c tunnel would reach the upstream without \
                            being judged; clients that want HTTP/2 speak it to opbound directly"
                    .to_string());
            }
            let token =
                !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(format!("{p:?} is not a protocol name, like websocket"));
            }
        }
        Ok(Upgrades(protocols.into()))
    }

    /// The `Upgrade` field to forward for a request: the protocols it asks for that are allowed,
    /// in its order (`h2c` never). `None` when it asks for no switch, or for none allowed: it is
    /// then forwarded as an ordinary request, its `Upgrade` stripped.
    pub(crate) fn asked(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        if self.0.is_empty() || !wants_upgrade(headers) {
            return None;
        }
        let mut kept = String::new();
        let offered = headers.get_all(header::UPGRADE).iter().filter_map(|v| v.to_str().ok());
        for protocol in offered.flat_map(|v| v.split(',')).map(str::trim) {
            let name = protocol.split('/').next().unwrap_or("").trim();
            if name.is_empty()
                || name.eq_ignore_ascii_case("h2c")
                || !self.0.iter().any(|p| p.eq_ignore_ascii_case(name))
            {
                continue;
            }
            if !kept.is_empty() {
                kept.push_str(", ");
            }
            kept.push_str(protocol);
        }
        if kept.is_empty() { None } else { HeaderValue::from_str(&kept).ok() }
    }
}

/// Removes hop-by-hop headers (and those the `Connection` header names). For an upgrade, the
/// `Upgrade` header and `Connection: upgrade` are kept.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: Option<&str>) {
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
    let written = write_address(crate::server::facts::address::canonical(peer.ip()), &mut address);
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

/// What is done to a request's fields on their way upstream, besides stripping the hop-by-hop
/// ones: see [`Proxy::forward`](crate::server::proxy::Proxy::forward).
pub(super) struct Forwarding<'a> {
    /// The client's peer.
    pub peer: SocketAddr,
    /// Whether the peer is a trusted proxy, whose `X-Forwarded-*` and identity fields stand.
    pub peer_trusted: bool,
    /// Fields a peer that is not trusted may not send upstream: identity headers are an
    /// authenticating proxy's word; from anyone else they are a claim the upstream must not
    /// see (as oauth2-proxy strips them).
    pub identity: &'a IdentityHeaders,
    /// The `Host` the upstream is sent in place of the client's, if any.
    pub host: Option<&'a HeaderValue>,
}

/// Rewrites a request's map for the upstream: hop-by-hop fields stripped ([`strip_hop_by_hop`];
/// for an allowed switch, `Upgrade` set to `switch_to`, [`Upgrades::asked`]), `Trailer` and an
/// untrusted peer's identity fields removed, `X-Forwarded-*` set ([`forwarded_headers`]), and
/// the upstream's `Host`.
pub(super) fn forward_map(headers: &mut HeaderMap, forwarding: &Forwarding<'_>, switch_to: Option<HeaderValue>) {
    let original_host = headers.get(header::HOST).cloned();
    strip_hop_by_hop(headers, switch_to.is_some().then_some("upgrade"));
    if let Some(protocols) = switch_to {
        headers.insert(header::UPGRADE, protocols);
    }
    // Without the declaration hyper sends no request trailer upstream: identity headers are
    // stripped from the header section only, and a trailer must not bring one back.
    headers.remove(header::TRAILER);
    if !forwarding.peer_trusted {
        for name in forwarding.identity.names() {
            headers.remove(name);
        }
    }
    forwarded_headers(headers, forwarding.peer, original_host, forwarding.peer_trusted);
    if let Some(host) = forwarding.host {
        headers.insert(header::HOST, host.clone());
    }
}

/// Writes the fields of a request read as a list into `out`, for the upstream: what
/// [`forward_map`] makes of them in a map (without an upgrade), written as
/// `upstream_h1::write_request` writes a map's (framing fields left out).
/// Kept fields go in the order they came; the set ones follow. Returns whether the client gave
/// a `Content-Length`.
pub(super) fn write_forwarded(fields: &Fields, forwarding: &Forwarding<'_>, out: &mut Vec<u8>) -> bool {
    use crate::server::upstream::h1::{is_framing, write_field};
    let headers = Headers::List(fields);
    // Taken before any field is stripped, as `Proxy::forward` takes it from a map.
    let original_host = headers.get(header::HOST.as_str());
    // The names `Connection` lists: only a list with a hop-by-hop field has one.
    let mut named: SmallVec<[&str; 2]> = SmallVec::new();
    if !fields.plain() {
        let tokens = headers.get_all(header::CONNECTION.as_str()).filter_map(crate::server::facts::fields::text);
        named.extend(tokens.flat_map(|v| v.split(',')).map(str::trim).filter(|t| !t.is_empty()));
    }
    let stripped = |name: &HeaderName| {
        is_hop_by_hop(name)
            || *name == header::UPGRADE
            || *name == header::TRAILER
            || (!forwarding.peer_trusted && forwarding.identity.names().any(|n| n == name))
            || named.iter().any(|t| name.as_str().eq_ignore_ascii_case(t))
    };
    if let Some(host) = forwarding.host {
        write_field(&header::HOST, host.as_bytes(), out);
    }
    let mut had_length = false;
    // The values of the client's `X-Forwarded-For`, which the peer is appended to.
    let mut chain: SmallVec<[&str; 2]> = SmallVec::new();
    let (mut has_proto, mut has_host) = (false, false);
    for (name, value) in fields.iter() {
        if stripped(name) {
            continue;
        }
        if is_framing(name) {
            had_length |= *name == header::CONTENT_LENGTH;
            continue;
        }
        if *name == header::HOST && forwarding.host.is_some() {
            continue;
        }
        if *name == X_FORWARDED_FOR {
            chain.extend(crate::server::facts::fields::text(value));
            continue;
        }
        // A trusted proxy's `X-Forwarded-Proto` and `-Host` stand; anyone else's are replaced
        // (`-Host` only when the client sent a `Host` to replace it with).
        if *name == X_FORWARDED_PROTO {
            if !forwarding.peer_trusted {
                continue;
            }
            has_proto = true;
        }
        if *name == X_FORWARDED_HOST && original_host.is_some() {
            if !forwarding.peer_trusted {
                continue;
            }
            has_host = true;
        }
        write_field(name, value, out);
    }
    let mut address = [0u8; 64];
    let written = write_address(crate::server::facts::address::canonical(forwarding.peer.ip()), &mut address);
    out.extend_from_slice(X_FORWARDED_FOR.as_str().as_bytes());
    out.extend_from_slice(b": ");
    for earlier in chain {
        out.extend_from_slice(earlier.as_bytes());
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(&address[..written]);
    out.extend_from_slice(b"\r\n");
    if !has_proto {
        write_field(&X_FORWARDED_PROTO, b"http", out);
    }
    if let (Some(host), false) = (original_host, has_host) {
        write_field(&X_FORWARDED_HOST, host, out);
    }
    had_length
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
    fn only_allowed_protocols_are_switched_to_and_h2c_never() {
        let websocket = Upgrades::default();
        let asked = |upgrades: &Upgrades, fields: &[(&str, &str)]| {
            upgrades.asked(&headers(fields)).map(|v| v.to_str().unwrap().to_string())
        };
        fn upgrade(protocols: &str) -> [(&str, &str); 2] {
            [("connection", "keep-alive, Upgrade"), ("upgrade", protocols)]
        }
        assert_eq!(asked(&websocket, &upgrade("websocket")), Some("websocket".to_string()));
        assert_eq!(asked(&websocket, &upgrade("WebSocket/13")), Some("WebSocket/13".to_string()));
        assert_eq!(asked(&websocket, &upgrade("h2c")), None, "an h2c upgrade is an ordinary request");
        assert_eq!(asked(&websocket, &upgrade("h2c, websocket")), Some("websocket".to_string()));
        assert_eq!(asked(&websocket, &upgrade("TLS/1.2, IRC")), None);
        assert_eq!(asked(&websocket, &[("upgrade", "websocket")]), None, "no Connection: upgrade, no switch");
        let none = Upgrades::new(Vec::new()).unwrap();
        assert_eq!(asked(&none, &upgrade("websocket")), None);
        let irc = Upgrades::new(vec!["irc".into(), "websocket".into()]).unwrap();
        assert_eq!(asked(&irc, &upgrade("IRC/6.9, h2c, websocket")), Some("IRC/6.9, websocket".to_string()));
        assert!(Upgrades::new(vec!["H2C".into()]).unwrap_err().contains("h2c cannot be allowed"));
        assert!(Upgrades::new(vec!["web socket".into()]).is_err());
    }

    #[test]
    fn an_h2c_upgrade_loses_its_settings_whatever_connection_names() {
        let forwarding = Forwarding {
            peer: "192.0.2.1:4000".parse().unwrap(),
            peer_trusted: false,
            identity: &IdentityHeaders::default(),
            host: None,
        };
        let mut map =
            headers(&[("connection", "Upgrade"), ("upgrade", "h2c"), ("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA")]);
        let switch_to = Upgrades::default().asked(&map);
        forward_map(&mut map, &forwarding, switch_to);
        assert_eq!(names(&map), ["x-forwarded-for", "x-forwarded-proto"]);
        let mut head = Vec::new();
        let list = list(&[("connection", b"Upgrade"), ("upgrade", b"h2c"), ("http2-settings", b"AAMAAABk")]);
        write_forwarded(&list, &forwarding, &mut head);
        let written: Vec<String> = sent(&[b"GET / HTTP/1.1\r\n".as_slice(), &head, b"\r\n"].concat())
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(written, ["x-forwarded-for", "x-forwarded-proto"]);
    }

    /// A request's fields as opbound's reader lists them: each value a span of one head.
    fn list(fields: &[(&str, &[u8])]) -> Fields {
        let mut head = Vec::new();
        let mut spans = Vec::new();
        for &(name, value) in fields {
            spans.push((name, head.len(), value.len()));
            head.extend_from_slice(value);
        }
        let mut list = Fields::new(bytes::Bytes::from(head), fields.len());
        for (name, start, len) in spans {
            list.push(HeaderName::from_bytes(name.as_bytes()).unwrap(), start, len);
        }
        list
    }

    /// The fields of a written request head, grouped by name as a map keeps them: in the order
    /// their names first came, each name's values in their order.
    fn sent(head: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut fields);
        assert!(request.parse(head).unwrap().is_complete(), "{}", String::from_utf8_lossy(head));
        let mut sent: Vec<(String, Vec<u8>)> =
            request.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect();
        sent.sort_by(|a, b| a.0.cmp(&b.0));
        sent
    }

    /// What the upstream is sent of `fields`, by way of a map and by way of a list.
    fn both_ways(fields: &[(&str, &[u8])], forwarding: &Forwarding<'_>) -> (Vec<u8>, Vec<u8>) {
        let parts = || http::Request::get("/x").body(()).unwrap().into_parts().0;
        let mut map = HeaderMap::new();
        for &(name, value) in fields {
            map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_bytes(value).unwrap());
        }
        forward_map(&mut map, forwarding, None);
        let mut by_map = Vec::new();
        let mut with_map = parts();
        with_map.headers = map;
        let had_length = with_map.headers.contains_key(header::CONTENT_LENGTH);
        crate::server::upstream::h1::write_request(&with_map, b"", had_length, &mut by_map);

        let mut by_list = Vec::new();
        crate::server::upstream::h1::write_request_line(&parts(), &mut by_list);
        let had_length = write_forwarded(&list(fields), forwarding, &mut by_list);
        crate::server::upstream::h1::end_request(b"", had_length, &mut by_list);
        (by_map, by_list)
    }

    #[test]
    fn a_list_is_forwarded_as_its_map_would_be() {
        const FIELDS: &[(&str, &[u8])] = &[
            ("host", b"api.example"),
            ("host", b"other"),
            ("x-api-key", b"k1"),
            ("X-Api-Key", b"k2"),
            ("connection", b"close"),
            ("connection", b"x-internal, X-API-KEY"),
            ("connection", b"keep-alive, host"),
            ("connection", b"x-forwarded-for"),
            ("connection", b"X-Forwarded-Proto, \xff"),
            ("connection", b"x-forwarded-host"),
            ("x-internal", b"secret"),
            ("keep-alive", b"timeout=5"),
            ("te", b"trailers"),
            ("proxy-authorization", b"Basic x"),
            ("trailer", b"X-Sum"),
            ("upgrade", b"websocket"),
            ("content-length", b"0"),
            ("x-forwarded-for", b"203.0.113.1"),
            ("x-forwarded-for", b"198.51.100.2, 10.0.0.1"),
            ("x-forwarded-for", b"caf\xc3\xa9"),
            ("x-forwarded-proto", b"https"),
            ("x-forwarded-host", b"front.example"),
            ("x-user", b"ann"),
            ("x-roles", b"admin"),
            ("accept", b""),
        ];
        let identity = IdentityHeaders {
            user: Some(HeaderName::from_static("x-user")),
            org: None,
            roles: Some(HeaderName::from_static("x-roles")),
        };
        let upstream_host = HeaderValue::from_static("upstream:8080");
        // Requests of up to eight fields drawn from the ones above, the same draw every run.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut differed = 0;
        for case in 0..4000 {
            let fields: Vec<_> = (0..next(9)).map(|_| FIELDS[next(FIELDS.len())]).collect();
            let peer = if case % 3 == 0 { "[2001:db8::7]:4000" } else { "192.0.2.7:4000" }.parse().unwrap();
            let forwarding = Forwarding {
                peer,
                peer_trusted: case % 2 == 0,
                identity: &identity,
                host: (case % 5 != 0).then_some(&upstream_host),
            };
            let (by_map, by_list) = both_ways(&fields, &forwarding);
            assert_eq!(
                sent(&by_list),
                sent(&by_map),
                "{fields:?}, trusted: {}\nlist:\n{}\nmap:\n{}",
                forwarding.peer_trusted,
                String::from_utf8_lossy(&by_list),
                String::from_utf8_lossy(&by_map)
            );
            differed += usize::from(by_list != by_map);
        }
        // The ways differ only in where the fields they set go, and they do set some.
        assert!(differed > 0);
    }

    #[test]
    fn a_listed_request_s_forwarding_fields_are_set_as_the_peer_is_trusted() {
        let identity = IdentityHeaders { user: Some(HeaderName::from_static("x-user")), org: None, roles: None };
        let fields: &[(&str, &[u8])] = &[
            ("host", b"api.example"),
            ("x-forwarded-for", b"203.0.113.1"),
            ("x-forwarded-proto", b"https"),
            ("x-user", b"ann"),
            ("connection", b"keep-alive"),
            ("keep-alive", b"timeout=5"),
        ];
        let write = |peer_trusted| {
            let forwarding =
                Forwarding { peer: "192.0.2.7:4000".parse().unwrap(), peer_trusted, identity: &identity, host: None };
            let mut out = Vec::new();
            write_forwarded(&list(fields), &forwarding, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(true),
            "host: api.example\r\nx-forwarded-proto: https\r\nx-user: ann\r\n\
             x-forwarded-for: 203.0.113.1, 192.0.2.7\r\nx-forwarded-host: api.example\r\n"
        );
        assert_eq!(
            write(false),
            "host: api.example\r\nx-forwarded-for: 203.0.113.1, 192.0.2.7\r\n\
             x-forwarded-proto: http\r\nx-forwarded-host: api.example\r\n"
        );
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
