//! Issue 53: OpenAPI Overlays. `opbound overlay` against openapi-format's applier (npm, installed
//! by `.ci/test`) over real specs from `../shared/specs/real`, compared as JSON; findings from an
//! overlay located in it; `serve --overlay` enforcing a limit its spec does not have.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use common::{Opbound, TempSpec, Upstream, get};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_opbound")
}

fn real(name: &str) -> Option<PathBuf> {
    Some(common::shared_specs()?.join("real").join(name))
}

/// A file's tree, JSON or YAML, as opbound reads it.
fn tree(path: &Path) -> Value {
    opbound::spec::Source::read(path).unwrap().parse().unwrap()
}

/// What openapi-format makes of the spec and overlay, both handed over as JSON.
fn reference(spec: &Value, overlay: &Value, dir: &TempSpec) -> Value {
    let spec_json = dir.dir().join("reference-spec.json");
    let overlay_json = dir.dir().join("reference-overlay.json");
    std::fs::write(&spec_json, spec.to_string()).unwrap();
    std::fs::write(&overlay_json, overlay.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/overlay/reference/apply.js");
    let out = Command::new(common::require("node")).arg(script).arg(&spec_json).arg(&overlay_json).output().unwrap();
    assert!(out.status.success(), "openapi-format: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("openapi-format printed JSON")
}

/// What `opbound overlay` makes of them, read back.
fn ours(spec: &Path, overlay: &Path, dir: &TempSpec) -> Value {
    let ext = spec.extension().unwrap().to_str().unwrap();
    let written = dir.dir().join(format!("ours.{ext}"));
    let out = Command::new(binary()).arg("overlay").arg(spec).arg(overlay).arg("-o").arg(&written).output().unwrap();
    assert!(out.status.success(), "opbound overlay: {}", String::from_utf8_lossy(&out.stderr));
    tree(&written)
}

/// The first pointer at which two trees differ.
fn difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: Vec<&String> = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => difference(p, q, &format!("{at}/{k}")),
                _ => Some(format!("{at}/{k}: present on one side only")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| difference(p, q, &format!("{at}/{i}")))
        }
        _ if a == b => None,
        _ => Some(format!("{at}: {} against {}", short(a), short(b))),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 { format!("{}...", &s[..120]) } else { s }
}

/// Overlays over real specs: update and remove, filters, wildcards, recursive descent, arrays,
/// a target that selects nothing, and 1.1 `copy`.
const CASES: &[(&str, &str, &str)] = &[
    (
        "a filter on operationId",
        "stripe.json",
        r#"
overlay: 1.0.0
info: {title: filter, version: '1'}
actions:
  - target: $.paths[*][?(@.operationId == 'PostCustomers')]
    update:
      x-rate-limit: {per: address, limit: 10, window: PT1M}
"#,
    ),
    (
        "every GET, by wildcard",
        "twilio-2010.json",
        r#"
overlay: 1.0.0
info: {title: wildcard, version: '1'}
actions:
  - target: $.paths.*.get
    update:
      x-rate-limit: {per: 'header:Authorization', limit: 100, window: PT1S}
      summary: limited
"#,
    ),
    (
        "remove a path and a server",
        "stripe.json",
        r#"
overlay: 1.0.0
info: {title: remove, version: '1'}
actions:
  - target: $.paths['/v1/customers']
    remove: true
  - target: $.servers[0]
    remove: true
"#,
    ),
    (
        "recursive descent",
        "kubernetes.json",
        r#"
overlay: 1.0.0
info: {title: descent, version: '1'}
actions:
  - target: $.paths..[?(@.operationId == 'listCoreV1Namespace')]
    update:
      x-rate-limit: {per: user, limit: 5, window: PT1S}
"#,
    ),
    (
        // 1.1: openapi-format appends one value to an array only for 1.1 documents, where the
        // specification says so for 1.0 too (and opbound does); the docs say so.
        "arrays appended to, and a document-level route bound",
        "openai-3.1.yaml",
        r#"
overlay: 1.1.0
info: {title: arrays, version: '1'}
actions:
  - target: $.tags
    update:
      - {name: limited, description: operations opbound bounds}
  - target: $.servers
    update: {url: 'http://127.0.0.1:8080'}
  - target: $
    update:
      x-rate-limit: {per: route, limit: 1000, window: PT1M}
"#,
    ),
    (
        "a target that selects nothing, then one that does",
        "slack.json",
        r#"
overlay: 1.0.0
info: {title: nothing, version: '1'}
actions:
  - target: $.paths['/no/such/path'].get
    update: {x-rate-limit: {per: route, limit: 1, window: PT1M}}
  - target: $.info
    update: {title: renamed}
"#,
    ),
    (
        "1.1 copy into a node made by the action before",
        "stripe.json",
        r#"
overlay: 1.1.0
info: {title: copy, version: '1'}
actions:
  - target: $.components.schemas
    update: {copied_customer: {}}
  - target: $.components.schemas['copied_customer']
    copy: $.components.schemas['customer']
"#,
    ),
];

