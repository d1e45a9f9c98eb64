//! The [`Limiter`]: a policy with a table of counters per bound, what planning reads of each
//! operation, and an operator's look-up and reset of one caller's counter. Planning a request
//! is `plan.rs`, deciding a plan `decide.rs`.

use std::sync::Arc;

use super::clock::{Clock, Nanos, SystemClock};
use super::hash::KeyHasher;
use super::step::Step;
use super::table::KeyTable;
use crate::policy::{BoundIndex, Per, PerOperation, Policy};

/// One caller's counter on one bound, as an operator looks it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterView {
    /// Whether the caller has a counter of its own (no: never seen, idle and swept, or counted in
    /// the shared overflow counter).
    pub tracked: bool,
    /// `RateLimit-Limit`: the most the budget holds (the limit, or the burst of a token bucket).
    pub limit: u32,
    /// What the caller could spend now.
    pub remaining: u32,
    /// `RateLimit-Reset`, in nanoseconds.
    pub reset: Nanos,
}

/// A policy with its counters.
pub struct Limiter {
    pub(super) policy: Arc<Policy>,
    /// Parallel to `policy.bounds`.
    pub(super) tables: Vec<Arc<KeyTable>>,
    pub(super) hasher: KeyHasher,
    pub(super) clock: Arc<dyn Clock>,
    /// A copy of `clock` when it is the system clock, read without a virtual call.
    pub(super) system: Option<SystemClock>,
    /// Per operation (and for requests that match none): the bounds to plan, route bounds first.
    pub(super) steps: PerOperation<Box<[Step]>>,
    /// Per operation: whether any bound needs identity.
    pub(super) needs_identity: PerOperation<bool>,
    /// Per operation: whether any bound needs the request body.
    pub(super) needs_body: PerOperation<bool>,
    /// Per operation: whether any bound takes its cost from the request (`cost-from`); most
    /// take none, and their plans skip the pass that reads stated costs.
    pub(super) states_cost: PerOperation<bool>,
    /// Per operation: whether every step is for everybody, needs nothing but the request's head
    /// and is keyed by the address or the route, with no cost stated: then every stage plans
    /// every step, each one a push (the commonest operation; a sixth of a one-bound plan).
    pub(super) plain: PerOperation<bool>,
    /// Whether some bound counts what requests use (`cost-from`, `settle`): then a decision on
    /// several bounds reports the least left of each kind, for the providers' headers.
    pub(super) metered: bool,
}

/// Why a value names no caller of a bound ([`Limiter::caller_key`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A bound counted per address, and a value that is not one.
    #[error("{0:?} is not an address, which this bound counts per")]
    NotAnAddress(String),
    /// No value, for a bound counted per this.
    #[error("give the {0} value whose counter to look up")]
    Empty(String),
    /// Not one value for each part of the key.
    #[error("the bound counts per {0}: give {1} key values, one per part, in that order (key=...&key=...), not {2}")]
    Parts(String, usize, usize),
}

impl Limiter {
    /// A limiter with fresh counters for every bound.
    pub fn new(policy: Arc<Policy>, clock: Arc<dyn Clock>, hasher: KeyHasher) -> Limiter {
        Limiter::carrying_over(policy, clock, hasher, None)
    }

    /// A limiter for a new policy that keeps the counters of every bound whose id and definition
    /// did not change; changed bounds start fresh.
    pub fn carrying_over(
        policy: Arc<Policy>,
        clock: Arc<dyn Clock>,
        hasher: KeyHasher,
        previous: Option<&Limiter>,
    ) -> Limiter {
        let tables = policy
            .bounds
            .iter()
            .map(|b| {
                let kept = previous.and_then(|p| {
                    p.policy
                        .bounds
                        .iter()
                        .position(|old| old.id == b.id && old.def == b.def)
                        .map(|i| p.tables[i].clone())
                });
                // A durable bound (quota or `count-when`) that counts the same thing keeps its
                // counts under a new limit or cost: what a caller used this month stays used,
                // and a lower limit on failed sign-ins does not forgive the ones already made.
                let consumed = || {
                    previous.and_then(|p| {
                        p.policy
                            .bounds
                            .iter()
                            .position(|old| old.id == b.id && old.def.same_consumption(&b.def))
                            .map(|i| Arc::new(KeyTable::sharing(&b.def, &p.tables[i])))
                    })
                };
                kept.or_else(consumed).unwrap_or_else(|| Arc::new(KeyTable::of(&b.def)))
            })
            .collect();
        let needs_identity =
            PerOperation::new(&policy, |op| policy.bounds_for(op).any(|b| policy.bounds[b].def.needs_identity()));
        let needs_body =
            PerOperation::new(&policy, |op| policy.bounds_for(op).any(|b| policy.bounds[b].def.needs_body()));
        let states_cost =
            PerOperation::new(&policy, |op| policy.bounds_for(op).any(|b| policy.bounds[b].def.cost_from.is_some()));
        let steps: PerOperation<Box<[Step]>> = PerOperation::new(&policy, |op| {
            policy.bounds_for(op).map(|bound| Step::of(bound, &policy.bounds[bound].def, &hasher)).collect()
        });
        let plain = PerOperation::new(&policy, |op| !states_cost[op] && steps[op].iter().all(Step::is_plain));
        let system = clock.as_system().cloned();
        let metered = policy.bounds.iter().any(|b| b.def.is_metered());
        Limiter {
            policy,
            tables,
            hasher,
            clock,
            system,
            steps,
            needs_identity,
            needs_body,
            states_cost,
            plain,
            metered,
        }
    }

