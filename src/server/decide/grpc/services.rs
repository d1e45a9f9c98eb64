//! The gRPC services on one port (ext_authz, the rate-limit service, health), dispatched on the
//! request's path.

use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use http::{Request, Response};
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower_service::Service;

use crate::server::net::request_body::RequestBody;

use super::{Grpc, MAX_CHECK_MESSAGE, MAX_RATE_LIMIT_MESSAGE, OverCaps, Peer};
use super::{authz, rls, wire};

/// A gRPC message of no bytes: uncompressed, length zero. It decodes as any message's default.
const EMPTY_MESSAGE: &[u8] = &[0, 0, 0, 0, 0];

/// A frame that says its message is larger than any tonic decodes here (4 GiB less a byte), with
/// nothing after it: tonic refuses it as too large, as it refuses a call past its limit.
const TOO_LARGE: &[u8] = &[0, 0xff, 0xff, 0xff, 0xff];

/// The gRPC services on one port: what `listen::serve_workers` calls for each request.
#[derive(Clone)]
pub(crate) struct Services {
    grpc: Arc<Grpc>,
    authz: AuthorizationServer<authz::Authz>,
    rls: RateLimitServiceServer<rls::Rls>,
    health: tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>,
}

/// `grpc.health.v1.Health`, whose answers the server changes as it starts and stops.
pub(crate) struct Health(HealthReporter);

impl Health {
    /// Every service (and the server, `""`) serving, or not.
    pub(crate) async fn set(&self, serving: bool) {
        let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
        for name in [
            "",
            <AuthorizationServer<authz::Authz> as NamedService>::NAME,
            <RateLimitServiceServer<rls::Rls> as NamedService>::NAME,
        ] {
            self.0.set_service_status(name, status).await;
        }
    }
}

impl Services {
    /// The services over one decision-maker, and the health they report (not serving until
    /// told).
    pub(crate) async fn new(grpc: Arc<Grpc>) -> (Services, Health) {
        let reporter = HealthReporter::new();
        let health = tonic_health::pb::health_server::HealthServer::new(
            tonic_health::server::HealthService::from_health_reporter(reporter.clone()),
        );
        let health_state = Health(reporter);
        health_state.set(false).await;
        let services = Services {
            authz: AuthorizationServer::from_arc(Arc::new(authz::Authz(grpc.clone())))
                .max_decoding_message_size(MAX_CHECK_MESSAGE),
            rls: RateLimitServiceServer::from_arc(Arc::new(rls::Rls(grpc.clone())))
                .max_decoding_message_size(MAX_RATE_LIMIT_MESSAGE),
            grpc,
            health,
        };
        (services, health_state)
    }

    /// Serves one request from `peer`, by the service its path names.
    pub(crate) async fn call(mut self, mut req: Request<RequestBody>, peer: SocketAddr) -> Response<tonic::body::Body> {
        req.extensions_mut().insert(Peer(peer));
        // tonic reads the map (a gRPC request comes over HTTP/2, whose fields always are one).
        crate::server::net::request_body::fields_in_map(&mut req);
        let service = service_of(&req);
        let authz = service == <AuthorizationServer<authz::Authz> as NamedService>::NAME;
        let rls = service == <RateLimitServiceServer<rls::Rls> as NamedService>::NAME;
        let health = service == "grpc.health.v1.Health";
        if (authz || rls) && !self.grpc.trusts(Some(peer)) {
            // Nothing an untrusted peer sends is read: tonic decodes an empty message in its
            // place, which the service refuses as it refuses anything from that peer. Its own
            // bytes are dropped unread, however many it sends.
            *req.body_mut() = RequestBody::Whole(Some(bytes::Bytes::from_static(EMPTY_MESSAGE)), None);
        } else if authz || rls {
            count_before_decoding(&mut req, authz).await;
        }
        let answer = if authz {
            self.authz.call(req).await
        } else if rls {
            self.rls.call(req).await
        } else if health {
            self.health.call(req).await
        } else {
            let service = service_of(&req);
            Ok(tonic::Status::unimplemented(format!("opbound serves no gRPC service {service:?}")).into_http())
        };
        match answer {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// Reads a trusted peer's call (up to the size tonic decodes) and counts its repeated fields in
/// their wire form: past the caps, tonic decodes an empty message in its place and the service
/// refuses the call for the reason noted ([`OverCaps`]), as it refuses a decoded one. Twenty
/// calls of tiny entries in flight, decoded whole first, took 272 MiB.
async fn count_before_decoding(req: &mut Request<RequestBody>, authz: bool) {
    use http_body_util::BodyExt;
    let most = if authz { MAX_CHECK_MESSAGE } else { MAX_RATE_LIMIT_MESSAGE };
    let body = std::mem::replace(req.body_mut(), RequestBody::Whole(None, None));
    // A frame header and the largest message; past it tonic refuses the call as too large.
    let Ok(collected) = http_body_util::Limited::new(body, most + 5).collect().await else {
        *req.body_mut() = RequestBody::Whole(Some(bytes::Bytes::from_static(TOO_LARGE)), None);
        return;
    };
    let bytes = collected.to_bytes();
    let over =
        wire::framed(&bytes).and_then(|m| if authz { wire::check_over_caps(m) } else { wire::rate_limit_over_caps(m) });
    if let Some(why) = over {
        req.extensions_mut().insert(OverCaps(why));
        *req.body_mut() = RequestBody::Whole(Some(bytes::Bytes::from_static(EMPTY_MESSAGE)), None);
    } else {
        *req.body_mut() = RequestBody::Whole(Some(bytes), None);
    }
}

/// The service a gRPC request's path names.
fn service_of<B>(req: &Request<B>) -> &str {
    req.uri().path().trim_start_matches('/').split('/').next().unwrap_or("")
}
