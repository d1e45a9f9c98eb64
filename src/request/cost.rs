//! The cost a request states (`cost-from`): a non-negative integer in a query parameter, a
//! header or a JSON body, or the length of a JSON array.

use super::{Facts, Unclear, body};
use crate::policy::CostFrom;

/// What a request states, or why it cannot be used: `Ok(None)` when it states nothing (the
/// bound's `cost` applies), `Err` with the reason for a 400. Digits too many for any integer
/// opbound counts are `u64::MAX`, which is above every `max-cost`.
pub fn stated_cost<F: Facts + ?Sized>(from: &CostFrom, facts: &F) -> Result<Option<u64>, String> {
    let text = |value: Result<Option<&[u8]>, Unclear>, what: String| match value {
        Ok(None) => Ok(None),
        Err(_) => Err(format!("{what} is given more than once with different values, or malformed")),
        Ok(Some(v)) => match whole_number(v) {
            Some(n) => Ok(Some(n)),
            None => Err(format!("{what} is not a non-negative integer")),
        },
    };
    match from {
        CostFrom::Header(name) => text(facts.header(name), format!("header {name}")),
        CostFrom::Query(name) => {
            let value = facts.query(name);
            let value = value.as_ref().map(|v| v.as_deref().map(str::as_bytes)).map_err(|u| *u);
            text(value, format!("query parameter {name}"))
        }
        CostFrom::Json(pointer) => body::json_cost(facts, pointer),
    }
}

/// ASCII digits, nothing else (spaces around allowed, as in a header): a non-negative integer.
fn whole_number(v: &[u8]) -> Option<u64> {
    let v = super::trim(v);
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(std::str::from_utf8(v).ok()?.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Given;

    #[test]
    fn costs_from_headers_and_query_parameters() {
        let g = Given {
            address: "192.0.2.1".parse().unwrap(),
            headers: vec![("x-count".into(), b" 12 ".to_vec()), ("x-bad".into(), b"-1".to_vec())],
            query: Some("n=7&huge=99999999999999999999999&twice=1&twice=2&f=1.5".into()),
        };
        let cost = |from: CostFrom| stated_cost(&from, &g);
        assert_eq!(cost(CostFrom::Header("x-count".into())), Ok(Some(12)));
        assert_eq!(cost(CostFrom::Header("x-none".into())), Ok(None));
        assert_eq!(cost(CostFrom::Header("x-bad".into())), Err("header x-bad is not a non-negative integer".into()));
        assert_eq!(cost(CostFrom::Query("n".into())), Ok(Some(7)));
        assert_eq!(cost(CostFrom::Query("huge".into())), Ok(Some(u64::MAX)));
        assert!(cost(CostFrom::Query("twice".into())).is_err());
        assert!(cost(CostFrom::Query("f".into())).is_err());
    }
}
