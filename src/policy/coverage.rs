//! Which callers pass no bound: narrow rules can make an operation look bounded while it is open.

use super::{Bound, Missing, Mode, Operation, Per};
use crate::finding::Finding;
use crate::spec::pointer::push;

/// The callers each operation is checked for. Roles only narrow a bound, so a signed-in caller
/// with none of the roles stands for every role not named.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    Anonymous,
    SignedInWithoutRoles,
}

/// Whether a bound counts (or refuses) a caller who sends nothing optional: no org, no extra
/// header, cookie or query parameter.
fn bounds_caller(bound: &Bound, caller: Caller) -> bool {
    let def = &bound.def;
    let authenticated = caller == Caller::SignedInWithoutRoles;
    if def.mode != Mode::Enforce || !def.applies_to.admits(authenticated, &[]) {
        return false;
    }
    let present = match def.per {
        Per::Route | Per::Address => true,
        Per::User | Per::Token => authenticated,
        Per::Org | Per::Header(_) | Per::Cookie(_) | Per::Query(_) => false,
    };
    present || def.missing == Missing::Reject
}

/// Whether some caller reaches an operation with no bound counting them.
pub fn is_open(policy: &super::Policy, operation: usize) -> bool {
    let all: Vec<&Bound> = policy.bounds_for(Some(operation)).map(|b| &policy.bounds[b]).collect();
    [Caller::Anonymous, Caller::SignedInWithoutRoles].into_iter().any(|c| !all.iter().any(|b| bounds_caller(b, c)))
}

/// Adds a warning for every routable operation that some caller reaches with no bound.
pub fn check(operations: &[Operation], bounds: &[Bound], route_bounds: &[usize], findings: &mut Vec<Finding>) {
    if bounds.is_empty() {
        if !operations.is_empty() {
            findings.push(Finding::warning(
                "",
                format!(
                    "the spec has no x-rate-limit: {}; add route bounds at the top of the document or bounds on operations",
                    if operations.len() == 1 { "its only operation is unbounded".to_string() } else { format!("none of its {} operations is bounded", operations.len()) }
                ),
            ));
        }
        return;
    }
    let mut open: Vec<(usize, bool, bool)> = Vec::new();
    for (index, op) in operations.iter().enumerate().filter(|(_, op)| op.routable) {
        let all: Vec<&Bound> = route_bounds.iter().chain(&op.bounds).map(|&b| &bounds[b]).collect();
        let anonymous = !all.iter().any(|b| bounds_caller(b, Caller::Anonymous));
        let signed_in = !all.iter().any(|b| bounds_caller(b, Caller::SignedInWithoutRoles));
        if anonymous || signed_in {
            open.push((index, anonymous, signed_in));
        }
    }
    // When route bounds alone leave the same callers open everywhere, say it once.
    let routable = operations.iter().filter(|op| op.routable).count();
    let none_own = operations.iter().all(|op| op.bounds.is_empty());
    if none_own
        && routable > 1
        && open.len() == routable
        && open.windows(2).all(|w| (w[0].1, w[0].2) == (w[1].1, w[1].2))
    {
        let (_, anonymous, signed_in) = open[0];
        let who = who(anonymous, signed_in, &roles(route_bounds.iter().map(|&b| &bounds[b])));
        findings.push(Finding::warning(
            push("", "x-rate-limit"),
            format!("{who} pass no bound on any of the {routable} operations: the route bounds do not count them and no operation has bounds of its own"),
        ));
        return;
    }
    for (index, anonymous, signed_in) in open {
        let op = &operations[index];
        let all: Vec<&Bound> = route_bounds.iter().chain(&op.bounds).map(|&b| &bounds[b]).collect();
        let enforced = all.iter().filter(|b| b.def.mode == Mode::Enforce).count();
        let name = format!("operation {} ({} {})", op.id, op.method, op.template);
        let message = if enforced == 0 {
            format!("{name} has no enforced bound: any caller can call it without limit")
        } else {
            // Why each bound lets them through, for the callers left open.
            let mut reasons: Vec<String> = Vec::new();
            for caller in [Caller::Anonymous, Caller::SignedInWithoutRoles] {
                let open = if caller == Caller::Anonymous { anonymous } else { signed_in };
                for b in all.iter().filter(|_| open) {
                    if let Some(r) = why_not(b, caller)
                        && !reasons.contains(&r)
                    {
                        reasons.push(r);
                    }
                }
            }
            let who = who(anonymous, signed_in, &roles(all.iter().copied()));
            format!(
                "{who} pass no bound on {name}: {}; add a bound that applies to everybody, such as per: address",
                reasons.join(", ")
            )
        };
        let at = if op.bounds.is_empty() { op.pointer.clone() } else { push(&op.pointer, "x-rate-limit") };
        findings.push(Finding::warning(at, message));
    }
}

/// Why a bound does not count a caller, or `None` if it does.
fn why_not(bound: &Bound, caller: Caller) -> Option<String> {
    if bounds_caller(bound, caller) {
        return None;
    }
    let def = &bound.def;
    if def.mode == Mode::Shadow {
        return Some(format!("{} is in shadow mode", bound.id));
    }
    if !def.applies_to.admits(caller == Caller::SignedInWithoutRoles, &[]) {
        let audience = def.audience().unwrap_or_default();
        return Some(format!("{} is only for {audience}", bound.id));
    }
    let lacking = match &def.per {
        Per::User => "a signed-in user".to_string(),
        Per::Token => "a credential".to_string(),
        Per::Org => "an org".to_string(),
        Per::Header(n) => format!("header {n}"),
        Per::Cookie(n) => format!("cookie {n}"),
        Per::Query(n) => format!("query parameter {n}"),
        Per::Route | Per::Address => return None,
    };
    Some(format!("{} skips requests without {lacking} (missing: pass)", bound.id))
}

fn roles<'a>(bounds: impl Iterator<Item = &'a Bound>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for b in bounds {
        for r in &b.def.applies_to.roles {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
    }
    out
}

fn who(anonymous: bool, signed_in: bool, roles: &[String]) -> String {
    let signed = if roles.is_empty() {
        "signed-in callers".to_string()
    } else {
        format!("signed-in callers with none of the roles {}", roles.join(", "))
    };
    match (anonymous, signed_in) {
        (true, true) => format!("anonymous callers and {signed}"),
        (true, false) => "anonymous callers".to_string(),
        _ => signed,
    }
}
