//! Charges that wait for the response: a `count-when` bound's reservation, committed or
//! released by the status, and a `settle` bound's estimate, corrected to what the upstream
//! reports. A reservation nobody settles (the response never came) commits when dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::clock::{Clock, Nanos};
use super::table::{KeyTable, Slot, lock};
use crate::policy::Settle;

/// The charges of one admitted request that its response settles. Dropped unsettled, every
/// `count-when` reservation commits (the safe side: a sign-in whose answer never came counts
/// as failed) and every `settle` estimate stands.
#[derive(Default)]
// Boxed, and only when there is something to settle: every decision carries and drops this, and
// nearly none holds anything.
pub struct Reservations(Option<Box<Held>>);

#[derive(Default)]
struct Held {
    clock: Option<Arc<dyn Clock>>,
    items: SmallVec<[Reservation; 1]>,
    /// Charges held in a shared store, settled by a handle the store gave.
    external: Option<External>,
}

/// What a response did to one bound's charge: whether it counts, and what the upstream reported
/// it used (`None`: the estimate stands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The response's status matches the bound's `count-when` (always, without one).
    pub counted: bool,
    /// What the `settle` header or body reported, when the response counts and did.
    pub used: Option<u64>,
    /// The body it was read from ended before it was whole (the client went away, the upstream
    /// broke off): the charge is at least the estimate, since hanging up is never cheaper than
    /// finishing.
    pub cut_short: bool,
    /// The bound's `max-cost`, when a counted success response was to report its usage and
    /// did not (`used` is `None`): the estimate is the client's word, and a stream that said
    /// nothing may have used far more (10,034 tokens on an estimate of 1, issue 63).
    pub unreported: Option<u64>,
}

impl Finished {
    /// What to charge, given the estimate reserved at admission: what was reported (at least
    /// the estimate for a body cut short); when nothing was, the bound's `max-cost` (never
    /// below the estimate) if the response was to report, or `None` for the estimate.
    pub fn charge(&self, estimate: u64) -> Option<u64> {
        match (self.used, self.cut_short) {
            (Some(used), true) => Some(used.max(estimate)),
            (None, _) => self.unreported.map(|max| max.max(estimate)),
            (used, false) => used,
        }
    }
}

/// A store's reservations: the tables of the bounds (for their `count-when` and `settle`), in
/// the order `finish` takes their outcomes.
struct External {
    tables: SmallVec<[Arc<KeyTable>; 1]>,
    finish: Box<dyn FnOnce(Vec<Finished>) + Send + Sync>,
}

/// One bound's charge awaiting the response.
struct Reservation {
    table: Arc<KeyTable>,
    key: u64,
    slot: Slot,
    cost: u32,
    /// The cost is held as pending (`count-when`), not yet in the counter.
    pending: bool,
}

impl std::fmt::Debug for Reservations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservations").field("len", &self.0.as_ref().map_or(0, |h| h.items.len())).finish()
    }
}

impl Reservations {
    fn held(&mut self) -> &mut Held {
        self.0.get_or_insert_default()
    }

    pub(crate) fn push(&mut self, clock: &Arc<dyn Clock>, table: &Arc<KeyTable>, key: u64, slot: Slot, cost: u32) {
        let held = self.held();
        if held.clock.is_none() {
            held.clock = Some(clock.clone());
        }
        let pending = table.counting.count_when.is_some();
        held.items.push(Reservation { table: table.clone(), key, slot, cost, pending });
    }

    /// Charges a shared store holds: `finish` gets one outcome per table, in order, when the
    /// response settles them or, dropped unsettled, every one counted with the estimate.
    pub fn push_external(
        &mut self,
        tables: SmallVec<[Arc<KeyTable>; 1]>,
        finish: impl FnOnce(Vec<Finished>) + Send + Sync + 'static,
    ) {
        self.held().external = Some(External { tables, finish: Box::new(finish) });
    }

    /// Adds another decision's reservations to these (a store's local fallback). One external
    /// handle is kept; a second commits as `other` drops, as it always did.
    pub fn absorb(&mut self, mut other: Reservations) {
        let Some(mut theirs) = other.0.take() else { return };
        let Some(ours) = self.0.as_mut() else {
            self.0 = Some(theirs);
            return;
        };
        if ours.clock.is_none() {
            ours.clock = theirs.clock.take();
        }
        ours.items.extend(theirs.items.drain(..));
        if ours.external.is_none() {
            ours.external = theirs.external.take();
        }
        // Whatever `theirs` still holds (a second external handle) commits as it drops.
        other.0 = Some(theirs);
    }

