//! `opbound decide --grpc`: the decision service in the protocols Envoy speaks to an external
//! limiter, on one HTTP/2 port. `authz.rs` is ext_authz v3 (`Check`), `rls.rs` the rate-limit
//! service v3 (`ShouldRateLimit`), and `grpc.health.v1.Health` answers probes. Both services
//! turn what Envoy sends into a [`Described`] request and judge it here, with the same
//! `Shared::judge` as `serve` and the HTTP `decide`; the messages are Envoy's own protobuf
//! definitions (`envoy-types`), served by tonic's generated servers on the listener every other
//! service uses (`listen::serve_workers`: its workers, caps, deadlines and graceful stop).

pub(crate) mod authz;
pub(crate) mod rls;
pub(crate) mod services;
pub(crate) mod wire;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{HeaderValue as PbHeader, HeaderValueOption, header_value_option};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::router::canonical::EscapedSlashes;
use crate::server::judge::{Asked, Judgement, Shared};
use crate::throttle::Throttle;

/// The most descriptors one rate-limit call may carry. Envoy sends one per `rate_limits` entry
/// that applies to a route, a few in practice; no client can add one.
pub(crate) const MAX_DESCRIPTORS: usize = 256;

/// The most entries the descriptors of one call may carry together: a few per descriptor.
pub const MAX_ENTRIES: usize = 4 * MAX_DESCRIPTORS;

/// The most headers one check may carry, `header_map` and `headers` counted together. Envoy
/// refuses a request with more than its `max_headers_count` (100 by default) itself; the cap
/// keeps a check far below what an `http::HeaderMap` can hold (32,768 names, past which it
/// panics).
pub const MAX_HEADERS: usize = 256;

/// The largest encoded answer to a call refused before it is judged (an untrusted peer, a call
/// that cannot be read): one status and a short problem body, whatever the call carried.
#[cfg(any(test, feature = "fuzzing"))]
pub const REFUSAL_MAX: usize = 1024;

/// The largest encoded answer to a judged rate-limit call: past it, the per-descriptor statuses
/// (each repeating the one decision and its bound's name) are left out.
pub(crate) const ANSWER_MAX: usize = 64 * 1024;

/// The largest check tonic decodes: Envoy sends at most `max_request_bytes` of a body (as
/// `raw_body`, or as `body` with each byte of invalid UTF-8 replaced by one `!`) beside headers
/// of at most its `max_request_headers_kb` (60 KiB by default), so bodies of up to nearly 4 MiB
/// fit. A larger check is refused before it is read.
pub(crate) const MAX_CHECK_MESSAGE: usize = 4 << 20;

/// The largest rate-limit call tonic decodes: sixteen times Envoy's default header limit, for
/// descriptors that repeat header values.
pub(crate) const MAX_RATE_LIMIT_MESSAGE: usize = 1 << 20;

/// The client address of a request whose gateway gives none it can be read from (a pipe, an
/// internal listener, an address that does not parse): every such request shares it, and so
/// one per-address budget, and nothing a client wrote stands in for it.
pub(crate) const UNKNOWN_CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// The longest detail of a refusal, in bytes, as the client's own text can make it long: room
/// for every message of opbound's own, and twice it (JSON's escapes) still fits [`REFUSAL_MAX`].
const DETAIL_BYTES: usize = 300;

/// The peer of a gRPC request, as the listener accepted it.
#[derive(Clone, Copy, Debug)]
struct Peer(SocketAddr);

/// Why a decision request is refused before it is judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// The peer is not a `--trusted-proxy`: nothing in its message is read.
    #[error("the decision request did not come from a --trusted-proxy")]
    Untrusted,
    /// A check with more headers than [`MAX_HEADERS`].
    #[error(
        "the check carries {0} headers, more than the {MAX_HEADERS} opbound reads; Envoy sends at most its max_headers_count (100 by default)"
    )]
    TooManyHeaders(usize),
    /// A rate-limit call with more descriptors than [`MAX_DESCRIPTORS`].
    #[error(
        "the call carries {0} descriptors, more than the {MAX_DESCRIPTORS} opbound reads; Envoy sends one per rate_limits entry"
    )]
    TooManyDescriptors(usize),
    /// A rate-limit call whose descriptors carry more entries than [`MAX_ENTRIES`].
    #[error("the descriptors carry {0} entries, more than the {MAX_ENTRIES} opbound reads; Envoy sends one per action")]
    TooManyEntries(usize),
    /// The request it describes cannot be read; the detail says why, cut short.
    #[error("{}", Brief(.0))]
    Malformed(String),
}

