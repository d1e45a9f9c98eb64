//! `opbound serve`: the reverse proxy. Refuses early, forwards the canonical path, streams bodies
//! both ways, and puts RateLimit headers on every response.

pub(crate) mod rewrite;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use crate::engine::Clock;
use crate::router::canonical::{EscapedSlashes, canonical_path};
use crate::server::body::ProxyBody;
use crate::server::facts::fields::{Fields, Headers};
use crate::server::facts::reading::canonical_method;
use crate::server::judge::{Asked, Judgement, KeyBody, Shared, defer_rate_headers, problem, refusal};
use crate::server::net::admission::{Peer, Refused, Upstreaming};
use crate::server::net::request_body::RequestBody;
use crate::server::observe::request_log::{self, Entry, RequestLog};
use crate::server::proxy::rewrite::{Forwarding, Upgrades, forward_map, strip_hop_by_hop, write_forwarded};
use crate::server::upstream::Upstream;
use crate::server::upstream::client_body::ClientBody;
use crate::server::upstream::h1;
use crate::server::upstream::pool::{Pool, PoolError};
use crate::server::upstream::response::UpstreamBody;
use crate::throttle::{self, Throttle};

/// `--max-key-body` when not given: 64 KiB, enough for any sign-in or form, small enough to
/// hold for every request in flight.
pub(crate) const DEFAULT_MAX_KEY_BODY: usize = 64 * 1024;

/// `--client-body-timeout` when not given: nginx's `client_body_timeout`.
pub(crate) const DEFAULT_CLIENT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// What the upstream sent back: the response head, its fields when they were read as a list
/// (the head's map then has none), its body, and the client's side of an upgrade.
type Sent = (http::response::Parts, Option<Fields>, UpstreamBody, Option<hyper::upgrade::OnUpgrade>);

/// What a request holds while it is at the upstream: its place in the upstream budgets, and the
/// client connection's place under the caps, which an upgrade's tunnel keeps.
struct Holds {
    upstreaming: Upstreaming,
    peer: Peer,
}

/// The proxy's state.
pub(crate) struct Proxy {
    /// What it decides with.
    pub shared: Arc<Shared>,
    /// Where it forwards to.
    pub upstream: Upstream,
    /// What an escaped slash in a request path gets.
    pub escaped_slashes: EscapedSlashes,
    /// Response headers (and trailer fields) the client never sees (`--strip-header`).
    pub strip_headers: Arc<[http::HeaderName]>,
    /// `--max-key-body`: the most of a body read ahead for a bound keyed on it.
    pub max_key_body: usize,
    /// How long that body may take to arrive (`--header-read-timeout`).
    pub body_patience: std::time::Duration,
    /// How long a request body streamed upstream may go without a byte (`--client-body-timeout`).
    pub client_body_timeout: Duration,
    /// The protocols a client may switch to through the proxy (`--allow-upgrade`).
    pub upgrades: Upgrades,
    /// Where a line per request goes (`--request-log`), if anywhere.
    pub request_log: Option<Arc<RequestLog>>,
    /// This worker's connections to the upstream.
    pool: Pool,
    /// The `Host` the upstream is sent.
    host: Option<HeaderValue>,
    failures: UpstreamFailures,
    /// Requests answered 503 for a budget of requests at the upstream, logged at most a line a
    /// period.
    over_capacity: Throttle,
}

