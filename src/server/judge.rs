//! A request judged: the policy being served with its counts (`Active`), what every handler
//! shares (`Shared`), the judgement of one request, and the responses that say it (refusals,
//! problems, the request id an operator finds in the log).

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::engine::headers::{self, HeaderStyle};
use crate::engine::{Decision, Limiter, Outcome, Stage, problem};
use crate::request::WithBody;
use crate::server::body::ProxyBody;
use crate::server::facts::address::{self, TrustedProxies};
use crate::server::facts::fields::Headers;
use crate::server::facts::identity::{HeaderFacts, IdentityResolver};
use crate::server::observe::metrics::{Metrics, Stats};
use crate::server::observe::{refusal_log, request_log};
use crate::server::upstream::client_body::ClientBody;
use crate::store::Store;

/// The policy being served, with its counters and its counts. Swapped whole on reload.
pub(crate) struct Active {
    /// The policy and its counters.
    pub limiter: Arc<Limiter>,
    /// What the policy has decided so far, for metrics and the console.
    pub stats: Arc<Stats>,
}

impl Active {
    /// The first policy a server runs.
    pub(crate) fn new(limiter: Limiter) -> Active {
        let stats = Stats::new(limiter.policy(), None);
        Active { limiter: Arc::new(limiter), stats: Arc::new(stats) }
    }
}

/// What every request handler shares.
pub(crate) struct Shared {
    /// The policy being served, swapped whole on reload or rekey.
    pub active: ArcSwap<Active>,
    /// Whose forwarding and identity headers are believed.
    pub trusted: TrustedProxies,
    /// Who the caller is.
    pub identity: IdentityResolver,
    /// Which RateLimit headers responses carry.
    pub style: HeaderStyle,
    /// Counters that outlive reloads.
    pub metrics: Metrics,
    /// Where the spec came from, for the admin pages.
    pub spec: String,
    /// Where counters live.
    pub store: Store,
    /// How writing quota counts behind goes, once a writer runs (the in-memory store with quotas).
    pub state: std::sync::OnceLock<Arc<crate::store::durable::journal::StateStats>>,
    /// The request log (`serve --request-log`), once started.
    pub(crate) request_log: std::sync::OnceLock<Arc<request_log::RequestLog>>,
}

impl Shared {
    /// What handlers share, around a first policy.
    pub(crate) fn new(
        limiter: Limiter,
        trusted: TrustedProxies,
        identity: IdentityResolver,
        style: HeaderStyle,
        spec: String,
        store: Store,
    ) -> Shared {
        Shared {
            active: ArcSwap::from_pointee(Active::new(limiter)),
            trusted,
            identity,
            style,
            metrics: Metrics::default(),
            spec,
            store,
            state: std::sync::OnceLock::new(),
            request_log: std::sync::OnceLock::new(),
        }
    }
}

/// A request judged: the operation it routed to, the client address, and the decision.
pub(crate) struct Judgement {
    /// The limiter the request was decided by.
    pub limiter: Arc<Limiter>,
    /// The operation it routed to; `None` for no operation.
    pub operation: Option<usize>,
    /// The client address, as resolved from the peer and trusted proxies.
    pub client: IpAddr,
    /// What the bounds said.
    pub decision: Decision,
    /// Who the caller is, when some bound of the operation needed to know and it was resolved.
    pub identity: Option<crate::request::Identity>,
    /// The policy it was judged by, with its counts: a refusal is logged through its bound's
    /// throttle there.
    pub active: Arc<Active>,
}

/// The request a service is asked to judge, and who sent it.
pub(crate) struct Asked<'a> {
    /// The method, upper-cased.
    pub method: &'a str,
    /// The canonical path.
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: Headers<'a>,
    /// The client address: the peer's, or what a trusted proxy says it is.
    pub client: IpAddr,
    /// Whether what a trusted proxy says (identity headers) is believed: the headers came from
    /// one.
    pub trusted: bool,
    /// How many requests this one counts as (Envoy's `hits_addend`); 1 for any other.
    pub hits: u32,
    /// The body, when a gateway sent it whole with its question (Envoy's ext_authz with
    /// `with_request_body`); `None` when it sent none, or only part.
    pub body: Option<&'a [u8]>,
}