/// A detail of at most [`DETAIL_BYTES`], cut at a character with an ellipsis.
struct Brief<'a>(&'a str);

impl fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= DETAIL_BYTES {
            return f.write_str(self.0);
        }
        let end = (0..=DETAIL_BYTES).rev().find(|&i| self.0.is_char_boundary(i)).unwrap_or(0);
        write!(f, "{}…", &self.0[..end])
    }
}

impl From<String> for Unreadable {
    fn from(detail: String) -> Unreadable {
        Unreadable::Malformed(detail)
    }
}

impl From<crate::server::facts::reading::Unreadable> for Unreadable {
    fn from(why: crate::server::facts::reading::Unreadable) -> Unreadable {
        Unreadable::Malformed(why.to_string())
    }
}

impl From<&str> for Unreadable {
    fn from(detail: &str) -> Unreadable {
        Unreadable::Malformed(detail.to_string())
    }
}

/// A request as a gateway describes it, before it is read.
#[derive(Debug, Default)]
pub struct Described {
    /// The method as sent.
    pub method: String,
    /// The request target (path and query), raw bytes as sent.
    pub target: Vec<u8>,
    /// The request's headers.
    pub headers: HeaderMap,
    /// The address of whoever connected to the gateway, as it wrote it; `None` when it gives
    /// none that parses, and the request is the [`UNKNOWN_CLIENT`]'s.
    pub source: Option<IpAddr>,
    /// How many requests it counts as.
    pub hits: u32,
    /// The body, when the gateway sent all of it.
    pub body: Option<bytes::Bytes>,
}

/// What both services decide with.
pub(crate) struct Grpc {
    pub shared: Arc<Shared>,
    /// What an escaped slash in the original path gets.
    pub escaped_slashes: EscapedSlashes,
    /// Requests that could not be read: a misconfigured gateway sends nothing else, so they are
    /// warned about, at most a line every five seconds.
    unreadable: Arc<Throttle>,
}

impl Grpc {
    /// Both services over what handlers share.
    pub(crate) fn new(shared: Arc<Shared>, escaped_slashes: EscapedSlashes) -> Grpc {
        Grpc { shared, escaped_slashes, unreadable: Arc::new(Throttle::new(Duration::from_secs(5))) }
    }

    /// Whether `peer` is a trusted proxy, whose messages are read at all.
    pub(crate) fn trusts(&self, peer: Option<SocketAddr>) -> bool {
        peer.is_some_and(|p| self.shared.trusted.trusts(crate::server::facts::address::canonical(p.ip())))
    }

    /// Judges the request `read` describes, from `peer` (see [`Grpc::read_and_judge`]),
    /// warning about one that cannot be read: the first at once, then at most a line every five
    /// seconds with how many were left out.
    pub(crate) async fn judge(
        &self,
        peer: Option<SocketAddr>,
        service: &'static str,
        read: impl FnOnce() -> Result<Described, Unreadable>,
    ) -> Result<Judgement, Unreadable> {
        let judged = self.read_and_judge(peer, read).await;
        if let Err(why) = &judged {
            let clock = self.shared.active.load().limiter.clock().clone();
            if let Some(line) = self.unreadable.occurred(|| clock.now()) {
                let peer = peer.map(|p| p.to_string()).unwrap_or_default();
                let detail = why.to_string();
                tracing::warn!(
                    service,
                    peer,
                    detail,
                    suppressed = line.suppressed,
                    "a gRPC decision request could not be read; refused"
                );
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(crate::throttle::report_rest(
                        self.unreadable.clone(),
                        move || clock.now(),
                        line,
                        move |line| {
                            tracing::warn!(
                                service,
                                suppressed = line.suppressed,
                                "gRPC decision requests that could not be read, refused without a line each"
                            );
                        },
                    ));
                }
            }
        }
        judged
    }

    /// Judges a described request from `peer`. Only a trusted peer (the gateway) is believed at
    /// all, and nothing of its message is read before that is known. Its word for the client's
    /// address is the source it reports, read further through `X-Forwarded-For` only when that
    /// source is itself a trusted proxy (a balancer in front of the gateway), as for every other
    /// service; without a source, the client is the [`UNKNOWN_CLIENT`], never the gateway, whose
    /// trust would make the client's own `X-Forwarded-For` believed. `Err` says why a request
    /// cannot be read (or was not believed): it is refused, counted nowhere.
    async fn read_and_judge(
        &self,
        peer: Option<SocketAddr>,
        read: impl FnOnce() -> Result<Described, Unreadable>,
    ) -> Result<Judgement, Unreadable> {
        if !self.trusts(peer) {
            return Err(Unreadable::Untrusted);
        }
        let Described { method, target, headers, source, hits, body } = read()?;
        let target = crate::server::decide::escape_raw(&target);
        let (method, path, query) =
            crate::server::facts::reading::read_request(&method, &target, self.escaped_slashes)?;
        let client = match source {
            Some(source) => self.shared.trusted.client_address(source, (&headers).into()),
            None => UNKNOWN_CLIENT,
        };
        let asked = Asked {
            method: &method,
            path: &path,
            query,
            headers: (&headers).into(),
            client,
            trusted: true,
            hits,
            body: body.as_deref(),
        };
        let mut judgement = self.shared.judge(&asked, None).await;
        // Envoy never says when the request ends, so permits go back at once.
        drop(std::mem::take(&mut judgement.decision.permits));
        if !judgement.decision.allowed() {
            let (status, _) = crate::server::judge::refusal_body(&judgement);
            judgement.log_refusal(&method, &path, status.as_u16());
        }
        Ok(judgement)
    }
}

