//! Reads the tolerant model out of a parsed document: paths, operations, servers, security and
//! the rate-limit extensions, following local `$ref`s. Every problem becomes a finding.

mod document;
mod misplaced;
mod paths;
mod reader;
mod security;
mod servers;

use serde_json::Value;

use super::model::Document;
use crate::finding::Finding;
use reader::Reader;

pub(crate) use reader::is_token_byte;
pub use reader::{POLICIES, RATE_LIMIT, describe};
pub use servers::server_base_path;

/// How many operations the document's paths hold at most, counted without reading them: the
/// methods of each path item (the one a `$ref` names, for a reference) and its
/// `additionalOperations`.
pub fn count_operations(root: &Value) -> usize {
    let Some(paths) = root.get("paths").and_then(Value::as_object) else { return 0 };
    let count = |item: &serde_json::Map<String, Value>| {
        let fixed = item.keys().filter(|k| reader::METHODS.contains(&k.as_str())).count();
        fixed + item.get("additionalOperations").and_then(Value::as_object).map_or(0, |m| m.len())
    };
    paths
        .values()
        .filter_map(Value::as_object)
        .map(|item| {
            let target = item.get("$ref").and_then(Value::as_str).and_then(|r| super::pointer::resolve(root, r).ok());
            count(item) + target.and_then(|(t, _)| t.as_object()).map_or(0, count)
        })
        .sum()
}

/// Reads the document. `None` only when it is not an OpenAPI document at all.
pub fn read(root: &Value) -> (Option<Document>, Vec<Finding>) {
    let mut reader = Reader { root, findings: Vec::new() };
    let document = reader.document();
    (document, reader.findings)
}
