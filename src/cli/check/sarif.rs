//! `check --format sarif`: SARIF 2.1.0 for code-scanning tools, one run with every spec's
//! findings as results.
//!
//! Findings carry no stable identifier of their kind (a message, a pointer, a severity), so every
//! result is reported under one rule, `opbound/spec`; its level says error or warning. A rule id
//! guessed from the message's wording would change whenever the wording did.

use std::path::Path;

use serde_json::{Value, json};

use super::checked::{Checked, Outcome};
use crate::finding::{Finding, Severity};

const SCHEMA: &str = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";
const RULE: &str = "opbound/spec";

/// The whole log, pretty-printed.
pub(super) fn render(checked: &[Checked]) -> String {
    let results: Vec<Value> =
        checked.iter().flat_map(|c| c.outcome.findings().iter().map(|f| result(c.path, f))).collect();
    // A file that could not be read is no finding in it: SARIF says so as a notification.
    let unreadable: Vec<Value> = checked
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Unreadable { error } => Some(json!({
                "level": "error",
                "message": { "text": error },
                "locations": [{ "physicalLocation": { "artifactLocation": { "uri": uri(c.path) } } }],
            })),
            _ => None,
        })
        .collect();
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "opbound",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": [{
                    "id": RULE,
                    "name": "RateLimitSpec",
                    "shortDescription": { "text": "a problem in an x-rate-limit bound or the spec that carries it" },
                    "fullDescription": { "text": "opbound check found this in the spec: errors make the spec invalid (opbound will not load it), warnings deserve a look. The message says what and how to fix it." },
                    "defaultConfiguration": { "level": "error" },
                }],
            }},
            "invocations": [{
                "executionSuccessful": unreadable.is_empty(),
                "toolExecutionNotifications": unreadable,
            }],
            // Columns count characters, as the text output's do.
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&log).unwrap_or_default()
}

fn result(path: &Path, f: &Finding) -> Value {
    let level = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let mut physical = json!({ "artifactLocation": { "uri": uri(path) } });
    if let Some(line) = f.line {
        physical["region"] = json!({ "startLine": line });
        if let Some(column) = f.column {
            physical["region"]["startColumn"] = json!(column);
        }
    }
    let pointer = if f.pointer.is_empty() { "/" } else { &f.pointer };
    let mut properties = json!({ "pointer": pointer });
    if let Some(op) = &f.operation {
        properties["operation"] = json!(op);
    }
    json!({
        "ruleId": RULE,
        "ruleIndex": 0,
        "level": level,
        "message": { "text": f.message },
        "locations": [{
            "physicalLocation": physical,
            "logicalLocations": [{ "fullyQualifiedName": pointer, "kind": "element" }],
        }],
        "properties": properties,
    })
}

/// The spec's path as a URI reference: relative as given (code scanning resolves it against the
/// repository), `file://` when absolute, with what a URI cannot hold percent-encoded.
fn uri(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    if path.is_absolute() { format!("file://{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::uri;

    #[test]
    fn paths_become_uri_references() {
        assert_eq!(uri(Path::new("specs/api v2.yaml")), "specs/api%20v2.yaml");
        assert_eq!(uri(Path::new("/srv/api.yaml")), "file:///srv/api.yaml");
        assert_eq!(uri(Path::new("../é.yaml")), "../%C3%A9.yaml");
    }
}