/// The address a gateway writes for a client, read leniently: `192.0.2.1`, `192.0.2.1:8080`,
/// `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:443`, with spaces around; `None` for
/// anything else.
pub(crate) fn source_address(written: &str) -> Option<IpAddr> {
    crate::server::facts::address::parse_node(written.trim())
}

/// Adds one header a gateway describes, as sent: pseudo-headers (`:path`, read elsewhere) and
/// names or values no HTTP/1.1 message could carry are left out.
pub(crate) fn add_header(headers: &mut HeaderMap, name: &str, value: &[u8]) {
    if name.starts_with(':') {
        return;
    }
    let (Ok(name), Ok(value)) =
        (HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()), HeaderValue::from_bytes(value))
    else {
        return;
    };
    headers.append(name, value);
}

/// Headers as Envoy's messages carry them.
pub(crate) fn header_values(headers: &HeaderMap) -> Vec<PbHeader> {
    headers
        .iter()
        .map(|(name, value)| PbHeader {
            key: name.as_str().to_string(),
            value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            ..Default::default()
        })
        .collect()
}

/// Headers for Envoy to set, replacing any of the same name (the upstream's own RateLimit
/// headers, on an allowed request).
pub(crate) fn header_options(headers: &HeaderMap) -> Vec<HeaderValueOption> {
    header_values(headers)
        .into_iter()
        .map(|header| HeaderValueOption {
            header: Some(header),
            append_action: header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            ..Default::default()
        })
        .collect()
}

/// The peer a tonic request came from.
pub(crate) fn peer_of<T>(request: &tonic::Request<T>) -> Option<SocketAddr> {
    request.extensions().get::<Peer>().map(|p| p.0)
}

/// A call found past the caps before it was decoded (its message is then empty), and why.
#[derive(Clone, Debug)]
struct OverCaps(Unreadable);

/// Why a call was found past the caps before it was decoded.
pub(crate) fn over_caps<T>(request: &tonic::Request<T>) -> Option<Unreadable> {
    request.extensions().get::<OverCaps>().map(|o| o.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_what_http_could_carry() {
        let mut h = HeaderMap::new();
        add_header(&mut h, ":path", b"/x");
        add_header(&mut h, "X-Api-Key", b"k1");
        add_header(&mut h, "x-api-key", b"k2");
        add_header(&mut h, "bad name", b"v");
        add_header(&mut h, "x-line", b"a\nb");
        assert_eq!(h.len(), 2);
        let keys: Vec<&[u8]> = h.get_all("x-api-key").iter().map(|v| v.as_bytes()).collect();
        assert_eq!(keys, [&b"k1"[..], b"k2"]);
    }

    #[test]
    fn a_detail_is_cut_short_whatever_the_client_wrote() {
        let long = Unreadable::Malformed(format!("the original target {:?} is no path", "é".repeat(10_000)));
        let text = long.to_string();
        assert!(text.len() <= DETAIL_BYTES + '…'.len_utf8() && text.len() > DETAIL_BYTES - 4, "{}", text.len());
        assert!(text.starts_with("the original target \"éé") && text.ends_with('…'), "{text}");
        // opbound's own words are never cut.
        for own in [Unreadable::TooManyHeaders(32_769), Unreadable::TooManyDescriptors(1_900_000)] {
            assert!(!own.to_string().ends_with('…'), "{own}");
        }
        let short = Unreadable::from("no descriptor entry \"method\"");
        assert_eq!(short.to_string(), "no descriptor entry \"method\"");
    }
}
