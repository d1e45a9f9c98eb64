//! Which callers pass no bound: narrow rules can make an operation look bounded while it is open.

use indexmap::IndexMap;

use super::{Bound, BoundIndex, Missing, Mode, Operation, Per};
use crate::finding::{Finding, few, listing};
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
    def.per.parts().iter().all(|part| present(part, authenticated)) || def.missing == Missing::Reject
}

/// Whether a caller who sends nothing optional has this key.
fn present(per: &Per, authenticated: bool) -> bool {
    match per {
        Per::Route | Per::Address => true,
        Per::User | Per::Token => authenticated,
        Per::Org | Per::Header(_) | Per::Cookie(_) | Per::Query(_) | Per::Json(_) | Per::Form(_) => false,
        Per::Parts(parts) => parts.iter().all(|p| present(p, authenticated)),
    }
}

/// Whether some caller reaches an operation with no bound counting them.
pub(crate) fn is_open(policy: &super::Policy, operation: usize) -> bool {
    let all: Vec<&Bound> = policy.bounds_for(Some(operation)).map(|b| &policy.bounds[b]).collect();
    [Caller::Anonymous, Caller::SignedInWithoutRoles].into_iter().any(|c| !all.iter().any(|b| bounds_caller(b, c)))
}

/// Adds a warning for every routable operation that some caller reaches with no bound.
pub(crate) fn check(
    operations: &[Operation],
    bounds: &[Bound],
    route_bounds: &[BoundIndex],
    findings: &mut Vec<Finding>,
) {
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
    // One root cause, one warning: operations whose callers pass for the same reasons (a route
    // bound per user leaves anonymous callers uncounted on every one of them) share a warning
    // that says how many there are and names a few.
    let mut groups: IndexMap<Cause, Vec<Open>> = IndexMap::new();
    for (index, anonymous, signed_in) in open {
        let op = &operations[index];
        let all: Vec<BoundIndex> = route_bounds.iter().chain(&op.bounds).copied().collect();
        let enforced = all.iter().filter(|&&b| bounds[b].def.mode == Mode::Enforce).count();
        if enforced == 0 {
            let cause = Cause::NoneEnforced { shadow_only: !op.bounds.is_empty() };
            groups.entry(cause).or_default().push(Open { index, culprits: Vec::new() });
            continue;
        }
        // Why each bound lets them through, for the callers left open.
        let mut gaps: Vec<Gap> = Vec::new();
        let mut culprits: Vec<Vec<BoundIndex>> = Vec::new();
        for caller in [Caller::Anonymous, Caller::SignedInWithoutRoles] {
            let open = if caller == Caller::Anonymous { anonymous } else { signed_in };
            for &b in all.iter().filter(|_| open) {
                let Some(gap) = why_not(&bounds[b], caller) else { continue };
                let at = match gaps.iter().position(|g| *g == gap) {
                    Some(at) => at,
                    None => {
                        gaps.push(gap);
                        culprits.push(Vec::new());
                        gaps.len() - 1
                    }
                };
                if !culprits[at].contains(&b) {
                    culprits[at].push(b);
                }
            }
        }
        let who = who(anonymous, signed_in, &roles(all.iter().map(|&b| &bounds[b])));
        groups.entry(Cause::Open { who, gaps }).or_default().push(Open { index, culprits });
    }
    for (cause, ops) in groups {
        findings.push(warn(&cause, &ops, operations, bounds));
    }
}

/// Why some callers of an operation pass no bound, without naming the operation or its bounds.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Cause {
    /// No bound is enforced: only shadow bounds of its own, or none at all.
    NoneEnforced { shadow_only: bool },
    /// Bounds are enforced, but let these callers through for these reasons.
    Open { who: String, gaps: Vec<Gap> },
}

/// Why a bound lets a caller through.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Gap {
    Shadow,
    /// Its `applies-to` names only this audience.
    OnlyFor(String),
    /// It has no key for a caller without this, and `missing: pass` lets them by.
    Skips(String),
}

impl Gap {
    /// The reason in words, with the bounds it is about (`route:0 skips requests without ...`).
    fn describe(&self, ids: &[&str]) -> String {
        let one = ids.len() == 1;
        let ids = few(ids.iter().map(|id| id.to_string()).collect());
        let (is, skips) = if one { ("is", "skips") } else { ("are", "skip") };
        match self {
            Gap::Shadow => format!("{ids} {is} in shadow mode"),
            Gap::OnlyFor(audience) => format!("{ids} {is} only for {audience}"),
            Gap::Skips(lacking) => format!("{ids} {skips} requests without {lacking} (missing: pass)"),
        }
    }
}

/// An open operation, and for each gap of its cause the bounds that leave it.
struct Open {
    index: usize,
    culprits: Vec<Vec<BoundIndex>>,
}

