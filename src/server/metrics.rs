//! What the admin listener reports: counts per operation and bound, decision latency, keys and
//! overflow per bound, reloads. The request path only adds to atomics; prometheus-client encodes
//! them when `/metrics` is scraped. Labels come from the spec, never from callers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::refusal_log::Throttle;
use crate::engine::{Decision, Limiter, Outcome};
use crate::latency::{Latency, Snapshot};
use crate::policy::{BoundIndex, PerOperation, Policy};

type Cell = Arc<AtomicU64>;

fn bump(c: &Cell) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Counts for one bound on one operation.
#[derive(Clone, Debug)]
pub struct BoundStats {
    /// The bound counted.
    pub bound: BoundIndex,
    /// The bound's id, the metric label.
    pub id: String,
    /// Requests this bound admitted and that went through.
    pub allowed: Cell,
    /// Requests this bound refused.
    pub refused: Cell,
    /// Requests a shadow-mode bound would have refused.
    pub shadow_refused: Cell,
}

impl BoundStats {
    /// Counts of a bound starting at zero.
    pub fn new(bound: BoundIndex, id: String) -> BoundStats {
        BoundStats { bound, id, allowed: Cell::default(), refused: Cell::default(), shadow_refused: Cell::default() }
    }
}

/// Counts for one operation (or for requests that matched none).
#[derive(Clone, Debug, Default)]
pub struct OperationStats {
    /// The operation's id (`-` for requests that matched none), the metric label.
    pub id: String,
    /// Requests that went through.
    pub allowed: Cell,
    /// Requests refused with 429 (or a bound's own status).
    pub limited: Cell,
    /// Requests refused with 400 for a missing or unclear key.
    pub missing_key: Cell,
    /// Refused because the shared store could not answer a bound that fails closed.
    pub unavailable: Cell,
    /// Each bound that applies to the operation, route bounds included.
    pub bounds: Vec<BoundStats>,
}

/// The counts of one policy. Rebuilt on reload, keeping the cells of every operation and bound
/// whose id did not change, so counters never go backwards.
#[derive(Debug, Default)]
pub struct Stats {
    /// One per operation, and one for requests that matched no operation.
    pub operations: PerOperation<OperationStats>,
    /// When each bound (by index in the policy) may log its next refusal. Kept across reloads
    /// like the counts, so a reload in a flood does not add lines.
    pub refusals: Vec<Arc<Throttle>>,
}

/// The name the unmatched row goes by.
pub(crate) const UNMATCHED: &str = "-";

impl Stats {
    /// Counts for `policy`, carrying over the cells of operations and bounds that `previous` had.
    pub fn new(policy: &Policy, previous: Option<&Stats>) -> Stats {
        let keep = |id: &str| previous.and_then(|p| p.operations.iter().find(|o| o.id == id));
        let operations = PerOperation::new(policy, |op| {
            let id = op.map_or(UNMATCHED, |o| policy.operations[o].id.as_str());
            let old = keep(id);
            let bounds = policy
                .bounds_for(op)
                .map(|b| {
                    let bid = &policy.bounds[b].id;
                    match old.and_then(|o| o.bounds.iter().find(|s| &s.id == bid)) {
                        Some(s) => BoundStats { bound: b, ..s.clone() },
                        None => BoundStats::new(b, bid.clone()),
                    }
                })
                .collect();
            match old {
                Some(o) => OperationStats { bounds, ..o.clone() },
                None => OperationStats { id: id.to_string(), bounds, ..OperationStats::default() },
            }
        });
        // Bounds are found by id in the rows, the only place the previous policy's ids are kept.
        let throttles: HashMap<&str, &Arc<Throttle>> = previous
            .iter()
            .flat_map(|p| {
                p.operations
                    .iter()
                    .flat_map(|o| &o.bounds)
                    .filter_map(|b| Some((b.id.as_str(), p.refusals.get(b.bound.index())?)))
            })
            .collect();
        let refusals = policy
            .bounds
            .iter()
            .map(|b| throttles.get(b.id.as_str()).map_or_else(Default::default, |t| Arc::clone(t)))
            .collect();
        Stats { operations, refusals }
    }

    /// Counts a decision: the request's outcome, and each bound's part in it.
    pub fn record(&self, operation: Option<usize>, decision: &Decision) {
        let Some(op) = self.operations.get(operation) else {
            return;
        };
        match &decision.outcome {
            Outcome::Allowed => bump(&op.allowed),
            Outcome::Limited { .. } => bump(&op.limited),
            // Both are a 400 for how the request carries a key.
            Outcome::MissingKey { .. } | Outcome::UnclearKey { .. } => bump(&op.missing_key),
            Outcome::Unavailable { .. } => bump(&op.unavailable),
        }
        let refused_by = match decision.outcome {
            Outcome::Limited { bound } => Some(bound),
            _ => None,
        };
        for v in &decision.verdicts {
            let Some(s) = op.bounds.iter().find(|s| s.bound == v.bound) else { continue };
            if v.shadow && !v.admitted {
                bump(&s.shadow_refused);
            } else if refused_by == Some(v.bound) {
                bump(&s.refused);
            } else if decision.allowed() && v.admitted {
                bump(&s.allowed);
            }
        }
    }
}

