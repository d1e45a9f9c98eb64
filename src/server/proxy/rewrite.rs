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

/// Why a protocol may not be switched to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpgradeError {
    /// h2c, whose tunnel would carry requests past the judgement.
    #[error(
        "h2c cannot be allowed: requests inside an h2c tunnel would reach the upstream without being judged; clients that want HTTP/2 speak it to opbound directly"
    )]
    H2c,
    /// Not a token, so no `Upgrade` field could name it.
    #[error("{0:?} is not a protocol name, like websocket")]
    NotAProtocol(String),
}

impl Upgrades {
    /// These protocols (names as in `Upgrade`, without a version); none for no switch at all.
    pub(crate) fn new(protocols: Vec<String>) -> Result<Upgrades, UpgradeError> {
        for p in &protocols {
            if p.eq_ignore_ascii_case("h2c") {
                return Err(UpgradeError::H2c);
            }
            let token =
                !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(UpgradeError::NotAProtocol(p.clone()));
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
/// `h1::write_request` writes a map's (framing fields left out).
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
#[path = "rewrite_tests.rs"]
mod tests;
