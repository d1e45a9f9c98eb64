//! Validates what was written under `x-rate-limit` and `x-rate-limit-policies`, reporting every
//! problem with its location instead of stopping at the first.

use std::num::NonZeroU32;

use serde_json::{Map, Value};

use super::bound::*;
use super::window::Window;
use crate::finding::Finding;
use crate::spec::pointer::{push, push_index};
use crate::spec::read::describe;
use crate::suggest;

const FIELDS: [&str; 15] = [
    "per",
    "limit",
    "window",
    "algorithm",
    "burst",
    "cost",
    "applies-to",
    "max-keys",
    "missing",
    "on-store-error",
    "mode",
    "name",
    "status",
    "message",
    "use",
];

const PER_HINT: &str = "route, address, user, token, org, header:NAME, cookie:NAME or query:NAME";

/// One entry of an `x-rate-limit` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `use: NAME`: the named policy's bound and its shared counters.
    Use {
        /// The policy's name in `x-rate-limit-policies`, not yet checked to exist.
        policy: String,
        /// JSON pointer to the entry, for findings about it.
        pointer: String,
    },
    /// A bound written in place.
    Def {
        /// The validated bound.
        def: BoundDef,
        /// JSON pointer to the entry, for findings about it and the bound's `pointer`.
        pointer: String,
    },
}

