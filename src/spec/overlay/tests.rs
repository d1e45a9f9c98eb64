use std::path::Path;

use serde_json::json;

use super::*;

fn overlay(text: &str) -> Result<Overlay, Vec<Finding>> {
    Overlay::read(Source::from_text(Path::new("limits.yaml"), text.to_string()))
}

fn applied(spec: Value, text: &str) -> Result<(Value, Applied), Vec<Finding>> {
    let o = overlay(text)?;
    let (mut tree, mut applied) = (spec, Applied::default());
    o.apply(&mut tree, &mut applied)?;
    Ok((tree, applied))
}

fn spec() -> Value {
    json!({
        "openapi": "3.0.3",
        "tags": [{"name": "a"}],
        "paths": {
            "/search": {"get": {"tags": ["search"], "summary": "s"}},
            "/items": {"get": {"tags": ["items"]}, "post": {"tags": ["items"]}},
        }
    })
}

#[test]
fn a_pointer_becomes_the_json_path_of_the_same_node() {
    let tree = json!({"paths": {"/a/{b}": {"get": 1}, "it's": {"x": 2}}});
    for (at, value) in [("/paths/~1a~1{b}/get", 1), ("/paths/it's/x", 2)] {
        let path = JsonPath::parse(&json_path_of(at)).unwrap();
        assert_eq!(path.query(&tree).exactly_one().unwrap(), &json!(value), "{at}");
    }
    assert_eq!(json_path_of(""), "$");
}

#[test]
fn update_merges_objects_appends_to_arrays_and_replaces_primitives() {
    let (tree, applied) = applied(
        spec(),
        r#"
overlay: 1.0.0
info: {title: t, version: '1'}
actions:
  - target: $.paths[*][?(@.tags[0] == 'items')]
    update: {x-rate-limit: {per: address, limit: 5, window: PT1M}}
  - target: $.tags
    update: [{name: b}]
  - target: $.paths['/search'].get.summary
    update: searched
"#,
    )
    .unwrap();
    assert_eq!(tree["paths"]["/items"]["get"]["x-rate-limit"]["limit"], 5);
    assert_eq!(tree["paths"]["/items"]["post"]["x-rate-limit"]["limit"], 5);
    assert!(tree["paths"]["/search"]["get"].get("x-rate-limit").is_none());
    assert_eq!(tree["tags"], json!([{"name": "a"}, {"name": "b"}]));
    assert_eq!(tree["paths"]["/search"]["get"]["summary"], "searched");
    let origin = applied.origin_of("/paths/~1items/post/x-rate-limit/limit").unwrap();
    assert_eq!((origin.action.as_str(), origin.line, origin.column), ("limits.yaml, action 1", Some(5), Some(5)));
    assert!(applied.origin_of("/paths/~1items/post/tags").is_none(), "written by the spec");
}

