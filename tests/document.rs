//! `opbound document`: golden outputs for the fixtures and the shipped specs in both formats,
//! and what every output must be: loadable with the same routes and bounds, valid OpenAPI by
//! openapi-spec-validator (installed by `.ci/test`), and unchanged when documented again. A sweep
//! documents every shared spec with a bound added and validates the results.
//!
//! Refresh the goldens with `OPBOUND_BLESS=1 cargo test --test document` and read the diff.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;
use common::{shared_specs, spec_files};
use std::process::Command;

use serde_json::json;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A spec to document (relative to `fixtures/`), the extra arguments, and its golden's name in
/// `fixtures/document/golden/`.
struct Case {
    spec: &'static str,
    args: &'static [&'static str],
    golden: &'static str,
}

const OPENAPI: &[Case] = &[
    Case { spec: "document/swagger2.yaml", args: &[], golden: "swagger2.yaml" },
    Case { spec: "document/swagger2.yaml", args: &["--headers", "draft"], golden: "swagger2.draft.yaml" },
    Case { spec: "document/swagger2.json", args: &[], golden: "swagger2.json" },
    Case { spec: "document/oas30.json", args: &[], golden: "oas30.json" },
    Case { spec: "document/oas31.yaml", args: &[], golden: "oas31.yaml" },
    Case { spec: "document/oas31.yaml", args: &["--headers", "both"], golden: "oas31.both.yaml" },
    Case { spec: "../specs/petstore.yaml", args: &[], golden: "petstore.yaml" },
    Case { spec: "../specs/saas.yaml", args: &[], golden: "saas.yaml" },
    Case { spec: "document/tags.yaml", args: &[], golden: "tags.yaml" },
];

const MARKDOWN: &[Case] = &[
    Case { spec: "document/swagger2.yaml", args: &["--format", "markdown"], golden: "swagger2.md" },
    Case { spec: "document/swagger2.json", args: &["--format", "markdown"], golden: "swagger2-json.md" },
    Case { spec: "document/oas30.json", args: &["--format", "markdown"], golden: "oas30.md" },
    Case { spec: "document/oas31.yaml", args: &["--format", "markdown", "--headers", "both"], golden: "oas31.md" },
    Case { spec: "../specs/petstore.yaml", args: &["--format", "markdown"], golden: "petstore.md" },
    Case { spec: "../specs/saas.yaml", args: &["--format", "markdown"], golden: "saas.md" },
    Case { spec: "document/tags.yaml", args: &["--format", "markdown"], golden: "tags.md" },
];

/// Shipped specs that openapi-spec-validator rejects before opbound touches them: saas.yaml
/// leaves its path parameters undeclared. Their outputs must add no error of their own.
const INVALID_BEFORE: &[&str] = &["../specs/saas.yaml"];

