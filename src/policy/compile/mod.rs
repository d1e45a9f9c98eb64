//! From the tolerant model to the compiled policy: resolves `use`, names every bound, builds the
//! router, and checks what only the whole spec can show (clashes, budget, coverage).

mod body;
mod bounds;
mod budget;
mod credentials;
mod deployment;
mod operations;
mod response;
mod route;

use std::collections::HashMap;

use indexmap::IndexMap;
use serde_json::Value;

use crate::finding::Finding;
use crate::policy::bound::{BoundDef, Mode};
use crate::policy::compiled::{Bound, Operation, Policy, Scope};
use crate::policy::index::BoundIndex;
use crate::policy::options::Options;
use crate::policy::{coverage, parse};
use crate::spec::read;

/// Compiles a parsed document. `Err` holds every finding when at least one is an error.
pub fn compile(root: &Value, options: &Options) -> Result<Policy, Vec<Finding>> {
    // Before anything is read into tables: 200,000 operations took 1.45 GB to compile before
    // the counter budget refused them.
    let operations = read::count_operations(root);
    if operations > options.max_operations {
        return Err(vec![Finding::error(
            "/paths",
            format!(
                "the spec has {} operations, over the cap of {} (--max-operations); raise --max-operations, or load the spec in parts",
                crate::numbers::thousands(operations as u64),
                crate::numbers::thousands(options.max_operations as u64)
            ),
        )]);
    }
    let (document, findings) = read::read(root);
    let Some(document) = document else {
        return Err(findings);
    };
    let mut c = Compiler {
        findings,
        bounds: Vec::new(),
        policies: IndexMap::new(),
        broken_policies: Vec::new(),
        policy_bounds: HashMap::new(),
    };

    for (name, located) in &document.policies {
        match parse::policy(&located.value, &located.pointer, &mut c.findings) {
            Some(def) => {
                c.policies.insert(name.clone(), (def, located.pointer.clone()));
            }
            None => c.broken_policies.push(name.clone()),
        }
    }
    let route_bounds = match &document.route_bounds {
        Some(located) => c.entries(&located.value, &located.pointer, "route", &Scope::Route),
        None => Vec::new(),
    };
    let tag_bounds: Vec<(String, Vec<BoundIndex>, String)> = document
        .tag_bounds
        .iter()
        .map(|(name, located)| {
            let scope = Scope::Tag(name.clone());
            let bounds = c.entries(&located.value, &located.pointer, &format!("tag:{name}"), &scope);
            (name.clone(), bounds, located.pointer.clone())
        })
        .collect();
    let mut operations = c.operations(&document, &tag_bounds);
    c.settle_against_responses(root, operations.iter().map(|op| (op.pointer.as_str(), op.id.as_str(), &op.bounds[..])));
    c.ask_usage(root, &mut operations, &route_bounds);
    let router = c.route(&document, &mut operations);

    for (name, bounds, pointer) in &tag_bounds {
        let used = operations.iter().any(|op| bounds.iter().any(|b| op.bounds.contains(b)));
        if !bounds.is_empty() && !used {
            c.findings.push(Finding::warning(
                pointer.clone(),
                format!("no operation has tag {name}, so its bounds count nothing; list it in an operation's `tags`"),
            ));
        }
    }
    for (name, (_, pointer)) in &c.policies {
        if !c.policy_bounds.contains_key(name) {
            c.findings.push(Finding::warning(
                pointer.clone(),
                format!("policy {name} is never used; refer to it with {{use: {name}}} in an x-rate-limit list"),
            ));
        }
    }
    c.budget(options.max_counters);
    // What only a complete policy can show; with errors the policy is not complete.
    if !c.findings.iter().any(Finding::is_error) {
        coverage::check(&operations, &c.bounds, &route_bounds, &mut c.findings);
        c.deployment(options);
    }

    name_operations(&operations, &mut c.findings);
    if c.findings.iter().any(Finding::is_error) {
        return Err(c.findings);
    }
    if options.shadow {
        // The fingerprint stays: a shadow instance counts under the same store keys as the
        // enforcing ones beside it, so a dry run sees the numbers enforcement would.
        for bound in &mut c.bounds {
            bound.def.mode = Mode::Shadow;
        }
    }
    Ok(Policy { version: document.version, operations, bounds: c.bounds, route_bounds, router, warnings: c.findings })
}

