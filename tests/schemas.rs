//! The JSON Schemas opbound writes and is checked against, validated by Python's `jsonschema`
//! (installed by `.ci/test`; a missing validator fails these tests, it never skips them):
//! `check --format sarif` against the SARIF 2.1.0 schema in `fixtures/sarif/`, and
//! `opbound schema` against the fixtures `check` accepts and the field errors it reports.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the binary in the crate's root; its stdout and exit code.
fn opbound(args: &[&str]) -> (String, i32) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_opbound")).args(args).current_dir(root()).output().expect("opbound runs");
    (String::from_utf8(out.stdout).expect("utf-8"), out.status.code().unwrap_or(-1))
}

/// Runs `tests/schemas/validate.py` once with `input` on stdin; panics with its report unless it
/// says everything held.
fn validate(input: &Value) {
    let script = root().join("tests/schemas/validate.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (install it; .ci/test does)");
    child.stdin.take().expect("stdin").write_all(input.to_string().as_bytes()).expect("input written");
    let out = child.wait_with_output().expect("python3 finishes");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "validation failed:\n{report}");
    eprintln!("{report}");
}

fn specs_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("folder exists")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "json")))
        .collect();
    found.sort();
    found
}

#[test]
fn sarif_output_is_valid_sarif_2_1_0() {
    let schema =
        std::fs::read_to_string(root().join("fixtures/sarif/sarif-schema-2.1.0.json")).expect("schema vendored");
    let mut logs = Vec::new();
    // Errors, warnings, a minified spec, and an unreadable file: every shape a result takes.
    for args in [
        &["check", "--format", "sarif", "fixtures/check/many-errors.yaml", "fixtures/check/warn-shared-cause.yaml"][..],
        &["check", "--format", "sarif", "fixtures/check/json-minified.json", "fixtures/check/no-such-file.yaml"],
        &["check", "--format", "sarif", "specs/petstore.yaml"],
    ] {
        let (out, _) = opbound(args);
        logs.push(serde_json::from_str::<Value>(&out).expect("sarif is JSON"));
    }
    validate(&json!({ "task": "sarif", "schema": serde_json::from_str::<Value>(&schema).unwrap(), "logs": logs }));
}

#[test]
fn schema_accepts_what_check_accepts_and_rejects_its_field_errors() {
    let (schema, code) = opbound(&["schema"]);
    assert_eq!(code, 0);
    let schema: Value = serde_json::from_str(&schema).expect("schema is JSON");
    let mut specs = Vec::new();
    for path in specs_in(&root().join("fixtures/check")).into_iter().chain(specs_in(&root().join("specs"))) {
        let source = opbound::spec::Source::read(&path).expect("fixture reads");
        // A spec that does not parse has no x-rate-limit to look at.
        let Ok(document) = source.parse() else { continue };
        let name = path.strip_prefix(root()).unwrap().display().to_string();
        let (checked, _) = opbound(&["check", "--format", "json", &name]);
        let checked: Value = serde_json::from_str(&checked).expect("check --format json is JSON");
        let spec = &checked["specs"][0];
        specs.push(json!({
            "spec": name,
            "verdict": spec["verdict"],
            "findings": spec["findings"],
            "document": document,
        }));
    }
    assert!(specs.len() > 30, "fixtures found: {}", specs.len());
    validate(&json!({ "task": "x-rate-limit", "schema": schema, "specs": specs }));
}
