//! Planning: which bounds apply to a request and under which keys, checked against what the
//! request states as its cost, before anything is locked or counted.

use smallvec::SmallVec;

use super::decision::{Check, Outcome, Plan};
use super::limiter::Limiter;
use super::step::{Stage, StepKey};
use crate::policy::{BoundIndex, Credential, Missing, Mode, Per};
use crate::request::{self, Facts, Identity, Key};

/// Where a credential is looked for when a request matched no operation.
const DEFAULT_CREDENTIALS: &[Credential] = &[Credential::Authorization];

/// The costs requests state (`cost-from`), by bound: `None` for a shadow bound that skips this
/// request because its stated cost could not be used.
type StatedCosts = SmallVec<[(BoundIndex, Option<u32>); 2]>;

impl Limiter {
    /// Works out which bounds apply to a request and under which keys. A cost the request states
    /// (`cost-from`) is checked first, for every bound of the operation whose source this stage
    /// can read, so a cost above `max-cost` is refused before any bound is consulted.
    #[inline]
    pub fn plan<F: Facts + ?Sized>(
        &self,
        operation: Option<usize>,
        facts: &F,
        identity: Option<&Identity>,
        stage: Stage,
    ) -> Plan {
        let mut plan = Plan::default();
        self.plan_into(&mut plan, operation, facts, identity, stage);
        plan
    }

    /// [`plan`](Limiter::plan) into a plan the caller keeps (cleared first). The hot path's way:
    /// a plan returned by value is copied out in 16-byte moves over the narrower stores that
    /// wrote its checks, which the CPU cannot forward: a stall on every decision.
    // Always inline: the plain plan is a few instructions, fewer than a call's frame, and the
    // compiler's own choice moves with unrelated changes elsewhere.
    #[inline(always)]
    pub fn plan_into<F: Facts + ?Sized>(
        &self,
        plan: &mut Plan,
        operation: Option<usize>,
        facts: &F,
        identity: Option<&Identity>,
        stage: Stage,
    ) {
        plan.checks.clear();
        plan.rejected = None;
        if self.plain[operation] {
            let mut address = None;
            for step in self.steps[operation].iter() {
                let key = match step.key {
                    StepKey::Address => *address.get_or_insert_with(|| self.hasher.hash_address(facts.address())),
                    StepKey::Fixed(key) => key,
                    // Not in a plain operation; should one ever be, the general walk plans it.
                    StepKey::Derived => {
                        plan.checks.clear();
                        return self.plan_steps(plan, operation, facts, identity, stage);
                    }
                };
                plan.checks.push(Check { bound: step.bound, key, cost: step.cost });
            }
        } else {
            self.plan_steps(plan, operation, facts, identity, stage);
        }
    }

    /// `plan_into` for an operation that is not plain: stages, `applies-to`, stated costs and
    /// keys read from the request. Out of line, so the plain plan keeps a small stack frame.
    #[inline(never)]
    pub(super) fn plan_steps<F: Facts + ?Sized>(
        &self,
        plan: &mut Plan,
        operation: Option<usize>,
        facts: &F,
        identity: Option<&Identity>,
        stage: Stage,
    ) {
        let policy = &self.policy;
        // A slice, empty for most operations: those build no vector and search none per step.
        let owned: StatedCosts;
        let stated: &[(BoundIndex, Option<u32>)] = if self.states_cost.get(operation).copied().unwrap_or(true) {
            match self.stated_costs(operation, facts, stage) {
                Ok(costs) => {
                    owned = costs;
                    &owned
                }
                Err(outcome) => {
                    plan.rejected = Some(outcome);
                    return;
                }
            }
        } else {
            &[]
        };
        let (authenticated, roles) = identity.map_or((false, &[][..]), |i| (i.authenticated(), i.roles.as_slice()));
        let mut address = None;
        for step in self.steps[operation].iter() {
            if step.stage > stage {
                continue;
            }
            let b = step.bound;
            let cost = match stated.iter().find(|(s, _)| *s == b) {
                Some((_, Some(n))) => *n,
                Some((_, None)) => continue,
                None => step.cost,
            };
            if !step.everybody && !policy.bounds[b].def.applies_to.admits(authenticated, roles) {
                continue;
            }
            let key = match step.key {
                // Addresses hash from registers: the commonest key allocates and stores nothing.
                StepKey::Address => *address.get_or_insert_with(|| self.hasher.hash_address(facts.address())),
                StepKey::Fixed(key) => key,
                StepKey::Derived => match self.key_of(b, &policy.bounds[b].def.per, operation, facts, identity) {
                    Ok(Some(key)) => key,
                    Ok(None) => continue,
                    Err(outcome) => {
                        plan.rejected = Some(outcome);
                        plan.checks.clear();
                        return;
                    }
                },
            };
            plan.checks.push(Check { bound: b, key, cost });
        }
    }

