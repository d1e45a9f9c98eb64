//! The cost a request states (`cost-from`): a non-negative integer in a query parameter, a
//! header or a JSON body, or the length of a JSON array.

use super::body::{Json, compressed, json_value};
use super::facts::Facts;
use super::reading::{Unclear, trim};
use crate::policy::{CostFrom, JsonPointer};

/// Why a stated cost cannot be used; [`cost_problem`] says it in words for the refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostProblem {
    /// Given more than once with different values, or malformed.
    Unclear,
    /// Not a non-negative integer (nor, in a JSON body, an array).
    NotACount,
    /// In a compressed body, which opbound does not read.
    Compressed,
}

/// What a request states, or why it cannot be used: `Ok(None)` when it states nothing (the
/// bound's `cost` applies), `Err` with the reason for a 400. Digits too many for any integer
/// opbound counts are `u64::MAX`, which is above every `max-cost`.
pub fn stated_cost<F: Facts + ?Sized>(from: &CostFrom, facts: &F) -> Result<Option<u64>, CostProblem> {
    let count = |value: Result<Option<&[u8]>, Unclear>| match value {
        Ok(None) => Ok(None),
        Err(_) => Err(CostProblem::Unclear),
        Ok(Some(v)) => whole_number(v).map(Some).ok_or(CostProblem::NotACount),
    };
    match from {
        CostFrom::Header(name) => count(facts.header(name)),
        CostFrom::Query(name) => {
            let value = facts.query(name);
            count(value.as_ref().map(|v| v.as_deref().map(str::as_bytes)).map_err(|u| *u))
        }
        CostFrom::Json(pointer) => json_cost(facts, pointer),
    }
}

/// What is wrong with the cost a request states, in words for the refusal (`header x-count is
/// not a non-negative integer`).
pub fn cost_problem(from: &CostFrom, problem: CostProblem) -> String {
    let what = match from {
        CostFrom::Header(name) => format!("header {name}"),
        CostFrom::Query(name) => format!("query parameter {name}"),
        CostFrom::Json(pointer) => {
            return match problem {
                CostProblem::Compressed => format!(
                    "a compressed body (Content-Encoding) states the cost at {pointer}, which opbound does not read"
                ),
                CostProblem::Unclear => format!("the JSON body gives {pointer} more than once with different values"),
                CostProblem::NotACount => {
                    format!("{pointer} in the JSON body is not a non-negative integer or an array")
                }
            };
        }
    };
    match problem {
        CostProblem::NotACount => format!("{what} is not a non-negative integer"),
        // Headers and query parameters are never compressed; should one be, it is unclear.
        CostProblem::Unclear | CostProblem::Compressed => {
            format!("{what} is given more than once with different values, or malformed")
        }
    }
}

/// ASCII digits, nothing else (spaces around allowed, as in a header): a non-negative integer.
fn whole_number(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(std::str::from_utf8(v).ok()?.parse().unwrap_or(u64::MAX))
}

/// What a request states at a pointer of its JSON body as a cost: a non-negative integer, or an
/// array's length. `Ok(None)`: nothing there (or no readable JSON body); `Err`: something else.
fn json_cost<F: Facts + ?Sized>(facts: &F, pointer: &JsonPointer) -> Result<Option<u64>, CostProblem> {
    if compressed(facts) {
        return Err(CostProblem::Compressed);
    }
    let Some(doc) = json_value(facts) else { return Ok(None) };
    match doc.at(pointer) {
        Err(_) => Err(CostProblem::Unclear),
        Ok(None) => Ok(None),
        Ok(Some(Json::Array(items))) => Ok(Some(items.len() as u64)),
        Ok(Some(Json::Number(n))) if n.as_u64().is_some() => Ok(n.as_u64()),
        Ok(Some(_)) => Err(CostProblem::NotACount),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Given, WithBody};

    #[test]
    fn costs_from_headers_and_query_parameters() {
        let g = Given {
            address: "192.0.2.1".parse().unwrap(),
            headers: vec![("x-count".into(), b" 12 ".to_vec()), ("x-bad".into(), b"-1".to_vec())],
            query: Some("n=7&huge=99999999999999999999999&twice=1&twice=2&f=1.5".into()),
        };
        let cost = |from: CostFrom| stated_cost(&from, &g).map_err(|p| cost_problem(&from, p));
        assert_eq!(cost(CostFrom::Header("x-count".into())), Ok(Some(12)));
        assert_eq!(cost(CostFrom::Header("x-none".into())), Ok(None));
        assert_eq!(cost(CostFrom::Header("x-bad".into())), Err("header x-bad is not a non-negative integer".into()));
        assert_eq!(cost(CostFrom::Query("n".into())), Ok(Some(7)));
        assert_eq!(cost(CostFrom::Query("huge".into())), Ok(Some(u64::MAX)));
        assert!(cost(CostFrom::Query("twice".into())).is_err());
        assert!(cost(CostFrom::Query("f".into())).is_err());
    }

    #[test]
    fn json_costs_are_integers_or_array_lengths() {
        let head = |encoding: &str| Given {
            address: "192.0.2.1".parse().unwrap(),
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("content-encoding".into(), encoding.as_bytes().to_vec()),
            ],
            query: None,
        };
        let items = JsonPointer::parse("/items").unwrap();
        let cost = |body: &str| json_cost(&WithBody { facts: &head("identity"), body: Some(body.as_bytes()) }, &items);
        assert_eq!(cost(r#"{"items":[1,2,3]}"#), Ok(Some(3)));
        assert_eq!(cost(r#"{"items":0}"#), Ok(Some(0)));
        assert_eq!(cost(r#"{"other":1}"#), Ok(None));
        assert!(cost(r#"{"items":-1}"#).is_err());
        assert!(cost(r#"{"items":1.5}"#).is_err());
        assert!(cost(r#"{"items":"3"}"#).is_err());
        assert!(cost(r#"{"items":[1],"items":[1,2]}"#).is_err());
        let gzip = head("gzip");
        assert_eq!(
            json_cost(&WithBody { facts: &gzip, body: Some(br#"{"items":[1]}"#) }, &items),
            Err(CostProblem::Compressed)
        );
    }
}
