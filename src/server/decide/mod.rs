//! `opbound decide`: a decision service for gateways. nginx `auth_request`, Traefik
//! `ForwardAuth`, Caddy `forward_auth` and Envoy `ext_authz` ask it about each request; it
//! answers 200 with the RateLimit headers, or a refusal with the headers and the problem body.

pub(crate) mod grpc;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderName, Request, Response, StatusCode};

use crate::engine::problem as problem_body;
use crate::router::canonical::EscapedSlashes;
use crate::server::body::ProxyBody;
use crate::server::facts::fields::Headers;
use crate::server::facts::reading::{Unreadable, escape_raw, method_text, read_request};
use crate::server::judge::{Asked, Shared, defer_rate_headers, problem, refusal};
use crate::server::net::request_body::RequestBody;

/// Where the gateway in front writes the request it asks about. One source per gateway, never a
/// fallback: a gateway overwrites the headers it is configured to write and passes every other
/// header on as the client sent it, so a second source would be the client's to choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gateway {
    /// nginx `auth_request`: `X-Original-Method` and `X-Original-URI` (the book's nginx snippet sets
    /// both with `proxy_set_header`).
    Nginx,
    /// Caddy `forward_auth`: `X-Forwarded-Method` and `X-Forwarded-Uri` (Caddy sets both).
    Caddy,
    /// Traefik ForwardAuth: `X-Forwarded-Method` and `X-Forwarded-Uri` (Traefik sets both
    /// unless `trustForwardHeader` is on).
    Traefik,
    /// Envoy `ext_authz` over HTTP: the decision request's own method, and its path after
    /// `--path-prefix`.
    Envoy,
}

impl std::str::FromStr for Gateway {
    type Err = crate::choice::NotOneOf;

    fn from_str(s: &str) -> Result<Gateway, crate::choice::NotOneOf> {
        match s.to_ascii_lowercase().as_str() {
            "nginx" => Ok(Gateway::Nginx),
            "caddy" => Ok(Gateway::Caddy),
            "traefik" => Ok(Gateway::Traefik),
            "envoy" => Ok(Gateway::Envoy),
            _ => Err(crate::choice::NotOneOf::new(s, "nginx, caddy, traefik or envoy")),
        }
    }
}

impl Gateway {
    /// The name `--gateway` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Gateway::Nginx => "nginx",
            Gateway::Caddy => "caddy",
            Gateway::Traefik => "traefik",
            Gateway::Envoy => "envoy",
        }
    }

    /// The headers holding the original method and target, for gateways that send them so.
    /// Names made once: a name given as a string is parsed on every look-up.
    fn headers(self) -> Option<(&'static HeaderName, &'static HeaderName)> {
        static X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
        static X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
        static X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
        static X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
        match self {
            Gateway::Nginx => Some((&X_ORIGINAL_METHOD, &X_ORIGINAL_URI)),
            Gateway::Caddy | Gateway::Traefik => Some((&X_FORWARDED_METHOD, &X_FORWARDED_URI)),
            Gateway::Envoy => None,
        }
    }
}

/// How the decision service answers.
#[derive(Clone, Debug)]
pub(crate) struct DecideSettings {
    /// Where the original request is read from.
    pub gateway: Gateway,
    /// The status of every refusal, when given (nginx needs 403); otherwise 429, or 400 for a
    /// missing key or a request that cannot be read.
    pub deny_status: Option<StatusCode>,
    /// For Envoy: the original path follows this prefix on the service's own request line.
    pub path_prefix: String,
    /// What an escaped slash in the original path gets.
    pub escaped_slashes: EscapedSlashes,
}

/// The decision service.
pub(crate) struct Decider {
    /// What it decides with.
    pub shared: Arc<Shared>,
    /// How it answers.
    pub settings: DecideSettings,
}

