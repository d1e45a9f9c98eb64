//! Bounds proposed from recorded traffic (`opbound suggest`): per operation and for the route,
//! a percentile of the distribution of callers' busiest windows (measured by `measure.rs`) times
//! headroom, rounded to a number people write.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde_json::{Value, json};

pub use super::measure::{Caller, Measured, Measurements, Settings};

use super::peaks::percentile;
use crate::engine::clock::{Nanos, SECOND};
use crate::policy::Policy;

/// A bound proposed for an operation or the route, with the evidence for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    /// The operation, or `None` for the route.
    pub operation: Option<usize>,
    /// The bound as `x-rate-limit` writes it.
    pub bound: Value,
    /// Its name (`suggested-address`, ...).
    pub name: String,
    /// Why: the numbers it came from.
    pub evidence: Evidence,
}

/// The numbers behind a proposal.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evidence {
    /// Requests and (estimated) callers measured.
    pub requests: u64,
    /// Estimated distinct callers.
    pub callers: u64,
    /// Callers in the sample the percentiles come from.
    pub sampled: usize,
    /// Callers' busiest window at the 50th, 90th and 99th percentile, and the most.
    pub p50: u32,
    /// 90th percentile.
    pub p90: u32,
    /// 99th percentile.
    pub p99: u32,
    /// The busiest caller's busiest window.
    pub max: u32,
    /// The busiest second at the chosen percentile (for bursts).
    pub burst: u32,
    /// Filled in by replaying the annotated spec: requests and callers it refused on this log.
    pub refused: Option<(u64, u64)>,
}

/// An operation whose requests take much longer than most: a candidate for `cost`.
#[derive(Clone, Debug, PartialEq)]
pub struct Heavy {
    /// The operation.
    pub operation: usize,
    /// Its mean duration, and the median of all operations' means.
    pub mean: Nanos,
    /// The median of operations' mean durations.
    pub typical: Nanos,
}

/// The least traffic a proposal is made from.
pub const MIN_REQUESTS: u64 = 20;

/// The fewest keys a proposed bound keeps.
pub const MIN_KEYS: u32 = 100;

/// The keys a bound needs for `callers` callers: twice as many, rounded up, at least
/// [`MIN_KEYS`].
pub fn max_keys(callers: u64) -> u32 {
    round_up((2 * callers) as f64).max(MIN_KEYS)
}

/// The counters a proposed bound's table holds: one for a bound on the route as a whole.
pub fn counters(bound: &Value) -> u64 {
    if bound["per"] == "route" {
        1
    } else {
        bound["max-keys"].as_u64().unwrap_or(u64::from(crate::policy::bound::DEFAULT_MAX_KEYS))
    }
}

/// Drops operations' proposals, least traffic first, until all of them fit `available`
/// counters; the route's are kept (they count every operation's requests). Returns what was
/// dropped.
pub fn fit_budget(proposals: &mut Vec<Proposal>, available: u64) -> Vec<Proposal> {
    let mut total: u64 = proposals.iter().map(|p| counters(&p.bound)).sum();
    let mut dropped = Vec::new();
    while total > available {
        let lightest = proposals
            .iter()
            .enumerate()
            .filter(|(_, p)| p.operation.is_some() && counters(&p.bound) > 1)
            .min_by_key(|(i, p)| (p.evidence.requests, Reverse(*i)))
            .map(|(i, _)| i);
        let Some(i) = lightest else { break };
        let p = proposals.remove(i);
        total -= counters(&p.bound);
        dropped.push(p);
    }
    dropped
}

/// Raises a proposal that refused too much of the traffic it was made from: a limit to the
/// busiest window seen, or twice what it was if that is no higher (a burst, in flight, in
/// step), rounded as proposals are. Returns the limit it had, or `None` when it cannot go higher.
pub fn raise(proposal: &mut Proposal) -> Option<u64> {
    let bound = proposal.bound.as_object_mut()?;
    let old = bound.get("limit")?.as_u64()?;
    let windowed = bound.get("algorithm").is_none_or(|a| a != "concurrency");
    let seen = if windowed { f64::from(proposal.evidence.max) } else { 0.0 };
    let new = u64::from(round_up(seen.max(old as f64 * 2.0)));
    if new <= old {
        return None;
    }
    bound.insert("limit".into(), json!(new));
    if let Some(burst) = bound.get("burst").and_then(Value::as_u64) {
        let scaled = u64::from(round_up(burst as f64 * new as f64 / old as f64)).min(new);
        bound.insert("burst".into(), json!(scaled));
    }
    Some(old)
}

