//! The [`Reader`] every part of reading extends (the document's root, the findings so far,
//! `$ref` following), and what the parts share: the extensions' names, the methods an operation
//! may have, and how a value is described in a finding.

use serde_json::Value;

use crate::finding::Finding;
use crate::spec::pointer::{self, push};

/// The extension holding bounds.
pub const RATE_LIMIT: &str = "x-rate-limit";
/// The extension holding named bounds.
pub const POLICIES: &str = "x-rate-limit-policies";

pub(super) const METHODS: [&str; 9] = ["get", "put", "post", "delete", "options", "head", "patch", "trace", "query"];

/// Reads the document into the tolerant model, collecting findings.
pub(super) struct Reader<'a> {
    pub(super) root: &'a Value,
    pub(super) findings: Vec<Finding>,
}

impl<'a> Reader<'a> {
    pub(super) fn error(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding::error(pointer, message));
    }

    pub(super) fn warning(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding::warning(pointer, message));
    }

    /// Follows a `$ref` if the value is one; reports a broken reference and returns `None`.
    pub(super) fn follow<'v>(&mut self, value: &'v Value, at: &str) -> Option<&'v Value>
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

/// A string or a number as the text it was written as (a version, a variable's default);
/// `None` for anything else.
pub(super) fn scalar_text(v: &Value) -> Option<String> {
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

/// Whether a byte may be in an HTTP token (RFC 9110 `tchar`): a method or a header name.
pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