/// The method and target (path and query, as sent) of the request the gateway asks about.
fn original<'a>(
    req: &'a Request<RequestBody>,
    headers: Headers<'a>,
    settings: &DecideSettings,
) -> Result<(Cow<'a, str>, Cow<'a, str>), Unreadable> {
    let (method, target) = match settings.gateway.headers() {
        Some((method, target)) => {
            (Cow::Borrowed(method_text(header(headers, method)?)?), escape_raw(header(headers, target)?))
        }
        None => {
            let own = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
            let prefix = settings.path_prefix.trim_end_matches('/');
            let rest = own.strip_prefix(prefix).ok_or_else(|| Unreadable::Target(own.to_string()))?;
            let target = match rest.as_bytes().first() {
                None => Cow::Borrowed("/"),
                Some(b'/') => Cow::Borrowed(rest),
                Some(b'?') => Cow::Owned(format!("/{rest}")),
                Some(_) => return Err(Unreadable::Target(own.to_string())),
            };
            (Cow::Borrowed(req.method().as_str()), target)
        }
    };
    Ok((method, target))
}

/// A header the gateway sets, exactly once.
fn header<'a>(headers: Headers<'a>, name: &'static HeaderName) -> Result<&'a [u8], Unreadable> {
    let mut values = headers.get_all(name.as_str());
    let value = values.next().ok_or(Unreadable::Missing(name.as_str()))?;
    if values.next().is_some() {
        return Err(Unreadable::Repeated(name.as_str()));
    }
    Ok(value)
}

impl Decider {
    /// Decides the request a gateway asks about, from `peer`.
    pub(crate) async fn handle(
        self: Arc<Self>,
        mut req: Request<RequestBody>,
        peer: SocketAddr,
    ) -> Response<ProxyBody> {
        let fields = req.body_mut().take_fields();
        let headers = fields.as_ref().map_or(Headers::Map(req.headers()), Headers::List);
        let read = if self.shared.trusted.trusts(crate::server::facts::address::canonical(peer.ip())) {
            original(&req, headers, &self.settings)
        } else {
            Err(Unreadable::Untrusted)
        };
        let (method, target) = match read {
            Ok(pair) => pair,
            Err(e) => return self.malformed(&e.to_string(), peer),
        };
        let (method, path, query) = match read_request(&method, &target, self.settings.escaped_slashes) {
            Ok(read) => read,
            Err(e) => return self.malformed(&e.to_string(), peer),
        };
        let (client, trusted) = self.shared.caller(peer.ip(), headers);
        let asked = Asked { method: &method, path: &path, query, headers, client, trusted, hits: 1, body: None };
        let mut judgement = self.shared.judge(&asked, None).await;
        // A decision service never sees the response end, so permits go back at once.
        drop(std::mem::take(&mut judgement.decision.permits));
        if judgement.decision.allowed() {
            let mut response = Response::new(ProxyBody::empty());
            defer_rate_headers(&mut response, self.shared.style, &judgement);
            return response;
        }
        let mut response = refusal(self.shared.style, &judgement, self.settings.deny_status);
        judgement.log_refusal(&method, &path, response.status().as_u16());
        if self.settings.deny_status.is_some() {
            let code = problem_body::body(judgement.limiter.policy(), judgement.operation, &judgement.decision);
            if let Some((code, body)) = code {
                carry_problem(&mut response, code, &body);
            }
        }
        response
    }

    /// The answer for a request that cannot be read: a 400 (or the deny status).
    fn malformed(&self, detail: &str, peer: SocketAddr) -> Response<ProxyBody> {
        tracing::debug!(%peer, detail, "decision request refused");
        let mut r = problem(StatusCode::BAD_REQUEST, "malformed-request", detail);
        if let Some(s) = self.settings.deny_status {
            let body = crate::server::judge::problem_json(StatusCode::BAD_REQUEST, "malformed-request", detail);
            carry_problem(&mut r, 400, &body);
            *r.status_mut() = s;
        }
        r
    }
}

