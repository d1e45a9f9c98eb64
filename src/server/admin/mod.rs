//! The admin listener, apart from traffic: `/healthz`, `/metrics` (Prometheus text), `/limits`
//! (the policy and its warnings as JSON), and `/`, a console of every operation with its bounds
//! and live counts.

pub(crate) mod counters;
pub(crate) mod operator;
pub(crate) mod quota;
pub(crate) mod scrape;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};

use crate::policy::{Mode, Policy, coverage, report};
use crate::server::body::ProxyBody;
use crate::server::judge::Shared;
use crate::server::net::request_body::RequestBody;
use crate::server::observe::metrics::{BoundStats, OperationStats, unix_now};

const CONSOLE: &str = include_str!("console.html");

/// The admin listener's state.
pub(crate) struct Admin {
    /// What the traffic listener serves with.
    pub shared: Arc<Shared>,
    /// The token a counter reset or quota adjustment must present (`--admin-token-file`); none:
    /// they are refused.
    pub token: Option<String>,
}

impl Admin {
    /// Answers one request to the admin listener.
    pub(crate) async fn handle(
        self: Arc<Self>,
        mut req: Request<RequestBody>,
        _peer: SocketAddr,
    ) -> Response<ProxyBody> {
        // The admin API reads its token off the map.
        crate::server::net::request_body::fields_in_map(&mut req);
        match req.uri().path() {
            "/healthz" => respond(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            "/metrics" => respond(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                crate::server::admin::scrape::render(self.shared.clone()),
            ),
            "/limits" => respond(StatusCode::OK, "application/json", self.limits().to_string()),
            "/console.json" => respond(StatusCode::OK, "application/json", self.console().to_string()),
            "/" => respond(StatusCode::OK, "text/html; charset=utf-8", CONSOLE.to_string()),
            "/counters" => {
                let auth = req.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
                let (status, body) = crate::server::admin::counters::handle(
                    &self.shared,
                    self.token.as_deref(),
                    req.method(),
                    req.uri().query(),
                    auth,
                )
                .await;
                respond(status, "application/json", body.to_string())
            }
            "/quota" => {
                let (parts, body) = req.into_parts();
                let auth = parts.headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
                let Ok(body) = Limited::new(body, crate::server::admin::quota::MAX_BODY).collect().await else {
                    let detail = format!(
                        "the body is not readable or larger than {} bytes",
                        crate::server::admin::quota::MAX_BODY
                    );
                    let (status, body) = crate::server::admin::operator::error(StatusCode::PAYLOAD_TOO_LARGE, &detail);
                    return respond(status, "application/json", body.to_string());
                };
                let (status, body) = crate::server::admin::quota::handle(
                    &self.shared,
                    self.token.as_deref(),
                    &parts.method,
                    parts.uri.query(),
                    auth,
                    &body.to_bytes(),
                )
                .await;
                respond(status, "application/json", body.to_string())
            }
            _ => respond(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n".into()),
        }
    }

    fn scope(&self) -> (bool, String) {
        let store = &self.shared.store;
        if !store.shared() {
            return (
                true,
                "Counts and limits are per instance: with the in-memory store each opbound instance counts on its own, so N instances admit up to N times each limit.".to_string(),
            );
        }
        let state = if store.reachable() {
            "reachable"
        } else {
            "unreachable now: bounds follow their on-store-error (open, closed or local)"
        };
        (
            false,
            format!(
                "Counts are shared by every instance using the store {} ({state}): a limit means the same on all of them. The allowed and refused numbers on this page are this instance's.",
                store.describe()
            ),
        )
    }

    /// The compiled policy and its warnings: `route_bounds` and `operations` are what
    /// `opbound routes --json` prints.
    fn limits(&self) -> Value {
        let active = self.shared.active.load();
        let policy = active.limiter.policy();
        let (per_instance, scope) = self.scope();
        let mut routes = report::routes(policy);
        json!({
            "spec": self.shared.spec,
            "version": policy.version.label(),
            "per_instance": per_instance,
            "scope": scope,
            "route_bounds": routes["route_bounds"].take(),
            "operations": routes["operations"].take(),
            "warnings": policy.warnings,
        })
    }

    /// What the console shows: the status an operator looks at first (the store, the last
    /// reload), then every operation with its bounds and live counts. The page orders and filters
    /// the rows, so this stays in policy order.
    fn console(&self) -> Value {
        let active = self.shared.active.load();
        let policy = active.limiter.policy();
        let stats = &active.stats;
        let get = |c: &Arc<std::sync::atomic::AtomicU64>| c.load(Ordering::Relaxed);
        let bound = |b: &BoundStats| bound_json(policy, b, get(&b.allowed), get(&b.refused), get(&b.shadow_refused));
        let route_bounds: Vec<Value> = policy
            .route_bounds
            .iter()
            .map(|&rb| {
                // A route bound counts on every operation: add them up.
                let rows = stats.operations.iter().flat_map(|o| o.bounds.iter().filter(move |b| b.bound == rb));
                let (mut a, mut r, mut s) = (0, 0, 0);
                for b in rows {
                    a += get(&b.allowed);
                    r += get(&b.refused);
                    s += get(&b.shadow_refused);
                }
                bound_json(policy, &BoundStats::new(rb, policy.bounds[rb].id.clone()), a, r, s)
            })
            .collect();
        let op_row = |o: &OperationStats| {
            let (route, own): (Vec<&BoundStats>, Vec<&BoundStats>) =
                o.bounds.iter().partition(|b| policy.route_bounds.contains(&b.bound));
            // The route bounds are described once, above the table; a row names one only where it
            // counted something, so a refusal there says which bound refused.
            let route_counts: Vec<Value> = route
                .into_iter()
                .map(|b| (b, get(&b.allowed), get(&b.refused), get(&b.shadow_refused)))
                .filter(|&(_, a, r, s)| a + r + s > 0)
                .map(|(b, a, r, s)| json!({"id": b.id, "allowed": a, "refused": r, "shadow_refused": s}))
                .collect();
            json!({
                "id": o.id,
                "allowed": get(&o.allowed),
                "limited": get(&o.limited),
                "missing_key": get(&o.missing_key),
                "unavailable": get(&o.unavailable),
                "bounds": own.into_iter().map(bound).collect::<Vec<_>>(),
                "route_counts": route_counts,
            })
        };
        let operations: Vec<Value> = policy
            .operations
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let mut row = op_row(&stats.operations[Some(i)]);
                row["method"] = json!(op.method);
                row["template"] = json!(op.template);
                row["routable"] = json!(op.routable);
                row["open"] = json!(op.routable && coverage::is_open(policy, i));
                row
            })
            .collect();
        let unmatched = op_row(&stats.operations[None]);
        json!({
            "spec": self.shared.spec,
            "version": policy.version.label(),
            "bounds": policy.bounds.len(),
            "now": unix_now(),
            "store": self.store_status(),
            "reload": self.reload_status(),
            "warnings": self.console_warnings(policy),
            "route_bounds": route_bounds,
            "operations": operations,
            "unmatched": unmatched,
        })
    }

