//! What the engine answers: allowed or refused, which bound, the numbers for the headers, and
//! the concurrency permits to hold until the response ends.

use std::sync::Arc;

use smallvec::SmallVec;

use super::clock::{Nanos, SECOND};
use super::table::{KeyTable, Slot};
use crate::policy::{BoundIndex, Policy};
use crate::request::{self, CostProblem, Unclear};

/// Whole seconds, rounded up: what `Retry-After` and `RateLimit-Reset` carry.
pub(crate) fn whole_seconds(nanos: Nanos) -> u64 {
    nanos.div_ceil(SECOND)
}

/// One bound to check: its index in the policy, the caller's hashed key, and the cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// The caller's key for this bound, hashed with the secret (`KeyHasher`); never the raw
    /// value.
    pub key: u64,
    /// The bound to check.
    pub bound: BoundIndex,
    /// What the request takes from the bound's budget: the bound's `cost`, or what the request
    /// states (`cost-from`, at most `max-cost`, possibly zero).
    pub cost: u32,
}

/// The bounds a request is checked against, in the order they were declared.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// One per bound that applies to the caller and whose key the request carries; empty when
    /// `rejected` is set.
    pub checks: SmallVec<[Check; 4]>,
    /// A bound with `missing: reject` whose key the request lacks, or an enforced bound whose
    /// key the request carries ambiguously: the request is refused with this outcome (a 400)
    /// before anything is counted.
    pub rejected: Option<Outcome>,
}

/// How a request fared. Copy: every decision carries one and drops it, and nearly every one is
/// `Allowed`. What a refusal says in words is worked out from the policy when it is sent
/// ([`Outcome::what`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every enforced bound had room (shadow bounds may not have): the request goes on.
    Allowed,
    /// Refused with 429 by this bound.
    Limited {
        /// The first enforced bound, in declared order, without room.
        bound: BoundIndex,
    },
    /// Refused with 400: the bound is counted per something the request does not carry
    /// (the bound's `per`, with `missing: reject`).
    MissingKey {
        /// The bound with `missing: reject`.
        bound: BoundIndex,
    },
    /// Refused with 400: the request carries the bound's key twice with different values, or
    /// malformed, so upstreams would disagree on who the caller is.
    UnclearKey {
        /// The bound whose key is unclear.
        bound: BoundIndex,
        /// How the key is unclear.
        why: Unclear,
    },
    /// Refused with 400 before any bound is consulted: the request states its cost
    /// (`cost-from`) as something other than a non-negative integer.
    BadCost {
        /// The bound whose `cost-from` it is.
        bound: BoundIndex,
        /// What is wrong with it.
        why: CostProblem,
    },
    /// Refused with 413 before any bound is consulted, counted by none: the request states a
    /// cost above the bound's `max-cost`.
    CostTooHigh {
        /// The bound whose `max-cost` it exceeds.
        bound: BoundIndex,
        /// What the request stated (saturated at `u64::MAX`).
        stated: u64,
    },
    /// Refused with 503: the shared store could not answer and the bound fails closed.
    Unavailable {
        /// The bound with `on-store-error: closed`.
        bound: BoundIndex,
    },
}

impl Outcome {
    /// What a 400 refusal says the request lacks or gives unclearly, in words (`header
    /// x-api-key`, `query parameter key more than once with different values`, `header x-count
    /// is not a non-negative integer`); `None` for the other outcomes.
    pub fn what(&self, policy: &Policy) -> Option<String> {
        match *self {
            Outcome::MissingKey { bound } => Some(request::missing(&policy.bounds[bound].def.per)),
            Outcome::UnclearKey { bound, why } => Some(request::unclear(&policy.bounds[bound].def.per, why)),
            Outcome::BadCost { bound, why } => {
                policy.bounds[bound].def.cost_from.as_ref().map(|c| request::cost_problem(&c.from, why))
            }
            _ => None,
        }
    }
}

/// The numbers the headers report, for one bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// The bound described.
    pub bound: BoundIndex,
    /// `RateLimit-Limit`: the most the budget holds (the limit, or the burst of a token bucket).
    pub limit: u32,
    /// `RateLimit-Remaining`: budget left after this request if admitted, or now if refused.
    pub remaining: u32,
    /// Nanoseconds until the budget is whole again.
    pub reset: Nanos,
    /// Nanoseconds until the request could pass (refusals only).
    pub retry: Nanos,
    /// When a quota's period ends (Unix nanoseconds), for the refusal's body; None for the
    /// other algorithms.
    pub period_end: Option<Nanos>,
}

