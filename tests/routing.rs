//! Requests against the routing fixtures: which operation each method and target reaches.

use std::path::Path;

use opbound::router::canonical::{EscapedSlashes, canonical_path};
use opbound::{Options, Policy};
use serde_json::Value;

fn load(fixture: &str) -> Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture);
    match opbound::load(&path, &Options::default()) {
        Ok(l) => l.policy,
        Err(e) => panic!("{fixture} does not load: {e:?}"),
    }
}

/// The operation id a request reaches, or `None`.
fn reach(policy: &Policy, method: &str, target: &str) -> Option<String> {
    let path = target.split('?').next().unwrap();
    let canonical = canonical_path(path, EscapedSlashes::Keep).unwrap_or_else(|e| panic!("{target}: {e}"));
    policy.route(method, &canonical).map(|op| policy.operations[op].id.clone())
}

const HAZARDS: &[(&str, &str, Option<&str>)] = &[
    // Both base paths, from server variables and from a relative server.
    ("GET", "/v1/pets/7", Some("getPet")),
    ("GET", "/v2/pets/7", Some("getPet")),
    ("GET", "/pets/7", None),
    ("DELETE", "/v1/pets/7", Some("deletePet")),
    // Parameter names differ at the same position.
    ("GET", "/v1/pets/7/photos", Some("listPhotos")),
    // Static beats parameter.
    ("GET", "/v1/pets/mine", Some("myPets")),
    ("DELETE", "/v1/pets/mine", None),
    // HEAD falls back to GET.
    ("HEAD", "/v1/pets/mine", Some("myPets")),
    ("HEAD", "/v1/pets/7", Some("getPet")),
    // Parameters inside a segment.
    ("GET", "/v1/files/report.json", Some("fileJson")),
    ("GET", "/v1/files/report.csv", Some("file")),
    ("GET", "/v1/files/.json", Some("file")),
    ("POST", "/v1/operations/op-9:cancel", Some("cancelOperation")),
    ("GET", "/v1/operations/op-9", Some("getOperation")),
    ("POST", "/v1/operations/op-9", None),
    // Several parameters in one segment.
    ("GET", "/v1/compare/main...feature", Some("compare")),
    ("GET", "/v1/compare/main", Some("compareOne")),
    ("GET", "/v1/compare/...feature", Some("compareOne")),
    // `?` and `#` keys collide with the plain path; the plain one keeps the route.
    ("GET", "/v1/search?type=user", Some("search")),
    ("GET", "/v1/items/3", Some("getItem")),
    // Trailing slashes.
    ("GET", "/v1/apis/", Some("listApis")),
    ("GET", "/v1/apis", None),
    ("GET", "/v1/status/", Some("status")),
    ("GET", "/v1/status", Some("status")),
    // No operationId.
    ("PUT", "/v2/anonymous-ops", Some("PUT /anonymous-ops")),
    // Path- and operation-level servers replace the document's base paths.
    ("GET", "/internal/health", Some("health")),
    ("GET", "/v1/health", None),
    ("POST", "/api/v1/upload", Some("upload")),
    ("POST", "/v1/upload", None),
    // Spellings of one path reach the same operation.
    ("GET", "//v1//pets/./7", Some("getPet")),
    ("GET", "/v1/pets/x/../7", Some("getPet")),
    ("GET", "/v1/%70ets/mine", Some("myPets")),
    ("GET", "/v1/pets/%6Dine", Some("myPets")),
    // An encoded slash stays inside its segment.
    ("GET", "/v1/pets/a%2Fphotos", Some("getPet")),
];

#[test]
fn hazards() {
    let policy = load("fixtures/routing/hazards.yaml");
    let wrong: Vec<String> = HAZARDS
        .iter()
        .filter_map(|(method, target, want)| {
            let got = reach(&policy, method, target);
            (got.as_deref() != *want).then(|| format!("{method} {target}: expected {want:?}, got {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn swagger_oas32_and_refs() {
    let cases: &[(&str, &str, &str, Option<&str>)] = &[
        ("fixtures/routing/swagger2.yaml", "GET", "/v1.41/containers/abc/logs", Some("ContainerLogs")),
        ("fixtures/routing/swagger2.yaml", "GET", "/containers/abc/logs", None),
        ("fixtures/routing/oas32.yaml", "QUERY", "/records", Some("queryRecords")),
        ("fixtures/routing/oas32.yaml", "COPY", "/records", Some("copyRecords")),
        ("fixtures/routing/oas32.yaml", "PURGE", "/records", Some("PURGE /records")),
        ("fixtures/routing/oas32.yaml", "copy", "/records", None),
        ("fixtures/routing/refs.yaml", "GET", "/pets/1", Some("getPetByRef")),
        ("fixtures/routing/refs.yaml", "GET", "/animals/1", Some("getPetByRef")),
        ("fixtures/routing/refs.yaml", "GET", "/pets", Some("listPets")),
    ];
    for (fixture, method, target, want) in cases {
        let policy = load(fixture);
        assert_eq!(reach(&policy, method, target).as_deref(), *want, "{fixture}: {method} {target}");
    }
}

#[test]
fn refs_and_merge_keys_compile_as_written() {
    let policy = load("fixtures/routing/refs.yaml");
    let strict = policy.bounds.iter().find(|b| b.id == "policy:strict").expect("strict is used");
    assert_eq!(strict.def.limit.get(), 2, "the map's own limit wins over the merged one");
    assert_eq!(strict.def.per.to_string(), "address", "per comes from the merge key");
    let list = policy.operations.iter().find(|o| o.id == "listPets").unwrap();
    // The security scheme was a $ref to an API key in the query.
    assert_eq!(list.credentials, [opbound::policy::Credential::Query("api_key".into())]);
}

/// Reverses the order of every map in a document.
fn reversed(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().rev().map(|(k, v)| (k.clone(), reversed(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

#[test]
fn routing_does_not_depend_on_key_order() {
    for fixture in ["fixtures/routing/hazards.yaml", "fixtures/check/warn-clashes.yaml"] {
        let source = opbound::spec::Source::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture)).unwrap();
        let value = source.parse().unwrap();
        let forward = opbound::policy::compile(&value, &Options::default()).unwrap();
        let backward = opbound::policy::compile(&reversed(&value), &Options::default()).unwrap();
        let mut requests: Vec<(&str, String)> = HAZARDS.iter().map(|(m, t, _)| (*m, t.to_string())).collect();
        for op in &forward.operations {
            for path in &op.paths {
                requests.push((op.method.as_str(), path.replace('{', "x").replace('}', "")));
            }
        }
        for (method, target) in requests {
            assert_eq!(
                reach(&forward, method, &target),
                reach(&backward, method, &target),
                "{fixture}: {method} {target}"
            );
        }
        let mut a: Vec<String> = forward.warnings.iter().map(|w| w.message.clone()).collect();
        let mut b: Vec<String> = backward.warnings.iter().map(|w| w.message.clone()).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "{fixture}: the same findings whatever the order");
    }
}
