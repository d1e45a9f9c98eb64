//! `opbound demo`: a stub upstream answering every operation of a spec, and the lines that show
//! a bound at work against it.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use crate::policy::{Algorithm, BoundIndex, Missing, Policy};
use crate::server::body::ProxyBody;
use crate::server::net::request_body::RequestBody;

/// The petstore the demo serves when no spec is given and none is at `specs/petstore.yaml`.
pub(crate) const PETSTORE: &str = include_str!("../../specs/petstore.yaml");

/// An upstream that answers every operation of a policy with a little JSON saying which it was.
pub(crate) struct StubUpstream {
    /// The policy whose operations it answers for.
    pub policy: Arc<Policy>,
}

impl StubUpstream {
    /// Answers with the operation the request reached, as JSON.
    pub(crate) async fn handle(self: Arc<Self>, req: Request<RequestBody>, _peer: SocketAddr) -> Response<ProxyBody> {
        let path = req.uri().path().to_string();
        let op = self.policy.route(req.method().as_str(), &path);
        let (status, body) = match op {
            Some(op) => {
                let op = &self.policy.operations[op];
                (
                    StatusCode::OK,
                    serde_json::json!({"operation": op.id, "method": req.method().as_str(), "path": path, "served_by": "opbound demo stub upstream"}),
                )
            }
            None => (StatusCode::NOT_FOUND, serde_json::json!({"error": "no such operation", "path": path})),
        };
        let mut r = Response::new(ProxyBody::full(Bytes::from(body.to_string())));
        *r.status_mut() = status;
        r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        r
    }
}

/// The request the demo suggests: a GET whose tightest bound needs only the address (or
/// nothing), so a few `curl`s reach a 429. Returns the path and a description of the bound.
pub(crate) fn showcase(policy: &Policy) -> Option<(String, String, u32)> {
    let mut best: Option<(u32, usize, BoundIndex)> = None;
    for (i, _) in policy.operations.iter().enumerate().filter(|(_, o)| o.method == "GET" && o.routable) {
        for b in policy.bounds_for(Some(i)) {
            let def = &policy.bounds[b].def;
            let simple = !def.needs_identity()
                && def.missing == Missing::Pass
                && def.per.always_present()
                && def.algorithm != Algorithm::Concurrency;
            if simple && best.is_none_or(|(limit, ..)| def.capacity() < limit) {
                best = Some((def.capacity(), i, b));
            }
        }
    }
    let (limit, op, bound) = best?;
    let path = policy.operations[op].paths.first()?.clone();
    let concrete = concrete_path(&path);
    Some((concrete, crate::engine::problem::describe(policy, Some(op), bound), limit))
}

/// A template with each parameter filled in.
fn concrete_path(template: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in template.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    out.push('1');
                }
            }
            '}' => depth -= 1,
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_petstore_showcase_is_list_pets() {
        let source = crate::spec::Source::from_text(std::path::Path::new("petstore.yaml"), PETSTORE.to_string());
        let policy = crate::policy::load_source(source, &crate::Options::default()).unwrap().policy;
        let (path, what, limit) = showcase(&policy).unwrap();
        assert_eq!(path, "/v1/pets");
        assert_eq!(limit, 5);
        assert_eq!(what, "5 per PT10S per address on operation listPets");
        assert_eq!(concrete_path("/v1/pets/{petId}/x{a}.json"), "/v1/pets/1/x1.json");
    }
}
