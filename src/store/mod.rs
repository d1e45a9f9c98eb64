//! Where counters live: in this instance's memory, or in Redis so that a bound means the same on
//! every instance. The engine decides; a store is where its counts are kept.

pub mod deny;
pub mod redis;
pub mod stats;

pub use stats::StoreStats;

use std::sync::Arc;

use crate::engine::{CounterView, Decision, Limiter, Plan};

/// The counters' home.
#[derive(Clone)]
pub enum Store {
    /// This instance's memory: every instance counts on its own.
    Memory,
    /// Redis (or a Redis Cluster), shared by every instance using it.
    Redis(Arc<redis::RedisStore>),
}

impl Store {
    /// Whether counts are shared between instances.
    pub fn shared(&self) -> bool {
        matches!(self, Store::Redis(_))
    }

    /// For logs and the console.
    pub fn describe(&self) -> String {
        match self {
            Store::Memory => "memory".to_string(),
            Store::Redis(r) => r.target.display(),
        }
    }

    /// What a caller's counter on a bound says now, counting nothing.
    pub async fn inspect(&self, limiter: &Limiter, bound: usize, key: u64) -> Result<CounterView, String> {
        match self {
            Store::Memory => Ok(limiter.inspect(bound, key)),
            Store::Redis(r) => r.inspect(limiter, bound, key).await,
        }
    }

    /// Forgets a caller's counter on a bound (and any copy kept in memory for `on-store-error:
    /// local`). Whether it had one.
    pub async fn forget(&self, limiter: &Limiter, bound: usize, key: u64) -> Result<bool, String> {
        let local = limiter.forget(bound, key);
        match self {
            Store::Memory => Ok(local),
            Store::Redis(r) => r.forget(limiter, bound, key).await,
        }
    }

    /// Decides a plan: in memory at once, or with one call to the store.
    pub async fn decide(&self, limiter: &Limiter, plan: &Plan) -> Decision {
        match self {
            Store::Memory => limiter.decide(plan),
            Store::Redis(r) => r.decide(limiter, plan).await,
        }
    }
}