#[test]
fn opbound_overlay_makes_the_document_openapi_format_makes() {
    let dir = TempSpec::new("overlay-differential", "");
    for (what, spec, overlay) in CASES {
        let Some(spec) = real(spec) else { return };
        let overlay_file = dir.dir().join("overlay.yaml");
        std::fs::write(&overlay_file, overlay).unwrap();
        let expected = reference(&tree(&spec), &tree(&overlay_file), &dir);
        let got = ours(&spec, &overlay_file, &dir);
        assert_ne!(got, tree(&spec), "{what}: the overlay changed nothing");
        if let Some(at) = difference(&got, &expected, "") {
            panic!("{what} ({}): opbound and openapi-format differ at {at}", spec.display());
        }
    }
}

#[test]
fn a_finding_about_a_bound_from_an_overlay_names_the_action_and_its_line() {
    let Some(spec) = real("stripe.json") else { return };
    let overlay = TempSpec::new(
        "overlay-finding",
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/v1/gone'].get\n    update: {x-rate-limit: {per: route, limit: 1, window: PT1M}}\n  - target: $.paths['/v1/customers'].get\n    update:\n      x-rate-limit: {per: route, limit: 5, window: PT0.5S}\n",
    );
    let out = Command::new(binary()).args(["check", "--overlay", overlay.arg()]).arg(&spec).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let file = overlay.arg();
    assert!(
        stderr.contains(&format!("/paths/~1v1~1customers/get/x-rate-limit/window in GET /v1/customers ({file}, action 2, line 6, column 5): window PT0.5S is below the minimum PT1S")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "warning: /actions/0/target ({file}, line 4, column 13): target $.paths['/v1/gone'].get selects nothing"
        )),
        "{stderr}"
    );
}