struct Compiler {
    findings: Vec<Finding>,
    bounds: Vec<Bound>,
    policies: IndexMap<String, (BoundDef, String)>,
    /// Policies written with errors: a `use` of one is not reported a second time.
    broken_policies: Vec<String>,
    /// Policy name to its bound, created on first use.
    policy_bounds: HashMap<String, BoundIndex>,
}

/// Names the operation each finding sits in (`POST /v1/customers`), found by walking up its
/// pointer to an operation's. A path item shared through `$ref` holds several; all are named.
pub(super) fn name_operations(operations: &[Operation], findings: &mut [Finding]) {
    let mut by_pointer: HashMap<&str, Vec<String>> = HashMap::new();
    for op in operations {
        by_pointer.entry(op.pointer.as_str()).or_default().push(format!("{} {}", op.method, op.template));
    }
    for f in findings.iter_mut().filter(|f| f.operation.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() {
            if let Some(names) = by_pointer.get(p) {
                f.operation = Some(names.join(" and "));
                break;
            }
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each finding inside an operation names it in words; a path item shared by `$ref` names
    /// every operation it stands for; findings outside operations name none.
    #[test]
    fn findings_name_the_operation_they_sit_in() {
        let spec = json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "x-rate-limit": {"per": "adress", "limit": 1, "window": "PT1M"},
            "paths": {
                "/v1/customers": {"post": {"x-rate-limit": {"per": "address", "limit": 0, "window": "PT1M"}}},
                "/a": {"$ref": "#/components/pathItems/Shared"},
                "/b": {"$ref": "#/components/pathItems/Shared"}
            },
            "components": {"pathItems": {"Shared": {"get": {"x-rate-limit": {"per": "user", "limt": 1}}}}}
        });
        let findings = compile(&spec, &Options::default()).expect_err("the spec has errors");
        let named = |pointer: &str| {
            let f = findings.iter().find(|f| f.pointer == pointer).unwrap_or_else(|| panic!("no finding at {pointer}"));
            f.operation.clone()
        };
        let cases = [
            ("/x-rate-limit/per", None),
            ("/paths/~1v1~1customers/post/x-rate-limit/limit", Some("POST /v1/customers")),
            ("/components/pathItems/Shared/get/x-rate-limit/limt", Some("GET /a and GET /b")),
        ];
        for (pointer, expected) in cases {
            assert_eq!(named(pointer).as_deref(), expected, "{pointer}");
        }
    }

    /// Issue 63: 200,000 operations took 1.45 GB to compile before the counter budget refused
    /// them. They are counted first, a `$ref`'d path item's and 3.2's `additionalOperations`
    /// too, and a spec over the cap is refused before anything is compiled.
    #[test]
    fn a_spec_over_the_operation_cap_is_refused_before_it_compiles() {
        let spec = json!({
            "openapi": "3.2.0",
            "info": {"title": "t", "version": "1"},
            "paths": {
                "/a": {"get": {}, "post": {}, "parameters": []},
                "/b": {"$ref": "#/components/pathItems/B"},
                "/c": {"additionalOperations": {"LINK": {}}}
            },
            "components": {"pathItems": {"B": {"delete": {}}}}
        });
        for (cap, refused) in [(3, true), (4, false)] {
            let options = Options { max_operations: cap, ..Options::default() };
            match compile(&spec, &options) {
                Err(findings) if refused => {
                    assert_eq!(findings.len(), 1, "{findings:?}");
                    let expected = format!(
                        "the spec has 4 operations, over the cap of {cap} (--max-operations); raise --max-operations"
                    );
                    assert!(findings[0].message.starts_with(&expected), "{}", findings[0].message);
                    assert_eq!(findings[0].pointer, "/paths");
                }
                Ok(policy) if !refused => assert_eq!(policy.operations.len(), 4),
                other => panic!("cap {cap}: {other:?}"),
            }
        }
    }
}
