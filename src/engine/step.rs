//! What planning reads of each bound an operation has, worked out once when a limiter is made:
//! a [`Step`] per bound, and the [`Stage`] of checking that first covers it.

use super::hash::KeyHasher;
use crate::policy::{BoundDef, BoundIndex, Per};

/// Which bounds a plan covers. The server checks identity-free bounds first, before it spends
/// anything on identity, the body or the upstream; then the bounds that need no body, before it
/// reads one; then decides every bound at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Bounds that need nothing but the request's head: route, address, header, cookie, query,
    /// for everybody.
    IdentityFree,
    /// Every bound that needs no body (its key or its cost read from it).
    BeforeBody,
    /// Every bound.
    All,
}

impl Stage {
    /// The first stage whose plans cover a bound: every later stage covers it too.
    fn first_covering(def: &BoundDef) -> Stage {
        if def.needs_body() {
            Stage::All
        } else if def.needs_identity() {
            Stage::BeforeBody
        } else {
            Stage::IdentityFree
        }
    }
}

/// What planning needs of one bound that applies to an operation, read once from its definition
/// when the limiter is made: a plan walks these, a few bytes each, in the order they are checked.
#[derive(Clone, Copy, Debug)]
pub(super) struct Step {
    pub(super) bound: BoundIndex,
    /// The bound's fixed cost (a cost the request states replaces it).
    pub(super) cost: u32,
    /// The first stage that plans it.
    pub(super) stage: Stage,
    /// No `applies-to`: every caller.
    pub(super) everybody: bool,
    /// Where the key comes from.
    pub(super) key: StepKey,
}

/// How a step finds its caller's key.
#[derive(Clone, Copy, Debug)]
pub(super) enum StepKey {
    /// The caller's address, hashed from registers once per plan, however many bounds count per
    /// address.
    Address,
    /// The same for every request (`per: route`): hashed once, when the limiter is made.
    Fixed(u64),
    /// Anything else: `key_of`.
    Derived,
}

impl Step {
    /// The step of a bound in an operation's plan.
    pub(super) fn of(bound: BoundIndex, def: &BoundDef, hasher: &KeyHasher) -> Step {
        Step {
            bound,
            cost: def.cost.get(),
            stage: Stage::first_covering(def),
            everybody: def.applies_to.is_everybody(),
            key: match def.per {
                Per::Address => StepKey::Address,
                // `request::key` gives a route bound the empty key.
                Per::Route => StepKey::Fixed(hasher.hash(b"")),
                _ => StepKey::Derived,
            },
        }
    }

    /// For everybody, needing nothing but the request's head, keyed by the address or the
    /// route: a step every stage plans with one push.
    pub(super) fn is_plain(&self) -> bool {
        self.everybody && self.stage == Stage::IdentityFree && matches!(self.key, StepKey::Address | StepKey::Fixed(_))
    }
}