/// The warning for operations that share a cause: about the operation when it is one, about
/// the bound at fault when they share one, and about the whole `paths` otherwise.
fn warn(cause: &Cause, ops: &[Open], operations: &[Operation], bounds: &[Bound]) -> Finding {
    let name = |i: usize| {
        let op = &operations[i];
        format!("{} ({} {})", op.id, op.method, op.template)
    };
    let many = ops.len() > 1;
    let what = if many { format!("{} operations", ops.len()) } else { format!("operation {}", name(ops[0].index)) };
    // Cause and fix first; the operations after them, since there may be hundreds.
    let listing = if many { listing(ops.iter().map(|o| name(o.index)).collect()) } else { String::new() };
    match cause {
        Cause::NoneEnforced { shadow_only } => {
            let op = &operations[ops[0].index];
            let (at, message) = if many {
                let why = if *shadow_only { "only shadow bounds" } else { "no enforced bound" };
                ("/paths".to_string(), format!("{what} have {why}: any caller can call them without limit{listing}"))
            } else {
                (at_operation(op), format!("{what} has no enforced bound: any caller can call it without limit"))
            };
            Finding::warning(at, message)
        }
        Cause::Open { who, gaps } => {
            let mut all_culprits: Vec<BoundIndex> = Vec::new();
            let reasons: Vec<String> = gaps
                .iter()
                .enumerate()
                .map(|(g, gap)| {
                    let mut culprits: Vec<BoundIndex> = Vec::new();
                    for b in ops.iter().flat_map(|o| &o.culprits[g]) {
                        if !culprits.contains(b) {
                            culprits.push(*b);
                        }
                    }
                    for b in &culprits {
                        if !all_culprits.contains(b) {
                            all_culprits.push(*b);
                        }
                    }
                    let ids: Vec<&str> = culprits.iter().map(|&b| bounds[b].id.as_str()).collect();
                    gap.describe(&ids)
                })
                .collect();
            let shared = all_culprits.iter().all(|&b| !matches!(bounds[b].scope, super::Scope::Operation(_)));
            let at = match all_culprits.first() {
                _ if !many => at_operation(&operations[ops[0].index]),
                Some(&first) if shared => bounds[first].pointer.clone(),
                _ => "/paths".to_string(),
            };
            let message = format!(
                "{who} pass no bound on {what}: {}; add a bound that applies to everybody, such as per: address{listing}",
                reasons.join(", ")
            );
            Finding::warning(at, message)
        }
    }
}

/// An operation's warning sits on its bounds when it has some, on the operation otherwise.
fn at_operation(op: &Operation) -> String {
    if op.bounds.is_empty() { op.pointer.clone() } else { push(&op.pointer, "x-rate-limit") }
}

/// Why a bound does not count a caller, or `None` if it does.
fn why_not(bound: &Bound, caller: Caller) -> Option<Gap> {
    if bounds_caller(bound, caller) {
        return None;
    }
    let def = &bound.def;
    if def.mode == Mode::Shadow {
        return Some(Gap::Shadow);
    }
    if !def.applies_to.admits(caller == Caller::SignedInWithoutRoles, &[]) {
        return Some(Gap::OnlyFor(def.audience().unwrap_or_default()));
    }
    let authenticated = caller == Caller::SignedInWithoutRoles;
    // The first part the caller lacks.
    let lacked = def.per.parts().iter().find(|p| !present(p, authenticated)).unwrap_or(&def.per);
    let lacking = match lacked {
        Per::User => "a signed-in user".to_string(),
        Per::Token => "a credential".to_string(),
        Per::Org => "an org".to_string(),
        Per::Header(n) => format!("header {n}"),
        Per::Cookie(n) => format!("cookie {n}"),
        Per::Query(n) => format!("query parameter {n}"),
        Per::Json(p) => format!("JSON body field {p}"),
        Per::Form(n) => format!("form field {n}"),
        Per::Route | Per::Address | Per::Parts(_) => return None,
    };
    Some(Gap::Skips(lacking))
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::policy::{Options, compile};

    /// Regression: a `per: user` route bound on Stripe's 452 operations, one of them with a bound
    /// of its own, gave 451 identical warnings (one per operation) where one cause needs one.
    #[test]
    fn one_cause_gives_one_warning_however_many_operations_it_reaches() {
        let mut paths = serde_json::Map::new();
        paths.insert(
            "/login".into(),
            json!({"post": {"x-rate-limit": {"per": "address", "limit": 5, "window": "PT1M"}}}),
        );
        for i in 0..451 {
            paths.insert(format!("/v1/things{i}"), json!({"get": {"operationId": format!("GetThing{i}")}}));
        }
        let spec = json!({
            "openapi": "3.0.0",
            "info": {"title": "t", "version": "1"},
            "x-rate-limit": [{"per": "user", "limit": 100, "window": "PT1M"}],
            "paths": Value::Object(paths),
        });
        let options = Options { shared_store: true, ..Options::default() };
        let policy = compile(&spec, &options).expect("the spec compiles");
        let messages: Vec<&str> = policy.warnings.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(messages.len(), 1, "{messages:#?}");
        assert_eq!(policy.warnings[0].pointer, "/x-rate-limit/0", "the warning sits on the bound at fault");
        assert!(
            messages[0].starts_with("anonymous callers pass no bound on 451 operations: route:0 skips"),
            "{}",
            messages[0]
        );
        assert!(
            messages[0].ends_with(
                "among them GetThing0 (GET /v1/things0), GetThing1 (GET /v1/things1) and GetThing2 (GET /v1/things2)"
            ),
            "{}",
            messages[0]
        );
    }
}
