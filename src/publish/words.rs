//! Bounds in plain words for people reading an API's documentation: "10 per minute per user".

use crate::period::{Period, Unit};
use crate::policy::bound::Periods;
use crate::policy::{Algorithm, BoundDef, BoundIndex, CostFrom, Missing, Mode, Per, Policy, Scope, Settle};

/// One bound as a reader of the API's documentation sees it, its tier first:
/// `trial tier: 60 per minute per user`.
pub fn bound(def: &BoundDef) -> String {
    match audience(def) {
        Some(who) => format!("{who}: {}", rule(def)),
        None => rule(def),
    }
}

/// The bound without its tier: `2 per second per address, bursts of 5; each request costs 4`.
pub fn rule(def: &BoundDef) -> String {
    rule_with(def, true)
}

/// The bound without its tier or its cost, for tables that give the cost a column of its own.
pub fn rule_without_cost(def: &BoundDef) -> String {
    rule_with(def, false)
}

fn rule_with(def: &BoundDef, with_cost: bool) -> String {
    let limit = number(u64::from(def.limit.get()));
    let per = per(&def.per);
    let mut s = match &def.algorithm {
        Algorithm::SlidingWindow { window } => format!("{limit} {} {per}", window_words(window.secs_ceil())),
        Algorithm::TokenBucket { window, burst } => {
            format!("{limit} {} {per}, bursts of {}", window_words(window.secs_ceil()), number(u64::from(burst.get())))
        }
        Algorithm::Concurrency => format!("at most {limit} at once {per}"),
        Algorithm::Quota { periods } => {
            let zone = periods.zone().name();
            let in_zone = if zone == "UTC" { String::new() } else { format!(" ({zone})") };
            format!("{limit} {} {per}{in_zone}", quota_words(periods))
        }
    };
    match &def.cost_from {
        _ if !with_cost => {}
        Some(c) => s.push_str(&format!(
            "; a request costs what its {} says, at most {}",
            cost_source(&c.from),
            number(u64::from(c.max.get()))
        )),
        None if def.cost.get() > 1 => {
            s.push_str(&format!("; each request costs {}", number(u64::from(def.cost.get()))))
        }
        None => {}
    }
    if def.missing == Missing::Reject && !def.per.always_present() {
        s.push_str("; a request without it is refused");
    }
    if let Some(statuses) = &def.counting.count_when {
        s.push_str(&format!("; only responses {statuses} count"));
    }
    match &def.counting.settle {
        Some(Settle::Header(name)) => {
            s.push_str(&format!("; charged what the response's header {} reports", header_name(name)))
        }
        Some(body @ Settle::Body(_)) => {
            s.push_str(&format!("; charged what the response body (or its event stream) reports: {body}"))
        }
        None => {}
    }
    if def.mode == Mode::Shadow {
        s.push_str(" (measured, not enforced yet)");
    }
    s
}

/// Which operations count against one counter of the bound, when more than one does: `one count
/// shared by the 12 operations tagged Calls`. Without it, "100 per minute per token" written on
/// each of them reads as 100 for each (issue 47, item 9).
pub fn shared(policy: &Policy, bound: BoundIndex) -> Option<String> {
    let n = policy.operations.iter().filter(|op| op.bounds.contains(&bound)).count();
    let b = &policy.bounds[bound];
    let which = match &b.scope {
        Scope::Route => return Some("one count shared by every operation".to_string()),
        _ if n < 2 => return None,
        Scope::Tag(tag) => format!("the {n} operations tagged {tag}"),
        Scope::Policy(name) => format!("the {n} operations that use policy {name}"),
        Scope::Operation(_) => format!("{n} operations"),
    };
    Some(format!("one count shared by {which}"))
}

/// Who the bound is for, as pricing pages say it: `trial tier`, `trial or partner tier`,
/// `signed-in callers`; `None` for everybody.
pub fn audience(def: &BoundDef) -> Option<String> {
    let a = &def.applies_to;
    let who = match a.authenticated {
        Some(true) => Some("signed-in callers"),
        Some(false) => Some("anonymous callers"),
        None => None,
    };
    let tier = (!a.roles.is_empty()).then(|| format!("{} tier", a.roles.join(" or ")));
    match (tier, who) {
        (None, None) => None,
        (Some(t), None) => Some(t),
        (None, Some(w)) => Some(w.to_string()),
        (Some(t), Some(w)) => Some(format!("{t}, {w}")),
    }
}

