//! The admin listener, apart from traffic: `/healthz`, `/metrics` (Prometheus text), `/limits`
//! (the policy and its warnings as JSON), and `/`, a console of every operation with its bounds
//! and live counts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::Shared;
use super::body::ProxyBody;
use super::metrics::{BoundStats, OperationStats};
use crate::policy::{Mode, Policy, coverage, report};

const CONSOLE: &str = include_str!("console.html");

/// The admin listener's state.
pub struct Admin {
    /// What the traffic listener serves with.
    pub shared: Arc<Shared>,
    /// The token a counter reset must present (`--admin-token-file`); none: resets are refused.
    pub token: Option<String>,
}

impl Admin {
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, _peer: SocketAddr) -> Response<ProxyBody> {
        match req.uri().path() {
            "/healthz" => respond(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            "/metrics" => respond(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                super::metrics::render(self.shared.clone()),
            ),
            "/limits" => respond(StatusCode::OK, "application/json", self.limits().to_string()),
            "/console.json" => respond(StatusCode::OK, "application/json", self.console().to_string()),
            "/" => respond(StatusCode::OK, "text/html; charset=utf-8", CONSOLE.to_string()),
            "/counters" => {
                let auth = req.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
                let (status, body) =
                    super::counters::handle(&self.shared, self.token.as_deref(), req.method(), req.uri().query(), auth)
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
                bound_json(
                    policy,
                    &BoundStats { bound: rb, id: policy.bounds[rb].id.clone(), ..Default::default() },
                    a,
                    r,
                    s,
                )
            })
            .collect();
        let op_row = |o: &OperationStats| {
            let own: Vec<Value> =
                o.bounds.iter().filter(|b| !policy.route_bounds.contains(&b.bound)).map(bound).collect();
            json!({"id": o.id, "allowed": get(&o.allowed), "limited": get(&o.limited), "missing_key": get(&o.missing_key), "bounds": own})
        };
        let operations: Vec<Value> = policy
            .operations
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let mut row = op_row(&stats.operations[i]);
                row["method"] = json!(op.method);
                row["template"] = json!(op.template);
                row["routable"] = json!(op.routable);
                row["open"] = json!(op.routable && coverage::is_open(policy, i));
                row
            })
            .collect();
        let unmatched = stats.operations.last().map(op_row).unwrap_or(Value::Null);
        let (per_instance, scope) = self.scope();
        json!({
            "spec": self.shared.spec,
            "version": policy.version.label(),
            "bounds": policy.bounds.len(),
            "per_instance": per_instance,
            "scope": scope,
            "warnings": policy.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            "route_bounds": route_bounds,
            "operations": operations,
            "unmatched": unmatched,
            "reloads": self.shared.metrics.reloads.load(Ordering::Relaxed),
            "reload_failures": self.shared.metrics.reload_failures.load(Ordering::Relaxed),
        })
    }
}

fn bound_json(policy: &Policy, b: &BoundStats, allowed: u64, refused: u64, shadow_refused: u64) -> Value {
    let def = &policy.bounds[b.bound].def;
    json!({
        "id": b.id,
        "description": def.describe(),
        "audience": def.audience(),
        "mode": if def.mode == Mode::Shadow { "shadow" } else { "enforce" },
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
