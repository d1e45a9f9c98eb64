//! `cost-from` and `max-cost`: a request that states its own weight, and the most it may state.

use serde_json::{Map, Value};

use super::scalars::positive;
use crate::finding::Finding;
use crate::policy::{CostFrom, JsonPointer, RequestCost};
use crate::spec::pointer::push;
use crate::spec::read::describe;

const COST_FROM_HINT: &str = "query:NAME, header:NAME or json:/POINTER";

/// Parses `cost-from`.
pub(super) fn cost_from(value: &Value) -> Result<CostFrom, String> {
    let Some(text) = value.as_str() else {
        return Err(format!("cost-from must be one of {COST_FROM_HINT}, found {}", describe(value)));
    };
    match text.split_once(':') {
        Some(("json", p)) => JsonPointer::parse(p).map(CostFrom::Json).map_err(|e| format!("cost-from {text}: {e}")),
        Some((kind @ ("query" | "header"), n)) => {
            let n = n.trim();
            if n.is_empty() || !n.bytes().all(crate::spec::read::is_token_byte) {
                return Err(format!("cost-from {text} needs a valid {kind} name after the colon, as in {kind}:count"));
            }
            Ok(match kind {
                "header" => CostFrom::Header(n.to_ascii_lowercase()),
                _ => CostFrom::Query(n.to_string()),
            })
        }
        _ => Err(format!("cost-from {text} is not a place opbound reads a cost from; use {COST_FROM_HINT}")),
    }
}

/// `cost-from` and `max-cost` read together: each needs the other. `Some(None)` when neither is
/// written, `None` when what was written is wrong (reported in `findings`).
pub(super) fn request_cost(
    fields: &Map<String, Value>,
    at: &str,
    findings: &mut Vec<Finding>,
) -> Option<Option<Box<RequestCost>>> {
    let mut err = |field: &str, message: String| findings.push(Finding::error(push(at, field), message));
    let from = fields.get("cost-from").map(|v| cost_from(v).map_err(|m| err("cost-from", m)));
    let max = fields.get("max-cost").map(|v| positive(v, "max-cost").map_err(|m| err("max-cost", m)));
    match (from, max) {
        (None, None) => Some(None),
        (Some(from), Some(max)) => Some(Some(Box::new(RequestCost { from: from.ok()?, max: max.ok()? }))),
        (Some(_), None) => {
            err(
                "cost-from",
                "cost-from needs max-cost, the most one request may state (a larger one is refused with 413 \
                 before anything is counted), e.g. max-cost: 1000"
                    .to_string(),
            );
            None
        }
        // Without cost-from, max-cost is only what a settled response pays when it reports nothing.
        (None, Some(max)) if fields.contains_key("settle") => max.ok().map(|_| None),
        (None, Some(_)) => {
            err(
                "max-cost",
                "max-cost applies only with cost-from, which says where a request states its cost \
                 (query:NAME, header:NAME or json:/POINTER), or with settle; for a fixed weight write cost"
                    .to_string(),
            );
            None
        }
    }
}
