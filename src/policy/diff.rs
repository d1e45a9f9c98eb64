//! What a change to the spec does to the limits: bounds added, removed, loosened or tightened,
//! operations that lost or gained every bound, and the counter budget, for review before a deploy.

use std::collections::{BTreeMap, BTreeSet};

use super::{Algorithm, Bound, BoundDef, Missing, Mode, Policy};

/// Which way a change moves a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Direction {
    /// More requests get through than before.
    Loosened,
    /// Fewer requests get through than before.
    Tightened,
    /// Neither more nor fewer, or no way to say (a different key, other callers).
    Changed,
    /// Said differently, with the same requests through: a name, a message, a status; or what
    /// only an overflow or a store failure shows (`max-keys`, `on-store-error`).
    Neutral,
}

/// One field of a bound, before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldChange {
    /// The field as written in `x-rate-limit` (`limit`, `window`, `applies-to`).
    pub field: &'static str,
    /// Its value before, in words (`none` when absent).
    pub old: String,
    /// Its value after.
    pub new: String,
}

/// A bound found under the same id in both specs, with different fields.
#[derive(Clone, Debug)]
pub(crate) struct BoundChange {
    /// The bound's id (`route:perimeter`, `search:0`, `policy:writes`).
    pub id: String,
    /// Which way the change as a whole goes.
    pub direction: Direction,
    /// Every field that differs, in the order of the format's table.
    pub fields: Vec<FieldChange>,
    /// The bound before, in words.
    pub old: String,
    /// The bound after, in words.
    pub new: String,
}

/// An operation, as a reviewer knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OperationRef {
    /// `GET /v1/pets`: method and template, which identify it across specs.
    pub key: String,
    /// Its `operationId`, or `METHOD /template`.
    pub id: String,
    /// The ids of the bounds that can refuse its requests (route bounds included).
    pub bounds: Vec<String>,
}

/// An operation in both specs whose set of bounds changed.
#[derive(Clone, Debug)]
pub(crate) struct Rebounded {
    /// The operation in the new spec.
    pub operation: OperationRef,
    /// The ids of bounds it is now under and was not.
    pub gained: Vec<String>,
    /// The ids of bounds it was under and no longer is.
    pub lost: Vec<String>,
}

/// Everything a change to the spec does to the limits.
#[derive(Clone, Debug, Default)]
pub(crate) struct Diff {
    /// Bounds only in the new spec: `(id, description)`.
    pub added: Vec<(String, String)>,
    /// Bounds only in the old spec: `(id, description)`.
    pub removed: Vec<(String, String)>,
    /// Bounds in both whose fields differ.
    pub changed: Vec<BoundChange>,
    /// Operations that some bound could refuse before, and none can now (the old one's bounds).
    pub unbounded: Vec<OperationRef>,
    /// Operations that no bound could refuse before, and some can now.
    pub newly_bounded: Vec<OperationRef>,
    /// Operations only in the new spec.
    pub operations_added: Vec<OperationRef>,
    /// Operations only in the old spec.
    pub operations_removed: Vec<OperationRef>,
    /// Operations in both, still bounded, under other bounds than before.
    pub rebounded: Vec<Rebounded>,
    /// The counter budget (the sum of `max-keys`) before and after.
    pub budget: (u64, u64),
    /// Enforcing route bounds only in the new spec: every operation is now under each. The
    /// operation lists above still hold them, and a reader is told once (issue 47, item 10).
    pub every_operation_gained: Vec<String>,
    /// Enforcing route bounds only in the old spec: no operation is under them now.
    pub every_operation_lost: Vec<String>,
}

impl Diff {
    /// Whether some operation lost every bound: a change a reviewer must see.
    pub(crate) fn needs_review(&self) -> bool {
        !self.unbounded.is_empty()
    }

    /// Whether the limits are as they were.
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.unbounded.is_empty()
            && self.newly_bounded.is_empty()
            && self.operations_added.is_empty()
            && self.operations_removed.is_empty()
            && self.rebounded.is_empty()
            && self.budget.0 == self.budget.1
    }
}

