//! `opbound serve`: the reverse proxy. Refuses early, forwards the canonical path, streams bodies
//! both ways, and puts RateLimit headers on every response.

mod answer;
mod failures;
pub(crate) mod rewrite;

use failures::{FAILURE_LOG_PERIOD, UpstreamFailures};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use http::{Request, Response, StatusCode, Uri};

use crate::router::canonical::{EscapedSlashes, canonical_path};
use crate::server::body::ProxyBody;
use crate::server::facts::fields::{Fields, Headers};
use crate::server::facts::reading::canonical_method;
use crate::server::judge::{Asked, Judgement, KeyBody, Shared, problem, refusal};
use crate::server::net::admission::{Peer, Upstreaming};
use crate::server::net::request_body::RequestBody;
use crate::server::observe::request_log::{self, Entry, RequestLog};
use crate::server::proxy::rewrite::{Forwarding, Upgrades, forward_map, write_forwarded};
use crate::server::upstream::Upstream;
use crate::server::upstream::client_body::ClientBody;
use crate::server::upstream::h1;
use crate::server::upstream::pool::Pool;
use crate::server::upstream::response::UpstreamBody;
use crate::throttle::Throttle;

/// `--max-key-body` when not given: 64 KiB, enough for any sign-in or form, small enough to
/// hold for every request in flight.
pub(crate) const DEFAULT_MAX_KEY_BODY: usize = 64 * 1024;

/// `--client-body-timeout` when not given: nginx's `client_body_timeout`.
pub(crate) const DEFAULT_CLIENT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// What the upstream sent back: the response head, its fields when they were read as a list
/// (the head's map then has none), its body, and the client's side of an upgrade.
type Sent = (http::response::Parts, Fields, UpstreamBody, Option<crate::server::net::upgrade::OnUpgrade>);

/// What a request holds while it is at the upstream: its place in the upstream budgets, and the
/// client connection's place under the caps, which an upgrade's tunnel keeps.
struct Holds {
    upstreaming: Upstreaming,
    peer: Peer,
    /// A stream's usage was asked for on the client's behalf: what that adds is taken out of
    /// the answer ([`crate::engine::usage::ask`]).
    asked_usage: bool,
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
    /// How much of a response body is read for what it reports (`--settle-max-bytes`).
    pub settle_limits: crate::engine::usage::Limits,
    /// Whether a stream's usage may be asked for on the client's behalf (not `--no-ask-usage`).
    pub ask_usage: bool,
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
            settle_limits: crate::engine::usage::Limits::default(),
            ask_usage: true,
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
            let holds = Holds { upstreaming, peer: client, asked_usage: false };
            // A clone shares the bytes: the path below borrows them while `parts` moves on.
            let target = parts.uri.clone();
            let path = crate::server::facts::reading::http_scheme(&target)
                .and_then(|()| Ok(canonical_path(target.path(), self.escaped_slashes)?));
            let path = match path {
                Ok(p) => p,
                Err(e) => {
                    if let Some((log, arrived, entry)) = log {
                        let headers = fields.as_ref().map_or(Headers::Map(&parts.headers), Headers::List);
                        *entry = Some(self.malformed(log, arrived, &parts, headers, peer));
                    }
                    return problem(StatusCode::BAD_REQUEST, "malformed-request", &e.to_string());
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
            // A body found broken while it was read for a key is not sent on: the upstream would
            // get part of a request, and might answer it before the break reached it.
            if let Some(fault) = body.broken() {
                return self.client_broke(fault, &judgement);
            }
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
    /// map's are rewritten by ([`write_forwarded`]).
    fn forward(
        &self,
        mut req: Request<ClientBody>,
        fields: Option<Fields>,
        uri: Uri,
        mut holds: Holds,
        judgement: Judgement,
    ) -> impl Future<Output = Response<ProxyBody>> + Send + '_ {
        let peer = holds.peer.addr;
        // Only a switch to a protocol the operator allows is passed on; any other `Upgrade` is
        // stripped and the request forwarded as an ordinary one.
        let switch_to = self.upgrades.asked(req.headers());
        let upgrade = switch_to.is_some();
        let client_upgrade = upgrade.then(|| crate::server::net::upgrade::on(&mut req));
        let (mut parts, mut body) = req.into_parts();
        let peer_trusted = self.shared.trusted.trusts(crate::server::facts::address::canonical(peer.ip()));
        let asked = h1::Asked {
            head: parts.method == http::Method::HEAD,
            connect: parts.method == http::Method::CONNECT,
            switch: upgrade,
        };
        let mut whole = body.take_whole();
        let asks = self.ask_usage
            && judgement.operation.is_some_and(|op| judgement.limiter.policy().operations[op].asks_usage);
        if let Some(asked) = whole.as_deref().filter(|_| asks).and_then(crate::engine::usage::ask::ask) {
            whole = Some(asked.into());
            holds.asked_usage = true;
        }
        // A body taken whole was read without a fault; one streamed may still meet one.
        let client_fault = whole.is_none().then(|| body.fault());
        let forwarding =
            Forwarding { peer, peer_trusted, identity: &self.shared.identity.headers, host: self.host.as_ref() };
        if fields.is_none() {
            forward_map(&mut parts.headers, &forwarding, switch_to);
        }
        parts.uri = uri;
        // Upstreams speak HTTP/1.1 whatever the client spoke.
        parts.version = http::Version::HTTP_11;
        async move {
            let mut head = crate::server::buffers::take(512 + whole.as_ref().map_or(0, |w| w.len().min(16 * 1024)));
            h1::write_request_line(&parts, &mut head);
            let had_length = match &fields {
                Some(list) => write_forwarded(list, &forwarding, &mut head),
                None => h1::write_fields(&parts.headers, &mut head),
            };
            // Written: the fields are done with, their map kept for the next request.
            crate::server::buffers::give_map(std::mem::take(&mut parts.headers));
            drop(fields);
            let sent = match whole {
                // The usual request: its body goes with its head.
                Some(whole) => {
                    let rest = h1::end_request(&whole, had_length, &mut head).then_some(&whole[..]);
                    let idempotent = parts.method.is_idempotent();
                    // The exchange keeps the response timeout itself, on its connection's timer.
                    let timeout = self.upstream.response_timeout;
                    let exchange = self.pool.exchange(&head, rest, asked, idempotent, timeout);
                    Ok(exchange.await)
                }
                // A body streamed as it comes, framed by its length when it is known.
                None => {
                    let chunked = h1::end_streamed(hyper::body::Body::size_hint(&body).exact(), &mut head);
                    // Boxed: few requests take this way.
                    let send = Box::pin(self.pool.exchange_streamed(&head, &mut body, chunked, asked));
                    tokio::time::timeout(self.upstream.response_timeout, send).await
                }
            };
            let sent = sent.map(|r| r.map(|(parts, fields, body)| (parts, fields, UpstreamBody(body), client_upgrade)));
            self.answer(sent, client_fault.as_deref(), judgement, upgrade, holds)
        }
    }
}

#[cfg(test)]
mod tests;