impl Report {
    /// `Retry-After`: whole seconds from the actual deficit, rounded up, never 0.
    pub fn retry_after(&self) -> u64 {
        whole_seconds(self.retry).max(1)
    }

    /// `RateLimit-Reset`: whole seconds, rounded up.
    pub fn reset_seconds(&self) -> u64 {
        whole_seconds(self.reset)
    }
}

/// One bound's verdict on a request, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundVerdict {
    /// The bound.
    pub bound: BoundIndex,
    /// The caller's hashed key on this bound (as in the plan's `Check`): who was counted or
    /// refused, for a replay's report of its callers.
    pub key: u64,
    /// Whether this bound on its own had room; when another bound refused, nothing was counted
    /// here either.
    pub admitted: bool,
    /// The bound is in shadow mode: a refusal here was only reported.
    pub shadow: bool,
    /// The caller's key was not tracked: the overflow counter decided.
    pub overflow: bool,
    /// What the request costs on this bound (counted only when the request was allowed and this
    /// bound admitted it).
    pub cost: u32,
}

/// The engine's answer.
#[derive(Debug)]
pub struct Decision {
    /// Allowed, or refused and why.
    pub outcome: Outcome,
    /// The bound the headers describe: the refusing one, or the one with the least remaining.
    pub report: Option<Report>,
    /// The enforced bound with the least remaining of the other kind than `report`'s, when the
    /// request was counted by bounds on requests and on what requests use (`cost-from`,
    /// `settle`) alike: the providers' headers say both.
    pub other: Option<Box<Report>>,
    /// One per check of the plan, in the plan's order; empty when the plan was rejected before
    /// anything was counted.
    pub verdicts: SmallVec<[BoundVerdict; 4]>,
    /// Concurrency permits; hold the decision (or these) until the response has been sent.
    pub permits: Permits,
    /// Charges the response settles (`count-when`, `settle`); dropped unsettled, they commit.
    pub reservations: super::Reservations,
}

impl Decision {
    /// Whether the request may go on.
    #[inline]
    pub fn allowed(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed)
    }
}

/// Concurrency permits taken by an admitted request, returned when dropped.
#[derive(Debug, Default)]
// Boxed: every decision carries this and few hold a permit; empty, it is one null word, made
// by one store and dropped by one check (a `Vec` took three of each). The second allocation is
// made only by the few decisions that hold a permit.
#[allow(clippy::box_collection)]
pub struct Permits(Option<Box<Vec<Permit>>>);

impl Permits {
    /// How many permits are held.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |held| held.len())
    }

    /// Whether no permit is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds another decision's permits to these.
    pub fn absorb(&mut self, mut other: Permits) {
        if let Some(other) = other.0.take() {
            match &mut self.0 {
                Some(held) => held.extend(*other),
                None => self.0 = Some(other),
            }
        }
    }

    /// A permit held elsewhere (a shared store): `release` runs when it is dropped.
    pub fn push_external(&mut self, release: impl FnOnce() + Send + Sync + 'static) {
        self.push(Permit::External(Some(Box::new(release))));
    }

    pub(crate) fn push(&mut self, permit: Permit) {
        self.0.get_or_insert_default().push(permit);
    }
}

impl Drop for Permits {
    #[inline]
    fn drop(&mut self) {
        // Released out of line, like `Reservations`: a decision's drop is one check here.
        if let Some(held) = self.0.take() {
            release(held);
        }
    }
}

#[cold]
#[inline(never)]
#[allow(clippy::box_collection)] // the box itself is freed here, out of line
fn release(permits: Box<Vec<Permit>>) {
    drop(permits);
}

/// One concurrency permit, returned when dropped.
pub(crate) enum Permit {
    Local { table: Arc<KeyTable>, key: u64, slot: Slot, cost: u32 },
    External(Option<Box<dyn FnOnce() + Send + Sync>>),
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Permit::Local { slot, cost, .. } => {
                f.debug_struct("Permit").field("slot", slot).field("cost", cost).finish()
            }
            Permit::External(_) => f.write_str("Permit(external)"),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        match self {
            Permit::Local { table, key, slot, cost } => table.release(*key, *slot, *cost),
            Permit::External(release) => {
                if let Some(release) = release.take() {
                    release();
                }
            }
        }
    }
}