#[test]
fn bad_overlays_are_located_and_nothing_is_written() {
    let Some(spec) = real("stripe.json") else { return };
    for (text, says) in [
        (
            "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths[?@.x ==]\n    update: {}\n",
            "line 4",
        ),
        (
            "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths\n    updat: {}\n",
            "unknown field \"updat\"",
        ),
        ("overlay: 1.0.0\ninfo: {title: t, version: '1'\n", "cannot parse YAML"),
    ] {
        let overlay = TempSpec::new("overlay-bad", text);
        let written = overlay.dir().join("never.json");
        let out = Command::new(binary())
            .arg("overlay")
            .arg(&spec)
            .arg(overlay.arg())
            .arg("-o")
            .arg(&written)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(says) && !stderr.contains("panicked"), "{says}: {stderr}");
        assert!(!written.exists(), "nothing written for {says}");
    }
    let out = Command::new(binary()).arg("overlay").arg(&spec).arg("/nonexistent/overlay.yaml").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unreadable overlay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_enforces_a_limit_only_an_overlay_writes() {
    let spec = TempSpec::new(
        "overlay-serve.yaml",
        "openapi: 3.0.3\ninfo: {title: generated, version: '1'}\npaths:\n  /search:\n    get:\n      tags: [search]\n      responses: {'200': {description: ok}}\n  /items:\n    get:\n      responses: {'200': {description: ok}}\n",
    );
    let overlay = TempSpec::new(
        "overlay-serve-limits.yaml",
        "overlay: 1.0.0\ninfo: {title: limits, version: '1'}\nactions:\n  - target: $.paths[*][?(@.tags[0] == 'search')]\n    update:\n      x-rate-limit: {per: route, limit: 2, window: PT1H}\n",
    );
    let up = Upstream::start().await;
    let ob = Opbound::start(&["serve", "--spec", spec.arg(), "--overlay", overlay.arg(), "--upstream", &up.url()]);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get(ob.url("/search")).await.status);
    }
    assert_eq!(statuses, [200, 200, 429], "the overlay's bound holds");
    for _ in 0..3 {
        assert_eq!(get(ob.url("/items")).await.status, 200, "an operation the overlay does not select");
    }

    // A broken overlay is refused and the policy serving stays.
    std::fs::write(
        overlay.arg(),
        "overlay: 1.0.0\ninfo: {title: limits, version: '1'}\nactions:\n  - target: $.paths[\n    update: {}\n",
    )
    .unwrap();
    let refused = ob.logged_at_least("is not a JSONPath", 1);
    assert!(!refused.is_empty(), "the reload was refused: {:#?}", ob.logged("reload"));
    assert_eq!(get(ob.url("/search")).await.status, 429, "the old policy, its counts kept");

    // The overlay changes: the server reloads and its new bound holds.
    std::fs::write(
        overlay.arg(),
        "overlay: 1.0.0\ninfo: {title: limits, version: '2'}\nactions:\n  - target: $.paths['/items'].get\n    update:\n      x-rate-limit: {per: route, limit: 1, window: PT1H}\n",
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while get(ob.url("/items")).await.status != 429 {
        assert!(
            std::time::Instant::now() < deadline,
            "the changed overlay was never reloaded: {:#?}",
            ob.logged("reload")
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `suggest --as overlay`: the proposals alone, as an overlay that makes, with the spec, the same
/// bounds as the copy `suggest` writes otherwise (with and without `--replace`).
#[test]
fn suggest_as_overlay_makes_the_bounds_the_suggested_copy_has() {
    let dir = TempSpec::new("overlay-suggest", "");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/replay");
    let spec = fixtures.join("shop.yaml");
    let bounds = |policy: &opbound::Policy| -> Vec<(String, Vec<String>)> {
        let mut all: Vec<(String, Vec<String>)> = policy
            .operations
            .iter()
            .map(|o| (o.id.clone(), o.bounds.iter().map(|&b| policy.bounds[b].def.describe()).collect()))
            .collect();
        all.push(("route".into(), policy.route_bounds.iter().map(|&b| policy.bounds[b].def.describe()).collect()));
        all
    };
    for replace in [false, true] {
        let copy = dir.dir().join(format!("copy-{replace}.yaml"));
        let overlay = dir.dir().join(format!("proposals-{replace}.yaml"));
        for (out, written) in [(&copy, "spec"), (&overlay, "overlay")] {
            let mut command = Command::new(binary());
            command.arg("suggest").arg(&spec).arg(fixtures.join("shop.log"));
            command.args(["--field", "user=uid", "--as", written, "-o"]).arg(out);
            if replace {
                command.arg("--replace");
            }
            let done = command.output().unwrap();
            assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        }
        let suggested = opbound::load(&copy, &opbound::Options::default()).expect("the copy loads").policy;
        let options = opbound::Options { overlays: vec![overlay.clone()], ..opbound::Options::default() };
        let overlaid = opbound::load(&spec, &options).expect("the spec with the overlay loads").policy;
        assert_eq!(bounds(&overlaid), bounds(&suggested), "replace: {replace}");
        assert!(bounds(&overlaid).iter().any(|(_, b)| !b.is_empty()));
        let size = std::fs::metadata(&overlay).unwrap().len();
        assert!(size < 4096, "{size} bytes: the proposals alone");
    }
}

/// `routes` and `explain` say where a bound was written: the overlay action, or beside overlays
/// the spec's file and line; a spec read alone says nothing of the kind.
#[test]
fn routes_and_explain_say_where_a_bound_was_written() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/book/overlays");
    let run = |args: &[&str]| {
        let out = Command::new(binary()).current_dir(&dir).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let routes = run(&["routes", "--overlay", "limits.yaml", "--spec", "api.yaml"]);
    assert!(routes.contains("search:0          10 per PT1S per address; from limits.yaml, action 1"), "{routes}");
    assert!(routes.contains("adminListUsers:0  5 per PT1M per address; from limits.yaml, action 3"), "{routes}");
    let explained = run(&["explain", "--overlay", "limits.yaml", "--spec", "api.yaml", "POST", "/items"]);
    assert!(explained.contains("(from limits.yaml, action 2)"), "{explained}");
    let json = run(&["explain", "--overlay", "limits.yaml", "--spec", "api.yaml", "POST", "/items", "--json"]);
    assert!(json.contains("\"written_by\": \"limits.yaml, action 2\""), "{json}");
    let plain = run(&[
        "routes",
        "--spec",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/petstore.yaml").display().to_string(),
    ]);
    assert!(!plain.contains("from "), "{plain}");

    // With an overlay, the spec's own bounds name their file and line beside the overlay's.
    let petstore = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/petstore.yaml").display().to_string();
    let limits = TempSpec::new(
        "written-at",
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/pets'].post\n    update: {x-rate-limit: {per: address, limit: 7, window: PT1M}}\n",
    );
    let mixed = run(&["routes", "--overlay", limits.arg(), "--spec", &petstore]);
    assert!(mixed.contains(&format!("listPets:0     5 per PT10S per address; from {petstore}, line 22")), "{mixed}");
    assert!(
        mixed.contains(&format!("createPets:0   7 per PT1M per address; from {}, action 1", limits.arg())),
        "{mixed}"
    );
    let json = run(&["explain", "--overlay", limits.arg(), "--spec", &petstore, "GET", "/v1/pets", "--json"]);
    assert!(json.contains(&format!("\"written_by\": \"{petstore}, line 11\"")), "the route bound: {json}");
}