/// Rounds up to a number people write: 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten.
pub fn round_up(x: f64) -> u32 {
    // NaN, and anything up to one, is one.
    if x.is_nan() || x <= 1.0 {
        return 1;
    }
    let mut scale = 1.0;
    while scale * 10.0 <= x {
        scale *= 10.0;
    }
    for step in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        let candidate = step * scale;
        if candidate >= x - 1e-9 {
            // Below ten the steps between whole numbers (1.2, 1.5, 2.5) round up to them.
            return candidate.ceil().min(f64::from(u32::MAX)) as u32;
        }
    }
    (10.0 * scale) as u32
}

/// An ISO 8601 duration for a window in whole seconds.
pub fn iso_window(window: Nanos) -> String {
    let s = (window / SECOND).max(1);
    if s.is_multiple_of(86_400) {
        format!("P{}D", s / 86_400)
    } else if s.is_multiple_of(3600) {
        format!("PT{}H", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("PT{}M", s / 60)
    } else {
        format!("PT{s}S")
    }
}

/// The proposals the measurements support, and the operations heavy enough for a `cost`.
pub fn propose(measurements: &Measurements) -> (Vec<Proposal>, Vec<Heavy>) {
    let settings = &measurements.settings;
    let mut proposals = Vec::new();
    for group in &measurements.groups {
        // Some callers signed in: the address bound is for the others only.
        let signed_in = group.callers.keys().any(|c| matches!(c, Caller::User(_)));
        for (caller, peaks) in &group.callers {
            if peaks.requests < MIN_REQUESTS {
                continue;
            }
            let (all, bursts) = (peaks.peaks(), peaks.bursts());
            let evidence = Evidence {
                requests: peaks.requests,
                callers: peaks.distinct.estimate().max(peaks.sampled() as u64),
                sampled: peaks.sampled(),
                p50: percentile(&all, 50.0),
                p90: percentile(&all, 90.0),
                p99: percentile(&all, 99.0),
                max: all.last().copied().unwrap_or(0),
                burst: percentile(&bursts, settings.percentile),
                refused: None,
            };
            let limit = round_up(f64::from(percentile(&all, settings.percentile)) * settings.headroom);
            let (per, name, applies) = match caller {
                Caller::Address if signed_in => {
                    ("address", "suggested-address".to_string(), Some(json!({"authenticated": false})))
                }
                Caller::Address => ("address", "suggested-address".to_string(), None),
                Caller::User(Some(role)) => ("user", format!("suggested-user-{role}"), Some(json!({"roles": [role]}))),
                Caller::User(None) => ("user", "suggested-user".to_string(), None),
                Caller::Token => ("token", "suggested-token".to_string(), None),
                Caller::Org => ("org", "suggested-org".to_string(), None),
            };
            let mut bound = serde_json::Map::new();
            bound.insert("name".into(), json!(name));
            bound.insert("per".into(), json!(per));
            // A burst well above the window's even pace: a token bucket lets it through.
            let pace = f64::from(limit) * SECOND as f64 / settings.window as f64;
            let burst = round_up(f64::from(evidence.burst) * settings.headroom).min(limit);
            if settings.window > SECOND && f64::from(burst) > 2.0 * pace.max(1.0) {
                bound.insert("algorithm".into(), json!("token-bucket"));
                bound.insert("limit".into(), json!(limit));
                bound.insert("window".into(), json!(iso_window(settings.window)));
                bound.insert("burst".into(), json!(burst));
            } else {
                bound.insert("limit".into(), json!(limit));
                bound.insert("window".into(), json!(iso_window(settings.window)));
            }
            if let Some(applies) = applies {
                bound.insert("applies-to".into(), applies);
            }
            // Room for twice the callers seen: the default (10,000 a bound) on every operation of
            // a large spec asks for more counters than the budget holds.
            bound.insert("max-keys".into(), json!(max_keys(evidence.callers)));
            proposals.push(Proposal { operation: group.operation, bound: Value::Object(bound), name, evidence });
        }
        // Concurrency from observed overlap, where requests overlapped at all.
        if group.requests() >= MIN_REQUESTS && group.most_in_flight() >= 2 {
            let limit = round_up(f64::from(group.in_flight(99.9)) * settings.headroom).max(2);
            let name = String::from("suggested-in-flight");
            let bound = json!({"name": name, "per": "route", "algorithm": "concurrency", "limit": limit});
            let evidence = Evidence {
                requests: group.timed,
                p50: group.in_flight(50.0),
                p90: group.in_flight(90.0),
                p99: group.in_flight(99.0),
                max: group.most_in_flight(),
                ..Evidence::default()
            };
            proposals.push(Proposal { operation: group.operation, bound, name, evidence });
        }
    }
    (proposals, heavy(measurements))
}

/// Operations whose mean duration is at least four times the median operation's.
fn heavy(measurements: &Measurements) -> Vec<Heavy> {
    let means: Vec<(usize, Nanos)> = measurements
        .groups
        .iter()
        .filter(|g| g.timed >= MIN_REQUESTS)
        .filter_map(|g| Some((g.operation?, g.mean_duration()?)))
        .collect();
    if means.len() < 2 {
        return Vec::new();
    }
    let mut sorted: Vec<Nanos> = means.iter().map(|(_, m)| *m).collect();
    sorted.sort_unstable();
    let typical = sorted[(sorted.len() - 1) / 2].max(1);
    means
        .into_iter()
        .filter(|(_, mean)| *mean >= 4 * typical)
        .map(|(operation, mean)| Heavy { operation, mean, typical })
        .collect()
}

/// Writes the proposals into the spec's tree as `x-rate-limit`: on each operation (by its
/// pointer) and at the top for the route. Where bounds are already written they are left alone
/// unless `replace`; the proposals not written are returned.
pub fn annotate(tree: &mut Value, policy: &Policy, proposals: &[Proposal], replace: bool) -> Vec<usize> {
    let mut skipped = Vec::new();
    let mut by_place: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, p) in proposals.iter().enumerate() {
        let place = match p.operation {
            Some(op) => policy.operations[op].pointer.clone(),
            None => String::new(),
        };
        by_place.entry(place).or_default().push(i);
    }
    for (place, indices) in by_place {
        let Some(Value::Object(target)) = tree.pointer_mut(&place) else {
            skipped.extend(indices);
            continue;
        };
        if target.contains_key("x-rate-limit") && !replace {
            skipped.extend(indices);
            continue;
        }
        let rows: Vec<Value> = indices.iter().map(|&i| proposals[i].bound.clone()).collect();
        target.insert("x-rate-limit".into(), Value::Array(rows));
    }
    skipped.sort_unstable();
    skipped
}

