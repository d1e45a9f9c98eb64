//! `opbound decide`: a decision service for gateways. nginx `auth_request`, Traefik
//! `ForwardAuth`, Caddy `forward_auth` and Envoy `ext_authz` ask it about each request; it
//! answers 200 with the RateLimit headers, or a refusal with the headers and the problem body.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderMap, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::body::ProxyBody;
use super::{Shared, problem, refusal, set_rate_headers};
use crate::engine::Outcome;
use crate::router::canonical::canonical_path;

/// How the decision service answers.
#[derive(Clone, Debug, Default)]
pub struct DecideSettings {
    /// The status of every refusal, when given (nginx needs 403); otherwise 429, or 400 for a
    /// missing key.
    pub deny_status: Option<StatusCode>,
    /// For Envoy: the original path follows this prefix on the service's own request line.
    pub path_prefix: String,
}

pub struct Decider {
    pub shared: Arc<Shared>,
    pub settings: DecideSettings,
}

/// The method and target of the request the gateway asks about.
fn original(req: &Request<Incoming>, prefix: &str) -> (String, String) {
    let h = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let method = h("x-original-method").or_else(|| h("x-forwarded-method")).unwrap_or_else(|| req.method().to_string());
    let uri = h("x-original-uri").or_else(|| h("x-forwarded-uri")).unwrap_or_else(|| {
        let own = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        let rest = own.strip_prefix(prefix.trim_end_matches('/')).unwrap_or(own);
        if rest.starts_with('/') { rest.to_string() } else { format!("/{rest}") }
    });
    (method.to_ascii_uppercase(), uri)
}

/// Splits a request target (origin form, or absolute form) into path and query.
fn split_target(target: &str) -> (&str, Option<&str>) {
    let target = match target.find("://") {
        Some(i) => target[i + 3..].find('/').map_or("/", |j| &target[i + 3 + j..]),
        None => target,
    };
    let target = target.split('#').next().unwrap_or(target);
    match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    }
}

impl Decider {
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
        let (method, target) = original(&req, &self.settings.path_prefix);
        let (raw_path, query) = split_target(&target);
        let path = match canonical_path(raw_path) {
            Ok(p) => p.into_owned(),
            Err(e) => {
                let mut r = problem(StatusCode::BAD_REQUEST, "malformed-request", &e.to_string());
                if let Some(s) = self.settings.deny_status {
                    *r.status_mut() = s;
                }
                return r;
            }
        };
        let headers: &HeaderMap = req.headers();
        let mut judgement = self.shared.judge(&method, &path, query, headers, peer.ip()).await;
        // A decision service never sees the response end, so permits go back at once.
        drop(std::mem::take(&mut judgement.decision.permits));
        if judgement.decision.allowed() {
            let mut response = Response::new(ProxyBody::empty());
            set_rate_headers(response.headers_mut(), self.shared.style, &judgement);
            return response;
        }
        let status = self.settings.deny_status.or(match judgement.decision.outcome {
            Outcome::Limited { .. } => Some(StatusCode::TOO_MANY_REQUESTS),
            _ => None,
        });
        let response = refusal(self.shared.style, &judgement, status);
        judgement.log_refusal(&method, &path, response.status().as_u16());
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(split_target("/a/b?x=1"), ("/a/b", Some("x=1")));
        assert_eq!(split_target("http://h:8080/a?x"), ("/a", Some("x")));
        assert_eq!(split_target("https://h"), ("/", None));
        assert_eq!(split_target("/a#frag"), ("/a", None));
    }
}
