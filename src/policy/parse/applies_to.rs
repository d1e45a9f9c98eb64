//! `applies-to`: the roles, or the authenticated or anonymous callers, a bound counts.

use serde_json::Value;

use crate::finding::Finding;
use crate::policy::bound::AppliesTo;
use crate::spec::pointer::push;
use crate::spec::read::describe;
use crate::suggest;

pub(super) fn applies_to(value: &Value, at: &str, findings: &mut Vec<Finding>) -> Option<AppliesTo> {
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
