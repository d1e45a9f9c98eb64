//! What a durable table (a quota's, a `count-when` bound's) adds to a key table: the changes the
//! journal writes behind and reads back, and an operator's look-up and change of a quota.

use std::sync::atomic::Ordering;

use super::{Change, KeyTable, Slot, lock};
use crate::engine::clock::Nanos;
use crate::engine::counter::Counter;
use crate::engine::quota::{Adjustment, Standing, consumed};
use crate::engine::rate::Rate;

impl KeyTable {
    /// What changed since the last call, for writing behind; empty for tables without a
    /// journal. Each key is reported once, with its counter as it stands at `now` and any cost
    /// still pending charged to it: a process killed before those responses come has them
    /// counted, the safe side a reservation nobody settles takes anyway.
    pub fn drain_changes(&self, now: Nanos) -> Vec<Change> {
        let with_pending = |c: Counter, pending: u32| match pending {
            0 => c,
            p => self.rate_at(c, now).charge(c, now, i64::from(p)),
        };
        let mut out = Vec::new();
        for shard in self.counters.shards.iter() {
            let mut shard = lock(shard);
            let Some(dirty) = shard.dirty.as_mut() else { return out };
            let keys: Vec<u64> = dirty.drain().collect();
            out.extend(keys.into_iter().map(|k| {
                let pending = shard.pending.get(&k).copied().unwrap_or(0);
                Change::Caller(k, shard.map.get(&k).map(|&c| with_pending(c, pending)))
            }));
        }
        if self.counters.overflow_dirty.swap(false, Ordering::Relaxed) {
            let overflow = lock(&self.counters.overflow);
            out.push(Change::Overflow(with_pending(*overflow, self.counters.overflow_pending.load(Ordering::Relaxed))));
        }
        out
    }

    /// Puts back changes a failed write could not keep, so the next drain reports them again.
    pub fn requeue(&self, changes: &[Change]) {
        for change in changes {
            match *change {
                Change::Caller(key, _) => {
                    if let Some(dirty) = lock(&self.counters.shards[self.shard_of(key)]).dirty.as_mut() {
                        dirty.insert(key);
                    }
                }
                Change::Overflow(_) => self.counters.overflow_dirty.store(true, Ordering::Relaxed),
            }
        }
    }

    /// Restores counters kept from before a restart (up to the table's capacity), without
    /// reporting them as changed.
    pub fn restore(&self, changes: impl IntoIterator<Item = Change>) {
        for change in changes {
            match change {
                Change::Caller(key, Some(counter)) => {
                    let mut shard = lock(&self.counters.shards[self.shard_of(key)]);
                    if shard.map.len() < shard.capacity {
                        shard.map.insert(key, counter);
                    }
                }
                Change::Caller(_, None) => {}
                Change::Overflow(counter) => *lock(&self.counters.overflow) = counter,
            }
        }
    }

    /// Changes what a quota caller consumed in the current period (an operator's grant or
    /// correction), creating its counter if it has none (anchored now for `reset: first-use`),
    /// and reports it changed so it is written behind. `(before, after)`; `None` for a bound that
    /// is not a quota, or a full table, where the caller shares the overflow counter and a change
    /// would move everyone's count.
    pub fn adjust(&self, key: u64, now: Nanos, change: Adjustment) -> Option<(u32, u32)> {
        let mut locked = self.lock(key, now);
        if locked.slot == Slot::Overflow {
            return None;
        }
        let Rate::Quota { window, first_use, .. } = self.rate_at(locked.counter, now) else { return None };
        let (before, current) = consumed(locked.counter, now, window, first_use);
        let after = change.apply(before);
        locked.commit(Counter { c: after, ..current });
        Some((before, after))
    }

    /// A quota caller's consumption in the current period, counting nothing; `None` for a bound
    /// that is not a quota.
    pub fn standing(&self, key: u64, now: Nanos) -> Option<Standing> {
        let counter = self.get(key);
        let (Rate::Quota { limit, first_use, .. }, Some(clock)) = (self.rate, &self.quota) else {
            return None;
        };
        // Shown to an operator: the start as well as the end.
        let window = clock.exact_window(counter.unwrap_or_default(), now);
        let (used, _) = consumed(counter.unwrap_or_default(), now, window, first_use);
        Some(Standing { tracked: counter.is_some(), consumed: used, limit, window })
    }
}
