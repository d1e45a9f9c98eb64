//! `check --format json`: every spec's verdict, counts and findings as one JSON document.

use serde_json::{Value, json};

use super::checked::{Checked, Outcome};

/// `{"specs": [{"spec", "verdict", "errors", "warnings", "findings", ...}]}`.
pub(super) fn render(checked: &[Checked]) -> String {
    let specs: Vec<Value> = checked
        .iter()
        .map(|Checked { path, outcome }| {
            let (errors, warnings) = outcome.counts();
            let mut spec = json!({
                "spec": path.display().to_string(),
                "verdict": outcome.verdict(),
                "errors": errors,
                "warnings": warnings,
                "findings": outcome.findings(),
            });
            match outcome {
                Outcome::Valid { version, operations, bounds, .. } => {
                    spec["version"] = json!(version);
                    spec["operations"] = json!(operations);
                    spec["bounds"] = json!(bounds);
                }
                Outcome::Invalid { .. } => {}
                Outcome::Unreadable { error } => spec["error"] = json!(error),
            }
            spec
        })
        .collect();
    serde_json::to_string_pretty(&json!({ "specs": specs })).unwrap_or_default()
}