    /// How many bounds wait for the response.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |h| h.items.len() + h.external.as_ref().map_or(0, |e| e.tables.len()))
    }

    /// Whether no bound waits for the response.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tables waiting for the response, local and held by a store.
    fn tables(&self) -> impl Iterator<Item = &KeyTable> {
        let held = self.0.as_deref();
        let local = held.into_iter().flat_map(|h| h.items.iter().map(|r| &*r.table));
        let external = held.and_then(|h| h.external.as_ref()).into_iter().flat_map(|e| e.tables.iter().map(|t| &**t));
        local.chain(external)
    }

    /// The settles of the bounds a response with this status counts for, each once.
    pub fn settles(&self, status: u16) -> Vec<&Settle> {
        let mut all: Vec<&Settle> = Vec::new();
        for table in self.tables() {
            let counting = &table.counting;
            if let Some(settle) = &counting.settle
                && counting.count_when.as_ref().is_none_or(|s| s.matches(status))
                && !all.contains(&settle)
            {
                all.push(settle);
            }
        }
        all
    }

    /// Settles every charge with the response's status and what the upstream reported:
    /// `reported(settle)` is what the response said where `settle` reads (a header's value when
    /// it is a non-negative integer, a body's weighted sum), `None` when it said nothing there.
    /// `cut_short`: the body was not whole (see [`Finished::cut_short`]).
    pub fn settle(mut self, status: u16, reported: impl Fn(&Settle) -> Option<u64>, cut_short: bool) {
        let Some(mut held) = self.0.take() else { return };
        let finished = |table: &KeyTable| {
            let counting = &table.counting;
            let counted = counting.count_when.as_ref().is_none_or(|s| s.matches(status));
            let used = match &counting.settle {
                Some(settle) if counted => reported(settle),
                _ => None,
            };
            let cut_short = cut_short && matches!(counting.settle, Some(Settle::Body(_)));
            // Only a success is expected to report: an error's body says why, not what it used.
            let expected = counted && counting.settle.is_some() && (200..300).contains(&status);
            let unreported = counting.max_cost.filter(|_| expected && used.is_none()).map(|m| u64::from(m.get()));
            Finished { counted, used, cut_short, unreported }
        };
        if let Some(e) = held.external.take() {
            (e.finish)(e.tables.iter().map(|t| finished(t)).collect());
        }
        let Some(clock) = held.clock.take() else { return };
        let now = clock.now();
        for r in held.items.drain(..) {
            let f = finished(&r.table);
            r.finish(now, f);
        }
    }
}

impl Drop for Reservations {
    #[inline]
    fn drop(&mut self) {
        // Nearly every decision holds nothing to settle. Taken, the box is freed out of line
        // too: left here, its drop code sat in every decision's drop.
        if let Some(held) = self.0.take() {
            held.commit_unsettled();
        }
    }
}

impl Held {
    #[cold]
    #[inline(never)]
    #[allow(clippy::boxed_local)] // by the box, so that it too is freed out of line
    fn commit_unsettled(mut self: Box<Self>) {
        if let Some(e) = self.external.take() {
            (e.finish)(vec![
                Finished { counted: true, used: None, cut_short: false, unreported: None };
                e.tables.len()
            ]);
        }
        let Some(clock) = self.clock.take() else { return };
        let now = clock.now();
        for r in self.items.drain(..) {
            r.finish(now, Finished { counted: true, used: None, cut_short: false, unreported: None });
        }
    }
}

impl Reservation {
    /// Charges what the request turned out to cost: what was reported (the estimate when
    /// nothing was) if its response counts, nothing if not.
    fn finish(self, now: Nanos, finished: Finished) {
        let used = finished.charge(u64::from(self.cost));
        let charged =
            if finished.counted { used.map_or(i64::from(self.cost), |u| u.min(i64::MAX as u64) as i64) } else { 0 };
        let already = if self.pending { 0 } else { i64::from(self.cost) };
        let reserved = if self.pending { self.cost } else { 0 };
        self.table.finish(self.key, self.slot, reserved, charged - already, now);
    }
}

impl KeyTable {
    /// Cost reserved under a caller's key by requests whose response has not come.
    pub fn pending(&self, key: u64) -> u32 {
        lock(&self.counters.shards[self.shard_of(key)]).pending.get(&key).copied().unwrap_or(0)
    }

    /// Releases `reserved` pending cost and charges `delta` to a caller's counter.
    fn finish(&self, key: u64, slot: Slot, reserved: u32, delta: i64, now: Nanos) {
        let counters = &self.counters;
        if slot == Slot::Overflow {
            let mut overflow = lock(&counters.overflow);
            let left = counters.overflow_pending.load(Ordering::Relaxed).saturating_sub(reserved);
            counters.overflow_pending.store(left, Ordering::Relaxed);
            if delta != 0 {
                *overflow = self.rate_at(*overflow, now).charge(*overflow, now, delta);
            }
            if delta != 0 || reserved > 0 {
                counters.overflow_dirty.store(true, Ordering::Relaxed);
            }
            return;
        }
        let mut shard = lock(&counters.shards[self.shard_of(key)]);
        if reserved > 0
            && let Some(p) = shard.pending.get_mut(&key)
        {
            *p = p.saturating_sub(reserved);
            if *p == 0 {
                shard.pending.remove(&key);
            }
        }
        let counter = shard.map.get(&key).copied();
        if delta != 0 {
            // A key forgotten meanwhile (an operator's reset) is charged afresh, if it has room.
            let tracked = counter.is_some() || shard.map.len() < shard.capacity;
            if tracked {
                let c = counter.unwrap_or_default();
                shard.map.insert(key, self.rate_at(c, now).charge(c, now, delta));
            }
        }
        // The journal wrote the pending cost counted: a release must be written too.
        if (delta != 0 || reserved > 0)
            && let Some(dirty) = shard.dirty.as_mut()
        {
            dirty.insert(key);
        }
        if !shard.pending.contains_key(&key)
            && let Some(c) = shard.map.get(&key).copied()
        {
            // The key could not be swept while it had a reservation; now it can, once idle.
            let idle = self.rate_at(c, now).idle_at(c);
            shard.next_sweep = shard.next_sweep.min(idle);
        }
    }
}
