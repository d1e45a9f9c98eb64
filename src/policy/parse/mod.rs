//! Validates what was written under `x-rate-limit` and `x-rate-limit-policies`, reporting every
//! problem with its location instead of stopping at the first.

mod applies_to;
mod cost;
mod counting;
mod fields;
mod per;
mod scalars;

use serde_json::Value;

use super::bound::BoundDef;
use crate::finding::Finding;
use crate::spec::pointer::{push, push_index};
use crate::spec::read::describe;
use crate::suggest;
use fields::bound;

const FIELDS: [&str; 22] = [
    "per",
    "limit",
    "window",
    "algorithm",
    "burst",
    "cost",
    "cost-from",
    "max-cost",
    "applies-to",
    "max-keys",
    "missing",
    "on-store-error",
    "mode",
    "name",
    "status",
    "message",
    "use",
    "period",
    "reset",
    "timezone",
    "count-when",
    "settle",
];

/// One entry of an `x-rate-limit` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `use: NAME`: the named policy's bound and its shared counters.
    Use {
        /// The policy's name in `x-rate-limit-policies`, not yet checked to exist.
        policy: String,
        /// JSON pointer to the entry, for findings about it.
        pointer: String,
    },
    /// A bound written in place.
    Def {
        /// The validated bound (boxed: a bound is large beside a `use`).
        def: Box<BoundDef>,
        /// JSON pointer to the entry, for findings about it and the bound's `pointer`.
        pointer: String,
    },
}

/// Reads an `x-rate-limit` value: one bound (a map) or a list of them. Entries with errors are
/// left out; their findings say why.
pub(crate) fn entries(value: &Value, at: &str, findings: &mut Vec<Finding>) -> Vec<Entry> {
    match value {
        Value::Array(items) => {
            items.iter().enumerate().filter_map(|(i, item)| entry(item, &push_index(at, i), findings, true)).collect()
        }
        Value::Object(_) => entry(value, at, findings, true).into_iter().collect(),
        other => {
            findings.push(Finding::error(
                at,
                format!("x-rate-limit must be a bound (a map) or a list of bounds, found {}", describe(other)),
            ));
            Vec::new()
        }
    }
}

/// Reads one named policy; `use` is not allowed there.
pub(crate) fn policy(value: &Value, at: &str, findings: &mut Vec<Finding>) -> Option<BoundDef> {
    match entry(value, at, findings, false)? {
        Entry::Def { def, .. } => Some(*def),
        Entry::Use { .. } => None,
    }
}