/// Compares two policies. Bounds are matched by id, as a reload matches them to keep counters
/// (`Limiter::carrying_over`); operations by method and template, since an `operationId` may
/// change with nothing else.
pub(crate) fn diff(old: &Policy, new: &Policy) -> Diff {
    let old_bounds: BTreeMap<&str, &Bound> = old.bounds.iter().map(|b| (b.id.as_str(), b)).collect();
    let new_bounds: BTreeMap<&str, &Bound> = new.bounds.iter().map(|b| (b.id.as_str(), b)).collect();
    let mut d = Diff { budget: (old.counters(), new.counters()), ..Diff::default() };
    for b in &new.bounds {
        match old_bounds.get(b.id.as_str()) {
            None => d.added.push((b.id.clone(), b.def.describe())),
            Some(was) if was.def != b.def => d.changed.push(compare(&b.id, &was.def, &b.def)),
            Some(_) => {}
        }
    }
    for b in &old.bounds {
        if !new_bounds.contains_key(b.id.as_str()) {
            d.removed.push((b.id.clone(), b.def.describe()));
        }
    }

    let old_ops = operations(old);
    let new_ops = operations(new);
    for (key, op) in &new_ops {
        let Some(was) = old_ops.get(key) else {
            d.operations_added.push(op.clone());
            continue;
        };
        match (was.bounds.is_empty(), op.bounds.is_empty()) {
            (false, true) => d.unbounded.push(was.clone()),
            (true, false) => d.newly_bounded.push(op.clone()),
            (false, false) if was.bounds != op.bounds => {
                let before: BTreeSet<&String> = was.bounds.iter().collect();
                let after: BTreeSet<&String> = op.bounds.iter().collect();
                d.rebounded.push(Rebounded {
                    operation: op.clone(),
                    gained: after.difference(&before).map(|s| s.to_string()).collect(),
                    lost: before.difference(&after).map(|s| s.to_string()).collect(),
                });
            }
            _ => {}
        }
    }
    d.operations_removed = old_ops.iter().filter(|(k, _)| !new_ops.contains_key(*k)).map(|(_, o)| o.clone()).collect();
    let (old_route, new_route) = (enforcing_route_bounds(old), enforcing_route_bounds(new));
    d.every_operation_gained = new_route.difference(&old_route).cloned().collect();
    d.every_operation_lost = old_route.difference(&new_route).cloned().collect();
    d
}

/// The ids of the route bounds that can refuse: every request meets them.
fn enforcing_route_bounds(policy: &Policy) -> BTreeSet<String> {
    policy
        .route_bounds
        .iter()
        .map(|&b| &policy.bounds[b])
        .filter(|b| b.def.mode == Mode::Enforce)
        .map(|b| b.id.clone())
        .collect()
}

/// Every operation by `METHOD /template`, with the bounds that can refuse it: route bounds and
/// its own, in enforce mode (a shadow bound never refuses).
fn operations(policy: &Policy) -> BTreeMap<String, OperationRef> {
    policy
        .operations
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let mut bounds: Vec<String> = policy
                .bounds_for(Some(i))
                .map(|b| &policy.bounds[b])
                .filter(|b| b.def.mode == Mode::Enforce)
                .map(|b| b.id.clone())
                .collect();
            bounds.sort();
            bounds.dedup();
            let key = format!("{} {}", op.method, op.template);
            (key.clone(), OperationRef { key, id: op.id.clone(), bounds })
        })
        .collect()
}