impl Shared {
    /// Who sent a request that arrived from `peer`: the client address, and whether the
    /// peer is trusted.
    pub(crate) fn caller(&self, peer: IpAddr, headers: Headers<'_>) -> (IpAddr, bool) {
        (self.trusted.client_address(peer, headers), self.trusted.trusts(address::canonical(peer)))
    }
}

/// A request body the proxy may read ahead for the bounds keyed on it, up to `limit` bytes.
pub(crate) struct KeyBody<'a> {
    /// The client's body, which keeps what is read ahead for the upstream.
    pub(crate) body: &'a mut ClientBody,
    /// `--max-key-body`.
    pub(crate) limit: usize,
    /// How long the body may take to arrive (`--header-read-timeout`).
    pub(crate) patience: std::time::Duration,
}

/// The refusal of a request whose body, needed for a key, did not arrive in time: waiting on
/// would let a client hold a decision open at will, and deciding without the key would let it
/// go uncounted by pausing mid-body. `None` when only shadow bounds read the body (they then
/// skip this request).
fn stalled(limiter: &Limiter, operation: Option<usize>, patience: std::time::Duration) -> Option<Decision> {
    let policy = limiter.policy();
    let bound = policy.bounds_for(operation).find(|&b| {
        let def = &policy.bounds[b].def;
        def.needs_body() && def.mode == crate::policy::Mode::Enforce
    })?;
    let why = crate::request::Unclear::Stalled { patience_ms: patience.as_millis().try_into().unwrap_or(u64::MAX) };
    let plan = crate::engine::Plan { rejected: Some(Outcome::UnclearKey { bound, why }), ..Default::default() };
    Some(limiter.peek(&plan))
}

