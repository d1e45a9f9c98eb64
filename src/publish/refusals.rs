//! Which refusals an operation can answer with, from the bounds that apply to it.

use std::collections::BTreeSet;

use crate::policy::{Missing, Mode, Per, Policy};

/// The refusals opbound can send for one operation, each status once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Whether any bound applies, so RateLimit headers come on its responses.
    pub bounded: bool,
    /// The statuses of exceeded bounds: 429, or a bound's own `status`.
    pub limited: BTreeSet<u16>,
    /// A 400: a key that `missing: reject` requires, a key given twice with different values
    /// (or in a compressed body), or a stated cost that is not a count.
    pub bad_request: bool,
    /// A 413: a stated cost above `max-cost`.
    pub too_large: bool,
}

/// What a request to `operation` can be refused with (route bounds included).
pub fn refusals(policy: &Policy, operation: usize) -> Refusals {
    let mut r = Refusals::default();
    for index in policy.bounds_for(Some(operation)) {
        let def = &policy.bounds[index].def;
        r.bounded = true;
        // A shadow bound is counted and reported, never refuses.
        if def.mode == Mode::Enforce {
            r.limited.insert(def.status.unwrap_or(429));
        }
        let unclear = def.per.parts().iter().any(|part| {
            matches!(part, Per::Token | Per::Header(_) | Per::Cookie(_) | Per::Query(_) | Per::Json(_) | Per::Form(_))
        });
        let rejects_missing = def.missing == Missing::Reject && !def.per.always_present();
        if unclear || rejects_missing || def.cost_from.is_some() {
            r.bad_request = true;
        }
        if def.cost_from.is_some() {
            r.too_large = true;
        }
    }
    r
}