#[test]
fn remove_takes_nodes_out_and_later_items_first() {
    let mut spec = spec();
    spec["tags"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
    let (tree, _) = applied(
        spec,
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.tags[0,2]\n    remove: true\n  - target: $.paths['/search']\n    remove: true\n",
    )
    .unwrap();
    assert_eq!(tree["tags"], json!([{"name": "b"}]));
    assert!(tree["paths"].get("/search").is_none());
}

#[test]
fn copy_is_overlay_1_1_and_takes_exactly_one_node() {
    let text = "overlay: 1.1.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/search'].get\n    copy: $.paths['/items'].get\n";
    let (tree, _) = applied(spec(), text).unwrap();
    assert_eq!(tree["paths"]["/search"]["get"]["tags"], json!(["search", "items"]), "arrays appended to");
    let errors = overlay(&text.replace("1.1.0", "1.0.0")).unwrap_err();
    assert!(errors[0].message.contains("Overlay 1.1"), "{errors:?}");
    let errors = applied(spec(), &text.replace("$.paths['/items'].get", "$.paths[*].get")).unwrap_err();
    assert!(errors[0].to_string().contains("selects 2 nodes"), "{}", errors[0]);
    assert_eq!(errors[0].file.as_deref(), Some("limits.yaml"));
    assert_eq!(errors[0].line, Some(5));
}

#[test]
fn a_target_that_selects_nothing_is_a_located_warning() {
    let (_, applied) = applied(
        spec(),
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/gone'].get\n    update: {x: 1}\n",
    )
    .unwrap();
    let w = &applied.warnings[0];
    assert!(!w.is_error() && w.message.contains("selects nothing"), "{w}");
    assert_eq!((w.file.as_deref(), w.line, w.column), (Some("limits.yaml"), Some(4), Some(13)));
}

#[test]
fn bad_overlays_are_located_errors() {
    let cases = [
        (
            "overlay: 2.0.0\ninfo: {title: t, version: '1'}\nactions: [{target: $, update: {}}]\n",
            "not 1.0.x or 1.1.x",
            1,
        ),
        (
            "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths\n    updte: {}\n",
            "unknown field \"updte\"",
            5,
        ),
        (
            "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths[?@.x ==]\n    update: {}\n",
            "is not a JSONPath",
            4,
        ),
        (
            "overlay: 1.0.0\ninfo: {title: t}\nactions:\n  - target: $.paths\n    update: {}\n",
            "info needs a version",
            2,
        ),
        ("overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions: []\n", "actions is empty", 3),
        ("overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths\n", "does nothing", 4),
        ("overlay: 1.0.0\ninfo: {title: t, version: '1'\n", "cannot parse YAML", 3),
    ];
    for (text, says, line) in cases {
        let errors = overlay(text).unwrap_err();
        assert!(errors.iter().any(|e| e.message.contains(says) && e.line == Some(line)), "{says}: {errors:#?}");
    }
}

#[test]
fn an_update_of_the_wrong_shape_is_an_error_at_the_action() {
    let errors = applied(
        spec(),
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/search'].get\n    update: just text\n",
    )
    .unwrap_err();
    assert!(errors[0].message.contains("selects an object"), "{}", errors[0]);
    assert_eq!(errors[0].line, Some(5));
}

/// Found by the fuzz target: a number an overlay writes came back from the JSON
/// `opbound overlay` writes as another (1.0666666666666665e39 read as ...666e39) until
/// serde_json parsed floats exactly.
#[test]
fn numbers_an_overlay_writes_read_back_the_same() {
    let (tree, _) = applied(
        spec(),
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/search'].get\n    update: {x-limit: 1.0666666666666665e39}\n",
    )
    .unwrap();
    let written = Source::render(&tree, crate::spec::Format::Json);
    let back = Source::from_text(Path::new("back.json"), written).parse().unwrap();
    assert_eq!(back, tree);
}

/// Issue 63: each action's position was found by a pass over the overlay's file, which made
/// applying one quadratic in its length. Now one pass places them all: the last writer of a node
/// or of a node above it is the action a finding there is blamed on, at its line.
#[test]
fn the_last_action_to_write_a_node_or_above_it_owns_it() {
    let (_, applied) = applied(
        spec(),
        r#"
overlay: 1.0.0
info: {title: t, version: '1'}
actions:
  - target: $.paths['/items'].get
    update: {x-rate-limit: {per: address, limit: 5, window: PT1M}}
  - target: $.paths['/items'].get['x-rate-limit']
    update: {limit: 6}
  - target: $.paths['/nowhere']
    update: {x: 1}
  - target: $.paths['/items'].post
    update: {summary: s}
"#,
    )
    .unwrap();
    let cases = [
        ("/paths/~1items/get/x-rate-limit/window", Some(("limits.yaml, action 1", 5))),
        ("/paths/~1items/get/x-rate-limit/limit", Some(("limits.yaml, action 2", 7))),
        ("/paths/~1items/get/x-rate-limit/limit/deeper", Some(("limits.yaml, action 2", 7))),
        ("/paths/~1items/post/summary", Some(("limits.yaml, action 4", 11))),
        ("/paths/~1items/post", None),
        ("/paths/~1items/get", None),
        ("/paths", None),
        ("", None),
    ];
    for (at, expected) in cases {
        let found = applied.origin_of(at).map(|o| (o.action.as_str(), o.line.unwrap()));
        assert_eq!(found, expected, "{at:?}");
    }
    let warnings: Vec<_> = applied.warnings.iter().map(|w| (w.line, w.column)).collect();
    assert_eq!(warnings, [(Some(9), Some(13))], "{:?}", applied.warnings);
}
