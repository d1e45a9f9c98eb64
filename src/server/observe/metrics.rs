//! What the server counts for the admin listener: requests per operation and bound, decision
//! latency, reloads. The request path only adds to atomics; `scrape.rs` encodes them when
//! `/metrics` is scraped. Labels come from the spec, never from callers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::engine::{Decision, Outcome};
use crate::latency::Latency;
use crate::policy::{BoundIndex, PerOperation, Policy};
use crate::throttle::Throttle;

/// One count, shared by the policies a reload carries it across.
pub(crate) type Cell = Arc<AtomicU64>;

fn bump(c: &Cell) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Counts for one bound on one operation.
#[derive(Clone, Debug)]
pub(crate) struct BoundStats {
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
    /// Cost units of the requests this bound admitted and that went through (what a quota
    /// consumed).
    pub consumed: Cell,
}

impl BoundStats {
    /// Counts of a bound starting at zero.
    pub(crate) fn new(bound: BoundIndex, id: String) -> BoundStats {
        BoundStats {
            bound,
            id,
            allowed: Cell::default(),
            refused: Cell::default(),
            shadow_refused: Cell::default(),
            consumed: Cell::default(),
        }
    }
}

/// Counts for one operation (or for requests that matched none).
#[derive(Clone, Debug, Default)]
pub(crate) struct OperationStats {
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
pub(crate) struct Stats {
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
    pub(crate) fn new(policy: &Policy, previous: Option<&Stats>) -> Stats {
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
            .map(|b| {
                throttles
                    .get(b.id.as_str())
                    .map_or_else(|| Arc::new(crate::server::observe::refusal_log::throttle()), |t| Arc::clone(t))
            })
            .collect();
        Stats { operations, refusals }
    }

    /// Counts a decision: the request's outcome, and each bound's part in it.
    pub(crate) fn record(&self, operation: Option<usize>, decision: &Decision) {
        let Some(op) = self.operations.get(operation) else {
            return;
        };
        match &decision.outcome {
            Outcome::Allowed => bump(&op.allowed),
            Outcome::Limited { .. } => bump(&op.limited),
            // Both are a 400 for how the request carries a key.
            Outcome::MissingKey { .. }
            | Outcome::UnclearKey { .. }
            | Outcome::BadCost { .. }
            | Outcome::CostTooHigh { .. } => bump(&op.missing_key),
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
                s.consumed.fetch_add(u64::from(v.cost), Ordering::Relaxed);
            }
        }
    }
}

/// Process-wide counters that outlive reloads.
#[derive(Debug)]
pub(crate) struct Metrics {
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
pub(crate) struct RefusedReload {
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
    pub(crate) fn reload_succeeded(&self) {
        self.last_reload_success.store(unix_now(), Ordering::Relaxed);
        self.last_reload_successful.store(true, Ordering::Relaxed);
    }

    /// The spec on disk was refused, for `error`; an older one serves.
    pub(crate) fn reload_failed(&self, error: &str) {
        self.reload_failures.fetch_add(1, Ordering::Relaxed);
        self.last_reload_successful.store(false, Ordering::Relaxed);
        let refusal = RefusedReload { at: unix_now(), error: error.to_string() };
        *self.last_reload_refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(refusal);
    }

    /// The last reload refused, if any was.
    pub(crate) fn last_reload_refusal(&self) -> Option<RefusedReload> {
        self.last_reload_refusal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Seconds since the Unix epoch, by the system clock (0 if it is set before 1970).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
