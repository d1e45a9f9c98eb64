//! Refusal bodies in `application/problem+json` (RFC 9457): what was refused and why, in plain
//! words, and nothing about anybody else's traffic.

use serde_json::json;

use super::decision::{Decision, Outcome};
use crate::policy::{BoundIndex, Policy, Scope};

/// The media type of a refusal body.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// The status and JSON body for a refused decision; `None` when it was allowed.
pub fn body(policy: &Policy, operation: Option<usize>, decision: &Decision) -> Option<(u16, String)> {
    let (status, value) = match &decision.outcome {
        Outcome::Allowed => return None,
        Outcome::Limited { bound } => {
            let retry_after = decision.report.map_or(1, |r| r.retry_after());
            let b = &policy.bounds[*bound];
            // A bound may name its own status and message, as gateway plugins let one.
            let status = b.def.status.unwrap_or(429);
            let title = http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
            let detail = b.def.message.clone().unwrap_or_else(|| describe(policy, operation, *bound));
            let mut value = json!({
                "type": "tag:opbound.dev,2026:rate-limited",
                "title": title,
                "status": status,
                "detail": detail,
                "bound": b.id,
                "retry_after": retry_after,
            });
            // A quota says until when, as an instant in its own zone, not only in seconds.
            if let (Some(periods), Some(end)) = (b.def.algorithm.periods(), decision.report.and_then(|r| r.period_end))
            {
                let until = periods.zone().rfc3339(end);
                if b.def.message.is_none() {
                    value["detail"] = json!(format!("{detail}; it is used up until {until}"));
                }
                value["quota_period"] = json!(periods.period().to_string());
                value["quota_resets_at"] = json!(until);
            }
            (status, value)
        }
        Outcome::Unavailable { bound } => {
            let b = &policy.bounds[*bound];
            let retry_after = decision.report.map_or(1, |r| r.retry_after());
            (
                503,
                json!({
                    "type": "tag:opbound.dev,2026:store-unavailable",
                    "title": "Service Unavailable",
                    "status": 503,
                    "detail": format!("the store that counts {} cannot answer, and this bound fails closed (on-store-error: closed)", describe(policy, operation, *bound)),
                    "bound": b.id,
                    "retry_after": retry_after,
                }),
            )
        }
        Outcome::UnclearKey { bound, .. } => {
            let b = &policy.bounds[*bound];
            let what = decision.outcome.what(policy).unwrap_or_default();
            let whose = whose(policy, operation);
            (
                400,
                json!({
                    "type": "tag:opbound.dev,2026:unclear-key",
                    "title": "Bad Request",
                    "status": 400,
                    "detail": format!("{whose} counts requests per {}, and this request gives {what}: send it once", b.def.per),
                    "bound": b.id,
                }),
            )
        }
        Outcome::BadCost { bound, .. } => {
            let b = &policy.bounds[*bound];
            let what = decision.outcome.what(policy).unwrap_or_default();
            let from = b.def.cost_from.as_ref().map_or(String::new(), |c| c.from.to_string());
            (
                400,
                json!({
                    "type": "tag:opbound.dev,2026:bad-cost",
                    "title": "Bad Request",
                    "status": 400,
                    "detail": format!("{} takes each request's cost from {from}, and {what}", whose(policy, operation)),
                    "bound": b.id,
                }),
            )
        }
        Outcome::CostTooHigh { bound, stated } => {
            let b = &policy.bounds[*bound];
            // A stated cost above max-cost, or (a gateway's hits × cost) above what the bound
            // could ever admit.
            let max = match &b.def.cost_from {
                Some(c) if *stated <= u64::from(b.def.capacity()) => c.max.get(),
                _ => b.def.capacity(),
            };
            (
                413,
                json!({
                    "type": "tag:opbound.dev,2026:cost-too-high",
                    "title": "Content Too Large",
                    "status": 413,
                    "detail": format!("{} admits a cost of at most {max} in one request, and this one states {stated}; split it", whose(policy, operation)),
                    "bound": b.id,
                    "max_cost": max,
                }),
            )
        }
        Outcome::MissingKey { bound } => {
            let b = &policy.bounds[*bound];
            let what = decision.outcome.what(policy).unwrap_or_default();
            let whose = whose(policy, operation);
            (
                400,
                json!({
                    "type": "tag:opbound.dev,2026:missing-key",
                    "title": "Bad Request",
                    "status": 400,
                    "detail": format!("{whose} counts requests per {}, and this request lacks {what}", b.def.per),
                    "bound": b.id,
                    "missing": what,
                }),
            )
        }
    };
    Some((status, value.to_string()))
}

/// Who counts: `operation search`, or `this API` for a request that matched no operation.
fn whose(policy: &Policy, operation: Option<usize>) -> String {
    match operation {
        Some(op) => format!("operation {}", policy.operations[op].id),
        None => "this API".to_string(),
    }
}

/// A bound in plain words, with where it counts: `10 per PT1M per user on operation search`.
pub fn describe(policy: &Policy, operation: Option<usize>, bound: BoundIndex) -> String {
    let b = &policy.bounds[bound];
    let what = b.def.describe();
    let op = operation.map(|o| policy.operations[o].id.as_str());
    match (&b.scope, op) {
        (Scope::Route, _) => format!("{what} across all requests"),
        (Scope::Policy(name), Some(op)) => {
            format!("{what} on operation {op} (policy {name}, shared with other operations)")
        }
        (Scope::Policy(name), None) => format!("{what} (policy {name})"),
        (Scope::Tag(name), Some(op)) => {
            format!("{what} on operation {op} (tag {name}, shared with the tag's other operations)")
        }
        (Scope::Tag(name), None) => format!("{what} (tag {name})"),
        (Scope::Operation(o), _) => format!("{what} on operation {}", policy.operations[*o].id),
    }
}