impl Shared {
    /// Decides a request. Identity-free bounds are checked first, before any identity work (in
    /// memory, or against the store's local deny cache, so a Redis decision stays one round trip);
    /// the identity is resolved only when some bound of this operation needs it; the body is read
    /// (from `body`, up to its limit) only when some bound needs it, after every bound that does
    /// not has been looked at. The decision over all bounds is still one: a request refused by
    /// one is counted by none. Without `body` (`opbound decide`) body keys are missing.
    pub(crate) async fn judge(&self, asked: &Asked<'_>, body: Option<KeyBody<'_>>) -> Judgement {
        let started = quanta::Instant::now();
        let active = self.active.load_full();
        let limiter = active.limiter.clone();
        let &Asked { method, path, query, headers, client, trusted, hits, body: given } = asked;
        let facts = HeaderFacts { address: client, headers, query };
        let operation = limiter.policy().route(method, path);
        let (needs_identity, needs_body) = (limiter.needs_identity(operation), limiter.needs_body(operation));
        // A refusal known before the next, costlier step: a rejected plan (a cost above
        // max-cost) or a bound already without room, looked at without counting.
        let refused_early = |plan: &crate::engine::Plan| match plan.rejected {
            Some(_) => Some(limiter.peek(plan)),
            None => self.store.early(&limiter, plan).filter(|d| !d.allowed()),
        };
        let mut identity = None;
        let decision = 'decided: {
            if needs_identity || needs_body {
                let mut early_plan = crate::engine::Plan::default();
                limiter.plan_into(&mut early_plan, operation, &facts, None, Stage::IdentityFree);
                limiter.scale(&mut early_plan, hits);
                if let Some(d) = refused_early(&early_plan) {
                    break 'decided d;
                }
            }
            if needs_identity {
                identity = Some(self.identity.resolve(headers, trusted));
            }
            let mut read = None;
            if needs_body {
                if needs_identity {
                    let mut plan = crate::engine::Plan::default();
                    limiter.plan_into(&mut plan, operation, &facts, identity.as_ref(), Stage::BeforeBody);
                    limiter.scale(&mut plan, hits);
                    if let Some(d) = refused_early(&plan) {
                        break 'decided d;
                    }
                }
                if let Some(KeyBody { body, limit, patience }) = body {
                    // Boxed, as the rare futures below are: every request's future is moved
                    // whole into its box, room for what it never awaits included.
                    match tokio::time::timeout(patience, Box::pin(body.read_ahead(limit))).await {
                        Ok(whole) => read = whole,
                        Err(_) => {
                            if let Some(refused) = stalled(&limiter, operation, patience) {
                                break 'decided refused;
                            }
                        }
                    }
                }
            }
            let facts = WithBody { facts: &facts, body: read.as_deref().or(given.filter(|_| needs_body)) };
            let mut plan = crate::engine::Plan::default();
            limiter.plan_into(&mut plan, operation, &facts, identity.as_ref(), Stage::All);
            limiter.scale(&mut plan, hits);
            self.store.decide(&limiter, &plan).await
        };
        active.stats.record(operation, &decision);
        self.metrics.latency.observe(started.elapsed());
        Judgement { limiter, operation, client, decision, identity, active }
    }

    /// Rebuilds the policy's limiter around a new key secret (the one instances sharing a store
    /// agreed on). Local counters start over: they were keyed by the old secret.
    pub(crate) fn rekey(&self, hasher: crate::engine::KeyHasher) {
        // `rcu`: a reload racing with this one is rebuilt on top of it, not lost.
        self.active.rcu(|old| {
            let limiter = Limiter::new(old.limiter.policy().clone(), old.limiter.clock().clone(), hasher.clone());
            let stats = Stats::new(limiter.policy(), Some(&old.stats));
            Arc::new(Active { limiter: Arc::new(limiter), stats: Arc::new(stats) })
        });
    }

    /// Hashes callers with whatever secret the instances sharing a store agree on, for as long as
    /// the store runs: the one it gives when it first answers (if it was not there at start), or
    /// a new one if the store lost it. Spawned on the current runtime.
    pub(crate) fn follow_store_secret(self: &Arc<Self>, mut secrets: tokio::sync::watch::Receiver<Option<[u8; 16]>>) {
        let shared = self.clone();
        tokio::spawn(async move {
            loop {
                let secret = *secrets.borrow_and_update();
                if let Some(secret) = secret {
                    let hasher = crate::engine::KeyHasher::with_secret(secret);
                    if hasher.id() != shared.active.load().limiter.hasher().id() {
                        shared.rekey(hasher);
                        tracing::info!("caller keys now hash with the secret the instances share");
                    }
                }
                if secrets.changed().await.is_err() {
                    return;
                }
            }
        });
    }
}

impl Judgement {
    /// Logs a refusal: one structured line, unless its bound wrote one less than a second ago;
    /// then it is counted, and the bound's next line says how many were not logged
    /// (`suppressed`). A flood costs a line a second per bound, not one per request.
    pub(crate) fn log_refusal(&self, method: &str, path: &str, status: u16) {
        let policy = self.limiter.policy();
        let index = match &self.decision.outcome {
            Outcome::Limited { bound }
            | Outcome::MissingKey { bound, .. }
            | Outcome::UnclearKey { bound, .. }
            | Outcome::BadCost { bound, .. }
            | Outcome::CostTooHigh { bound, .. }
            | Outcome::Unavailable { bound } => *bound,
            Outcome::Allowed => return,
        };
        if !tracing::enabled!(target: refusal_log::TARGET, tracing::Level::INFO) {
            return;
        }
        let Some(throttle) = self.active.stats.refusals.get(index.index()) else { return };
        let clock = self.limiter.clock();
        let Some(line) = refusal_log::refusal(throttle, clock.as_ref()) else { return };
        let bound = policy.bounds[index].id.as_str();
        let operation = self.operation.map_or("-", |o| policy.operations[o].id.as_str());
        let retry_after = self.decision.report.map(|r| r.retry_after());
        let suppressed = line.suppressed;
        tracing::info!(target: refusal_log::TARGET, status, bound, operation, client = %self.client, method, path, retry_after, suppressed, "refused");
        // Outside a runtime (a unit test) there is no one to report the rest; the next line will.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(refusal_log::report_rest(throttle.clone(), clock.clone(), bound.to_string(), line));
        }
    }
}

