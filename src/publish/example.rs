//! An example refusal body, with the fields `engine::problem` sends, for documentation.

use serde_json::{Value, json};

use crate::engine::problem;
use crate::policy::{Algorithm, BoundIndex, Policy};

/// The 429 (or the bound's own status) body a request to `operation` gets when `bound` is
/// exceeded, with a plausible `retry_after`: what `engine::problem::body` writes, field for field.
pub fn refusal_example(policy: &Policy, operation: Option<usize>, bound: BoundIndex) -> Value {
    let b = &policy.bounds[bound];
    let status = b.def.status.unwrap_or(429);
    let title = http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    let detail = b.def.message.clone().unwrap_or_else(|| problem::describe(policy, operation, bound));
    // The wait for one request's worth of budget to come back: a window's share per request.
    let retry_after = match b.def.algorithm {
        Algorithm::SlidingWindow { window } | Algorithm::TokenBucket { window, .. } => {
            window.secs_ceil().div_ceil(u64::from(b.def.limit.get())).max(1)
        }
        Algorithm::Concurrency => 1,
        Algorithm::Quota { ref periods } => periods.period().nominal_seconds() / 2,
    };
    let mut value = json!({
        "type": "tag:opbound.dev,2026:rate-limited",
        "title": title,
        "status": status,
        "detail": detail,
        "bound": b.id,
        "retry_after": retry_after,
    });
    if let Some(periods) = b.def.algorithm.periods() {
        let until = "2026-12-01T00:00:00Z";
        if b.def.message.is_none() {
            value["detail"] = json!(format!("{detail}; it is used up until {until}"));
        }
        value["quota_period"] = json!(periods.period().to_string());
        value["quota_resets_at"] = json!(until);
    }
    value
}
