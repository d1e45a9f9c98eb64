//! The engine: decides requests against a compiled policy. Pure and synchronous: time comes from
//! a [`Clock`], state lives in capped [`KeyTable`]s, and nothing here does I/O.

pub mod clock;
mod counter;
pub mod decision;
pub mod hash;
pub mod headers;
pub mod problem;
pub mod quota;
pub mod rate;
pub mod reservation;
pub mod table;

use std::sync::Arc;

use smallvec::SmallVec;

pub use clock::{Clock, ManualClock, Nanos, SystemClock};
pub use counter::{Counter, Verdict};
pub use decision::{BoundVerdict, Check, Decision, Outcome, Permits, Plan, Report};
pub use hash::KeyHasher;
pub use rate::Rate;
pub use reservation::{Finished, Reservations};
pub use table::{Change, KeyTable, Slot};

use crate::policy::{BoundIndex, Credential, Missing, Mode, Per, PerOperation, Policy};
use crate::request::{self, Facts, Identity, Key};
use decision::Permit;

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
    fn first_covering(def: &crate::policy::BoundDef) -> Stage {
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
struct Step {
    bound: BoundIndex,
    /// The bound's fixed cost (a cost the request states replaces it).
    cost: u32,
    /// The first stage that plans it.
    stage: Stage,
    /// No `applies-to`: every caller.
    everybody: bool,
    /// Where the key comes from.
    key: StepKey,
}

/// How a step finds its caller's key.
#[derive(Clone, Copy, Debug)]
enum StepKey {
    /// The caller's address, hashed from registers once per plan, however many bounds count per
    /// address.
    Address,
    /// The same for every request (`per: route`): hashed once, when the limiter is made.
    Fixed(u64),
    /// Anything else: `key_of`.
    Derived,
}

const DEFAULT_CREDENTIALS: &[Credential] = &[Credential::Authorization];

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

/// The costs requests state (`cost-from`), by bound: `None` for a shadow bound that skips this
/// request because its stated cost could not be used.
type StatedCosts = SmallVec<[(BoundIndex, Option<u32>); 2]>;

/// A policy with its counters.
pub struct Limiter {
    policy: Arc<Policy>,
    /// Parallel to `policy.bounds`.
    tables: Vec<Arc<KeyTable>>,
    hasher: KeyHasher,
    clock: Arc<dyn Clock>,
    /// A copy of `clock` when it is the system clock, read without a virtual call.
    system: Option<SystemClock>,
    /// Per operation (and for requests that match none): the bounds to plan, route bounds first.
    steps: PerOperation<Box<[Step]>>,
    /// Per operation: whether any bound needs identity.
    needs_identity: PerOperation<bool>,
    /// Per operation: whether any bound needs the request body.
    needs_body: PerOperation<bool>,
    /// Per operation: whether any bound takes its cost from the request (`cost-from`); most
    /// take none, and their plans skip the pass that reads stated costs.
    states_cost: PerOperation<bool>,
    /// Per operation: whether every step is for everybody, needs nothing but the request's head
    /// and is keyed by the address or the route, with no cost stated: then every stage plans
    /// every step, each one a push (the commonest operation; a sixth of a one-bound plan).
    plain: PerOperation<bool>,
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
            policy
                .bounds_for(op)
                .map(|bound| {
                    let def = &policy.bounds[bound].def;
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
                })
                .collect()
        });
        let plain = PerOperation::new(&policy, |op| {
            !states_cost[op]
                && steps[op].iter().all(|s| {
                    s.everybody
                        && s.stage == Stage::IdentityFree
                        && matches!(s.key, StepKey::Address | StepKey::Fixed(_))
                })
        });
        let system = clock.as_system().cloned();
        Limiter { policy, tables, hasher, clock, system, steps, needs_identity, needs_body, states_cost, plain }
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
    fn now(&self) -> Nanos {
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

    /// Whether deciding a request to `operation` needs its body: only then does the server read
    /// it.
    pub fn needs_body(&self, operation: Option<usize>) -> bool {
        self.needs_body[operation]
    }

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
    /// wrote its checks, which the CPU cannot forward (the profile put that stall at a fifth of
    /// a one-bound decision).
    // Always inline: the plain plan is a few instructions, and out of line (which the compiler
    // chose after an unrelated change elsewhere) it cost a call's frame and 20 instructions.
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
    fn plan_steps<F: Facts + ?Sized>(
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

    /// The hashed key a bound counts the caller with this key value under: an address for
    /// `per: address` (counted by its /64 for IPv6), nothing for `per: route`, the value itself
    /// otherwise. For an operator's look-up and reset; the value is hashed, never kept.
    pub fn caller_key(&self, bound: BoundIndex, value: &str) -> Result<u64, String> {
        let per = &self.policy.bounds[bound].def.per;
        match per {
            Per::Route => Ok(self.hasher.hash(b"")),
            Per::Address => {
                let ip: std::net::IpAddr = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("{value:?} is not an address, which this bound counts per"))?;
                Ok(self.hasher.hash_address(ip))
            }
            _ if value.is_empty() => Err(format!("give the {per} value whose counter to look up")),
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

    /// Checks every bound of the plan and, only if all admit, counts the request in all of them,
    /// atomically: the counters of one decision are locked together, in a fixed order.
    pub fn decide(&self, plan: &Plan) -> Decision {
        self.run(plan, true)
    }

    /// Checks without counting: what `decide` would answer now.
    pub fn peek(&self, plan: &Plan) -> Decision {
        self.run(plan, false)
    }

    fn run(&self, plan: &Plan, commit: bool) -> Decision {
        if let Some(outcome) = plan.rejected {
            return Self::rejected(outcome);
        }
        match plan.checks.as_slice() {
            // No bound applies (an operation without any, and no route bounds): nothing to read
            // or lock. Through `run_many`, setting up for none cost 300 instructions a request.
            [] => Self::unbounded(),
            [check] => self.run_one(check, commit),
            checks => self.run_many(checks, commit),
        }
    }

    /// The decision for a plan of no bounds: allowed, nothing to report or hold.
    #[inline]
    fn unbounded() -> Decision {
        Decision {
            outcome: Outcome::Allowed,
            report: None,
            verdicts: SmallVec::new(),
            permits: Permits::default(),
            reservations: Reservations::default(),
        }
    }

    /// A plan refused before anything was counted.
    #[cold]
    fn rejected(outcome: Outcome) -> Decision {
        Decision { outcome, ..Self::unbounded() }
    }

    /// The decision for a plan of several bounds, their counters locked together.
    // Apart from `run_one`, so the commonest plan does not pay for this one's stack frame.
    #[inline(never)]
    fn run_many(&self, checks: &[Check], commit: bool) -> Decision {
        // Lock in a fixed order: by table (bound index), then shard, then overflow.
        // Pushed in place: collected, the vector was built aside and moved, a 160-byte copy.
        let mut order: SmallVec<[(BoundIndex, usize, usize); 6]> = SmallVec::new();
        for (i, c) in checks.iter().enumerate() {
            order.push((c.bound, self.table(c.bound).shard_of(c.key), i));
        }
        // Plans list bounds in declared order, which is nearly always the order to lock them in.
        if !order.is_sorted() {
            order.sort_unstable();
        }
        // The locks apart from the verdicts: each part moves into its vector in a few registers,
        // where the two together were copied through `memmove`.
        let mut locks: SmallVec<[table::Locked<'_>; 4]> = SmallVec::new();
        let mut held: SmallVec<[(usize, Verdict); 4]> = SmallVec::new();
        // The time read once the first counter is locked (see `KeyTable::lock_reading`).
        let mut read = None;
        for &(.., i) in &order {
            let table = self.table(checks[i].bound);
            let locked = table.lock_reading(checks[i].key, || *read.get_or_insert_with(|| self.now()));
            let now = *read.get_or_insert_with(|| self.now());
            // What is pending on a `count-when` counter weighs as if counted: exact under concurrency.
            let weight = checks[i].cost.saturating_add(locked.pending);
            // Evaluated in its place in `held` (see `Rate::evaluate_into`).
            let n = held.len();
            held.push((i, Verdict::BLANK));
            table.rate_at(locked.counter, now).evaluate_into(locked.counter, now, weight, &mut held[n].1);
            locks.push(locked);
        }
        // Slices from here on: every access through a `SmallVec` asks again whether it spilled
        // (a tenth of `run_many`'s instructions for three bounds, counted with callgrind).
        let held = held.as_slice();
        let bounds = &self.policy.bounds;
        let enforced = |i: usize| bounds[checks[i].bound].def.mode == Mode::Enforce;
        // The first exceeded in declared order refuses; `i` is the declared position.
        let refusing = held.iter().filter(|(i, v)| !v.admitted && enforced(*i)).min_by_key(|(i, _)| *i);
        let report_of = |i: usize, v: &Verdict| Report {
            bound: checks[i].bound,
            limit: self.table(checks[i].bound).rate.capacity(),
            remaining: v.remaining,
            reset: v.reset,
            retry: v.retry,
            period_end: v.period_end,
        };
        let (outcome, report) = match refusing {
            Some((i, v)) => (Outcome::Limited { bound: checks[*i].bound }, Some(report_of(*i, v))),
            None => {
                // The enforced bound with the least left; the first declared on a tie.
                let least = held.iter().filter(|(i, _)| enforced(*i)).min_by_key(|(i, v)| (v.remaining, *i));
                (Outcome::Allowed, least.map(|(i, v)| report_of(*i, v)))
            }
        };
        let refused = refusing.is_some();
        // The decision is made first and its verdicts pushed into it: a vector of verdicts
        // collected aside and then moved in was read back in 16-byte moves over its fields'
        // narrower stores, which the CPU cannot forward. (The decision itself is still copied
        // out once on return; Rust does not build a local returned by name in its caller's slot.)
        let mut decision = Decision {
            outcome,
            report,
            verdicts: SmallVec::new(),
            permits: Permits::default(),
            reservations: Reservations::default(),
        };
        for c in checks {
            decision.verdicts.push(BoundVerdict {
                bound: c.bound,
                key: c.key,
                admitted: false,
                shadow: false,
                overflow: false,
                cost: c.cost,
            });
        }
        let Decision { verdicts, permits, reservations, .. } = &mut decision;
        let verdicts = verdicts.as_mut_slice();
        for ((i, verdict), locked) in held.iter().zip(locks.iter_mut()) {
            let check = checks[*i];
            let v = &mut verdicts[*i];
            (v.admitted, v.shadow, v.overflow) = (verdict.admitted, !enforced(*i), locked.slot == Slot::Overflow);
            // A refused request is counted by no bound; a shadow bound counts only what it admits.
            if commit && !refused && verdict.admitted {
                self.take(self.table(check.bound), locked, verdict.next, check, permits, reservations);
            }
        }
        drop(locks);
        decision
    }

    /// The same decision for a plan of one bound, the commonest case, without the bookkeeping
    /// that ordering several locks needs.
    #[inline]
    fn run_one(&self, check: &Check, commit: bool) -> Decision {
        let table = self.table(check.bound);
        let mut shard = table.lock_shard(check.key);
        let (Rate::SlidingWindow { limit, window }, Some(entry)) =
            (table.rate, table.plain_entry(&mut shard, check.key))
        else {
            return self.run_one_locked(check, commit, shard);
        };
        // The commonest of all: a caller already tracked under a sliding window, on a table
        // nothing outlives a decision on. Judged and stored with only the counter itself read
        // and written under the lock, and the verdict kept in registers: through `evaluate`,
        // whose arms merge into one `Verdict`, its fields were stored and read back wider than
        // they were written, which the CPU cannot forward. The time is read once the counter
        // is locked (see `KeyTable::lock_reading`).
        let (counter, now) = (*entry, self.now());
        let Verdict { admitted, next, remaining, reset, retry, period_end } =
            rate::sliding(counter, now, check.cost, limit, window);
        if commit && admitted {
            (entry.a, entry.b, entry.c) = (next.a, next.b, next.c);
        }
        drop(shard);
        let verdict = Verdict { admitted, next, remaining, reset, retry, period_end };
        self.one_decision(*check, table, verdict, false, Permits::default(), Reservations::default())
    }

    /// `run_one` for any other counter: a new caller, the overflow counter, something pending
    /// or written behind, a charge that outlives the decision.
    #[inline(never)]
    fn run_one_locked(&self, check: &Check, commit: bool, shard: table::ShardGuard<'_>) -> Decision {
        let check = *check;
        let table = self.table(check.bound);
        let mut permits = Permits::default();
        let mut reservations = Reservations::default();
        // The time read once the counter is locked (see `KeyTable::lock_reading`).
        let mut read = None;
        let mut locked = table.locked_in(shard, check.key, || *read.insert(self.now()));
        let now = read.unwrap_or_else(|| self.now());
        let weight = check.cost.saturating_add(locked.pending);
        let verdict = table.rate_at(locked.counter, now).evaluate(locked.counter, now, weight);
        if commit && verdict.admitted {
            self.take(table, &mut locked, verdict.next, check, &mut permits, &mut reservations);
        }
        let overflow = locked.slot == Slot::Overflow;
        drop(locked);
        self.one_decision(check, table, verdict, overflow, permits, reservations)
    }

    /// The decision on a plan of one bound, from that bound's verdict.
    #[inline(always)]
    fn one_decision(
        &self,
        check: Check,
        table: &KeyTable,
        Verdict { admitted, remaining, reset, retry, period_end, .. }: Verdict,
        overflow: bool,
        permits: Permits,
        reservations: Reservations,
    ) -> Decision {
        let enforced = self.policy.bounds[check.bound].def.mode == Mode::Enforce;
        let report = Report { bound: check.bound, limit: table.rate.capacity(), remaining, reset, retry, period_end };
        let outcome = if admitted || !enforced { Outcome::Allowed } else { Outcome::Limited { bound: check.bound } };
        let mut verdicts = SmallVec::new();
        verdicts.push(BoundVerdict {
            bound: check.bound,
            key: check.key,
            admitted,
            shadow: !enforced,
            overflow,
            cost: check.cost,
        });
        Decision { outcome, report: enforced.then_some(report), verdicts, permits, reservations }
    }

    /// Counts an admitted request on one bound: commits the counter, or (`count-when`) holds
    /// the cost as pending; a concurrency permit or a reservation goes with the decision.
    #[inline(always)]
    fn take(
        &self,
        table: &Arc<KeyTable>,
        locked: &mut table::Locked<'_>,
        next: Counter,
        check: Check,
        permits: &mut Permits,
        reservations: &mut Reservations,
    ) {
        if table.plain {
            locked.commit(next);
        } else {
            // `next` field by field, as `Locked::commit` passes it on.
            self.take_held(table, locked, (next.a, next.b, next.c), check, permits, reservations);
        }
    }

    /// `take` for a bound whose charge outlives the decision: a concurrency permit, or a
    /// reservation the response settles.
    #[inline(never)]
    fn take_held(
        &self,
        table: &Arc<KeyTable>,
        locked: &mut table::Locked<'_>,
        (a, b, c): (u64, u32, u32),
        check: Check,
        permits: &mut Permits,
        reservations: &mut Reservations,
    ) {
        if table.counting.count_when.is_some() {
            locked.reserve(check.cost);
        } else {
            locked.commit(Counter { a, b, c });
        }
        if matches!(table.rate, Rate::Concurrency { .. }) {
            permits.push(Permit::Local { table: table.clone(), key: check.key, slot: locked.slot, cost: check.cost });
        } else if table.counting.after_response() {
            reservations.push(&self.clock, table, check.key, locked.slot, check.cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::request::Given;

    const SPEC: &str = r#"
openapi: 3.0.3
info: {title: t, version: '1'}
x-rate-limit:
  - {name: perimeter, per: address, limit: 5, window: PT1M}
  - {name: everyone, per: route, limit: 50, window: PT1M}
paths:
  /plain:
    get:
      x-rate-limit:
        - {per: address, algorithm: token-bucket, limit: 3, window: PT1S, cost: 2}
  /keyed:
    get:
      x-rate-limit: [{per: 'header:x-key', limit: 3, window: PT1M}]
  /partners:
    get:
      x-rate-limit: [{per: address, limit: 3, window: PT1M, applies-to: {roles: [partner]}}]
  /costly:
    get:
      x-rate-limit: [{per: address, limit: 30, window: PT1M, cost-from: 'header:x-count', max-cost: 10}]
"#;

    /// The plain plan is a shortcut: it must plan what the general walk plans, for every
    /// operation it is taken for, at every stage.
    #[test]
    fn plain_plans_are_the_general_plans() {
        let source = crate::spec::Source::from_text(Path::new("t.yaml"), SPEC.to_string());
        let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
        let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
        let l = Limiter::new(policy.clone(), clock, KeyHasher::random());
        let op = |path: &str| policy.route("GET", path);
        let plain: Vec<bool> = ["/plain", "/keyed", "/partners", "/costly"].iter().map(|p| l.plain[op(p)]).collect();
        assert_eq!(plain, [true, false, false, false]);
        // Requests that match no operation see the route bounds alone: plain too.
        assert!(l.plain[None]);
        let partner = Identity { user: Some("u".into()), org: None, roles: vec!["partner".into()] };
        let facts = [
            Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None },
            Given {
                address: "2001:db8::1".parse().unwrap(),
                headers: vec![("x-key".into(), b"k".to_vec()), ("x-count".into(), b"4".to_vec())],
                query: None,
            },
        ];
        for path in ["/plain", "/keyed", "/partners", "/costly", "/nowhere"] {
            for f in &facts {
                for identity in [None, Some(&partner)] {
                    for stage in [Stage::IdentityFree, Stage::BeforeBody, Stage::All] {
                        let mut fast = Plan::default();
                        l.plan_into(&mut fast, op(path), f, identity, stage);
                        let mut general = Plan::default();
                        l.plan_steps(&mut general, op(path), f, identity, stage);
                        assert_eq!(fast.checks, general.checks, "{path} {stage:?}");
                        assert_eq!(fast.rejected, general.rejected, "{path} {stage:?}");
                    }
                }
            }
        }
        // The plain operation's plan: the address counted under one key on both address
        // bounds, the route under another, each at its own cost.
        let plan = l.plan(op("/plain"), &facts[0], None, Stage::IdentityFree);
        let costs: Vec<u32> = plan.checks.iter().map(|c| c.cost).collect();
        assert_eq!(costs, [1, 1, 2]);
        assert_eq!(plan.checks[0].key, plan.checks[2].key);
        assert_ne!(plan.checks[0].key, plan.checks[1].key);
    }

    /// A tracked caller under a sliding window skips `Locked` (`run_one`'s fast path): it must
    /// answer what the general path answers, through admissions, refusals, shadow bounds and
    /// windows rolling over, on two limiters kept in step.
    #[test]
    fn the_tracked_sliding_window_path_decides_as_the_general_path_does() {
        let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /e:\n    get:\n      x-rate-limit: \
                    [{per: address, limit: 3, window: PT10S}]\n  /s:\n    get:\n      x-rate-limit: \
                    [{per: address, limit: 2, window: PT10S, mode: shadow}]\n";
        let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
        let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
        let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
        let (fast, general) = (
            Limiter::new(policy.clone(), clock.clone(), KeyHasher::random()),
            Limiter::new(policy.clone(), clock.clone(), KeyHasher::random()),
        );
        let facts = Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None };
        let mut refused = 0;
        for path in ["/e", "/s"] {
            let op = policy.route("GET", path);
            for step in 0..40 {
                let (a, b) = (fast.plan(op, &facts, None, Stage::All), general.plan(op, &facts, None, Stage::All));
                let check = b.checks[0];
                let tracked = fast.table(check.bound).get(a.checks[0].key).is_some();
                let x = fast.decide(&a);
                let y = general.run_one_locked(&check, true, general.table(check.bound).lock_shard(check.key));
                assert_eq!(x.outcome, y.outcome, "{path} step {step} (tracked before: {tracked})");
                assert_eq!(x.report, y.report, "{path} step {step}");
                let strip = |d: &Decision| {
                    d.verdicts.iter().map(|v| (v.bound, v.admitted, v.shadow, v.overflow, v.cost)).collect::<Vec<_>>()
                };
                assert_eq!(strip(&x), strip(&y), "{path} step {step}");
                assert_eq!(
                    fast.table(check.bound).get(a.checks[0].key),
                    general.table(check.bound).get(check.key),
                    "{path} step {step}: the counters"
                );
                refused += usize::from(!x.verdicts[0].admitted);
                // Bursts of five a window, with a window and a half now and then: both the
                // previous window's weight and a counter too old to weigh at all.
                clock.advance(Duration::from_millis(if step % 5 == 4 { 15_000 } else { 700 }));
            }
        }
        assert!(refused > 10, "only {refused} refusals: the comparison never saw a full window");
    }

    /// A refusal keeps only what it is about; the words it is sent with are worked out from the
    /// policy, and must be the ones it was always sent with.
    #[test]
    fn a_refusal_says_what_is_wrong_in_the_words_it_always_did() {
        let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    post:\n      x-rate-limit:\n\
                    \x20       - {per: 'header:x-api-key', limit: 9, window: PT1M, missing: reject}\n\
                    \x20       - {per: 'query:key', limit: 9, window: PT1M}\n\
                    \x20       - {per: route, limit: 99, window: PT1M, cost-from: 'header:x-count', max-cost: 9}\n\
                    \x20       - {per: route, limit: 99, window: PT1M, cost-from: 'json:/items', max-cost: 9}\n\
                    \x20       - {per: token, limit: 9, window: PT1M}\n";
        let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
        let policy = crate::policy::load_source(source, &crate::Options::default()).unwrap().policy;
        let b = |i: usize| policy.bounds_for(policy.route("POST", "/a")).nth(i).unwrap();
        let what = |o: Outcome| o.what(&policy);
        use crate::request::{CostProblem, Unclear};
        let cases = [
            (Outcome::MissingKey { bound: b(0) }, "header x-api-key"),
            (
                Outcome::UnclearKey { bound: b(1), why: Unclear::Repeated },
                "query parameter key more than once with different values",
            ),
            (
                Outcome::UnclearKey { bound: b(1), why: Unclear::Malformed },
                "query parameter key with a malformed percent-escape",
            ),
            (
                Outcome::UnclearKey { bound: b(4), why: Unclear::Repeated },
                "its credential more than once with different values",
            ),
            (
                Outcome::UnclearKey { bound: b(0), why: Unclear::Encoded },
                "header x-api-key in a compressed body (Content-Encoding), which opbound does not read",
            ),
            (
                Outcome::UnclearKey { bound: b(0), why: Unclear::Stalled { patience_ms: 2_500 } },
                "a body that stalled (not all of it within 2.5s)",
            ),
            (
                Outcome::BadCost { bound: b(2), why: CostProblem::NotACount },
                "header x-count is not a non-negative integer",
            ),
            (
                Outcome::BadCost { bound: b(2), why: CostProblem::Unclear },
                "header x-count is given more than once with different values, or malformed",
            ),
            (
                Outcome::BadCost { bound: b(3), why: CostProblem::Unclear },
                "the JSON body gives /items more than once with different values",
            ),
            (
                Outcome::BadCost { bound: b(3), why: CostProblem::NotACount },
                "/items in the JSON body is not a non-negative integer or an array",
            ),
            (
                Outcome::BadCost { bound: b(3), why: CostProblem::Compressed },
                "a compressed body (Content-Encoding) states the cost at /items, which opbound does not read",
            ),
        ];
        for (outcome, words) in cases {
            assert_eq!(what(outcome).as_deref(), Some(words), "{outcome:?}");
        }
        assert_eq!(what(Outcome::Allowed), None);
        assert_eq!(what(Outcome::Limited { bound: b(0) }), None);
    }

    /// `run_many` evaluates each bound in its place and builds the decision where it returns
    /// it: the verdicts must still come out in the plan's order whatever order the locks were
    /// taken in, each with its own bound's flags, and a refusal must count no bound.
    #[test]
    fn several_bounds_are_reported_in_the_plans_order_and_a_refusal_counts_none() {
        let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /m:\n    get:\n      x-rate-limit:\n\
                    \x20       - {per: address, limit: 2, window: PT1M}\n\
                    \x20       - {per: route, limit: 1, window: PT1M, mode: shadow}\n\
                    \x20       - {per: address, algorithm: token-bucket, limit: 5, window: PT1M}\n";
        let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
        let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
        let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
        let l = Limiter::new(policy.clone(), clock, KeyHasher::random());
        let facts = Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None };
        let mut plan = l.plan(policy.route("GET", "/m"), &facts, None, Stage::All);
        assert_eq!(plan.checks.len(), 3);
        // Planned in declared order, which is the lock order; reversed, the two differ.
        plan.checks.reverse();
        let [bucket, shadow, window] = [plan.checks[0], plan.checks[1], plan.checks[2]];
        let counter = |c: Check| l.table(c.bound).get(c.key);
        let flags = |d: &Decision| {
            d.verdicts.iter().map(|v| (v.bound, v.key, v.admitted, v.shadow, v.overflow, v.cost)).collect::<Vec<_>>()
        };
        let expect = |admitted: [bool; 3]| {
            [bucket, shadow, window]
                .iter()
                .zip(admitted)
                .map(|(c, a)| (c.bound, c.key, a, c.bound == shadow.bound, false, c.cost))
                .collect::<Vec<_>>()
        };
        // The first: every bound admits; the report is the enforced bound with the least left.
        let d = l.decide(&plan);
        assert_eq!(d.outcome, Outcome::Allowed);
        assert_eq!(flags(&d), expect([true, true, true]));
        assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((window.bound, 1)));
        // The second: the shadow bound is over its limit and refuses nothing.
        let d = l.decide(&plan);
        assert_eq!(d.outcome, Outcome::Allowed);
        assert_eq!(flags(&d), expect([true, false, true]));
        assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((window.bound, 0)));
        // The third: the window refuses, and no bound counts the request.
        let before = [counter(bucket), counter(shadow), counter(window)];
        let d = l.decide(&plan);
        assert_eq!(d.outcome, Outcome::Limited { bound: window.bound });
        assert_eq!(flags(&d), expect([true, false, false]));
        assert_eq!(d.report.map(|r| (r.bound, r.remaining)), Some((window.bound, 0)));
        assert!(d.report.is_some_and(|r| r.retry > 0));
        assert_eq!([counter(bucket), counter(shadow), counter(window)], before, "a refused request was counted");
    }

    /// A plan of no bounds skips `run_many`: it must answer what `run_many` answers for none.
    #[test]
    fn a_plan_of_no_bounds_is_decided_as_the_general_path_decides_it() {
        let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /open:\n    get: {}\n";
        let source = crate::spec::Source::from_text(Path::new("t.yaml"), spec.to_string());
        let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
        let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1_000)));
        let l = Limiter::new(policy.clone(), clock, KeyHasher::random());
        let facts = Given { address: "10.0.0.1".parse().unwrap(), headers: vec![], query: None };
        let plan = l.plan(policy.route("GET", "/open"), &facts, None, Stage::All);
        assert!(plan.checks.is_empty() && plan.rejected.is_none());
        for commit in [true, false] {
            let (fast, general) = (l.run(&plan, commit), l.run_many(&[], commit));
            assert_eq!(fast.outcome, general.outcome);
            assert_eq!(fast.outcome, Outcome::Allowed);
            assert_eq!(fast.report, general.report);
            assert_eq!(fast.verdicts, general.verdicts);
            assert_eq!((fast.permits.len(), fast.reservations.len()), (0, 0));
            assert_eq!((general.permits.len(), general.reservations.len()), (0, 0));
        }
    }
}
