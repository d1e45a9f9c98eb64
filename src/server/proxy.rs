//! `opbound serve`: the reverse proxy. Refuses early, forwards the canonical path, streams bodies
//! both ways, and puts RateLimit headers on every response.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::body::{ClientBody, ProxyBody};
use super::{Judgement, Shared, problem, refusal, set_rate_headers};
use crate::router::canonical::{EscapedSlashes, canonical_path};

/// Where and how to reach the upstream.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    /// `http://host:port` or `https://host:port`, with an optional path prefix.
    pub base: Uri,
    /// For `https://`: whom to trust and which name to ask for (SNI) and verify.
    pub tls: Option<UpstreamTls>,
    /// How long connecting to the upstream may take.
    pub connect_timeout: Duration,
    /// From sending the request to receiving the response's headers.
    pub response_timeout: Duration,
    /// Which idle connections are kept for the next request.
    pub pool: UpstreamPool,
}

/// Idle connections to the upstream kept for reuse. Each holds a descriptor here and a worker or
/// a descriptor at the upstream, so they are capped and closed when unused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamPool {
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// The most idle connections kept; a connection freed beyond that is closed.
    pub max_idle: usize,
}

impl Default for UpstreamPool {
    fn default() -> Self {
        UpstreamPool { idle_timeout: Duration::from_secs(30), max_idle: 64 }
    }
}

