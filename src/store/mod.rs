//! Where counters live: in this instance's memory, or in Redis so that a bound means the same on
//! every instance. The engine decides; a store is where its counts are kept.

pub(crate) mod deny;
pub mod durable;
mod error;
pub mod redis;
pub mod stats;

pub use error::StoreError;
pub use stats::StoreStats;

use std::sync::Arc;

use crate::engine::quota::{Adjustment, Standing};
use crate::engine::{CounterView, Decision, KeyHasher, Limiter, Plan};
use crate::policy::BoundIndex;

/// The counters' home. Callers ask it, never which one it is.
#[derive(Clone)]
pub enum Store {
    /// This instance's memory: every instance counts on its own.
    Memory,
    /// Redis (or a Redis Cluster), shared by every instance using it.
    Redis(Arc<redis::RedisStore>),
}

/// How a shared store is doing, for metrics.
pub struct Status<'a> {
    /// Whether this instance counts in the store now: it answers, and the plan's key secret is
    /// the one instances share.
    pub counting: bool,
    /// The store's counters, for metrics and the console.
    pub stats: &'a StoreStats,
    /// Each node the store's keys are on (`host:port`: the one server, each master of a
    /// cluster, the primary Sentinel names), and whether it answers; none until connected.
    pub nodes: Vec<(String, bool)>,
}

impl Store {
    /// Whether counts are shared between instances.
    pub fn shared(&self) -> bool {
        matches!(self, Store::Redis(_))
    }

    /// Whether the store answers now (memory always does).
    pub fn reachable(&self) -> bool {
        match self {
            Store::Memory => true,
            Store::Redis(r) => r.stats.up.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// A shared store's activity, for a limiter hashing with `hasher`; none for memory, which
    /// has nothing to report beyond the engine's own counts.
    pub fn status(&self, hasher: &KeyHasher) -> Option<Status<'_>> {
        match self {
            Store::Memory => None,
            Store::Redis(r) => Some(Status { counting: r.counts_with(hasher), stats: &r.stats, nodes: r.nodes() }),
        }
    }

    /// For logs and the console.
    pub fn describe(&self) -> String {
        match self {
            Store::Memory => "memory".to_string(),
            Store::Redis(r) => r.target.display(),
        }
    }

    /// A refusal known without waiting (for the identity-free bounds checked before identity
    /// work): in memory, a look at the counters that commits nothing; with Redis, the local deny
    /// cache alone, so a decision stays one round trip. None: nothing known yet.
    pub fn early(&self, limiter: &Limiter, plan: &Plan) -> Option<Decision> {
        match self {
            Store::Memory => Some(limiter.peek(plan)),
            Store::Redis(r) => r.early(limiter, plan),
        }
    }

    /// What a caller's counter on a bound says now, counting nothing.
    pub async fn inspect(&self, limiter: &Limiter, bound: BoundIndex, key: u64) -> Result<CounterView, StoreError> {
        match self {
            Store::Memory => Ok(limiter.inspect(bound, key)),
            Store::Redis(r) => r.inspect(limiter, bound, key).await,
        }
    }

    /// Forgets a caller's counter on a bound (and any copy kept in memory for `on-store-error:
    /// local`). Whether it had one.
    pub async fn forget(&self, limiter: &Limiter, bound: BoundIndex, key: u64) -> Result<bool, StoreError> {
        let local = limiter.forget(bound, key);
        match self {
            Store::Memory => Ok(local),
            Store::Redis(r) => r.forget(limiter, bound, key).await,
        }
    }

    /// A quota caller's consumption in the current period, counting nothing (`None`: the bound
    /// is not a quota). `Err` says why the store did not answer.
    pub async fn standing(
        &self,
        limiter: &Limiter,
        bound: BoundIndex,
        key: u64,
    ) -> Result<Option<Standing>, StoreError> {
        match self {
            Store::Memory => Ok(limiter.table(bound).standing(key, limiter.clock().now())),
            Store::Redis(r) => r.standing(limiter, bound, key).await,
        }
    }

    /// Changes what a quota caller consumed in the current period: `(before, after)`, or `None`
    /// when the bound is not a quota or its table is full (see [`KeyTable::adjust`]). In memory
    /// the change is written behind with the rest of the quota's counts; in Redis it is made in
    /// one script call. `Err` says why the store did not answer.
    ///
    /// [`KeyTable::adjust`]: crate::engine::KeyTable::adjust
    pub async fn adjust(
        &self,
        limiter: &Limiter,
        bound: BoundIndex,
        key: u64,
        change: Adjustment,
    ) -> Result<Option<(u32, u32)>, StoreError> {
        match self {
            Store::Memory => Ok(limiter.table(bound).adjust(key, limiter.clock().now(), change)),
            Store::Redis(r) => r.adjust(limiter, bound, key, change).await,
        }
    }

    /// Decides a plan: in memory at once, or with one call to the store.
    pub async fn decide(&self, limiter: &Limiter, plan: &Plan) -> Decision {
        match self {
            Store::Memory => limiter.decide(plan),
            // Boxed: a Redis decision's future is large, and every request's future would carry
            // room for it, copied whole when the request's future is boxed.
            Store::Redis(r) => Box::pin(r.decide(limiter, plan)).await,
        }
    }
}
