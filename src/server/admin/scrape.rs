//! `/metrics`: the Prometheus text of what the server counted, encoded through a
//! prometheus-client `Collector` at scrape time, with the limiter's keys and overflow per bound
//! and the store's activity read then too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::engine::Limiter;
use crate::latency::{Latency, Snapshot};
use crate::policy::BoundIndex;
use crate::server::observe::metrics::{Cell, Metrics, Stats};

/// What a scrape reads the current policy's numbers from.
pub(crate) trait Source: Send + Sync + 'static {
    /// The policy being served and its counts.
    fn current(&self) -> (Arc<Limiter>, Arc<Stats>);
    /// The counters that outlive reloads.
    fn metrics(&self) -> &Metrics;
    /// Where counters live.
    fn store(&self) -> &crate::store::Store;
    /// How writing quota counts behind goes, when something writes them.
    fn state(&self) -> Option<&crate::store::durable::journal::StateStats>;
    /// Request log lines dropped because its writer fell behind, when a request log is kept.
    fn request_log_dropped(&self) -> Option<u64> {
        None
    }
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
            "opbound_settle_unread",
            "Responses a bound settled from the body could not read its usage from (not JSON, compressed, the \
             pointers found nowhere, cut short): max-cost, the estimate, or what was reported so far, was charged.",
            &[(vec![], crate::engine::usage::unread_total())],
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
        if let Some(dropped) = self.0.request_log_dropped() {
            counter(
                &mut e,
                "opbound_request_log_dropped",
                "Request log lines dropped because the writer fell behind the traffic.",
                &[(vec![], dropped)],
            )?;
        }
        gauge(
            &mut e,
            "opbound_operations",
            "Operations in the policy being served.",
            &[(vec![], policy.operations.len() as i64)],
        )?;
        gauge(&mut e, "opbound_bounds", "Bounds in the policy being served.", &[(vec![], policy.bounds.len() as i64)])?;
        // Summed over operations: a route bound counts on each. Labelled by bound, never caller.
        let consumed: Vec<_> = policy
            .indexed_bounds()
            .filter(|(_, b)| b.def.algorithm.periods().is_some())
            .map(|(i, b)| {
                let rows = stats.operations.iter().flat_map(|o| o.bounds.iter().filter(move |s| s.bound == i));
                (vec![("bound", b.id.clone())], rows.map(|s| get(&s.consumed)).sum())
            })
            .collect();
        if !consumed.is_empty() {
            counter(
                &mut e,
                "opbound_quota_consumed",
                "Cost units quota bounds admitted, by bound (this instance's, since it started).",
                &consumed,
            )?;
        }
        if let Some(state) = self.0.state() {
            histogram(
                &mut e,
                "opbound_state_sync_seconds",
                "Time of one write of quota counts to the state directory.",
                &state.latency,
            )?;
            counter(
                &mut e,
                "opbound_state_sync_failures",
                "Writes of quota counts to the state directory that failed; their changes wait for the next.",
                &[(vec![], state.failures.load(Ordering::Relaxed))],
            )?;
        }
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
            let nodes: Vec<_> =
                status.nodes.iter().map(|(node, up)| (vec![("node", node.clone())], i64::from(*up))).collect();
            gauge(
                &mut e,
                "opbound_store_node_up",
                "1 while the store node (the server, a cluster master, the primary Sentinel names) answers, 0 while its circuit is open and decisions for its keys follow on-store-error without asking it.",
                &nodes,
            )?;
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
            let followed: Vec<_> = ["open", "closed", "local"]
                .iter()
                .zip(&s.followed)
                .map(|(policy, n)| (vec![("on_store_error", policy.to_string())], load(n)))
                .collect();
            counter(
                &mut e,
                "opbound_store_fallbacks_by_policy",
                "Decisions in which some bound followed on-store-error, by what it declares (open admits, closed refuses, local counts on this instance).",
                &followed,
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

impl Source for crate::server::judge::Shared {
    fn current(&self) -> (Arc<Limiter>, Arc<Stats>) {
        let active = self.active.load();
        (active.limiter.clone(), active.stats.clone())
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn store(&self) -> &crate::store::Store {
        &self.store
    }

    fn state(&self) -> Option<&crate::store::durable::journal::StateStats> {
        self.state.get().map(|s| &**s)
    }

    fn request_log_dropped(&self) -> Option<u64> {
        self.request_log.get().map(|log| log.dropped())
    }
}
