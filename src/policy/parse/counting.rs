//! `count-when` and `settle`: what a bound counts once the response is known.

use serde_json::{Map, Value};

use crate::finding::Finding;
use crate::policy::{Counting, Settle, StatusSet, Term};
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
        Some(v) => match v.as_str().map(settle) {
            Some(Ok(s)) => Some(s),
            found => {
                let shown = v.as_str().map_or_else(|| describe(v), |s| format!("{s:?}"));
                let why = match found {
                    Some(Err(why)) if !why.is_empty() => format!("{why}; "),
                    _ => String::new(),
                };
                findings.push(Finding::error(
                    push(at, "settle"),
                    format!(
                        "settle {shown} is not where opbound can read a used amount: {why}write header:NAME \
                         (settle: header:X-Usage-Tokens) or JSON pointers into the body, weighted if need be \
                         (settle: json:/usage/input_tokens + 4 * json:/usage/output_tokens)"
                    ),
                ));
                ok = false;
                None
            }
        },
    };
    // `max-cost` itself is read beside `cost-from` (`parse::cost`), which reports its errors.
    let max_cost = fields.get("max-cost").and_then(|v| super::scalars::positive(v, "max-cost").ok());
    ok.then_some(Counting { count_when, settle, max_cost })
}

/// The most terms a body-settled sum may have.
const MAX_TERMS: usize = 8;

/// `header:NAME`, or a sum of `[N *] json:POINTER` terms.
fn settle(text: &str) -> Result<Settle, String> {
    if let Some(name) = text.trim().strip_prefix("header:") {
        return if valid_header(name) {
            Ok(Settle::Header(name.to_ascii_lowercase()))
        } else {
            Err(format!("{name:?} is not a header name"))
        };
    }
    if !text.contains("json:") {
        // Neither a header nor the body: the general advice says it all.
        return Err(String::new());
    }
    let mut terms = Vec::new();
    for written in text.split('+') {
        let written = written.trim();
        let (factor, pointer) = match written.split_once('*') {
            Some((n, rest)) => {
                let n = n.trim();
                match n.parse::<u64>() {
                    Ok(f) if f > 0 && !n.starts_with('+') => (f, rest.trim()),
                    _ => return Err(format!("{n:?} in {written:?} is not a positive whole factor")),
                }
            }
            None => (1, written),
        };
        let Some(pointer) = pointer.strip_prefix("json:") else {
            return Err(format!("{written:?} is not json:POINTER or N * json:POINTER"));
        };
        if !pointer.starts_with('/') {
            return Err(format!("{pointer:?} is not a JSON pointer (RFC 6901), which starts with /"));
        }
        if pointer.contains(char::is_whitespace) || bad_escape(pointer) {
            return Err(format!("{pointer:?} is not a JSON pointer (RFC 6901): ~ is written ~0, / in a name ~1"));
        }
        terms.push(Term { factor, pointer: pointer.to_string() });
    }
    if terms.len() > MAX_TERMS {
        return Err(format!("{} terms, more than the {MAX_TERMS} a sum may have", terms.len()));
    }
    Ok(Settle::Body(terms))
}

/// Whether a pointer has a `~` not followed by `0` or `1`.
fn bad_escape(pointer: &str) -> bool {
    let bytes = pointer.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| b == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')))
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
