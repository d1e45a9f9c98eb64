//! Every real spec in `../shared/specs` loads, `routes --json` lists every operation, and a
//! concrete path made from each routable operation's template routes back to it.
//!
//! The folder sits beside the checkout (CI has it). Point `OPBOUND_SHARED_SPECS` elsewhere, or
//! set `OPBOUND_SKIP_SWEEP=1` to skip the sweep knowingly; a missing folder otherwise fails.

use std::process::Command;

use opbound::router::canonical::{EscapedSlashes, canonical_path};
use opbound::spec::pointer;
use serde_json::Value;

mod common;
use common::{shared_specs, spec_files};

const METHODS: [&str; 9] = ["get", "put", "post", "delete", "options", "head", "patch", "trace", "query"];

/// Counts operations straight from the document, independently of the loader's model.
fn count_operations(doc: &Value) -> usize {
    let v32 = doc.get("openapi").and_then(Value::as_str).is_some_and(|v| v.starts_with("3.2"));
    let mut n = 0;
    for item in doc
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter())
        .filter(|(k, _)| !k.starts_with("x-"))
        .map(|(_, v)| v)
    {
        let mut item = item;
        while let Some(r) = item.get("$ref").and_then(Value::as_str) {
            item = pointer::resolve(doc, r).expect("sweep specs have resolvable refs").0;
        }
        let Some(map) = item.as_object() else {
            continue;
        };
        n += METHODS.iter().filter(|m| map.get(**m).is_some_and(Value::is_object) && (**m != "query" || v32)).count();
        if v32 {
            n += map.get("additionalOperations").and_then(Value::as_object).map_or(0, |m| m.len());
        }
    }
    n
}

/// A concrete path for a template: each `{param}` becomes a value no static segment spells.
fn concrete(template: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in template.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("v7q");
            }
            '}' => in_param = false,
            c if !in_param => out.push(c),
            _ => {}
        }
    }
    out
}

#[test]
fn every_shared_spec_loads_lists_and_routes_back() {
    let Some(dir) = shared_specs() else { return };
    let files = spec_files(&dir);
    assert!(files.len() >= 60, "expected the shared specs, found {} files in {}", files.len(), dir.display());
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in &files {
        let name = file.strip_prefix(&dir).unwrap().display().to_string();
        let loaded = match opbound::load(file, &opbound::Options::default()) {
            Ok(l) => l,
            Err(e) => {
                failures.push(format!("{name}: does not load: {e}"));
                continue;
            }
        };
        let policy = &loaded.policy;
        let doc = loaded.source.parse().unwrap();
        let expected = count_operations(&doc);
        if policy.operations.len() != expected {
            failures
                .push(format!("{name}: {} operations loaded, the document has {expected}", policy.operations.len()));
        }

        // The binary's JSON listing names every operation.
        let out = Command::new(env!("CARGO_BIN_EXE_opbound")).args(["routes", "--json"]).arg(file).output().unwrap();
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let listed = listed["operations"].as_array().map_or(0, Vec::len);
        if !out.status.success() || listed != expected {
            failures
                .push(format!("{name}: routes --json exited {:?} listing {listed} of {expected}", out.status.code()));
        }
        let check = Command::new(env!("CARGO_BIN_EXE_opbound")).arg("check").arg(file).output().unwrap();
        if !check.status.success() {
            failures.push(format!(
                "{name}: check exited {:?}: {}",
                check.status.code(),
                String::from_utf8_lossy(&check.stderr)
            ));
        }

        for (index, op) in policy.operations.iter().enumerate() {
            if !op.routable {
                continue;
            }
            for path in &op.paths {
                let target = concrete(path);
                let canonical = canonical_path(&target, EscapedSlashes::Keep).unwrap();
                let got = policy.route(&op.method, &canonical);
                // A path this operation lost in a clash goes to the operation that kept it.
                let ok =
                    got == Some(index) || got.is_some_and(|g| policy.operations[g].shares_route_with.contains(&index));
                if !ok {
                    let got = got.map(|g| format!("{} {}", policy.operations[g].method, policy.operations[g].template));
                    failures.push(format!("{name}: {} {target} (for {}) routed to {got:?}", op.method, op.id));
                }
                checked += 1;
            }
        }
    }
    eprintln!("swept {} specs, {checked} concrete paths routed", files.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
