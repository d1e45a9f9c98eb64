//! A local deny cache: a caller the store refused until T is refused here until T, without a
//! round trip, so a flood does not become a flood of the store.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::engine::Nanos;

const SHARDS: usize = 16;

/// The longest a refusal is answered from the cache before the store is asked again. A quota's
/// refusal lasts until its period ends, which can be a month, and an operator may give the
/// caller more through another instance (`POST /quota`) or a refund may land in the store: this
/// instance sees it within this time. One store call per refused caller per 5 s is nothing.
pub(crate) const RECHECK: Nanos = 5_000_000_000;

/// A remembered refusal: until when it lasts, until when the cache answers it, the cost refused.
#[derive(Clone, Copy)]
struct Refusal {
    until: Nanos,
    recheck: Nanos,
    cost: u32,
}

type Shard = Mutex<HashMap<(u64, u64), Refusal>>;

/// `(bound fingerprint, caller key)` → refused until, and the cost that was refused.
pub(crate) struct DenyCache {
    shards: Vec<Shard>,
    per_shard: usize,
}

impl DenyCache {
    /// A cache of at most `capacity` refused callers.
    pub(crate) fn new(capacity: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: (u64, u64)) -> &Shard {
        &self.shards[((key.0 ^ key.1) >> 32) as usize % SHARDS]
    }

    /// Until when a request of `cost` from this caller is refused, if it is.
    pub(crate) fn until(&self, bound: u64, caller: u64, cost: u32, now: Nanos) -> Option<Nanos> {
        let shard = self.shard((bound, caller)).lock().unwrap_or_else(|p| p.into_inner());
        shard.get(&(bound, caller)).filter(|r| r.recheck > now && cost >= r.cost).map(|r| r.until)
    }

    /// Remembers a refusal until `until`, answered from here for at most [`RECHECK`]. When the
    /// cache is full, expired entries go first; if none has expired the refusal is not cached
    /// (the store still decides).
    pub(crate) fn refuse(&self, bound: u64, caller: u64, cost: u32, until: Nanos, now: Nanos) {
        let mut shard = self.shard((bound, caller)).lock().unwrap_or_else(|p| p.into_inner());
        if shard.len() >= self.per_shard && !shard.contains_key(&(bound, caller)) {
            shard.retain(|_, r| r.recheck > now);
            if shard.len() >= self.per_shard {
                return;
            }
        }
        shard.insert((bound, caller), Refusal { until, recheck: until.min(now.saturating_add(RECHECK)), cost });
    }

    /// Forgets a caller's refusal (an operator reset its counter).
    pub(crate) fn forget(&self, bound: u64, caller: u64) {
        self.shard((bound, caller)).lock().unwrap_or_else(|p| p.into_inner()).remove(&(bound, caller));
    }

    /// How many refusals are remembered now (the tests check the cap with it).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_last_until_their_time_and_stay_capped() {
        let d = DenyCache::new(32);
        d.refuse(1, 7, 1, 1_000, 0);
        assert_eq!(d.until(1, 7, 1, 999), Some(1_000));
        assert_eq!(d.until(1, 7, 1, 1_000), None, "expired");
        assert_eq!(d.until(2, 7, 1, 10), None, "another bound");
        d.refuse(1, 8, 4, 1_000, 0);
        assert_eq!(d.until(1, 8, 1, 10), None, "a cheaper request may still fit");
        for caller in 0..10_000 {
            d.refuse(3, caller, 1, 5_000, 0);
        }
        assert!(d.len() <= 32 + SHARDS, "{}", d.len());
    }

    #[test]
    fn a_long_refusal_is_answered_with_its_end_but_asked_again_after_a_few_seconds() {
        let d = DenyCache::new(32);
        let month = 30 * 86_400 * 1_000_000_000;
        d.refuse(1, 7, 1, month, 0);
        assert_eq!(d.until(1, 7, 1, RECHECK - 1), Some(month), "the refusal's real end");
        assert_eq!(d.until(1, 7, 1, RECHECK), None, "the store decides again");
    }
}
