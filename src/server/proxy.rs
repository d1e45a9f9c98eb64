//! `opbound serve`: the reverse proxy. Refuses early, forwards the canonical path, streams bodies
//! both ways, and puts RateLimit headers on every response.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;

use super::body::{ClientBody, ProxyBody};
use super::rewrite::{canonical_method, forwarded_headers, strip_hop_by_hop, wants_upgrade};
use super::upstream::Upstream;
use super::{Judgement, Shared, problem, refusal, set_rate_headers};
use crate::router::canonical::{EscapedSlashes, canonical_path};

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
        let client = upstream.client();
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
