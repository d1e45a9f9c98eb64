//! `count-when` and `settle`: what a bound counts once the response is known.

use serde_json::{Map, Value};

use crate::finding::Finding;
use crate::policy::{Counting, Settle, StatusSet};
use crate::spec::pointer::push;
use crate::spec::read::describe;

const STATUS_HINT: &str = "a status from 100 to 599 or a class such as \"4xx\"";

/// Reads both fields; `None` when either is malformed or does not fit the algorithm (each
/// problem reported, located).
pub(super) fn counting(
    fields: &Map<String, Value>,
    algorithm: &str,
    at: &str,
    findings: &mut Vec<Finding>,
) -> Option<Counting> {
    let mut ok = true;
    for field in ["count-when", "settle"] {
        if algorithm == "concurrency" && fields.contains_key(field) {
            findings.push(Finding::error(
                push(at, field),
                format!(
                    "{field} does not apply to a concurrency bound, which holds a request only while it is in flight; \
                     use it with sliding-window, token-bucket or quota"
                ),
            ));
            ok = false;
        }
    }
    let count_when = match fields.get("count-when") {
        None => None,
        Some(v) => match statuses(v) {
            Ok(set) => Some(set),
            Err(message) => {
                findings.push(Finding::error(push(at, "count-when"), message));
                ok = false;
                None
            }
        },
    };
    let settle = match fields.get("settle") {
        None => None,
        Some(Value::String(s)) if valid_header(s.strip_prefix("header:").unwrap_or("")) => {
            Some(Settle::Header(s["header:".len()..].to_ascii_lowercase()))
        }
        Some(v) => {
            let shown = v.as_str().map_or_else(|| describe(v), |s| format!("{s:?}"));
            findings.push(Finding::error(
                push(at, "settle"),
                format!(
                    "settle {shown} is not where opbound can read a used amount; write header:NAME, e.g. settle: header:X-Usage-Tokens"
                ),
            ));
            ok = false;
            None
        }
    };
    ok.then_some(Counting { count_when, settle })
}

fn statuses(value: &Value) -> Result<StatusSet, String> {
    let items = match value {
        Value::Array(items) if !items.is_empty() => items.as_slice(),
        Value::Array(_) => return Err(format!("count-when is empty, so nothing would ever count; list {STATUS_HINT}")),
        // One status alone is a list of one.
        other => std::slice::from_ref(other),
    };
    let mut set = StatusSet::default();
    for item in items {
        let code = item.as_u64().or_else(|| item.as_str().and_then(|s| s.parse().ok()));
        match (code, item.as_str().map(str::as_bytes)) {
            (Some(n @ 100..=599), _) => set.add_code(n as u16),
            (_, Some([d @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'])) => set.add_class(d - b'0'),
            _ => {
                let shown = match item {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => format!("{s:?}"),
                    other => describe(other),
                };
                return Err(format!(
                    "count-when lists {shown}, which is not {STATUS_HINT}, e.g. count-when: [401, 403]"
                ));
            }
        }
    }
    Ok(set)
}

/// An HTTP header name: one or more token characters.
fn valid_header(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
