//! A bound's counters: at most `max-keys` callers, sharded locks, expired keys swept first, and
//! one overflow counter shared by the long tail, so memory is fixed by `max-keys`, not traffic.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::clock::Nanos;
use super::counter::Counter;
use super::quota::QuotaClock;
use super::rate::Rate;

mod durable;

/// Keys arrive already hashed with a secret key; hashing them again would only cost time.
#[derive(Default)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map = HashMap<u64, Counter, BuildHasherDefault<PassThrough>>;

pub(crate) struct Shard {
    pub(super) map: Map,
    /// Cost reserved by admitted `count-when` requests whose response has not come, per key;
    /// every key here is also in `map` (so `max-keys` bounds it) and is never swept.
    pub(super) pending: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
    /// Keys committed, reserved, settled or removed since the journal was last drained; `None`
    /// for tables nothing writes behind (every table but a durable bound's: quota, `count-when`).
    pub(super) dirty: Option<std::collections::HashSet<u64, BuildHasherDefault<PassThrough>>>,
    pub(super) capacity: usize,
    /// No entry can be idle before this time, so a full shard is not swept again until then.
    pub(super) next_sweep: Nanos,
}

/// Where a caller's counter lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Tracked under its own key.
    Tracked,
    /// Not tracked yet; a key will be added if the request is committed.
    New,
    /// The table is full: the shared overflow counter.
    Overflow,
}

/// The counters of one bound.
pub struct KeyTable {
    /// The bound's algorithm and numbers, the same for every counter in the table (a quota's
    /// period is filled in per decision by [`KeyTable::rate_at`]).
    pub rate: Rate,
    /// A quota's periods.
    quota: Option<QuotaClock>,
    /// Shared with the table of the same quota under a new limit (a reload keeps consumption).
    pub(super) counters: Arc<Counters>,
    /// What the bound counts once the response is known (`count-when`, `settle`).
    pub(crate) counting: crate::policy::Counting,
    /// Nothing outlives a decision: not a concurrency limit, nothing settled by the response.
    /// An admitted request is only committed.
    pub(crate) plain: bool,
}

/// The counters themselves, apart from the numbers they are judged by.
pub(super) struct Counters {
    pub(super) shards: Box<[Mutex<Shard>]>,
    pub(super) overflow: Mutex<Counter>,
    /// Cost reserved on the overflow counter; changed only while `overflow` is locked.
    pub(super) overflow_pending: AtomicU32,
    overflow_hits: AtomicU64,
    /// The overflow counter changed since the journal was last drained.
    pub(super) overflow_dirty: std::sync::atomic::AtomicBool,
}

/// One change a table's journal reports: a caller's counter as it stands now, or gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A caller's own counter (`None`: forgotten or never kept).
    Caller(u64, Option<Counter>),
    /// The shared overflow counter.
    Overflow(Counter),
}

/// A shard of a table, locked; dropping it unlocks.
pub(crate) struct ShardGuard<'a>(MutexGuard<'a, Shard>);

/// A caller's counter, locked; dropping it unlocks.
pub struct Locked<'a> {
    shard: MutexGuard<'a, Shard>,
    /// A tracked key's counter in `shard.map`, found once by `lock` so `commit` need not look
    /// it up again; null for any other slot. Valid while `shard` is held: nothing adds to or
    /// removes from the map through a `Locked` before a tracked key's commit.
    entry: *mut Counter,
    overflow: Option<MutexGuard<'a, Counter>>,
    overflow_dirty: &'a std::sync::atomic::AtomicBool,
    overflow_pending: &'a AtomicU32,
    key: u64,
    /// Where the counter lives; a `New` slot becomes `Tracked` once committed.
    pub slot: Slot,
    /// The counter as it stands (all zeros for a new key); `commit` replaces it.
    pub counter: Counter,
    /// Cost reserved under this counter by requests whose response has not come.
    pub pending: u32,
}