    /// The policy this limiter decides by.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Where this limiter's time comes from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Now, on this limiter's clock.
    #[inline(always)]
    pub(super) fn now(&self) -> Nanos {
        match &self.system {
            Some(system) => system.now(),
            None => self.clock.now(),
        }
    }

    /// The keyed hash callers' keys go through.
    pub fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    /// The counters of a bound.
    pub fn table(&self, bound: BoundIndex) -> &Arc<KeyTable> {
        &self.tables[bound.index()]
    }

    /// Whether deciding a request to `operation` needs the caller's identity at all.
    pub fn needs_identity(&self, operation: Option<usize>) -> bool {
        self.needs_identity[operation]
    }

    /// Whether some bound counts what requests use (`cost-from`, `settle`).
    pub fn metered(&self) -> bool {
        self.metered
    }

    /// Whether deciding a request to `operation` needs its body: only then does the server read
    /// it.
    pub fn needs_body(&self, operation: Option<usize>) -> bool {
        self.needs_body[operation]
    }

    /// The hashed key a bound counts the caller with this key value under: an address for
    /// `per: address` (counted by its /64 for IPv6), nothing for `per: route`, the value itself
    /// otherwise. For an operator's look-up and reset; the value is hashed, never kept.
    pub fn caller_key(&self, bound: BoundIndex, value: &str) -> Result<u64, KeyError> {
        self.caller_key_of(bound, &[value])
    }

    /// [`Limiter::caller_key`] for a key of any kind: one value, or one per part of a key made
    /// of several (`per: [token, json:/model]`), in the order the bound lists them.
    pub fn caller_key_of(&self, bound: BoundIndex, values: &[&str]) -> Result<u64, KeyError> {
        let per = &self.policy.bounds[bound].def.per;
        if let Per::Parts(parts) = per {
            if values.len() != parts.len() {
                return Err(KeyError::Parts(per.to_string(), parts.len(), values.len()));
            }
            let mut joined = Vec::new();
            for (part, value) in parts.iter().zip(values) {
                let bytes = match part {
                    Per::Address => {
                        let ip: std::net::IpAddr =
                            value.trim().parse().map_err(|_| KeyError::NotAnAddress(value.to_string()))?;
                        crate::request::address_key(ip).as_bytes().to_vec()
                    }
                    _ if value.is_empty() => return Err(KeyError::Empty(part.to_string())),
                    _ => value.as_bytes().to_vec(),
                };
                joined.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                joined.extend_from_slice(&bytes);
            }
            return Ok(self.hasher.hash(&joined));
        }
        let [value] = values else {
            return Err(KeyError::Parts(per.to_string(), 1, values.len()));
        };
        match per {
            Per::Route => Ok(self.hasher.hash(b"")),
            Per::Address => {
                let ip: std::net::IpAddr =
                    value.trim().parse().map_err(|_| KeyError::NotAnAddress(value.to_string()))?;
                Ok(self.hasher.hash_address(ip))
            }
            _ if value.is_empty() => Err(KeyError::Empty(per.to_string())),
            _ => Ok(self.hasher.hash(value.as_bytes())),
        }
    }

    /// What a caller's counter on a bound says now, without counting anything.
    pub fn inspect(&self, bound: BoundIndex, key: u64) -> CounterView {
        let table = self.table(bound);
        let counter = table.get(key);
        let v = {
            let (counter, now) = (counter.unwrap_or_default(), self.now());
            // What is pending is as good as spent until its response comes.
            table.rate_at(counter, now).evaluate(counter, now, table.pending(key))
        };
        CounterView { tracked: counter.is_some(), limit: table.rate.capacity(), remaining: v.remaining, reset: v.reset }
    }

    /// Forgets a caller's counter on a bound: its next request starts afresh. Whether it had one.
    pub fn forget(&self, bound: BoundIndex, key: u64) -> bool {
        self.table(bound).remove(key)
    }
}
