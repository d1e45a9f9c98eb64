//! Reads the tolerant model out of a parsed document: paths, operations, servers, security and
//! the rate-limit extensions, following local `$ref`s. Every problem becomes a finding.

mod document;
mod misplaced;
mod paths;
mod security;
mod servers;

use serde_json::Value;

use super::model::Document;
use super::pointer::{self, push};
use crate::finding::Finding;

pub use servers::server_base_path;

/// The extension holding bounds.
pub const RATE_LIMIT: &str = "x-rate-limit";
/// The extension holding named bounds.
pub const POLICIES: &str = "x-rate-limit-policies";

const METHODS: [&str; 9] = ["get", "put", "post", "delete", "options", "head", "patch", "trace", "query"];

/// Reads the document. `None` only when it is not an OpenAPI document at all.
pub fn read(root: &Value) -> (Option<Document>, Vec<Finding>) {
    let mut reader = Reader { root, findings: Vec::new() };
    let document = reader.document();
    (document, reader.findings)
}

struct Reader<'a> {
    root: &'a Value,
    findings: Vec<Finding>,
}

impl<'a> Reader<'a> {
    fn error(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding::error(pointer, message));
    }

    fn warning(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding::warning(pointer, message));
    }

    /// Follows a `$ref` if the value is one; reports a broken reference and returns `None`.
    fn follow<'v>(&mut self, value: &'v Value, at: &str) -> Option<&'v Value>
    where
        'a: 'v,
    {
        match value.get("$ref").and_then(Value::as_str) {
            None => Some(value),
            Some(reference) => match pointer::resolve(self.root, reference) {
                Ok((target, _)) => Some(target),
                Err(e) => {
                    self.error(push(at, "$ref"), e.to_string());
                    None
                }
            },
        }
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A short description of a value's type for messages.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a map".to_string(),
    }
}

pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
