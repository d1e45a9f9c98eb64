//! What a replay counts: per bound and per operation, admitted and refused, the callers
//! refused and the heaviest of them, and when refusals happened. Fixed memory per bound and per
//! operation, whatever the log holds.

use super::Record;
use super::run::Replayed;
use super::sketch::{Distinct, Heaviest, Timeline};
use crate::engine::Outcome;
use crate::engine::clock::Nanos;
use crate::policy::{Per, Policy};

/// How many of a bound's heaviest refused callers are tracked (the report shows fewer).
const TRACKED: usize = 64;

/// One bound's counts.
#[derive(Clone, Debug)]
pub struct BoundTally {
    /// Requests the bound was checked for (it applied and the request carried its key).
    pub checked: u64,
    /// Requests it counted: admitted by every bound.
    pub counted: u64,
    /// Requests this bound refused (the first enforced bound without room).
    pub refused: u64,
    /// Requests a shadow bound would have refused, had it been enforced.
    pub shadow_refused: u64,
    /// Distinct callers refused (or, for a shadow bound, that would have been).
    pub callers: Distinct,
    /// The callers refused most.
    pub heaviest: Heaviest,
}

impl Default for BoundTally {
    fn default() -> BoundTally {
        BoundTally {
            checked: 0,
            counted: 0,
            refused: 0,
            shadow_refused: 0,
            callers: Distinct::default(),
            heaviest: Heaviest::new(TRACKED),
        }
    }
}

/// One operation's counts (or the requests that matched none).
#[derive(Clone, Debug, Default)]
pub struct OperationTally {
    /// Requests that routed here.
    pub requests: u64,
    /// Allowed.
    pub allowed: u64,
    /// Refused with 429 (or a bound's own status) for want of room.
    pub limited: u64,
    /// Refused with 400 (a key missing or unclear, a bad cost) or 413 (a cost too high).
    pub malformed_keys: u64,
    /// Distinct callers refused, by the refusing bound's key.
    pub callers: Distinct,
}

/// Everything a replay counted.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Records judged, malformed targets included.
    pub records: u64,
    /// Records whose target or method `serve` would have refused with 400 before any bound.
    pub malformed: u64,
    /// The first few of them: line and why.
    pub malformed_examples: Vec<(super::Source, String)>,
    /// Records without a client address (judged as `0.0.0.0`).
    pub without_client: u64,
    /// The first record's time and the last's.
    pub span: Option<(Nanos, Nanos)>,
    /// Per bound, in `Policy::bounds` order.
    pub bounds: Vec<BoundTally>,
    /// Per operation, then the requests that matched none.
    pub operations: Vec<OperationTally>,
    /// When refusals (enforced) happened.
    pub refusals: Timeline,
    /// Whether callers' keys are kept as the log wrote them (`--show-keys`).
    pub show_keys: bool,
}

impl Tally {
    /// Nothing counted yet, for `policy`.
    pub fn new(policy: &Policy, show_keys: bool) -> Tally {
        Tally {
            records: 0,
            malformed: 0,
            malformed_examples: Vec::new(),
            without_client: 0,
            span: None,
            bounds: vec![BoundTally::default(); policy.bounds.len()],
            operations: vec![OperationTally::default(); policy.operations.len() + 1],
            refusals: Timeline::default(),
            show_keys,
        }
    }

    /// The index into `operations` of an operation, or of no operation.
    pub fn slot(&self, operation: Option<usize>) -> usize {
        operation.unwrap_or(self.operations.len() - 1)
    }

    /// Counts one judged record.
    pub fn count(&mut self, policy: &Policy, record: &Record, replayed: &Replayed, at: Nanos) {
        self.records += 1;
        self.span = Some(match self.span {
            Some((first, _)) => (first, at),
            None => (at, at),
        });
        if record.client.is_none() {
            self.without_client += 1;
        }
        let Some(decision) = &replayed.decision else {
            self.malformed += 1;
            if self.malformed_examples.len() < 10 {
                let why = replayed.malformed.clone().unwrap_or_default();
                self.malformed_examples.push((record.source, why));
            }
            return;
        };
        let slot = self.slot(replayed.operation);
        let op = &mut self.operations[slot];
        op.requests += 1;
        let refusing = match &decision.outcome {
            Outcome::Allowed => {
                op.allowed += 1;
                None
            }
            Outcome::Limited { bound } | Outcome::Unavailable { bound } => {
                op.limited += 1;
                Some(*bound)
            }
            Outcome::MissingKey { bound, .. }
            | Outcome::UnclearKey { bound, .. }
            | Outcome::BadCost { bound, .. }
            | Outcome::CostTooHigh { bound, .. } => {
                op.malformed_keys += 1;
                Some(*bound)
            }
        };
        if refusing.is_some() {
            self.refusals.insert(at);
        }
        let show = self.show_keys;
        for v in &decision.verdicts {
            let b = &mut self.bounds[v.bound.index()];
            b.checked += 1;
            if decision.allowed() && v.admitted {
                b.counted += 1;
            }
            let refused_here = refusing == Some(v.bound);
            if v.shadow && !v.admitted {
                b.shadow_refused += 1;
            } else if !refused_here {
                continue;
            } else {
                b.refused += 1;
                op.callers.insert(v.key);
            }
            b.callers.insert(v.key);
            let per = &policy.bounds[v.bound].def.per;
            b.heaviest.insert(v.key, || show.then(|| label(per, record, replayed)).flatten());
        }
        // A refusal before any counter (a missing or unclear key) names its bound but has no
        // verdict: count it against the bound all the same.
        if let Some(bound) = refusing
            && !decision.verdicts.iter().any(|v| v.bound == bound)
        {
            self.bounds[bound.index()].refused += 1;
        }
    }
}

/// A caller's key as the log holds it, for `--show-keys`.
fn label(per: &Per, record: &Record, replayed: &Replayed) -> Option<String> {
    let header = |name: &str| record.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    match per {
        Per::Route => Some(String::from("(everyone)")),
        Per::Address => Some(replayed.client.to_string()),
        Per::User => record.user.clone(),
        Per::Org => record.org.clone(),
        Per::Token => record.token.clone(),
        Per::Header(name) => header(name.as_str()),
        Per::Cookie(name) => record.cookies.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()),
        Per::Query(name) => {
            let query = record.target.split_once('?')?.1;
            query.split('&').find_map(|pair| {
                let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
                (n == name).then(|| v.to_string())
            })
        }
        Per::Json(_) | Per::Form(_) => None,
        Per::Parts(parts) => {
            let each: Option<Vec<String>> = parts.iter().map(|p| label(p, record, replayed)).collect();
            each.map(|e| e.join(" / "))
        }
    }
}
