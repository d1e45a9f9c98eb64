//! The admin listener: `/healthz`, kept apart from the traffic port.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::Shared;
use super::body::ProxyBody;

pub struct Admin {
    pub shared: Arc<Shared>,
}

impl Admin {
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, _peer: SocketAddr) -> Response<ProxyBody> {
        match req.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::full(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