    /// Charges a planned request `hits` times over: a gateway that counts a request as several
    /// (Envoy's `hits_addend`: a batch of `hits` items) takes `hits` × each bound's cost. A cost
    /// no bound could ever admit (above its capacity) refuses the request with 413 before
    /// anything is counted, as a stated cost above `max-cost` does; a shadow bound skips it.
    pub fn scale(&self, plan: &mut Plan, hits: u32) {
        if hits == 1 || plan.rejected.is_some() {
            return;
        }
        let policy = &self.policy;
        let mut refused = None;
        plan.checks.retain(|check| {
            check.cost = check.cost.saturating_mul(hits);
            let def = &policy.bounds[check.bound].def;
            if check.cost <= def.capacity() {
                return true;
            }
            if def.mode == Mode::Enforce && refused.is_none() {
                refused = Some(Outcome::CostTooHigh { bound: check.bound, stated: u64::from(check.cost) });
            }
            false
        });
        if let Some(outcome) = refused {
            plan.checks.clear();
            plan.rejected = Some(outcome);
        }
    }

    /// The costs requests to `operation` state (`cost-from`) that this stage can read, per bound:
    /// `None` for a shadow bound that skips a cost it cannot use. A cost above `max-cost`, or
    /// not a number, refuses the request.
    // Out of line, like `key_of`: most plans need neither, and `plan` stays small without them.
    #[inline(never)]
    fn stated_costs<F: Facts + ?Sized>(
        &self,
        operation: Option<usize>,
        facts: &F,
        stage: Stage,
    ) -> Result<StatedCosts, Outcome> {
        let policy = &self.policy;
        let mut stated = SmallVec::new();
        for b in policy.bounds_for(operation) {
            let def = &policy.bounds[b].def;
            let Some(from) = def.cost_from.as_ref().filter(|c| stage == Stage::All || !c.from.needs_body()) else {
                continue;
            };
            let refusal = match request::stated_cost(&from.from, facts) {
                Ok(None) => None,
                Ok(Some(n)) if n <= u64::from(from.max.get()) => {
                    stated.push((b, Some(n as u32)));
                    continue;
                }
                Ok(Some(n)) => Some(Outcome::CostTooHigh { bound: b, stated: n }),
                Err(why) => Some(Outcome::BadCost { bound: b, why }),
            };
            match refusal {
                // A shadow bound refuses nothing: it skips a request whose cost it cannot use.
                Some(_) if def.mode == Mode::Shadow => stated.push((b, None)),
                Some(outcome) => return Err(outcome),
                None => {}
            }
        }
        Ok(stated)
    }

    /// The hashed key of a bound not counted per address: `None` when the bound skips the
    /// request, an outcome when it refuses it (a key missing under `missing: reject`, or unclear).
    #[inline(never)]
    fn key_of<F: Facts + ?Sized>(
        &self,
        b: BoundIndex,
        per: &Per,
        operation: Option<usize>,
        facts: &F,
        identity: Option<&Identity>,
    ) -> Result<Option<u64>, Outcome> {
        let def = &self.policy.bounds[b].def;
        let credentials = operation.map_or(DEFAULT_CREDENTIALS, |op| self.policy.operations[op].credentials.as_slice());
        match request::key(per, facts, identity, credentials) {
            Key::Present(bytes) => Ok(Some(self.hasher.hash(&bytes))),
            Key::Missing if def.missing == Missing::Reject && def.mode == Mode::Enforce => {
                Err(Outcome::MissingKey { bound: b })
            }
            Key::Missing => Ok(None),
            // Counting one reading would let the client choose its key; a shadow bound
            // refuses nothing, so it skips the request.
            Key::Unclear(unclear) if def.mode == Mode::Enforce => Err(Outcome::UnclearKey { bound: b, why: unclear }),
            Key::Unclear(_) => Ok(None),
        }
    }
}