/// How an `https://` upstream is reached.
#[derive(Clone)]
pub(crate) struct UpstreamTls {
    config: Arc<rustls::ClientConfig>,
    /// The name sent in SNI and checked against the certificate, when not the URL's host (an
    /// upstream reached by address whose certificate names a host).
    server_name: Option<String>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// Trusts the CA certificates in `ca_pem`, or the system's roots when `None`; asks for and
    /// verifies `server_name`, or the URL's host.
    pub(crate) fn new(ca_pem: Option<&[u8]>, server_name: Option<String>) -> Result<UpstreamTls, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        match ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert =
                        cert.map_err(|e| format!("the upstream CA file holds a certificate that cannot be read: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("the upstream CA file holds a certificate rustls refuses: {e}"))?;
                }
                if roots.is_empty() {
                    return Err("the upstream CA file holds no PEM certificate".to_string());
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(
                        "no system root certificates were found to verify the upstream; install ca-certificates or give --upstream-ca-file"
                            .to_string(),
                    );
                }
            }
        }
        if let Some(name) = &server_name {
            rustls::pki_types::ServerName::try_from(name.as_str())
                .map_err(|_| format!("--upstream-server-name {name:?} is not a host name or an address"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS to the upstream: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(UpstreamTls { config: Arc::new(config), server_name })
    }
}

impl Upstream {
    /// Checks an upstream URL: `http://` or `https://` with a host. An `https://` upstream
    /// needs [`Upstream::tls`] set before a proxy is built.
    pub(crate) fn parse(url: &str, connect_timeout: Duration, response_timeout: Duration) -> Result<Upstream, String> {
        let base: Uri = url.parse().map_err(|e| format!("upstream {url:?} is not a URL: {e}"))?;
        if !matches!(base.scheme_str(), Some("http" | "https")) || base.authority().is_none() {
            return Err(format!(
                "upstream {url:?} must be an http:// or https:// URL with a host, like http://127.0.0.1:3000"
            ));
        }
        if base.query().is_some() {
            return Err(format!("upstream {url:?} cannot have a query"));
        }
        Ok(Upstream { base, tls: None, connect_timeout, response_timeout, pool: UpstreamPool::default() })
    }

    /// Whether the upstream is reached over TLS.
    pub(crate) fn is_https(&self) -> bool {
        self.base.scheme_str() == Some("https")
    }

    fn uri(&self, path: &str, query: Option<&str>) -> Result<Uri, http::Error> {
        let prefix = self.base.path().trim_end_matches('/');
        let mut target = String::with_capacity(prefix.len() + path.len() + query.map_or(0, |q| q.len() + 1));
        target.push_str(prefix);
        target.push_str(path);
        if let Some(q) = query {
            target.push('?');
            target.push_str(q);
        }
        Uri::builder()
            .scheme(self.base.scheme_str().unwrap_or("http"))
            .authority(self.base.authority().expect("checked in parse").clone())
            .path_and_query(target)
            .build()
    }
}

/// The proxy's state.
pub(crate) struct Proxy {
    /// What it decides with.
    pub shared: Arc<Shared>,
    /// Where it forwards to.
    pub upstream: Upstream,
    /// What an escaped slash in a request path gets.
    pub escaped_slashes: EscapedSlashes,
    client: Client<HttpsConnector<HttpConnector>, ClientBody>,
}

impl Proxy {
    /// A proxy to `upstream`.
    pub(crate) fn new(shared: Arc<Shared>, upstream: Upstream, escaped_slashes: EscapedSlashes) -> Proxy {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(upstream.connect_timeout));
        http.set_nodelay(true);
        // The TLS layer below takes https:// URLs; the TCP connector must let them through.
        http.enforce_http(false);
        let tls = upstream.tls.clone();
        let config = match &tls {
            Some(t) => (*t.config).clone(),
            // A plain http:// upstream never starts TLS; the config is only a placeholder.
            None => rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth())
                .expect("ring supports the default protocol versions"),
        };
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
        let connector = match tls.and_then(|t| t.server_name) {
            Some(name) => {
                // Checked in UpstreamTls::new; an unreadable name cannot get this far.
                let name = rustls::pki_types::ServerName::try_from(name).expect("checked when the upstream was set up");
                let resolver = hyper_rustls::FixedServerNameResolver::new(name);
                builder.with_server_name_resolver(resolver).enable_http1().wrap_connector(http)
            }
            None => builder.enable_http1().wrap_connector(http),
        };
        let client = Client::builder(TokioExecutor::new())
            // Without a timer the pool never looks at its idle connections again: they stay open
            // until the upstream closes them, whatever the idle timeout says.
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(upstream.pool.idle_timeout)
            .pool_max_idle_per_host(upstream.pool.max_idle)
            .build(connector);
        Proxy { shared, upstream, escaped_slashes, client }
    }

    /// Handles one request from `peer`.
    pub(crate) async fn handle(self: Arc<Self>, mut req: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
        let path = match canonical_path(req.uri().path(), self.escaped_slashes) {
            Ok(p) => p.into_owned(),
            Err(e) => return problem(StatusCode::BAD_REQUEST, "malformed-request", &e.to_string()),
        };
        // Methods are matched in upper case and forwarded so: `get` is charged as GET, and
        // upstreams that upper-case methods themselves (Werkzeug) run what was charged.
        if let Some(upper) = canonical_method(req.method()) {
            *req.method_mut() = upper;
        }
        let query = req.uri().query();
        let method = req.method().as_str();
        let judgement = self.shared.judge(method, &path, query, req.headers(), peer.ip()).await;
        if !judgement.decision.allowed() {
            let response = refusal(self.shared.style, &judgement, None);
            judgement.log_refusal(method, &path, response.status().as_u16());
            return response;
        }
        let uri = match self.upstream.uri(&path, query) {
            Ok(uri) => uri,
            Err(e) => return problem(StatusCode::BAD_REQUEST, "malformed-request", &e.to_string()),
        };
        self.forward(req, uri, peer, judgement).await
    }

    async fn forward(
        &self,
        mut req: Request<Incoming>,
        uri: Uri,
        peer: SocketAddr,
        mut judgement: Judgement,
    ) -> Response<ProxyBody> {
        let upgrade = wants_upgrade(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let original_host = parts.headers.get(header::HOST).cloned();
        let peer_trusted = self.shared.trusted.trusts(super::address::canonical(peer.ip()));
        strip_hop_by_hop(&mut parts.headers, upgrade.then_some("upgrade"));
        if !peer_trusted {
            // Identity headers are an authenticating proxy's word; from anyone else they are a
            // claim the upstream must not see (as oauth2-proxy strips them).
            for name in self.shared.identity.headers.names() {
                parts.headers.remove(name);
            }
        }
        forwarded_headers(&mut parts.headers, peer, original_host, peer_trusted);
        if let Some(authority) = self.upstream.base.authority()
            && let Ok(host) = HeaderValue::from_str(authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
        parts.uri = uri;
        // Upstreams speak HTTP/1.1 whatever the client spoke.
        parts.version = http::Version::HTTP_11;
        let (body, client_fault) = ClientBody::new(body);
        let upstream_req = Request::from_parts(parts, body);

        let response =
            match tokio::time::timeout(self.upstream.response_timeout, self.client.request(upstream_req)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    if let Some(fault) = client_fault.get() {
                        // The client broke its own request (a malformed chunk, a body cut
                        // short): nothing an operator can act on, and not the upstream's doing.
                        tracing::debug!(error = %fault, "the request body could not be read");
                        let mut r = problem(
                            StatusCode::BAD_REQUEST,
                            "malformed-request",
                            &format!("the request body is malformed: {fault}"),
                        );
                        set_rate_headers(r.headers_mut(), self.shared.style, &judgement);
                        return r;
                    }
                    let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                    tracing::warn!(error = %cause, "upstream request failed");
                    let mut r = problem(
                        StatusCode::BAD_GATEWAY,
                        "upstream-unavailable",
                        &format!("the upstream did not answer: {cause}"),
                    );
                    set_rate_headers(r.headers_mut(), self.shared.style, &judgement);
                    return r;
                }
                Err(_) => {
                    let mut r = problem(
                        StatusCode::GATEWAY_TIMEOUT,
                        "upstream-timeout",
                        &format!("the upstream did not answer within {:?}", self.upstream.response_timeout),
                    );
                    set_rate_headers(r.headers_mut(), self.shared.style, &judgement);
                    return r;
                }
            };
        let (mut parts, body) = response.into_parts();
        let permits = std::mem::take(&mut judgement.decision.permits);
        if parts.status == StatusCode::SWITCHING_PROTOCOLS && upgrade {
            // The permits now belong to the tunnel: released when either side closes it.
            return self.tunnel(Response::from_parts(parts, body), client_upgrade, permits, &judgement);
        }
        strip_hop_by_hop(&mut parts.headers, None);
        set_rate_headers(&mut parts.headers, self.shared.style, &judgement);
        Response::from_parts(parts, ProxyBody::Upstream { inner: body, permits: Some(permits) })
    }

    /// Passes a protocol switch (WebSocket) through: both upgraded connections are spliced.
    fn tunnel(
        &self,
        mut upstream_response: Response<Incoming>,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
        permits: crate::engine::Permits,
        judgement: &Judgement,
    ) -> Response<ProxyBody> {
        let upstream_upgrade = hyper::upgrade::on(&mut upstream_response);
        let (parts, _) = upstream_response.into_parts();
        if let Some(client_upgrade) = client_upgrade {
            tokio::spawn(async move {
                let (client, upstream) = match tokio::try_join!(client_upgrade, upstream_upgrade) {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::debug!(error = %e, "upgrade failed");
                        return;
                    }
                };
                let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                drop(permits);
            });
        }
        let mut response = Response::from_parts(parts, ProxyBody::empty());
        set_rate_headers(response.headers_mut(), self.shared.style, judgement);
        response
    }
}

/// The upper-case spelling of a method that is not already upper case (`get` → `GET`).
fn canonical_method(method: &http::Method) -> Option<http::Method> {
    let m = method.as_str();
    if !m.bytes().any(|b| b.is_ascii_lowercase()) {
        return None;
    }
    http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok()
}

fn wants_upgrade(headers: &HeaderMap) -> bool {
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
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: Option<&str>) {
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
fn forwarded_headers(headers: &mut HeaderMap, peer: SocketAddr, host: Option<HeaderValue>, peer_trusted: bool) {
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