/// Reads an `x-rate-limit` value: one bound (a map) or a list of them. Entries with errors are
/// left out; their findings say why.
pub fn entries(value: &Value, at: &str, findings: &mut Vec<Finding>) -> Vec<Entry> {
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
pub fn policy(value: &Value, at: &str, findings: &mut Vec<Finding>) -> Option<BoundDef> {
    match entry(value, at, findings, false)? {
        Entry::Def { def, .. } => Some(def),
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
    if findings.len() > before {
        return None;
    }
    def.map(|def| Entry::Def { def, pointer: at.to_string() })
}

fn bound(fields: &Map<String, Value>, at: &str, findings: &mut Vec<Finding>) -> Option<BoundDef> {
    macro_rules! err {
        ($field:expr, $message:expr) => {
            findings.push(Finding::error(push(at, $field), $message))
        };
    }

    let per = match fields.get("per") {
        None => {
            findings.push(Finding::error(at, format!("bound has no per: say what it is counted per ({PER_HINT})")));
            None
        }
        Some(v) => per(v).map_err(|m| err!("per", m)).ok(),
    };

    let algorithm_name = match fields.get("algorithm") {
        None => Some("sliding-window"),
        Some(Value::String(s)) if ["sliding-window", "token-bucket", "concurrency"].contains(&s.as_str()) => {
            Some(s.as_str())
        }
        Some(v) => {
            let shown = v.as_str().map_or_else(|| describe(v), |s| s.to_string());
            let hint = v
                .as_str()
                .and_then(|s| suggest::closest(s, &["sliding-window", "token-bucket", "concurrency"]))
                .map(|s| format!("did you mean {s}? "))
                .unwrap_or_default();
            err!(
                "algorithm",
                format!(
                    "algorithm {shown} is not one opbound knows; {hint}use sliding-window, token-bucket or concurrency"
                )
            );
            None
        }
    };

    let limit = match fields.get("limit") {
        None => {
            findings.push(Finding::error(at, "bound has no limit: say how many requests it admits, e.g. limit: 100"));
            None
        }
        Some(v) => positive(v, "limit").map_err(|m| err!("limit", m)).ok(),
    };

    let window = match fields.get("window") {
        None => None,
        Some(Value::String(s)) => Window::parse(s).map_err(|e| err!("window", e.to_string())).ok(),
        Some(Value::Number(n)) => {
            err!("window", format!("window {n} must be an ISO-8601 duration such as PT{n}S"));
            None
        }
        Some(v) => {
            err!("window", format!("window must be an ISO-8601 duration such as PT1M, found {}", describe(v)));
            None
        }
    };
    let burst = fields.get("burst").and_then(|v| positive(v, "burst").map_err(|m| err!("burst", m)).ok());
    let cost = match fields.get("cost") {
        None => Some(NonZeroU32::MIN),
        Some(v) => positive(v, "cost").map_err(|m| err!("cost", m)).ok(),
    };
    let max_keys = match fields.get("max-keys") {
        None => NonZeroU32::new(DEFAULT_MAX_KEYS),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u64::from(MAX_MAX_KEYS)).contains(&n) => NonZeroU32::new(n as u32),
            _ => {
                let message = match v.as_number() {
                    Some(n) => {
                        format!("max-keys {n} is out of range; it must be a whole number from 1 to {MAX_MAX_KEYS}")
                    }
                    None => format!("max-keys must be a whole number from 1 to {MAX_MAX_KEYS}, found {}", describe(v)),
                };
                err!("max-keys", message);
                None
            }
        },
    };
    let missing =
        choice(fields.get("missing"), "missing", &[("pass", Missing::Pass), ("reject", Missing::Reject)], at, findings);
    let on_store_error = choice(
        fields.get("on-store-error"),
        "on-store-error",
        &[("open", OnStoreError::Open), ("closed", OnStoreError::Closed), ("local", OnStoreError::Local)],
        at,
        findings,
    );
    let mode =
        choice(fields.get("mode"), "mode", &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)], at, findings);
    let name = match fields.get("name") {
        None => None,
        Some(Value::String(s))
            if !s.trim().is_empty() && !s.contains(['"', '\\']) && !s.chars().any(char::is_control) =>
        {
            Some(s.clone())
        }
        Some(v) => {
            err!(
                "name",
                format!("name must be a non-empty label without quotes or backslashes, found {}", describe(v))
            );
            None
        }
    };
    let status = match fields.get("status") {
        None => Some(None),
        Some(v) => match v.as_u64().and_then(|n| u16::try_from(n).ok()) {
            Some(n) if (400..=599).contains(&n) => Some(Some(n)),
            _ => {
                err!(
                    "status",
                    format!(
                        "status must be an HTTP error status from 400 to 599 (429 unless given), found {}",
                        describe(v)
                    )
                );
                None
            }
        },
    };
    let message = match fields.get("message") {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() && !s.chars().any(char::is_control) => Some(s.clone()),
        Some(v) => {
            err!("message", format!("message must be one line of text for the refusal's body, found {}", describe(v)));
            None
        }
    };
    let applies_to = fields
        .get("applies-to")
        .map_or(Some(AppliesTo::default()), |v| applies_to(v, &push(at, "applies-to"), findings));

    // Combinations: which fields belong with which algorithm, and whether a request can pass.
    let algorithm = match algorithm_name? {
        "concurrency" => {
            if let Some(w) = fields.get("window") {
                let shown = w.as_str().unwrap_or("");
                err!(
                    "window",
                    format!(
                        "window {shown} does not apply to a concurrency bound, which limits requests in flight at once; remove it"
                    )
                );
            }
            if fields.contains_key("burst") {
                err!("burst", "burst applies only to token-bucket bounds; this bound uses concurrency".to_string());
            }
            Algorithm::Concurrency
        }
        name => {
            if !fields.contains_key("window") {
                findings.push(Finding::error(
                    at,
                    format!("bound has no window: a {name} bound needs one, e.g. window: PT1M"),
                ));
                return None;
            }
            let window = window?;
            if name == "token-bucket" {
                Algorithm::TokenBucket { window, burst: burst.or(limit)? }
            } else {
                if fields.contains_key("burst") {
                    err!(
                        "burst",
                        "burst applies only to token-bucket bounds; this bound uses sliding-window".to_string()
                    );
                }
                Algorithm::SlidingWindow { window }
            }
        }
    };
    let def = BoundDef {
        per: per?,
        algorithm,
        limit: limit?,
        cost: cost?,
        applies_to: applies_to?,
        max_keys: max_keys?,
        missing: missing?,
        on_store_error: on_store_error?,
        mode: mode?,
        name,
        status: status?,
        message,
    };
    if def.cost.get() > def.capacity() {
        let message = match def.algorithm {
            Algorithm::TokenBucket { burst, .. } if fields.contains_key("burst") => format!(
                "burst {burst} is below the cost {}, so no request could ever pass; raise burst to at least {}",
                def.cost, def.cost
            ),
            Algorithm::TokenBucket { burst, .. } => format!(
                "cost {} is above the burst {burst} (which defaults to the limit), so no request could ever pass; set burst to at least {}",
                def.cost, def.cost
            ),
            _ => format!("cost {} is above the limit {}, so no request could ever pass", def.cost, def.limit),
        };
        let field = if matches!(def.algorithm, Algorithm::TokenBucket { .. }) && fields.contains_key("burst") {
            "burst"
        } else {
            "cost"
        };
        findings.push(Finding::error(push(at, field), message));
        return None;
    }
    Some(def)
}