impl Proxy {
    /// A proxy to `upstream`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        upstream: Upstream,
        escaped_slashes: EscapedSlashes,
        max_key_body: usize,
    ) -> Proxy {
        let pool = upstream.pool();
        let host = upstream.base.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        Proxy {
            shared,
            upstream,
            escaped_slashes,
            max_key_body,
            body_patience: std::time::Duration::from_secs(10),
            client_body_timeout: DEFAULT_CLIENT_BODY_TIMEOUT,
            upgrades: Upgrades::default(),
            strip_headers: Arc::new([]),
            request_log: None,
            pool,
            host,
            failures: UpstreamFailures::default(),
            over_capacity: Throttle::new(FAILURE_LOG_PERIOD),
        }
    }

    /// Handles one request from `peer`. With a request log, its line is sent when the response
    /// body ends (an upstream's, when its last frame is sent and the concurrency permits go
    /// back) or at once for a body opbound wrote whole; a protocol switch (101) is timed to its
    /// head, not over the tunnel's life, which is spawned apart from the response.
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep the request twice in its future")]
    pub(crate) fn handle(
        self: Arc<Self>,
        req: Request<RequestBody>,
        peer: Peer,
    ) -> impl Future<Output = Response<ProxyBody>> + Send + 'static {
        async move {
            let Some(log) = &self.request_log else { return self.respond(req, peer, None).await };
            let log = log.clone();
            let mut entry = None;
            let arrived = std::time::Instant::now();
            let mut response = self.respond(req, peer, Some((&log, arrived, &mut entry))).await;
            if let Some(mut entry) = entry {
                entry.status(response.status().as_u16());
                response.body_mut().log_at_end(entry);
            }
            response
        }
    }

    /// Answers one request from `peer`; with a request log, leaves its line in `log`'s entry.
    /// Not an `async fn`, for the reason [`Proxy::forward`] gives.
    fn respond<'a>(
        &'a self,
        req: Request<RequestBody>,
        client: Peer,
        log: Option<(&'a Arc<RequestLog>, std::time::Instant, &'a mut Option<Entry>)>,
    ) -> impl Future<Output = Response<ProxyBody>> + Send + 'a {
        let (mut parts, mut body) = req.into_parts();
        // Read here as a list, the fields stay one on their way upstream: the map has none.
        let fields = body.take_fields();
        let peer = client.addr;
        async move {
            // Before anything is read or counted: a request the upstream has no room for is
            // charged to no bound, and one with a body to read ahead holds it within the budget.
            let upstreaming = match client.to_upstream() {
                Ok(upstreaming) => upstreaming,
                Err(cap) => return self.over_capacity(cap, peer),
            };
            let holds = Holds { upstreaming, peer: client };
            // A clone shares the bytes: the path below borrows them while `parts` moves on.
            let target = parts.uri.clone();
            let path = crate::server::facts::reading::http_scheme(&target)
                .and_then(|()| canonical_path(target.path(), self.escaped_slashes).map_err(|e| e.to_string()));
            let path = match path {
                Ok(p) => p,
                Err(e) => {
                    if let Some((log, arrived, entry)) = log {
                        let headers = fields.as_ref().map_or(Headers::Map(&parts.headers), Headers::List);
                        *entry = Some(self.malformed(log, arrived, &parts, headers, peer));
                    }
                    return problem(StatusCode::BAD_REQUEST, "malformed-request", &e);
                }
            };
            // Methods are matched in upper case and forwarded so: `get` is charged as GET, and
            // upstreams that upper-case methods themselves (Werkzeug) run what was charged.
            if let Some(upper) = canonical_method(&parts.method) {
                parts.method = upper;
            }
            let query = parts.uri.query();
            let method = parts.method.as_str();
            let mut body = ClientBody::new(body, self.client_body_timeout);
            let read = KeyBody { body: &mut body, limit: self.max_key_body, patience: self.body_patience };
            let headers = fields.as_ref().map_or(Headers::Map(&parts.headers), Headers::List);
            let (client, trusted) = self.shared.caller(peer.ip(), headers);
            let asked = Asked { method, path: &path, query, headers, client, trusted, hits: 1, body: None };
            // Read just before judging: replay sets its clock to exactly this.
            let time = log.as_ref().map(|_| self.shared.active.load().limiter.clock().now());
            let judgement = self.shared.judge(&asked, Some(read)).await;
            if let (Some((log, arrived, entry)), Some(time)) = (log, time) {
                let target = target.path_and_query().map_or("/", |t| t.as_str());
                let request = request_log::Request { time, method, target, client, headers };
                let judged = request_log::Judged {
                    operation: judgement.operation,
                    outcome: &judgement.decision.outcome,
                    identity: judgement.identity.as_ref(),
                };
                let resolve = || self.shared.identity.resolve(headers, trusted);
                *entry = Some(log.entry(arrived, judgement.limiter.policy(), &request, Some(&judged), &resolve));
            }
            if !judgement.decision.allowed() {
                let response = refusal(self.shared.style, &judgement, None);
                judgement.log_refusal(method, &path, response.status().as_u16());
                return response;
            }
            // Forwarded exactly as charged: the client's own bytes only when they are the canonical path.
            let as_sent = (*path == *target.path()).then(|| target.path_and_query()).flatten();
            let uri = match self.upstream.uri(&path, query, as_sent) {
                Ok(uri) => uri,
                Err(e) => return problem(StatusCode::BAD_REQUEST, "malformed-request", &e.to_string()),
            };
            self.forward(Request::from_parts(parts, body), fields, uri, holds, judgement).await
        }
    }

    /// The log line of a request refused as malformed before it could be judged.
    fn malformed(
        &self,
        log: &Arc<RequestLog>,
        arrived: std::time::Instant,
        parts: &http::request::Parts,
        headers: Headers<'_>,
        peer: SocketAddr,
    ) -> Entry {
        let active = self.shared.active.load();
        let time = active.limiter.clock().now();
        let (client, _) = self.shared.caller(peer.ip(), headers);
        let method = canonical_method(&parts.method).unwrap_or_else(|| parts.method.clone());
        let target = parts.uri.path_and_query().map_or("/", |t| t.as_str());
        let request = request_log::Request { time, method: method.as_str(), target, client, headers };
        log.entry(arrived, active.limiter.policy(), &request, None, &crate::request::Identity::default)
    }

    /// Sends an allowed request upstream and answers with what came back. Not an `async fn`: the
    /// rewriting is done before the future is made, so the future holds only what its waits
    /// need (an `async fn` keeps room for its arguments and again for what they are moved
    /// into, and the whole future is copied as it is boxed and awaited).
    ///
    /// A request's fields read as a list (`fields`) are written from the list by the rules the
    /// map's are rewritten by ([`write_forwarded`]), unless hyper's client sends the request.
    fn forward(
        &self,
        mut req: Request<ClientBody>,
        fields: Option<Fields>,
        uri: Uri,
        holds: Holds,
        judgement: Judgement,
    ) -> impl Future<Output = Response<ProxyBody>> + Send + '_ {
        let peer = holds.peer.addr;
        // Only a switch to a protocol the operator allows is passed on; any other `Upgrade` is
        // stripped and the request forwarded as an ordinary one.
        let switch_to = self.upgrades.asked(req.headers());
        let upgrade = switch_to.is_some();
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, mut body) = req.into_parts();
        let peer_trusted = self.shared.trusted.trusts(crate::server::facts::address::canonical(peer.ip()));
        // A CONNECT's 2xx makes a tunnel of the connection: hyper's client knows that.
        let whole = if upgrade || parts.method == http::Method::CONNECT || !self.pool.direct() {
            None
        } else {
            body.take_whole()
        };
        // A body taken whole was read without a fault; one streamed may still meet one.
        let client_fault = whole.is_none().then(|| body.fault());
        let list = match fields {
            Some(list) if whole.is_some() => Some(list),
            // Hyper's client sends a map.
            Some(list) => {
                list.append_to(&mut parts.headers);
                None
            }
            None => None,
        };
        let forwarding =
            Forwarding { peer, peer_trusted, identity: &self.shared.identity.headers, host: self.host.as_ref() };
        if list.is_none() {
            forward_map(&mut parts.headers, &forwarding, switch_to);
        }
        parts.uri = uri;
        // Upstreams speak HTTP/1.1 whatever the client spoke.
        parts.version = http::Version::HTTP_11;
        async move {
            let sent = match whole {
                // The usual request: written here and its response read in this task.
                Some(whole) => {
                    let mut head = crate::server::buffers::take(512 + whole.len().min(16 * 1024));
                    let rest = match list {
                        Some(list) => {
                            h1::write_request_line(&parts, &mut head);
                            let had_length = write_forwarded(&list, &forwarding, &mut head);
                            h1::end_request(&whole, had_length, &mut head)
                        }
                        None => {
                            let had_length = parts.headers.contains_key(header::CONTENT_LENGTH);
                            h1::write_request(&parts, &whole, had_length, &mut head)
                        }
                    };
                    let rest = rest.then_some(&whole[..]);
                    // Written: the fields are done with, their map kept for the next request.
                    crate::server::buffers::give_map(std::mem::take(&mut parts.headers));
                    let head_request = parts.method == http::Method::HEAD;
                    let idempotent = parts.method.is_idempotent();
                    // The exchange keeps the response timeout itself, on its connection's timer.
                    let timeout = self.upstream.response_timeout;
                    let exchange = self.pool.exchange(&head, rest, head_request, idempotent, timeout);
                    Ok(exchange
                        .await
                        .map(|(parts, fields, body)| (parts, Some(fields), UpstreamBody::Direct(body), None)))
                }
                // A body to stream or a protocol switch: hyper's client connection.
                None => {
                    let upstream_req = Request::from_parts(parts, body);
                    // Boxed: hyper's client future is a kilobyte, and few requests take this way.
                    let send = Box::pin(self.pool.send(upstream_req));
                    tokio::time::timeout(self.upstream.response_timeout, send).await.map(|r| {
                        r.map(|(response, checkin)| {
                            let (parts, inner) = response.into_parts();
                            (parts, None, UpstreamBody::Pooled { inner, checkin: Some(checkin) }, client_upgrade)
                        })
                    })
                }
            };
            self.answer(sent, client_fault.as_deref(), judgement, upgrade, holds)
        }
    }

    /// The client's response to what the upstream sent back (or the problem when nothing did).
    fn answer(
        &self,
        sent: Result<Result<Sent, PoolError>, tokio::time::error::Elapsed>,
        client_fault: Option<&std::sync::OnceLock<crate::server::upstream::client_body::ClientFault>>,
        mut judgement: Judgement,
        upgrade: bool,
        holds: Holds,
    ) -> Response<ProxyBody> {
        let (mut parts, fields, body, client_upgrade) = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(PoolError::Direct(h1::Error::TimedOut(_)))) | Err(_) => {
                let id = crate::server::judge::RequestId::next();
                let cause = format!("no response within {:?}", self.upstream.response_timeout);
                self.failures.failed(&cause, id, judgement.limiter.clock());
                let detail = "the upstream did not answer in time; the server's log has more under this request id";
                let mut r = crate::server::judge::problem_for_the_log(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream-timeout",
                    detail,
                    &id,
                );
                defer_rate_headers(&mut r, self.shared.style, &judgement);
                return r;
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
                    // The client broke its own request (a malformed chunk, a body cut short, a
                    // body that stopped coming): nothing an operator can act on, and not the
                    // upstream's doing.
                    tracing::debug!(error = %fault, "the request body could not be read");
                    return match fault {
                        crate::server::upstream::client_body::ClientFault::Stalled(after) => {
                            let detail = format!("no part of the request body arrived for {}s", after.as_secs());
                            self.problem(StatusCode::REQUEST_TIMEOUT, "body-timeout", &detail, &judgement)
                        }
                        crate::server::upstream::client_body::ClientFault::Malformed(why) => {
                            let detail = format!("the request body is malformed: {why}");
                            self.problem(StatusCode::BAD_REQUEST, "malformed-request", &detail, &judgement)
                        }
                    };
                }
                // What failed (a refused connection, a certificate, a reset) is the operator's to
                // read, not the client's: the client gets the id of the log line.
                let id = crate::server::judge::RequestId::next();
                self.failures.failed(&e.to_string(), id, judgement.limiter.clock());
                let detail = "the upstream could not be reached; the server's log has the cause under this request id";
                let mut r = crate::server::judge::problem_for_the_log(
                    StatusCode::BAD_GATEWAY,
                    "upstream-unavailable",
                    detail,
                    &id,
                );
                defer_rate_headers(&mut r, self.shared.style, &judgement);
                return r;
            }
        };
        if parts.status == StatusCode::SWITCHING_PROTOCOLS && !upgrade {
            // A switch nobody asked for (hyper's client passes it on; the connection read here
            // refuses it): what follows is not HTTP, and is not passed on as a response.
            let id = crate::server::judge::RequestId::next();
            self.failures.failed("the upstream switched protocols unasked", id, judgement.limiter.clock());
            let detail = "the upstream could not be reached; the server's log has the cause under this request id";
            let mut r =
                crate::server::judge::problem_for_the_log(StatusCode::BAD_GATEWAY, "upstream-unavailable", detail, &id);
            defer_rate_headers(&mut r, self.shared.style, &judgement);
            return r;
        }
        if fields.is_none() && parts.headers.contains_key(header::TRANSFER_ENCODING) {
            // hyper's client framed the body by its chunks (RFC 9112 §6.3): a `Content-Length`
            // beside them is not the body's length, and a proxy must not pass it on.
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        // The response head settles what waited for it; an error above dropped the reservations,
        // which commits them (the answer never came).
        let reservations = std::mem::take(&mut judgement.decision.reservations);
        // The upstream's fields are passed on as the list they were read into, unless something
        // here looks them up or takes some out: then they are a map, as hyper's client gives.
        let fields = match fields {
            Some(f) if f.plain() && reservations.is_empty() && self.strip_headers.is_empty() => Some(f),
            Some(f) => {
                parts.headers = f.to_map();
                None
            }
            None => None,
        };
        if !reservations.is_empty() {
            reservations.settle(parts.status.as_u16(), |name| reported(&parts.headers, name));
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
            let mut body = body;
            if let UpstreamBody::Pooled { checkin, .. } = &mut body {
                checkin.take();
            }
            return self.tunnel(Response::from_parts(parts, ()), client_upgrade, permits, holds, &judgement);
        }
        if fields.is_none() {
            strip_hop_by_hop(&mut parts.headers, None);
        }
        let body = ProxyBody::upstream(body, fields, permits, strip_trailers, holds.upstreaming);
        let mut response = Response::from_parts(parts, body);
        defer_rate_headers(&mut response, self.shared.style, &judgement);
        response
    }

    /// The answer to a request the upstream budgets have no room for: a 503 at once, counted by
    /// no bound, that asks the client to come back in a second (as a connection over a cap is
    /// told), logged at most a line a period.
    fn over_capacity(&self, cap: Refused, peer: SocketAddr) -> Response<ProxyBody> {
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

    /// A problem of opbound's own for a request that was allowed: it still says what is left.
    fn problem(&self, status: StatusCode, kind: &str, detail: &str, judgement: &Judgement) -> Response<ProxyBody> {
        let mut r = problem(status, kind, detail);
        defer_rate_headers(&mut r, self.shared.style, judgement);
        r
    }

    /// Passes a protocol switch (WebSocket) through: both upgraded connections are spliced. The
    /// tunnel keeps what the request held (its permits, its place at the upstream, and the client
    /// connection's place under the caps) until either side closes it, or the server stops.
    fn tunnel(
        &self,
        mut upstream_response: Response<()>,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
        permits: crate::engine::Permits,
        holds: Holds,
        judgement: &Judgement,
    ) -> Response<ProxyBody> {
        let upstream_upgrade = hyper::upgrade::on(&mut upstream_response);
        let (parts, _) = upstream_response.into_parts();
        if let Some(client_upgrade) = client_upgrade {
            let slot = holds.peer.hold();
            let stopped = holds.peer.stopped();
            tokio::spawn(async move {
                let (client, upstream) = match tokio::try_join!(client_upgrade, upstream_upgrade) {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::debug!(error = %e, "upgrade failed");
                        return;
                    }
                };
                let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
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

/// The shortest time between two lines about failed upstream requests: an upstream that is down
/// fails every request, and a warning each would bury the log.
const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(5);

/// Upstream requests that failed (no answer, not a timeout): the first is logged at once with its
/// cause, then at most one line every `FAILURE_LOG_PERIOD`, each with how many failed unlogged
/// since the last; once the failures stop, one line with those left.
struct UpstreamFailures(Arc<Throttle>);

impl Default for UpstreamFailures {
    fn default() -> UpstreamFailures {
        UpstreamFailures(Arc::new(Throttle::new(FAILURE_LOG_PERIOD)))
    }
}

impl UpstreamFailures {
    /// A request the upstream did not answer, for `cause`, at the time `clock` reads: every one
    /// at DEBUG, the first of each period at WARN, each with the id its client was given.
    fn failed(&self, cause: &str, id: crate::server::judge::RequestId, clock: &Arc<dyn Clock>) {
        tracing::debug!(request_id = %id, error = %cause, "upstream request failed");
        let Some(line) = self.0.occurred(|| clock.now()) else { return };
        tracing::warn!(request_id = %id, error = %cause, suppressed = line.suppressed, "upstream request failed");
        // Outside a runtime (a unit test) there is no one to report the rest; the next line will.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let clock = clock.clone();
            runtime.spawn(throttle::report_rest(
                self.0.clone(),
                move || clock.now(),
                line,
                |line| {
                    tracing::warn!(
                        suppressed = line.suppressed,
                        "upstream requests failed, not logged one by one since the last line"
                    );
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests;