    /// Where counts live, and whether the store answers now. `note` is the one place the console
    /// says what that means for the numbers (per instance, or shared).
    fn store_status(&self) -> Value {
        match &self.shared.store {
            crate::store::Store::Memory => {
                let (per_instance, note) = self.scope();
                json!({"kind": "memory", "target": "memory", "per_instance": per_instance, "up": true, "note": note})
            }
            crate::store::Store::Redis(r) => {
                let up = r.stats.up.load(Ordering::Relaxed);
                let target = r.target.display();
                let mut note = format!(
                    "Counts in {target} are shared by every instance using it: a limit means the same on all of them. The allowed and refused numbers on this page are this instance's."
                );
                if !up {
                    note.push_str(
                        " While it (or one of its nodes) does not answer, bounds follow their on-store-error (open, closed or local) for the keys it holds; the other nodes count as usual.",
                    );
                }
                json!({
                    "kind": "redis",
                    "target": target,
                    "per_instance": false,
                    "up": up,
                    "errors": r.stats.errors.load(Ordering::Relaxed),
                    "fallbacks": r.stats.fallbacks.load(Ordering::Relaxed),
                    "nodes": r.nodes().into_iter().map(|(node, up)| json!({"node": node, "up": up})).collect::<Vec<_>>(),
                    "note": note,
                })
            }
        }
    }

    /// Whether the spec on disk is the one serving, and the last refusal with its reason, which
    /// stays after a later success so an operator can still read what went wrong.
    fn reload_status(&self) -> Value {
        let m = &self.shared.metrics;
        let refusal = m.last_reload_refusal().map(|r| json!({"at": r.at, "error": r.error}));
        json!({
            "ok": m.last_reload_successful.load(Ordering::Relaxed),
            "applied": m.reloads.load(Ordering::Relaxed),
            "refused": m.reload_failures.load(Ordering::Relaxed),
            "last_success": m.last_reload_success.load(Ordering::Relaxed),
            "last_refusal": refusal,
        })
    }

    /// The policy's warnings, less the one the store status already gives: with the in-memory
    /// store, the page would otherwise say twice that counts are per instance.
    fn console_warnings(&self, policy: &Policy) -> Vec<String> {
        let memory = matches!(self.shared.store, crate::store::Store::Memory);
        policy
            .warnings
            .iter()
            .filter(|w| !(memory && w.pointer.is_empty() && w.message.starts_with(PER_INSTANCE_WARNING)))
            .map(|w| w.to_string())
            .collect()
    }
}

/// How the policy's deployment warning about the in-memory store begins (`policy::compile`).
const PER_INSTANCE_WARNING: &str = "counts are per instance";

fn bound_json(policy: &Policy, b: &BoundStats, allowed: u64, refused: u64, shadow_refused: u64) -> Value {
    let def = &policy.bounds[b.bound].def;
    json!({
        "id": b.id,
        "description": def.describe(),
        "audience": def.audience(),
        "mode": if def.mode == Mode::Shadow { "shadow" } else { "enforce" },
        // A quota is read by its period, not a window: "500 per P1M (calendar, Europe/Berlin)".
        "period": def.algorithm.periods().map(|p| format!("{} per {} ({}, {})", def.limit, p.period(), p.reset(), p.zone().name())),
        "allowed": allowed,
        "refused": refused,
        "shadow_refused": shadow_refused,
    })
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::full(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