impl Locked<'_> {
    /// Stores the new counter (adding the key if it was new).
    #[inline(always)]
    pub fn commit(&mut self, next: Counter) {
        // The commonest commit, a tracked key of a table nothing writes behind, field by field:
        // the verdict holding `next` was written so, and a 16-byte copy of it (for an insert,
        // say) was read back wider than it was stored, which the CPU cannot forward.
        if self.slot == Slot::Tracked && !self.entry.is_null() && self.shard.dirty.is_none() {
            // SAFETY: `entry` points into `self.shard.map`, whose lock `self.shard` holds; the
            // map has not been added to or removed from since `lock` found the key (only
            // `commit_other` adds, and only for a `New` slot, which has no entry).
            let entry = unsafe { &mut *self.entry };
            (entry.a, entry.b, entry.c) = (next.a, next.b, next.c);
            (self.counter.a, self.counter.b, self.counter.c) = (next.a, next.b, next.c);
        } else {
            // Field by field: a 16-byte struct passed by value travels as one 16-byte integer
            // and by reference needs a copy in memory; either is read whole from where its
            // fields were stored.
            self.commit_other(next.a, next.b, next.c);
        }
    }

    #[inline(never)]
    fn commit_other(&mut self, a: u64, b: u32, c: u32) {
        let next = Counter { a, b, c };
        match self.slot {
            Slot::Overflow => {
                **self.overflow.as_mut().expect("overflow is locked") = next;
                self.overflow_dirty.store(true, Ordering::Relaxed);
            }
            Slot::Tracked | Slot::New => {
                if self.slot == Slot::Tracked && !self.entry.is_null() {
                    // SAFETY: as in `commit`.
                    unsafe { *self.entry = next };
                } else {
                    self.shard.map.insert(self.key, next);
                }
                if let Some(dirty) = self.shard.dirty.as_mut() {
                    dirty.insert(self.key);
                }
                self.slot = Slot::Tracked;
            }
        }
        self.counter = next;
    }

    /// Holds `cost` as pending until the response settles it (adding the key if it was new, so
    /// the reservation has a place that counts towards `max-keys`).
    pub fn reserve(&mut self, cost: u32) {
        match self.slot {
            Slot::Overflow => {
                self.overflow_pending.fetch_add(cost, Ordering::Relaxed);
                self.overflow_dirty.store(true, Ordering::Relaxed);
            }
            Slot::Tracked | Slot::New => {
                if self.slot == Slot::New {
                    self.commit(self.counter);
                }
                *self.shard.pending.entry(self.key).or_insert(0) += cost;
                // Written behind with the pending cost counted (see `drain_changes`).
                if let Some(dirty) = self.shard.dirty.as_mut() {
                    dirty.insert(self.key);
                }
            }
        }
        self.pending = self.pending.saturating_add(cost);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave a counter half-written: every write is one assignment.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl KeyTable {
    /// A table for at most `max_keys` callers (exactly: the shards' capacities add up to it).
    pub fn new(rate: Rate, max_keys: u32) -> KeyTable {
        let max_keys = max_keys.max(1) as usize;
        // A power of two, so picking a shard is a mask; never more shards than keys.
        let shard_count = 1 << max_keys.min(16).ilog2();
        let shards = (0..shard_count)
            .map(|i| {
                let capacity = max_keys / shard_count + usize::from(i < max_keys % shard_count);
                Mutex::new(Shard {
                    map: Map::default(),
                    pending: HashMap::default(),
                    dirty: None,
                    capacity,
                    next_sweep: 0,
                })
            })
            .collect();
        let counters = Counters {
            shards,
            overflow: Mutex::new(Counter::default()),
            overflow_pending: AtomicU32::new(0),
            overflow_hits: AtomicU64::new(0),
            overflow_dirty: std::sync::atomic::AtomicBool::new(false),
        };
        let plain = !matches!(rate, Rate::Concurrency { .. });
        KeyTable { rate, quota: None, counters: Arc::new(counters), counting: Default::default(), plain }
    }

    /// The table of a validated bound: its rate, its key cap, and a quota's periods.
    pub fn of(def: &crate::policy::BoundDef) -> KeyTable {
        let mut table = KeyTable::new(Rate::of(def), def.table_size());
        table.quota = def.algorithm.periods().map(|p| QuotaClock::new(p.clone()));
        table.counting = def.counting.clone();
        table.plain = table.plain && !table.counting.after_response();
        if def.durable() {
            // A quota's or a `count-when` bound's counts outlive the process: what changes is
            // written behind.
            for shard in table.counters.shards.iter() {
                lock(shard).dirty = Some(Default::default());
            }
        }
        table
    }

    /// A table for a durable bound with new numbers (its limit or cost changed) that keeps
    /// counting in `previous`'s counters, pending reservations included: a customer upgraded
    /// mid-month still has what it used (see `BoundDef::same_consumption`).
    pub fn sharing(def: &crate::policy::BoundDef, previous: &KeyTable) -> KeyTable {
        KeyTable { counters: previous.counters.clone(), ..KeyTable::of(def) }
    }

    /// The rate a decision at `now` on this counter is judged by: a quota's with the period it
    /// falls in; every other bound's as it is.
    pub fn rate_at(&self, counter: Counter, now: Nanos) -> Rate {
        match (self.rate, &self.quota) {
            (Rate::Quota { limit, first_use, .. }, Some(clock)) => {
                Rate::Quota { limit, window: clock.window(counter, now), first_use }
            }
            (rate, _) => rate,
        }
    }

    /// A quota's periods.
    pub fn quota(&self) -> Option<&QuotaClock> {
        self.quota.as_ref()
    }

    /// The order in which locks are taken across tables: by table, then shard, then overflow.
    pub fn shard_of(&self, key: u64) -> usize {
        // The high bits: the map uses the low ones.
        ((key >> 48) as usize) & (self.counters.shards.len() - 1)
    }

    /// Locks a caller's counter. A full shard is swept of idle keys (no more often than one can
    /// have become idle); if still full, the caller shares the overflow counter.
    #[inline(always)]
    pub fn lock(&self, key: u64, now: Nanos) -> Locked<'_> {
        self.lock_reading(key, || now)
    }

    /// [`lock`](KeyTable::lock), reading the time only if a sweep needs it (a key the shard does
    /// not track). A decision reads its time once its counter is locked: the lock's atomic
    /// waits for every instruction before it, and a clock read there (the TSC, slow on a VM)
    /// would be waited for in full.
    #[inline(always)]
    pub fn lock_reading(&self, key: u64, now: impl FnOnce() -> Nanos) -> Locked<'_> {
        self.locked_in(self.lock_shard(key), key, now)
    }

    /// The shard that holds `key`, locked: for [`KeyTable::plain_entry`], then (if it has no
    /// entry) [`KeyTable::locked_in`].
    #[inline(always)]
    pub(crate) fn lock_shard(&self, key: u64) -> ShardGuard<'_> {
        ShardGuard(lock(&self.counters.shards[self.shard_of(key)]))
    }

    /// A tracked key's counter in a plain table, with nothing pending under it and nothing
    /// written behind: all a one-bound decision needs to judge it and store what it admits.
    /// `None` for anything else, which goes through [`KeyTable::locked_in`]. With no
    /// [`Locked`] built, the fields a `Locked` holds are not stored and read back while the
    /// lock is held.
    #[inline(always)]
    pub(crate) fn plain_entry<'g>(&self, shard: &'g mut ShardGuard<'_>, key: u64) -> Option<&'g mut Counter> {
        let shard = &mut *shard.0;
        if !self.plain || shard.dirty.is_some() || !shard.pending.is_empty() {
            return None;
        }
        shard.map.get_mut(&key)
    }

    /// `lock_reading` with the shard already locked.
    #[inline(always)]
    pub(crate) fn locked_in<'a>(&'a self, shard: ShardGuard<'a>, key: u64, now: impl FnOnce() -> Nanos) -> Locked<'a> {
        let mut shard = shard.0;
        if let Some(entry) = shard.map.get_mut(&key) {
            let (counter, entry) = (*entry, entry as *mut Counter);
            // Only `count-when` tables ever hold anything pending: others skip the look-up.
            let pending = if shard.pending.is_empty() { 0 } else { shard.pending.get(&key).copied().unwrap_or(0) };
            return self.held(shard, entry, None, key, Slot::Tracked, counter, pending);
        }
        self.lock_untracked(shard, key, now())
    }

    /// `lock` for a key the shard does not track: a new caller, or the overflow counter.
    #[inline(never)]
    fn lock_untracked<'a>(&'a self, mut shard: MutexGuard<'a, Shard>, key: u64, now: Nanos) -> Locked<'a> {
        if shard.map.len() >= shard.capacity && now >= shard.next_sweep {
            let mut earliest = Nanos::MAX;
            let Shard { map, pending, .. } = &mut *shard;
            map.retain(|k, c| {
                // A key with a reservation outstanding stays: its response will settle it. When
                // the last one settles, `next_sweep` learns when the key can go idle.
                if pending.contains_key(k) {
                    return true;
                }
                let idle = self.rate_at(*c, now).idle_at(*c);
                if idle <= now {
                    return false;
                }
                earliest = earliest.min(idle);
                true
            });
            shard.next_sweep = earliest;
        }
        if shard.map.len() < shard.capacity {
            return self.held(shard, std::ptr::null_mut(), None, key, Slot::New, Counter::default(), 0);
        }
        self.counters.overflow_hits.fetch_add(1, Ordering::Relaxed);
        let overflow = lock(&self.counters.overflow);
        let counter = *overflow;
        let pending = self.counters.overflow_pending.load(Ordering::Relaxed);
        self.held(shard, std::ptr::null_mut(), Some(overflow), key, Slot::Overflow, counter, pending)
    }

    /// A caller's counter as `lock` hands it out, in whichever slot it was found.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn held<'a>(
        &'a self,
        shard: MutexGuard<'a, Shard>,
        entry: *mut Counter,
        overflow: Option<MutexGuard<'a, Counter>>,
        key: u64,
        slot: Slot,
        counter: Counter,
        pending: u32,
    ) -> Locked<'a> {
        let Counters { overflow_dirty, overflow_pending, .. } = &*self.counters;
        Locked { shard, entry, overflow, overflow_dirty, overflow_pending, key, slot, counter, pending }
    }

    /// Returns concurrency permits. A counter back at zero is dropped: it holds no history.
    pub fn release(&self, key: u64, slot: Slot, cost: u32) {
        if slot == Slot::Overflow {
            let mut overflow = lock(&self.counters.overflow);
            *overflow = self.rate.release(*overflow, cost);
            return;
        }
        let mut shard = lock(&self.counters.shards[self.shard_of(key)]);
        if let Some(c) = shard.map.get(&key).copied() {
            let next = self.rate.release(c, cost);
            if self.rate.idle_at(next) == 0 {
                shard.map.remove(&key);
            } else {
                shard.map.insert(key, next);
            }
        }
    }

    /// A caller's own counter, if the table tracks one (an operator's look-up).
    pub fn get(&self, key: u64) -> Option<Counter> {
        lock(&self.counters.shards[self.shard_of(key)]).map.get(&key).copied()
    }

    /// Forgets a caller's counter, so it starts afresh (an operator's reset). Whether it had one.
    /// Permits still in flight under it are returned to nothing when they end.
    pub fn remove(&self, key: u64) -> bool {
        let mut shard = lock(&self.counters.shards[self.shard_of(key)]);
        if let Some(dirty) = shard.dirty.as_mut() {
            dirty.insert(key);
        }
        shard.map.remove(&key).is_some()
    }

    /// Keys tracked now (never more than `max-keys`).
    pub fn tracked(&self) -> usize {
        self.counters.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// How many lookups fell to the overflow counter since the table was made.
    pub fn overflow_hits(&self) -> u64 {
        self.counters.overflow_hits.load(Ordering::Relaxed)
    }

    /// The overflow counter's state.
    pub fn overflow(&self) -> Counter {
        *lock(&self.counters.overflow)
    }
}