/// Gives a response the RateLimit headers of a decision, replacing any the upstream sent, to be
/// written with its head (`body::Deferred`).
pub(crate) fn defer_rate_headers(response: &mut Response<ProxyBody>, style: HeaderStyle, judgement: &Judgement) {
    let pending = headers::Pending::of(style, judgement.limiter.policy(), &judgement.decision);
    response.body_mut().set_rate(pending);
}

/// Sets the RateLimit headers of a decision on a response, replacing any the upstream sent.
pub(crate) fn set_rate_headers(headers: &mut HeaderMap, style: HeaderStyle, judgement: &Judgement) {
    for (name, value) in headers::render(style, judgement.limiter.policy(), &judgement.decision) {
        headers.insert(name, value);
    }
}

/// The refusal response for a decision that was not allowed: its status (or `status` instead),
/// the RateLimit headers, and the problem body.
pub(crate) fn refusal(style: HeaderStyle, judgement: &Judgement, status: Option<StatusCode>) -> Response<ProxyBody> {
    let (code, body) = refusal_body(judgement);
    let mut response = problem_response(status.unwrap_or(code), body);
    defer_rate_headers(&mut response, style, judgement);
    response
}

/// The status and problem body of a decision that was not allowed.
pub(crate) fn refusal_body(judgement: &Judgement) -> (StatusCode, String) {
    let (code, body) = problem::body(judgement.limiter.policy(), judgement.operation, &judgement.decision)
        .unwrap_or((500, String::from("{}")));
    (StatusCode::from_u16(code).unwrap_or(StatusCode::TOO_MANY_REQUESTS), body)
}

/// A problem+json response.
pub(crate) fn problem_response(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static(problem::CONTENT_TYPE));
    response
}

/// A problem response for what is not a refusal: a malformed request, an unreachable upstream.
pub(crate) fn problem(status: StatusCode, kind: &str, detail: &str) -> Response<ProxyBody> {
    problem_response(status, problem_json(status, kind, detail))
}

/// The problem body of [`problem()`].
pub(crate) fn problem_json(status: StatusCode, kind: &str, detail: &str) -> String {
    serde_json::json!({
        "type": format!("tag:opbound.dev,2026:{kind}"),
        "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(),
        "detail": detail,
    })
    .to_string()
}

/// A problem whose cause is for the operator, not the client (an upstream that failed): the
/// client gets a stable type, a fixed detail and the id the log line about it carries.
pub(crate) fn problem_for_the_log(status: StatusCode, kind: &str, detail: &str, id: &RequestId) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "type": format!("tag:opbound.dev,2026:{kind}"),
        "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(),
        "detail": detail,
        "request-id": id.to_string(),
    });
    problem_response(status, body.to_string())
}

/// The id of a request whose failure is logged: unique in this process, and unlike another
/// process's (the sequence starts at a random point).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestId(pub(crate) u64);

impl RequestId {
    pub(crate) fn next() -> RequestId {
        use std::hash::BuildHasher;
        use std::sync::atomic::{AtomicU64, Ordering};
        static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let start = *START.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(std::process::id()));
        // An odd multiplier visits every u64 before repeating: ids differ in every digit, not
        // only the last, so a client sees no count of failures.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        RequestId(start.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
