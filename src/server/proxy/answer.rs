//! The client's response to what the upstream sent back: the upstream's answer with the
//! RateLimit fields, a tunnel for a switch, or the problem that says why there is none.

use std::net::SocketAddr;

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use crate::engine::usage::{BodyKind, Meter};
use crate::policy::Settle;
use crate::server::body::ProxyBody;
use crate::server::judge::{Judgement, defer_rate_headers, problem};
use crate::server::net::admission::Refused;
use crate::server::proxy::rewrite::strip_hop_by_hop;
use crate::server::upstream::client_body::ClientFault;
use crate::server::upstream::h1;
use crate::server::upstream::pool::PoolError;
use crate::throttle::{self};

use super::{Holds, Proxy, Sent};

impl Proxy {
    /// The client's response to what the upstream sent back (or the problem when nothing did).
    pub(super) fn answer(
        &self,
        sent: Result<Result<Sent, PoolError>, tokio::time::error::Elapsed>,
        client_fault: Option<&std::sync::OnceLock<ClientFault>>,
        mut judgement: Judgement,
        upgrade: bool,
        holds: Holds,
    ) -> Response<ProxyBody> {
        let (mut parts, fields, body, client_upgrade) = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(PoolError::Direct(h1::Error::TimedOut(_)))) | Err(_) => {
                let cause = format!("no response within {:?}", self.upstream.response_timeout);
                return self.upstream_failed(StatusCode::GATEWAY_TIMEOUT, &cause, &judgement);
            }
            Ok(Err(PoolError::Exhausted(cause))) => {
                // Out of descriptors: this server is full, as when a budget is spent, and the
                // client is told so, not that the upstream failed.
                tracing::debug!(error = %cause, "no descriptor for an upstream connection");
                let mut response = self.problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "over-capacity",
                    "the server has too many connections open; retry shortly",
                    &judgement,
                );
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return response;
            }
            Ok(Err(e)) => {
                if let Some(fault) = client_fault.and_then(std::sync::OnceLock::get) {
                    return self.client_broke(fault, &judgement);
                }
                // What failed (a refused connection, a certificate, a reset) is the operator's to
                // read, not the client's: the client gets the id of the log line.
                return self.upstream_failed(StatusCode::BAD_GATEWAY, &e.to_string(), &judgement);
            }
        };
        // The response head settles what waited for it; an error above dropped the reservations,
        // which commits them (the answer never came).
        let reservations = std::mem::take(&mut judgement.decision.reservations);
        // The upstream's fields are passed on as the list they were read into, unless something
        // here looks them up or takes some out: then they are a map, as hyper's client gives.
        let fields = if fields.plain() && reservations.is_empty() && self.strip_headers.is_empty() && !holds.asked_usage
        {
            Some(fields)
        } else {
            parts.headers = fields.to_map();
            None
        };
        let mut meter = None;
        if !reservations.is_empty() {
            let status = parts.status.as_u16();
            let text = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
            let kind =
                BodyKind { content_type: text(header::CONTENT_TYPE), content_encoding: text(header::CONTENT_ENCODING) };
            // A bound settled from the body is settled when the body ends; the others with it.
            match Meter::new(reservations, status, kind, |name| reported(&parts.headers, name), self.settle_limits) {
                Ok(m) => meter = Some(Box::new(m)),
                Err(reservations) => reservations.settle(
                    status,
                    |settle| match settle {
                        Settle::Header(name) => reported(&parts.headers, name),
                        Settle::Body(_) => None,
                    },
                    false,
                ),
            }
        }
        for name in self.strip_headers.iter() {
            parts.headers.remove(name);
        }
        let strip_trailers = if self.strip_headers.is_empty() || !parts.headers.contains_key(header::TRAILER) {
            None
        } else {
            undeclare(&mut parts.headers, &self.strip_headers);
            Some(self.strip_headers.clone())
        };
        let permits = std::mem::take(&mut judgement.decision.permits);
        if parts.status == StatusCode::SWITCHING_PROTOCOLS && upgrade {
            // The permits now belong to the tunnel: released when either side closes it. The
            // connection is the tunnel's too, never given back to the pool.
            return self.tunnel(parts, body.into_tunnel(), client_upgrade, permits, holds, &judgement);
        }
        if fields.is_none() {
            strip_hop_by_hop(&mut parts.headers, None);
        }
        // What asking for usage added is taken out of an event stream; its length changes.
        let unasked =
            holds.asked_usage
                && parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|t| {
                    t.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("text/event-stream")
                });
        if unasked {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let mut body = ProxyBody::upstream(body, fields, permits, strip_trailers, holds.upstreaming);
        if let Some(meter) = meter {
            body.meter(meter);
        }
        if unasked {
            body.unasked();
        }
        let mut response = Response::from_parts(parts, body);
        defer_rate_headers(&mut response, self.shared.style, &judgement);
        response
    }

    /// The answer to a request the upstream budgets have no room for: a 503 at once, counted by
    /// no bound, that asks the client to come back in a second (as a connection over a cap is
    /// told), logged at most a line a period.
    pub(super) fn over_capacity(&self, cap: Refused, peer: SocketAddr) -> Response<ProxyBody> {
        if let Some(line) = self.over_capacity.occurred(throttle::monotonic_now) {
            tracing::warn!(%peer, cap = %cap, suppressed = line.suppressed, "refused a request over an upstream budget");
        }
        let detail = match cap {
            Refused::AddressBusy => "too many requests from this address are in flight; retry when one has ended",
            _ => "the server has too many requests in flight; retry shortly",
        };
        let mut response = problem(StatusCode::SERVICE_UNAVAILABLE, "over-capacity", detail);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }

    /// The answer to an upstream request that failed (504 when it timed out, else 502): the
    /// cause goes to the operator's log under a request id, and the client gets only the id.
    fn upstream_failed(&self, status: StatusCode, cause: &str, judgement: &Judgement) -> Response<ProxyBody> {
        let id = crate::server::judge::RequestId::next();
        self.failures.failed(cause, id, judgement.limiter.clock());
        let (kind, detail) = if status == StatusCode::GATEWAY_TIMEOUT {
            ("upstream-timeout", "the upstream did not answer in time; the server's log has more under this request id")
        } else {
            (
                "upstream-unavailable",
                "the upstream could not be reached; the server's log has the cause under this request id",
            )
        };
        let mut r = crate::server::judge::problem_for_the_log(status, kind, detail, &id);
        defer_rate_headers(&mut r, self.shared.style, judgement);
        r
    }

    /// The answer to a request whose client broke its body (a malformed chunk, a body cut short,
    /// a body that stopped coming): nothing an operator can act on, and not the upstream's doing.
    pub(super) fn client_broke(&self, fault: &ClientFault, judgement: &Judgement) -> Response<ProxyBody> {
        tracing::debug!(error = %fault, "the request body could not be read");
        match fault {
            ClientFault::Stalled(after) => {
                let detail = format!("no part of the request body arrived for {}s", after.as_secs());
                self.problem(StatusCode::REQUEST_TIMEOUT, "body-timeout", &detail, judgement)
            }
            ClientFault::Malformed(why) => {
                let detail = format!("the request body is malformed: {why}");
                self.problem(StatusCode::BAD_REQUEST, "malformed-request", &detail, judgement)
            }
        }
    }

    /// A problem of opbound's own for a request that was allowed: it still says what is left.
    pub(super) fn problem(
        &self,
        status: StatusCode,
        kind: &str,
        detail: &str,
        judgement: &Judgement,
    ) -> Response<ProxyBody> {
        let mut r = problem(status, kind, detail);
        defer_rate_headers(&mut r, self.shared.style, judgement);
        r
    }

    /// Passes a protocol switch (WebSocket) through: both upgraded connections are spliced. The
    /// tunnel keeps what the request held (its permits, its place at the upstream, and the client
    /// connection's place under the caps) until either side closes it, or the server stops.
    pub(super) fn tunnel(
        &self,
        parts: http::response::Parts,
        upstream: Option<h1::Tunnel>,
        client_upgrade: Option<crate::server::net::upgrade::OnUpgrade>,
        permits: crate::engine::Permits,
        holds: Holds,
        judgement: &Judgement,
    ) -> Response<ProxyBody> {
        if let (Some(client_upgrade), Some(mut upstream)) = (client_upgrade, upstream) {
            let slot = holds.peer.hold();
            let stopped = holds.peer.stopped();
            tokio::spawn(async move {
                let mut client = match client_upgrade.upgraded().await {
                    Ok(client) => client,
                    Err(e) => {
                        tracing::debug!(error = %e, "upgrade failed");
                        return;
                    }
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                    () = stopped => {}
                }
                drop((permits, holds.upstreaming, slot));
            });
        }
        let mut response = Response::from_parts(parts, ProxyBody::empty());
        defer_rate_headers(&mut response, self.shared.style, judgement);
        response
    }
}

/// Takes the names the client never sees out of a response's `Trailer` declaration (its fields
/// are taken out of the trailer section as it passes).
fn undeclare(headers: &mut http::HeaderMap, stripped: &[http::HeaderName]) {
    let declared: Vec<String> = headers
        .get_all(header::TRAILER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty() && !stripped.iter().any(|s| s.as_str().eq_ignore_ascii_case(name)))
        .map(str::to_owned)
        .collect();
    headers.remove(header::TRAILER);
    if declared.is_empty() {
        return;
    }
    if let Ok(value) = HeaderValue::from_str(&declared.join(", ")) {
        headers.insert(header::TRAILER, value);
    }
}

/// A response header's value as a used amount: one non-negative integer, or nothing.
fn reported(headers: &http::HeaderMap, name: &str) -> Option<u64> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let text = value.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}