/// The fields that differ between two versions of one bound, and which way they move it.
fn compare(id: &str, old: &BoundDef, new: &BoundDef) -> BoundChange {
    let mut fields = Vec::new();
    let mut directions = Vec::new();
    let mut field = |name: &'static str, a: String, b: String, direction: Direction| {
        if a != b {
            fields.push(FieldChange { field: name, old: a, new: b });
            directions.push(direction);
        }
    };
    let more_is_looser = |a: u64, b: u64| if b > a { Direction::Loosened } else { Direction::Tightened };
    let same_kind = old.algorithm.name() == new.algorithm.name();
    field("per", old.per.to_string(), new.per.to_string(), Direction::Changed);
    field("algorithm", old.algorithm.name().into(), new.algorithm.name().into(), Direction::Changed);
    // A limit and a window move the rate together: 10 a minute to 20 an hour is tighter.
    let (old_window, new_window) = (old.algorithm.window(), new.algorithm.window());
    let rate = match (old_window, new_window) {
        (Some(a), Some(b)) if same_kind => {
            let before = u128::from(old.limit.get()) * b.duration().as_millis();
            let after = u128::from(new.limit.get()) * a.duration().as_millis();
            Some(if after > before { Direction::Loosened } else { Direction::Tightened })
        }
        _ => None,
    };
    let limit_direction = if same_kind {
        rate.unwrap_or(more_is_looser(old.limit.get().into(), new.limit.get().into()))
    } else {
        Direction::Changed
    };
    field("limit", old.limit.to_string(), new.limit.to_string(), limit_direction);
    let shown = |w: Option<super::Window>| w.map_or_else(|| "none".to_string(), |w| w.to_string());
    field("window", shown(old_window), shown(new_window), rate.unwrap_or(Direction::Changed));
    let burst = |a: &Algorithm| match a {
        Algorithm::TokenBucket { burst, .. } => Some(burst.get()),
        _ => None,
    };
    let (old_burst, new_burst) = (burst(&old.algorithm), burst(&new.algorithm));
    let burst_direction = match (old_burst, new_burst) {
        (Some(a), Some(b)) => more_is_looser(a.into(), b.into()),
        _ => Direction::Changed,
    };
    let shown_n = |n: Option<u32>| n.map_or_else(|| "none".to_string(), |n| n.to_string());
    field("burst", shown_n(old_burst), shown_n(new_burst), burst_direction);
    let periods = |d: &BoundDef| {
        d.algorithm
            .periods()
            .map_or_else(|| "none".to_string(), |p| format!("{} ({}, {})", p.period(), p.reset(), p.zone().name()))
    };
    field("period", periods(old), periods(new), Direction::Changed);
    // A request that weighs more is refused sooner.
    field(
        "cost",
        old.cost.to_string(),
        new.cost.to_string(),
        more_is_looser(new.cost.get().into(), old.cost.get().into()),
    );
    let stated = |d: &BoundDef| {
        d.cost_from.as_ref().map_or_else(|| "none".to_string(), |c| format!("{} (max {})", c.from, c.max))
    };
    field("cost-from", stated(old), stated(new), Direction::Changed);
    field("applies-to", audience(old), audience(new), Direction::Changed);
    field("max-keys", old.max_keys.to_string(), new.max_keys.to_string(), Direction::Neutral);
    // `reject` refuses what `pass` let through uncounted.
    let missing_direction = if new.missing == Missing::Reject { Direction::Tightened } else { Direction::Loosened };
    field(
        "missing",
        format!("{:?}", old.missing).to_lowercase(),
        format!("{:?}", new.missing).to_lowercase(),
        missing_direction,
    );
    let store = |d: &BoundDef| format!("{:?}", d.on_store_error).to_lowercase();
    field("on-store-error", store(old), store(new), Direction::Neutral);
    let mode_direction = if new.mode == Mode::Shadow { Direction::Loosened } else { Direction::Tightened };
    field("mode", format!("{:?}", old.mode).to_lowercase(), format!("{:?}", new.mode).to_lowercase(), mode_direction);
    let status = |d: &BoundDef| d.status.unwrap_or(429).to_string();
    field("status", status(old), status(new), Direction::Neutral);
    let text = |s: &Option<String>| s.clone().unwrap_or_else(|| "none".to_string());
    field("message", text(&old.message), text(&new.message), Direction::Neutral);
    field("name", text(&old.name), text(&new.name), Direction::Neutral);
    let counting = |d: &BoundDef| {
        let when = d.counting.count_when.as_ref().map_or_else(|| "every response".to_string(), |s| s.to_string());
        match &d.counting.settle {
            Some(s) => format!("{when}, settled by {s}"),
            None => when,
        }
    };
    field("count-when", counting(old), counting(new), Direction::Changed);
    // Neutral fields go with whatever the others say; alone, the bound only changed.
    directions.retain(|d| *d != Direction::Neutral);
    let direction = if directions.is_empty() {
        Direction::Changed
    } else if directions.iter().all(|d| *d == Direction::Loosened) {
        Direction::Loosened
    } else if directions.iter().all(|d| *d == Direction::Tightened) {
        Direction::Tightened
    } else {
        Direction::Changed
    };
    BoundChange { id: id.to_string(), direction, fields, old: old.describe(), new: new.describe() }
}

/// `applies-to` in words: `everybody` when it is not written.
fn audience(d: &BoundDef) -> String {
    d.audience().unwrap_or_else(|| "everybody".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Source;

    fn policy(yaml: &str) -> Policy {
        let source = Source::from_text(std::path::Path::new("spec.yaml"), yaml.to_string());
        crate::policy::load_source(source, &crate::policy::Options::default()).expect("valid").policy
    }

    const HEAD: &str = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\n";

    #[test]
    fn limit_and_window_move_the_rate_together() {
        let old = policy(&format!(
            "{HEAD}paths:\n  /a:\n    get:\n      x-rate-limit: {{per: user, limit: 10, window: PT1M}}\n"
        ));
        let new = policy(&format!(
            "{HEAD}paths:\n  /a:\n    get:\n      x-rate-limit: {{per: user, limit: 20, window: PT1H}}\n"
        ));
        let d = diff(&old, &new);
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].direction, Direction::Tightened);
        assert!(!d.needs_review());
    }

    #[test]
    fn an_operation_that_loses_every_bound_needs_review() {
        let old = policy(&format!(
            "{HEAD}paths:\n  /a:\n    get:\n      x-rate-limit: {{per: user, limit: 10, window: PT1M}}\n"
        ));
        let new = policy(&format!("{HEAD}paths:\n  /a:\n    get: {{}}\n"));
        let d = diff(&old, &new);
        assert!(d.needs_review());
        assert_eq!(d.unbounded[0].key, "GET /a");
        assert_eq!(d.removed.len(), 1);
    }

    #[test]
    fn shadow_mode_is_a_loosening_that_unbounds() {
        let old = policy(&format!(
            "{HEAD}x-rate-limit: {{per: address, limit: 10, window: PT1M}}\npaths:\n  /a:\n    get: {{}}\n"
        ));
        let new = policy(&format!(
            "{HEAD}x-rate-limit: {{per: address, limit: 10, window: PT1M, mode: shadow}}\npaths:\n  /a:\n    get: {{}}\n"
        ));
        let d = diff(&old, &new);
        assert_eq!(d.changed[0].direction, Direction::Loosened);
        assert!(d.needs_review());
    }
}
