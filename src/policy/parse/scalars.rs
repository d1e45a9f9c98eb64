//! The scalar fields of a bound: a whole number of at least 1, or one name out of a few.

use std::num::NonZeroU32;

use serde_json::Value;

use crate::finding::Finding;
use crate::spec::pointer::push;
use crate::spec::read::describe;
use crate::suggest;

pub(super) fn positive(value: &Value, field: &str) -> Result<NonZeroU32, String> {
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

pub(super) fn choice<T: Copy>(
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