/// Parses `per`.
pub fn per(value: &Value) -> Result<Per, String> {
    let Some(text) = value.as_str() else {
        return Err(format!("per must be one of {PER_HINT}, found {}", describe(value)));
    };
    let (kind, name) = match text.split_once(':') {
        Some((k, n)) => (k, Some(n)),
        None => (text, None),
    };
    match (kind, name) {
        ("route", None) => Ok(Per::Route),
        ("address", None) => Ok(Per::Address),
        ("user", None) => Ok(Per::User),
        ("token", None) => Ok(Per::Token),
        ("org", None) => Ok(Per::Org),
        ("header" | "cookie" | "query", Some(n)) => {
            let n = n.trim();
            let valid = !n.is_empty() && n.bytes().all(crate::spec::read::is_token_byte);
            if !valid {
                return Err(format!("per {text} needs a valid {kind} name after the colon, as in {kind}:X-Api-Key"));
            }
            Ok(match kind {
                "header" => Per::Header(n.to_ascii_lowercase()),
                "cookie" => Per::Cookie(n.to_string()),
                _ => Per::Query(n.to_string()),
            })
        }
        ("header" | "cookie" | "query", None) => Err(format!("per {text} needs a name, as in {text}:X-Api-Key")),
        _ => {
            let synonyms = [
                ("ip", "address"),
                ("client", "address"),
                ("remote", "address"),
                ("addr", "address"),
                ("key", "token"),
                ("apikey", "token"),
                ("api-key", "token"),
                ("tenant", "org"),
                ("organization", "org"),
                ("organisation", "org"),
                ("account", "org"),
                ("global", "route"),
                ("all", "route"),
                ("operation", "route"),
                ("subject", "user"),
            ];
            let lower = text.to_ascii_lowercase();
            let meant = synonyms.iter().find(|(s, _)| *s == lower).map(|(_, m)| *m).or_else(|| {
                suggest::closest(kind, &["route", "address", "user", "token", "org", "header", "cookie", "query"])
            });
            let hint = meant.map(|m| format!("did you mean {m}? ")).unwrap_or_default();
            Err(format!("per {text} is not something opbound can count per; {hint}use {PER_HINT}"))
        }
    }
}

fn positive(value: &Value, field: &str) -> Result<NonZeroU32, String> {
    match value.as_u64() {
        Some(0) => Err(format!("{field} 0 must be at least 1")),
        Some(n) => match u32::try_from(n) {
            Ok(n) => Ok(NonZeroU32::new(n).expect("checked above")),
            Err(_) => Err(format!("{field} {n} is above the maximum {}", u32::MAX)),
        },
        None => {
            let shown = match value {
                Value::Number(n) => n.to_string(),
                Value::String(s) => format!("{s:?}"),
                other => describe(other),
            };
            if value.as_i64().is_some_and(|n| n < 0) {
                return Err(format!("{field} {shown} must be at least 1"));
            }
            Err(format!("{field} {shown} must be a whole number of at least 1"))
        }
    }
}

fn choice<T: Copy>(
    value: Option<&Value>,
    field: &str,
    options: &[(&str, T)],
    at: &str,
    findings: &mut Vec<Finding>,
) -> Option<T> {
    let Some(value) = value else {
        return Some(options[0].1);
    };
    if let Some(found) = value.as_str().and_then(|s| options.iter().find(|(name, _)| *name == s)) {
        return Some(found.1);
    }
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    let shown = value.as_str().map_or_else(|| describe(value), |s| s.to_string());
    let hint = value
        .as_str()
        .and_then(|s| suggest::closest(s, &names))
        .map(|s| format!("did you mean {s}? "))
        .unwrap_or_default();
    findings.push(Finding::error(
        push(at, field),
        format!("{field} {shown} is not allowed; {hint}use {}", names.join(" or ")),
    ));
    None
}

fn applies_to(value: &Value, at: &str, findings: &mut Vec<Finding>) -> Option<AppliesTo> {
    let Some(fields) = value.as_object() else {
        findings.push(Finding::error(
            at,
            format!("applies-to must be a map like {{roles: [partner]}}, found {}", describe(value)),
        ));
        return None;
    };
    let before = findings.len();
    let mut out = AppliesTo::default();
    for (key, v) in fields {
        match key.as_str() {
            "roles" => match v {
                Value::Array(items) if items.iter().all(|i| i.as_str().is_some_and(|s| !s.is_empty())) => {
                    out.roles = items.iter().filter_map(Value::as_str).map(str::to_string).collect();
                }
                Value::String(s) if !s.is_empty() => out.roles = vec![s.clone()],
                _ => findings.push(Finding::error(
                    push(at, key),
                    "applies-to roles must be a list of role names, e.g. [partner, trial]",
                )),
            },
            "authenticated" => match v {
                Value::Bool(b) => out.authenticated = Some(*b),
                other => findings.push(Finding::error(
                    push(at, key),
                    format!("applies-to authenticated must be true or false, found {}", describe(other)),
                )),
            },
            other => {
                let hint = suggest::closest(other, &["roles", "authenticated"])
                    .map(|s| format!("; did you mean {s}?"))
                    .unwrap_or_else(|| "; use roles or authenticated".to_string());
                findings.push(Finding::error(
                    push(at, key),
                    format!("unknown field {other} in x-rate-limit applies-to{hint}"),
                ));
            }
        }
    }
    (findings.len() == before).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(def.per, Per::Header("x-api-key".into()));
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
                "/x-rate-limit/0/per: per ip is not something opbound can count per; did you mean address? use route, address, user, token, org, header:NAME, cookie:NAME or query:NAME",
                "/x-rate-limit/0/limit: limit 0 must be at least 1",
                "/x-rate-limit/0/window: window PT0.5S is below the minimum PT1S",
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