/// What one counter is kept per: `per user`, `per header X-Api-Key`, `across all callers`.
pub fn per(per: &Per) -> String {
    match per {
        Per::Route => "across all callers".to_string(),
        Per::Address => "per address".to_string(),
        Per::User => "per user".to_string(),
        Per::Token => "per token".to_string(),
        Per::Org => "per org".to_string(),
        Per::Header(name) => format!("per header {}", header_name(name.as_str())),
        Per::Cookie(name) => format!("per cookie {name}"),
        Per::Query(name) => format!("per query parameter {name}"),
        Per::Json(pointer) => format!("per JSON body field {pointer}"),
        Per::Form(name) => format!("per form field {name}"),
        Per::Parts(parts) => {
            let each: Vec<String> = parts.iter().map(|p| self::per(p).trim_start_matches("per ").to_string()).collect();
            format!("per {}", each.join(" and "))
        }
    }
}

/// Where a request states its cost, in words.
fn cost_source(from: &CostFrom) -> String {
    match from {
        CostFrom::Query(name) => format!("query parameter {name}"),
        CostFrom::Header(name) => format!("header {}", header_name(name)),
        CostFrom::Json(pointer) => format!("JSON body field {pointer}"),
    }
}

/// Header names are stored lower case; documentation reads better in the usual capitals.
fn header_name(lower: &str) -> String {
    lower
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or(String::new(), |c| c.to_ascii_uppercase().to_string() + chars.as_str())
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A window in words: `per minute`, `per 10 seconds`, `per 90 minutes`.
pub fn window_words(secs: u64) -> String {
    let (count, unit) = if secs.is_multiple_of(86_400) {
        (secs / 86_400, "day")
    } else if secs.is_multiple_of(3_600) {
        (secs / 3_600, "hour")
    } else if secs.is_multiple_of(60) {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    every(count, unit)
}

/// A quota's period in words: `per calendar month`, `per 3 calendar months`, `per day from each
/// caller's first use`.
fn quota_words(periods: &Periods) -> String {
    let period: Period = periods.period();
    let unit = match period.unit() {
        // "calendar hour" reads oddly; an hour on the clock is what is meant.
        Unit::Hour => "clock hour",
        Unit::Day => "calendar day",
        Unit::Week => "calendar week",
        Unit::Month => "calendar month",
        Unit::Year => "calendar year",
    };
    let count = u64::from(period.count().get());
    match periods {
        Periods::Calendar(_) => every(count, unit),
        Periods::FirstUse(_) => {
            let unit = unit.trim_start_matches("calendar ").trim_start_matches("clock ");
            format!("{} from each caller's first use", every(count, unit))
        }
    }
}

/// `per minute`, `per 10 seconds`.
fn every(count: u64, unit: &str) -> String {
    if count == 1 { format!("per {unit}") } else { format!("per {} {unit}s", number(count)) }
}

/// A number with thousands separated: `1,000`.
pub fn number(n: u64) -> String {
    crate::numbers::thousands(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_as_people_say_them() {
        let cases = [(1, "per second"), (10, "per 10 seconds"), (60, "per minute"), (90, "per 90 seconds")];
        for (secs, words) in cases {
            assert_eq!(window_words(secs), words, "{secs}");
        }
        let cases = [(5_400, "per 90 minutes"), (3_600, "per hour"), (7_200, "per 2 hours"), (86_400, "per day")];
        for (secs, words) in cases {
            assert_eq!(window_words(secs), words, "{secs}");
        }
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        for (n, s) in [(0, "0"), (999, "999"), (1_000, "1,000"), (1_234_567, "1,234,567")] {
            assert_eq!(number(n), s);
        }
    }

    #[test]
    fn header_names_get_their_usual_capitals() {
        assert_eq!(header_name("x-api-key"), "X-Api-Key");
    }
}