/// With `--deny-status`, the gateway sees the deny status, not the real one, and nginx drops an
/// auth response's body; these headers carry both, so the gateway can answer the client as
/// `serve` would (the nginx snippet returns `$opbound_status` with `$opbound_problem`).
fn carry_problem(response: &mut Response<ProxyBody>, status: u16, body: &str) {
    let headers = response.headers_mut();
    headers.insert("opbound-status", http::HeaderValue::from(status));
    if let Ok(v) = http::HeaderValue::from_str(body) {
        headers.insert("opbound-problem", v);
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;
    use crate::server::facts::reading::split_target;

    #[test]
    fn targets() {
        assert_eq!(split_target("/a/b?x=1"), Some(("/a/b", Some("x=1"))));
        assert_eq!(split_target("http://h:8080/a?x"), Some(("/a", Some("x"))));
        assert_eq!(split_target("HTTPS://h"), Some(("/", None)));
        assert_eq!(split_target("http://h?q=1"), Some(("/", Some("q=1"))));
        assert_eq!(split_target("/a#frag"), Some(("/a", None)));
        // Issue 9, item 2: `://` in the query made the tail of the query the path.
        assert_eq!(split_target("/api/limited?r=http://x/y"), Some(("/api/limited", Some("r=http://x/y"))));
        assert_eq!(split_target("/api/limited/http://x/y"), Some(("/api/limited/http://x/y", None)));
        assert_eq!(split_target("api/limited"), None);
        assert_eq!(split_target("ftp://h/a"), None);
        assert_eq!(split_target("*"), None);
    }

    #[test]
    fn raw_bytes_in_a_target_header_are_escaped_not_dropped() {
        // Issue 9, item 3: `é` sent raw made the header unreadable, and decide fell back to its
        // own path, which matched no operation.
        let mut h = HeaderMap::new();
        h.insert("x-original-uri", http::HeaderValue::from_bytes(b"/api/limited?x=\xc3\xa9").unwrap());
        let (method, uri) = Gateway::Nginx.headers().unwrap();
        assert_eq!(header((&h).into(), uri).map(escape_raw), Ok(Cow::from("/api/limited?x=%C3%A9")));
        assert_eq!(header((&h).into(), method), Err(Unreadable::Missing("x-original-method")));
        h.append("x-original-uri", http::HeaderValue::from_static("/other"));
        assert_eq!(header((&h).into(), uri), Err(Unreadable::Repeated("x-original-uri")));
    }

    #[test]
    fn a_method_header_is_a_token_or_unreadable() {
        assert_eq!(method_text(b"PATCH"), Ok("PATCH"));
        // Percent-encoded as a target is, these would be tokens (`%` is a token character) and
        // be judged as a method no request line can carry.
        for bytes in [&b"G T"[..], b"GET\x00", b"caf\xc3\xa9", b"GET\t", b""] {
            assert!(matches!(method_text(bytes), Err(Unreadable::Method(_))), "{bytes:?}");
        }
        assert_eq!(method_text(b"G T").unwrap_err().to_string(), "the original method \"G%20T\" is not an HTTP method");
    }

    #[test]
    fn a_target_is_escaped_byte_for_byte() {
        assert!(matches!(escape_raw(b"/a/b?x=1&y=%41"), Cow::Borrowed("/a/b?x=1&y=%41")));
        // Everything that is not printable ASCII: space, controls, DEL, and each byte of UTF-8.
        assert_eq!(escape_raw(b"/a b\t\x7f\x00"), "/a%20b%09%7F%00");
        assert_eq!(escape_raw("/caf\u{e9}".as_bytes()), "/caf%C3%A9");
        assert_eq!(escape_raw(b"\xff\x10"), "%FF%10");
        assert_eq!(escape_raw(b""), "");
        // Every byte, alone and between printable ones, by the rule a request line is read by.
        for b in 0..=255u8 {
            let one = if b.is_ascii_graphic() { char::from(b).to_string() } else { format!("%{b:02X}") };
            assert_eq!(escape_raw(&[b]), one, "{b:#04x}");
            assert_eq!(escape_raw(&[b'/', b, b'x']), format!("/{one}x"), "{b:#04x}");
        }
    }

    #[test]
    fn a_method_is_read_in_upper_case() {
        let read = |m| read_request(m, "/a", EscapedSlashes::default()).map(|(m, _, _)| m.into_owned());
        assert_eq!(read("get"), Ok("GET".to_string()));
        assert_eq!(read("PoSt"), Ok("POST".to_string()));
        assert_eq!(read("PURGE"), Ok("PURGE".to_string()));
        assert!(read("GE T").is_err());
        assert!(read("").is_err());
    }
}