/// Process-wide counters that outlive reloads.
#[derive(Debug)]
pub struct Metrics {
    /// How long routing and deciding took.
    pub latency: Latency,
    /// Reloads that took effect.
    pub reloads: AtomicU64,
    /// Reloads refused; the previous policy kept serving.
    pub reload_failures: AtomicU64,
    /// Whether the last reload left the spec on disk serving (false: it was refused).
    pub last_reload_successful: AtomicBool,
    /// Unix seconds of the last reload that left the spec on disk serving.
    pub last_reload_success: AtomicU64,
    /// The last reload refused, kept after a later success: the console shows why the spec on
    /// disk did not serve, which a counter cannot say. Locked only by reloads and the console.
    last_reload_refusal: Mutex<Option<RefusedReload>>,
}

/// A reload that was refused: when, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedReload {
    /// Unix seconds.
    pub at: u64,
    /// The reason, as logged.
    pub error: String,
}

impl Default for Metrics {
    /// A server's metrics start with the spec it loaded to start, which counts as the first
    /// successful load (as Prometheus counts its own configuration).
    fn default() -> Metrics {
        let metrics = Metrics {
            latency: Latency::default(),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            last_reload_successful: AtomicBool::new(false),
            last_reload_success: AtomicU64::new(0),
            last_reload_refusal: Mutex::new(None),
        };
        metrics.reload_succeeded();
        metrics
    }
}

impl Metrics {
    /// The spec on disk serves, now.
    pub fn reload_succeeded(&self) {
        self.last_reload_success.store(unix_now(), Ordering::Relaxed);
        self.last_reload_successful.store(true, Ordering::Relaxed);
    }

    /// The spec on disk was refused, for `error`; an older one serves.
    pub fn reload_failed(&self, error: &str) {
        self.reload_failures.fetch_add(1, Ordering::Relaxed);
        self.last_reload_successful.store(false, Ordering::Relaxed);
        let refusal = RefusedReload { at: unix_now(), error: error.to_string() };
        *self.last_reload_refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(refusal);
    }

    /// The last reload refused, if any was.
    pub fn last_reload_refusal(&self) -> Option<RefusedReload> {
        self.last_reload_refusal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Seconds since the Unix epoch, by the system clock (0 if it is set before 1970).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What a scrape reads the current policy's numbers from.
pub(crate) trait Source: Send + Sync + 'static {
    /// The policy being served and its counts.
    fn current(&self) -> (Arc<Limiter>, Arc<Stats>);
    /// The counters that outlive reloads.
    fn metrics(&self) -> &Metrics;
    /// Where counters live.
    fn store(&self) -> &crate::store::Store;
}

/// Encodes everything on each scrape.
pub(crate) struct Scrape<S: Source>(pub Arc<S>);

impl<S: Source> std::fmt::Debug for Scrape<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, rows: &[(Vec<(&str, String)>, u64)]) -> std::fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, rows: &[(Vec<(&str, String)>, i64)]) -> std::fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn histogram(e: &mut DescriptorEncoder, name: &str, help: &str, l: &Latency) -> std::fmt::Result {
    let Snapshot { buckets, count, sum } = l.snapshot();
    let mut hist = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    hist.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
}

impl<S: Source> Collector for Scrape<S> {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (limiter, stats) = self.0.current();
        let policy = limiter.policy();
        let get = |c: &Cell| c.load(Ordering::Relaxed);

        // A series only for what happened: every operation × bound × outcome up front is
        // thousands of zeros on a large spec. What can appear is still bounded by the spec.
        let mut requests = Vec::new();
        let mut decisions = Vec::new();
        for op in &stats.operations {
            let outcomes = [
                ("allowed", &op.allowed),
                ("limited", &op.limited),
                ("missing_key", &op.missing_key),
                ("unavailable", &op.unavailable),
            ];
            for (outcome, c) in outcomes {
                let n = get(c);
                if n > 0 {
                    requests.push((vec![("operation", op.id.clone()), ("outcome", outcome.to_string())], n));
                }
            }
            for b in &op.bounds {
                for (outcome, c) in
                    [("allowed", &b.allowed), ("refused", &b.refused), ("shadow_refused", &b.shadow_refused)]
                {
                    let n = get(c);
                    if n > 0 {
                        let labels = vec![
                            ("operation", op.id.clone()),
                            ("bound", b.id.clone()),
                            ("outcome", outcome.to_string()),
                        ];
                        decisions.push((labels, n));
                    }
                }
            }
        }
        counter(
            &mut e,
            "opbound_requests",
            "Requests by operation and outcome (allowed, limited, missing_key).",
            &requests,
        )?;
        counter(
            &mut e,
            "opbound_decisions",
            "Each bound's part in decisions, by operation, bound and outcome.",
            &decisions,
        )?;