/// Runs `opbound ARGS` in `fixtures/`: exit code, stdout, stderr.
fn opbound(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(args)
        .current_dir(fixtures())
        .output()
        .expect("the opbound binary runs");
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("output is UTF-8");
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `opbound document SPEC ARGS`, which must succeed.
fn document(spec: &str, args: &[&str]) -> String {
    let mut all = vec!["document", spec];
    all.extend(args);
    let (code, out, err) = opbound(&all);
    assert_eq!(code, 0, "opbound {} exited {code}: {err}", all.join(" "));
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("opbound-document-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Each OpenAPI case's output written to `dir`, named after its golden: (case, output file).
fn outputs(dir: &Path) -> Vec<(&'static Case, PathBuf)> {
    OPENAPI
        .iter()
        .map(|case| {
            let path = dir.join(case.golden);
            std::fs::write(&path, document(case.spec, case.args)).unwrap();
            (case, path)
        })
        .collect()
}

#[test]
fn goldens_for_every_fixture_and_shipped_spec() {
    let bless = std::env::var_os("OPBOUND_BLESS").is_some();
    let mut failures = Vec::new();
    for case in OPENAPI.iter().chain(MARKDOWN) {
        let actual = document(case.spec, case.args);
        let golden = fixtures().join("document/golden").join(case.golden);
        if bless {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            let line = expected.lines().zip(actual.lines()).position(|(e, a)| e != a).map_or(0, |l| l + 1);
            failures.push(format!(
                "{} differs from the output of {} (first at line {line})",
                golden.display(),
                case.spec
            ));
        }
    }
    assert!(failures.is_empty(), "{}\nOPBOUND_BLESS=1 rewrites them; read the diff", failures.join("\n"));
}

#[test]
fn output_loads_with_the_same_routes_and_bounds() {
    let dir = scratch("routes");
    for (case, output) in outputs(&dir) {
        let load = |p: &Path| opbound::load(p, &opbound::Options::default()).expect("loads");
        let before = opbound::policy::report::routes(&load(&fixtures().join(case.spec)).policy);
        let after = opbound::policy::report::routes(&load(&output).policy);
        assert_eq!(before, after, "{}: documenting changed the routes or bounds", case.golden);
    }
}

#[test]
fn documenting_twice_changes_nothing() {
    let dir = scratch("twice");
    for (case, output) in outputs(&dir) {
        let once = std::fs::read_to_string(&output).unwrap();
        let twice = document(output.to_str().unwrap(), case.args);
        assert!(once == twice, "{}: a second run changed the output", case.golden);
    }
}

#[test]
fn output_is_valid_openapi() {
    let dir = scratch("valid");
    let outs = outputs(&dir);
    let mut files: Vec<String> = outs.iter().map(|(_, p)| p.display().to_string()).collect();
    files.extend(INVALID_BEFORE.iter().map(|s| fixtures().join(s).display().to_string()));
    let errors = validate(&files);
    for (case, output) in &outs {
        let after = &errors[&output.display().to_string()];
        let before: &[String] = if INVALID_BEFORE.contains(&case.spec) {
            &errors[&fixtures().join(case.spec).display().to_string()]
        } else {
            &[]
        };
        let new: Vec<&String> = after.iter().filter(|e| !before.contains(e)).collect();
        assert!(new.is_empty(), "{} (from {}) is not valid OpenAPI: {new:#?}", case.golden, case.spec);
    }
}

/// Issue 47, item 9: "10 per minute per address" written on each operation of a tag read as 10
/// for each; one counter is shared by all of them, and both outputs say so. The Markdown's refusal
/// section named a `bound` id the table did not show: the table has the column.
#[test]
fn a_bound_several_operations_share_says_it_is_one_count() {
    let shared = "10 per minute per address (one count shared by the 2 operations tagged search)";
    let spec = document("document/tags.yaml", &[]);
    let descriptions: Vec<&str> = spec.lines().filter(|l| l.contains("**Rate limits** (opbound)")).collect();
    assert_eq!(descriptions.iter().filter(|l| l.contains(shared)).count(), 2, "{descriptions:#?}");
    assert!(!spec.contains("5 per minute per address (one count"), "a tag of one operation shares nothing: {spec}");

    let page = document("document/tags.yaml", &["--format", "markdown"]);
    assert!(page.contains("| method | path | operation | limit | tiers | cost | bound |"), "{page}");
    let rows: Vec<&str> = page.lines().filter(|l| l.contains(shared)).collect();
    assert_eq!(rows.len(), 2, "{page}");
    assert!(rows.iter().all(|r| r.ends_with("| `tag:search:0` |")), "{rows:#?}");
    let policies = document("../specs/saas.yaml", &["--format", "markdown"]);
    assert!(policies.contains("(one count shared by the 4 operations that use policy writes)"), "{policies}");
}

#[test]
fn errors_and_output_file() {
    let (code, out, err) = opbound(&["document", "check/bad-per.yaml"]);
    assert_eq!((code, out.as_str()), (1, ""), "an invalid spec: {err}");
    assert!(err.contains("error: ") && err.contains("invalid"), "findings as check prints them: {err}");
    let (code, _, err) = opbound(&["document", "check/no-such-file.yaml"]);
    assert_eq!(code, 2, "an unreadable spec: {err}");

    let dir = scratch("output");
    let file = dir.join("out.yaml");
    let (code, out, err) = opbound(&["document", "../specs/petstore.yaml", "-o", file.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), document("../specs/petstore.yaml", &[]));
}

/// Errors of each file by openapi-spec-validator, one Python process for them all.
fn validate(files: &[String]) -> BTreeMap<String, Vec<String>> {
    let check = Command::new("python3").args(["-c", "import openapi_spec_validator, yaml"]).output();
    assert!(
        check.is_ok_and(|o| o.status.success()),
        "openapi-spec-validator is not installed for python3; the README's test command (.ci/test) installs it with pip"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_validate.py");
    // The validator's errors depend on Python's hash order (one run finds 8 of a spec's schema
    // errors, the next 10): a fixed seed makes every run report the same ones.
    let out =
        Command::new("python3").env("PYTHONHASHSEED", "0").arg(script).args(files).output().expect("python3 runs");
    assert!(out.status.success(), "the validator failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the validator prints JSON")
}

#[test]
fn every_shared_spec_documented_with_a_bound_is_valid() {
    let Some(dir) = shared_specs() else { return };
    let work = scratch("sweep");
    // Two at a time (the large specs take seconds each): documenting, then validating.
    let files = spec_files(&dir);
    let mut pairs: Vec<(PathBuf, PathBuf, PathBuf)> = std::thread::scope(|scope| {
        let halves: Vec<_> = (0..2)
            .map(|half| {
                let (files, work) = (&files, &work);
                scope.spawn(move || {
                    let mut pairs = Vec::new();
                    for (i, file) in files.iter().enumerate().filter(|(i, _)| i % 2 == half) {
                        let source = opbound::spec::Source::read(file).unwrap();
                        let mut tree = source.parse().unwrap();
                        tree["x-rate-limit"] = json!([{"per": "address", "limit": 100, "window": "PT1M"}]);
                        let ext = file.extension().unwrap().to_str().unwrap();
                        let bounded = work.join(format!("{i}-bounded.{ext}"));
                        let text = match source.format {
                            opbound::spec::Format::Json => serde_json::to_string(&tree).unwrap(),
                            opbound::spec::Format::Yaml => yaml_serde::to_string(&tree).unwrap(),
                        };
                        std::fs::write(&bounded, text).unwrap();
                        let output = work.join(format!("{i}-documented.{ext}"));
                        let (code, _, err) =
                            opbound(&["document", bounded.to_str().unwrap(), "-o", output.to_str().unwrap()]);
                        assert_eq!(code, 0, "{}: document exited {code}: {err}", file.display());
                        pairs.push((file.clone(), bounded, output));
                    }
                    pairs
                })
            })
            .collect();
        halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    pairs.sort();
    assert!(pairs.len() >= 60, "expected the shared specs, found {} in {}", pairs.len(), dir.display());
    // The outputs first, in one process; only those with errors are validated again, input and
    // output together in a process of their own (the large specs take seconds each, so the
    // common case is validated once). Which of a spec's errors the validator reports depends on
    // what it validated before and on the hash seed, so a pair is compared within one fresh
    // process with a fixed seed, where the same document always gets the same errors.
    let outputs: Vec<String> = pairs.iter().map(|(_, _, o)| o.display().to_string()).collect();
    let first: BTreeMap<String, Vec<String>> = std::thread::scope(|scope| {
        let halves: Vec<_> =
            outputs.chunks(outputs.len().div_ceil(2)).map(|c| scope.spawn(move || validate(c))).collect();
        halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    for (file, bounded, output) in &pairs {
        if first[&output.display().to_string()].is_empty() {
            continue;
        }
        // Some shared specs are invalid OpenAPI as published: documenting must add no new error.
        let (bounded, output) = (bounded.display().to_string(), output.display().to_string());
        let mut both = validate(&[bounded.clone(), output.clone()]);
        let known = both.remove(&bounded).unwrap_or_default();
        let after = both.remove(&output).unwrap_or_default();
        let new: Vec<&String> = after.iter().filter(|e| !known.contains(e)).collect();
        if !new.is_empty() {
            failures.push(format!("{}: {new:?}", file.display()));
        }
    }
    eprintln!("documented and validated {} shared specs", pairs.len());
    assert!(failures.is_empty(), "new validation errors:\n{}", failures.join("\n"));
}
