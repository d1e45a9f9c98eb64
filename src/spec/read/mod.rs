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

/// Reads the document. `None` only when it is not an OpenAPI document at all.
pub fn read(root: &Value) -> (Option<Document>, Vec<Finding>) {
    let mut reader = Reader { root, findings: Vec::new() };
    let document = reader.document();
    (document, reader.findings)
}