        let m = self.0.metrics();
        histogram(
            &mut e,
            "opbound_decision_duration_seconds",
            "Time to route and decide a request, identity included.",
            &m.latency,
        )?;

        let per_bound = |f: &dyn Fn(BoundIndex) -> i64| -> Vec<(Vec<(&str, String)>, i64)> {
            policy.indexed_bounds().map(|(i, b)| (vec![("bound", b.id.clone())], f(i))).collect()
        };
        gauge(
            &mut e,
            "opbound_tracked_keys",
            "Callers a bound tracks now.",
            &per_bound(&|i| limiter.table(i).tracked() as i64),
        )?;
        gauge(
            &mut e,
            "opbound_max_keys",
            "The most callers a bound tracks (max-keys).",
            &per_bound(&|i| i64::from(policy.bounds[i].def.table_size())),
        )?;
        let overflow: Vec<_> = policy
            .indexed_bounds()
            .map(|(i, b)| (vec![("bound", b.id.clone())], limiter.table(i).overflow_hits()))
            .collect();
        counter(
            &mut e,
            "opbound_overflow_hits",
            "Requests decided by a bound's shared overflow counter because its table was full.",
            &overflow,
        )?;
        counter(
            &mut e,
            "opbound_reloads",
            "Spec reloads that took effect.",
            &[(vec![("result", "ok".to_string())], m.reloads.load(Ordering::Relaxed))],
        )?;
        counter(
            &mut e,
            "opbound_reload_failures",
            "Spec reloads refused because the new spec did not load; the old policy kept serving.",
            &[(vec![], m.reload_failures.load(Ordering::Relaxed))],
        )?;
        // Named as Prometheus names its own, so the same alerts fit.
        gauge(
            &mut e,
            "opbound_config_last_reload_successful",
            "1 when the spec on disk is the one serving, 0 when its last reload was refused.",
            &[(vec![], i64::from(m.last_reload_successful.load(Ordering::Relaxed)))],
        )?;
        gauge(
            &mut e,
            "opbound_config_last_reload_success_timestamp_seconds",
            "Unix time of the last load or reload that left the spec on disk serving.",
            &[(vec![], m.last_reload_success.load(Ordering::Relaxed) as i64)],
        )?;
        gauge(
            &mut e,
            "opbound_operations",
            "Operations in the policy being served.",
            &[(vec![], policy.operations.len() as i64)],
        )?;
        gauge(&mut e, "opbound_bounds", "Bounds in the policy being served.", &[(vec![], policy.bounds.len() as i64)])?;
        let store = self.0.store();
        gauge(
            &mut e,
            "opbound_store_shared",
            "1 when counts are shared between instances (a Redis store), 0 when they are per instance.",
            &[(vec![("store", store.describe())], i64::from(store.shared()))],
        )?;
        if let Some(status) = store.status(limiter.hasher()) {
            let s = status.stats;
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
            let up = i64::from(status.counting);
            let help = "1 while this instance counts in the store (it answers, and the key secret is shared), 0 while bounds follow on-store-error.";
            gauge(&mut e, "opbound_store_up", help, &[(vec![], up)])?;
            let calls = [(vec![], load(&s.calls))];
            counter(
                &mut e,
                "opbound_store_calls",
                "Script calls to the store (one per decision, per slot on a cluster).",
                &calls,
            )?;
            counter(
                &mut e,
                "opbound_store_errors",
                "Store calls that failed or timed out.",
                &[(vec![], load(&s.errors))],
            )?;
            let fallbacks = [(vec![], load(&s.fallbacks))];
            counter(
                &mut e,
                "opbound_store_fallbacks",
                "Decisions in which some bound followed its on-store-error.",
                &fallbacks,
            )?;
            let hits = [(vec![], load(&s.deny_hits))];
            counter(
                &mut e,
                "opbound_deny_cache_hits",
                "Refusals answered by the local deny cache, without a store call.",
                &hits,
            )?;
            counter(
                &mut e,
                "opbound_store_undo_failures",
                "Undo calls that failed: a request refused by one hash slot stays counted where another admitted it, until its window passes.",
                &[(vec![], s.undo_failures.count())],
            )?;
            counter(
                &mut e,
                "opbound_store_lease_failures",
                "Concurrency lease renewals and releases that failed.",
                &[(vec![], s.lease_failures.count())],
            )?;
            histogram(&mut e, "opbound_store_duration_seconds", "Time of one store call.", &s.latency)?;
        }
        Ok(())
    }
}

/// The Prometheus text of a scrape.
pub(crate) fn render<S: Source>(source: Arc<S>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(source)));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}