fn entry(value: &Value, at: &str, findings: &mut Vec<Finding>, allow_use: bool) -> Option<Entry> {
    let Some(fields) = value.as_object() else {
        findings.push(Finding::error(
            at,
            format!("a bound must be a map like {{per: user, limit: 10, window: PT1M}}, found {}", describe(value)),
        ));
        return None;
    };
    let before = findings.len();
    for key in fields.keys() {
        if !FIELDS.contains(&key.as_str()) {
            let hint = match suggest::closest(key, &FIELDS) {
                Some(s) => format!("; did you mean {s}?"),
                None => format!("; the fields are {}", FIELDS.join(", ")),
            };
            findings.push(Finding::error(push(at, key), format!("unknown field {key} in x-rate-limit{hint}")));
        }
    }
    if let Some(name) = fields.get("use") {
        if !allow_use {
            findings.push(Finding::error(
                push(at, "use"),
                "a policy in x-rate-limit-policies cannot use another policy; write its fields here",
            ));
            return None;
        }
        let others: Vec<&str> =
            fields.keys().map(String::as_str).filter(|k| *k != "use" && FIELDS.contains(k)).collect();
        if !others.is_empty() {
            findings.push(Finding::error(
                at,
                format!(
                    "use stands alone: it takes the named policy as it is, so {} cannot be set here; define another policy instead",
                    others.join(", ")
                ),
            ));
        }
        let Some(policy) = name.as_str().filter(|s| !s.is_empty()) else {
            findings.push(Finding::error(
                push(at, "use"),
                format!("use must name a policy in x-rate-limit-policies, found {}", describe(name)),
            ));
            return None;
        };
        return (findings.len() == before).then(|| Entry::Use { policy: policy.to_string(), pointer: at.to_string() });
    }
    let def = bound(fields, at, findings);
    // A warning (a quota per address) leaves the bound standing; an error does not.
    if findings[before..].iter().any(|f| f.severity == crate::finding::Severity::Error) {
        return None;
    }
    def.map(|def| Entry::Def { def: Box::new(def), pointer: at.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::bound::Per;
    use serde_json::json;

    fn errors(value: Value) -> Vec<String> {
        let mut f = Vec::new();
        entries(&value, "/x-rate-limit", &mut f);
        f.into_iter().map(|f| format!("{}: {}", f.pointer, f.message)).collect()
    }

    #[test]
    fn a_full_bound_reads() {
        let mut f = Vec::new();
        let e = entries(
            &json!({"per": "header:X-Api-Key", "algorithm": "token-bucket", "limit": 2, "window": "PT1S", "burst": 10, "cost": 4,
                    "applies-to": {"roles": ["partner"], "authenticated": true}, "max-keys": 500, "missing": "reject",
                    "on-store-error": "local", "mode": "shadow", "name": "exports"}),
            "/x",
            &mut f,
        );
        assert!(f.is_empty(), "{f:?}");
        let Entry::Def { def, .. } = &e[0] else { panic!() };
        assert_eq!(def.per, Per::Header(http::HeaderName::from_static("x-api-key")));
        assert_eq!(def.capacity(), 10);
        assert_eq!(def.describe(), "2 per PT1S per header:x-api-key (token bucket, burst 10), cost 4");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let errs = errors(json!([{"per": "ip", "limit": 0, "window": "PT0.5S", "limt": 3}]));
        assert_eq!(
            errs,
            [
                "/x-rate-limit/0/limt: unknown field limt in x-rate-limit; did you mean limit?",
                "/x-rate-limit/0/per: per ip is not something opbound can count per; did you mean address? use route, address, user, token, org, header:NAME, cookie:NAME, query:NAME, json:/POINTER or form:NAME",
                "/x-rate-limit/0/limit: limit 0 must be at least 1",
                "/x-rate-limit/0/window: window PT0.5S is below the minimum PT1S",
            ]
        );
    }

    #[test]
    fn body_keys_and_stated_costs_read() {
        let mut f = Vec::new();
        let e = entries(
            &json!([{"per": "json:/user~1name", "limit": 5, "window": "PT15M"},
                    {"per": "form:user[name]", "limit": 5, "window": "PT15M"},
                    {"per": "org", "limit": 10000, "window": "PT1H", "cost-from": "json:/items", "max-cost": 1000},
                    {"per": "org", "limit": 10, "window": "PT1H", "cost-from": "Header:X-Count", "max-cost": 10}]),
            "/x",
            &mut f,
        );
        let defs: Vec<&BoundDef> =
            e.iter().filter_map(|e| if let Entry::Def { def, .. } = e { Some(&**def) } else { None }).collect();
        assert!(f.len() == 1 && defs.len() == 3, "{f:?}");
        assert_eq!(defs[0].per.to_string(), "json:/user~1name");
        assert!(defs[0].needs_body() && defs[1].needs_body() && defs[2].needs_body());
        assert_eq!(defs[1].per, Per::Form("user[name]".into()));
        assert_eq!(defs[2].describe(), "10000 per PT1H per org, cost from json:/items (at most 1000)");
        assert_eq!(
            errors(json!({"per": "org", "limit": 10, "window": "PT1H", "cost-from": "query:n", "max-cost": 10})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn body_keys_and_stated_costs_say_what_is_wrong() {
        let w = |extra: Value| {
            let mut b = json!({"per": "org", "limit": 100, "window": "PT1M"});
            b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            errors(b)
        };
        assert_eq!(
            w(json!({"per": "json:username"})),
            ["/x-rate-limit/per: per json:username: the JSON pointer \"username\" must start with /, as in /username"]
        );
        assert_eq!(
            w(json!({"per": "form:"})),
            ["/x-rate-limit/per: per form: needs a field name after the colon, as in form:username"]
        );
        assert_eq!(
            w(json!({"cost-from": "json:/items"})),
            [
                "/x-rate-limit/cost-from: cost-from needs max-cost, the most one request may state (a larger one is refused with 413 before anything is counted), e.g. max-cost: 1000"
            ]
        );
        assert_eq!(
            w(json!({"max-cost": 5})),
            [
                "/x-rate-limit/max-cost: max-cost applies only with cost-from, which says where a request states its cost (query:NAME, header:NAME or json:/POINTER), or with settle; for a fixed weight write cost"
            ]
        );
        assert_eq!(
            w(json!({"cost-from": "body:/items", "max-cost": 5})),
            [
                "/x-rate-limit/cost-from: cost-from body:/items is not a place opbound reads a cost from; use query:NAME, header:NAME or json:/POINTER"
            ]
        );
        assert_eq!(
            w(json!({"cost-from": "query:n", "max-cost": 101})),
            [
                "/x-rate-limit/max-cost: max-cost 101 is above the limit 100, so a request stating it could never pass; lower max-cost to at most 100"
            ]
        );
        // Issue 63: a concurrency cost of millions was a script of millions of writes.
        assert_eq!(
            errors(
                json!({"per": "user", "algorithm": "concurrency", "limit": 2000000, "cost-from": "query:n", "max-cost": 1000000})
            ),
            [
                "/x-rate-limit/max-cost: max-cost 1000000 is above 10000, the most one request may hold of a concurrency bound (each unit is a lease in the store); lower max-cost, or count the weight with a token bucket"
            ]
        );
        assert_eq!(
            errors(json!({"per": "user", "algorithm": "concurrency", "limit": 20000, "cost": 10001})),
            [
                "/x-rate-limit/cost: cost 10001 is above 10000, the most one request may hold of a concurrency bound (each unit is a lease in the store); lower cost, or count the weight with a token bucket"
            ]
        );
        assert!(errors(json!({"per": "user", "algorithm": "concurrency", "limit": 20000, "cost": 10000})).is_empty());
        assert_eq!(
            w(json!({"algorithm": "token-bucket", "burst": 50, "cost-from": "query:n", "max-cost": 60})),
            [
                "/x-rate-limit/max-cost: max-cost 60 is above the burst 50, so a request stating it could never pass; lower max-cost to at most 50"
            ]
        );
    }

    #[test]
    fn combinations() {
        assert_eq!(
            errors(json!({"per": "user", "limit": 5})),
            ["/x-rate-limit: bound has no window: a sliding-window bound needs one, e.g. window: PT1M"]
        );
        assert_eq!(
            errors(json!({"per": "user", "limit": 5, "window": "PT1M", "algorithm": "concurrency"})),
            [
                "/x-rate-limit/window: window PT1M does not apply to a concurrency bound, which limits requests in flight at once; remove it"
            ]
        );
        assert_eq!(
            errors(json!({"per": "user", "limit": 5, "window": "PT1M", "burst": 9})),
            ["/x-rate-limit/burst: burst applies only to token-bucket bounds; this bound uses sliding-window"]
        );
        assert_eq!(
            errors(json!({"per": "user", "limit": 5, "window": "PT1M", "cost": 6})),
            ["/x-rate-limit/cost: cost 6 is above the limit 5, so no request could ever pass"]
        );
        assert_eq!(
            errors(
                json!({"per": "user", "limit": 5, "window": "PT1M", "algorithm": "token-bucket", "burst": 3, "cost": 4})
            ),
            [
                "/x-rate-limit/burst: burst 3 is below the cost 4, so no request could ever pass; raise burst to at least 4"
            ]
        );
        assert_eq!(
            errors(json!({"use": "writes", "limit": 5})),
            [
                "/x-rate-limit: use stands alone: it takes the named policy as it is, so limit cannot be set here; define another policy instead"
            ]
        );
        assert_eq!(
            errors(json!("PT1M")),
            ["/x-rate-limit: x-rate-limit must be a bound (a map) or a list of bounds, found the string \"PT1M\""]
        );
    }
}
