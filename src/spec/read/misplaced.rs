//! The rate-limit extensions where they mean nothing (components, info, servers, webhooks,
//! callbacks, ...), and extensions one typo away from ours.

use serde_json::{Map, Value};

use super::reader::{METHODS, POLICIES, RATE_LIMIT, Reader};
use crate::spec::model::Version;
use crate::spec::pointer::{push, push_index};
use crate::suggest;

impl Reader<'_> {
    /// Looks for the rate-limit extensions where they have no effect, so they do not sit there
    /// silently: components, info, servers, webhooks (and the policies map on tags).
    pub(super) fn scan_elsewhere(&mut self, root: &Map<String, Value>, version: Version) {
        for key in ["info", "externalDocs", "components"] {
            if let Some(Value::Object(m)) = root.get(key) {
                self.misplaced_key_in(m, &push("", key), &format!("in `{key}`"));
            }
        }
        for (i, item) in root.get("servers").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(m) = item.as_object() {
                self.misplaced_key_in(m, &push_index("/servers", i), "in `servers`");
            }
        }
        // A tag's x-rate-limit bounds its operations; only the policies map is misplaced there.
        for (i, item) in root.get("tags").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(m) = item.as_object()
                && m.contains_key(POLICIES)
            {
                self.misplaced_key(POLICIES, &push(&push_index("/tags", i), POLICIES), "in `tags`");
            }
        }
        // Reusable objects: an operation inside `components.pathItems` is read through the
        // `$ref` that uses it, so only the objects themselves are checked here.
        let groups: Vec<(&str, Option<&Value>)> = if version == Version::Swagger2 {
            ["definitions", "parameters", "responses", "securityDefinitions"]
                .iter()
                .map(|k| (*k, root.get(*k)))
                .collect()
        } else {
            let components = root.get("components");
            components
                .and_then(Value::as_object)
                .map(|c| c.keys().filter(|k| !k.starts_with("x-")).map(|k| (k.as_str(), c.get(k))).collect())
                .unwrap_or_default()
        };
        let base = if version == Version::Swagger2 { String::new() } else { "/components".to_string() };
        for (group, value) in groups {
            let Some(Value::Object(map)) = value else {
                continue;
            };
            for (name, item) in map {
                if let Some(m) = item.as_object() {
                    let here = push(&push(&base, group), name);
                    let what = if group == "pathItems" { "on a path item" } else { "in `components`" };
                    self.misplaced_key_in(m, &here, what);
                }
            }
        }
        if let Some(Value::Object(hooks)) = root.get("webhooks") {
            for (name, item) in hooks {
                self.scan_outgoing(item, &push("/webhooks", name), "a webhook");
            }
        }
    }

    /// Webhooks and callbacks are requests the API sends, so bounds there mean nothing.
    pub(super) fn scan_outgoing(&mut self, item: &Value, at: &str, what: &str) {
        let Some(m) = item.as_object() else { return };
        self.misplaced_key_in(m, at, &format!("on {what}"));
        for method in METHODS {
            if let Some(Value::Object(op)) = m.get(method)
                && (op.contains_key(RATE_LIMIT) || op.contains_key(POLICIES))
            {
                let key = if op.contains_key(RATE_LIMIT) { RATE_LIMIT } else { POLICIES };
                self.error(
                        push(&push(at, method), key),
                        format!("{key} is not allowed on {what}: those are requests your API sends, and opbound bounds the requests it receives; put it on an operation under `paths` or at the top of the document"),
                    );
            }
        }
    }

    pub(super) fn misplaced_key_in(&mut self, fields: &Map<String, Value>, at: &str, where_: &str) {
        for key in [RATE_LIMIT, POLICIES] {
            if fields.contains_key(key) {
                self.misplaced_key(key, &push(at, key), where_);
            }
        }
    }

    pub(super) fn misplaced_key(&mut self, key: &str, at: &str, where_: &str) {
        let message = if key == POLICIES {
            format!("x-rate-limit-policies is not allowed {where_}; it goes at the top of the document")
        } else if key == RATE_LIMIT {
            format!(
                "x-rate-limit is not allowed {where_}; it goes on an operation (get, post, ...) for that operation's own bounds, or at the top of the document for route bounds"
            )
        } else {
            return;
        };
        self.error(at, message);
    }

    /// Extensions one typo away from ours are almost certainly meant to be ours.
    pub(super) fn near_misses(&mut self, fields: &Map<String, Value>, at: &str) {
        for key in fields.keys() {
            if !key.starts_with("x-") || key == RATE_LIMIT || key == POLICIES {
                continue;
            }
            if let Some(meant) = suggest::closest(key, &[RATE_LIMIT, POLICIES]) {
                self.warning(push(at, key), format!("unknown extension {key} is ignored; did you mean {meant}?"));
            }
        }
    }
}