/// The proposals as an OpenAPI Overlay (1.0) instead of a copy of the spec: one action per
/// operation (or `$` for route bounds) setting its `x-rate-limit`, preceded, with `replace`, by
/// one removing the bounds written there. Proposals `annotate` would skip are left out too.
pub fn overlay(tree: &Value, policy: &Policy, proposals: &[Proposal], replace: bool, title: &str) -> Value {
    let mut scratch = tree.clone();
    let skipped = annotate(&mut scratch, policy, proposals, replace);
    let mut by_place: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, p) in proposals.iter().enumerate().filter(|(i, _)| !skipped.contains(i)) {
        let place = p.operation.map(|op| policy.operations[op].pointer.clone()).unwrap_or_default();
        by_place.entry(place).or_default().push(i);
    }
    let mut actions = Vec::new();
    for (place, indices) in by_place {
        let target = crate::spec::overlay::json_path_of(&place);
        if tree.pointer(&place).and_then(|t| t.get("x-rate-limit")).is_some() {
            let written = crate::spec::overlay::json_path_of(&crate::spec::pointer::push(&place, "x-rate-limit"));
            actions.push(serde_json::json!({"target": written, "remove": true}));
        }
        let rows: Vec<Value> = indices.iter().map(|&i| proposals[i].bound.clone()).collect();
        actions.push(serde_json::json!({"target": target, "update": {"x-rate-limit": rows}}));
    }
    serde_json::json!({
        "overlay": "1.0.0",
        "info": {"title": title, "version": "1"},
        "actions": actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_up_to_ones_people_write() {
        let cases = [
            (0.0, 1),
            (1.0, 1),
            (1.1, 2),
            (7.0, 8),
            (9.0, 10),
            (11.0, 12),
            (13.0, 15),
            (21.0, 25),
            (26.0, 30),
            (61.0, 80),
            (100.0, 100),
            (101.0, 120),
            (1999.0, 2000),
            (2001.0, 2500),
        ];
        for (x, want) in cases {
            assert_eq!(round_up(x), want, "{x}");
        }
    }

    #[test]
    fn windows_are_written_in_their_largest_whole_unit() {
        assert_eq!(iso_window(SECOND), "PT1S");
        assert_eq!(iso_window(90 * SECOND), "PT90S");
        assert_eq!(iso_window(60 * SECOND), "PT1M");
        assert_eq!(iso_window(7200 * SECOND), "PT2H");
        assert_eq!(iso_window(86_400 * SECOND), "P1D");
    }
}
