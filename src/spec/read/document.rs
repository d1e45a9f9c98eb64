//! The top of a document: which version it declares, and the bounds written there (route
//! bounds, named policies, and tags' bounds).

use serde_json::{Map, Value};

use super::reader::{POLICIES, RATE_LIMIT, Reader, describe, scalar_text};
use super::servers::swagger_base_path;
use crate::spec::model::*;
use crate::spec::pointer::{push, push_index};

impl Reader<'_> {
    pub(super) fn document(&mut self) -> Option<Document> {
        let Some(root) = self.root.as_object() else {
            self.error("", format!("a spec must be a map at the top, found {}", describe(self.root)));
            return None;
        };
        let version = self.version(root)?;
        let base_paths = if version == Version::Swagger2 {
            vec![swagger_base_path(root.get("basePath"))]
        } else {
            self.servers(root.get("servers"), "/servers").unwrap_or_else(|| vec!["/".to_string()])
        };
        let security = self.security(root.get("security"), "/security");
        let security_schemes = self.security_schemes(root, version);
        let route_bounds = root.get(RATE_LIMIT).map(|v| Located { pointer: push("", RATE_LIMIT), value: v.clone() });
        let policies = self.policies(root.get(POLICIES));
        let tag_bounds = self.tag_bounds(root.get("tags"));
        self.near_misses(root, "");

        let mut path_items = Vec::new();
        match root.get("paths") {
            None | Some(Value::Null) => {}
            Some(Value::Object(paths)) => {
                for (key, value) in paths {
                    let at = push("/paths", key);
                    if key.starts_with("x-") {
                        self.misplaced_key(key, &at, "inside `paths`");
                        continue;
                    }
                    if let Some(item) = self.path_item(key, value, &at, version) {
                        path_items.push(item);
                    }
                }
            }
            Some(other) => {
                self.error("/paths", format!("`paths` must be a map of path templates, found {}", describe(other)))
            }
        }
        self.scan_elsewhere(root, version);

        Some(Document {
            version,
            base_paths,
            path_items,
            security,
            security_schemes,
            route_bounds,
            policies,
            tag_bounds,
        })
    }

    /// The `x-rate-limit` of each entry of the top-level `tags` that has one.
    fn tag_bounds(&mut self, tags: Option<&Value>) -> Vec<(String, Located<Value>)> {
        let mut out: Vec<(String, Located<Value>)> = Vec::new();
        for (i, tag) in tags.and_then(Value::as_array).into_iter().flatten().enumerate() {
            let at = push_index("/tags", i);
            let Some(fields) = tag.as_object() else { continue };
            let Some(value) = fields.get(RATE_LIMIT) else { continue };
            let Some(name) = fields.get("name").and_then(Value::as_str) else {
                self.error(
                    push(&at, "name"),
                    "a tag with x-rate-limit needs a name, which operations list in their `tags`",
                );
                continue;
            };
            if let Some((_, first)) = out.iter().find(|(n, _)| n == name) {
                let message = format!(
                    "tag {name} has x-rate-limit twice (the other is at {}); write its bounds once",
                    first.pointer
                );
                self.error(push(&at, RATE_LIMIT), message);
                continue;
            }
            out.push((name.to_string(), Located { pointer: push(&at, RATE_LIMIT), value: value.clone() }));
        }
        out
    }

    fn version(&mut self, root: &Map<String, Value>) -> Option<Version> {
        if let Some(v) = root.get("openapi") {
            let text = scalar_text(v);
            let version = match text.as_deref() {
                Some(t) if t == "3" || t.starts_with("3.0") => Some(Version::OpenApi30),
                Some(t) if t.starts_with("3.1") => Some(Version::OpenApi31),
                Some(t) if t.starts_with("3.2") => Some(Version::OpenApi32),
                _ => None,
            };
            if version.is_none() {
                let shown = text.unwrap_or_else(|| describe(v));
                self.error("/openapi", format!("openapi version {shown} is not supported; opbound reads Swagger 2.0 and OpenAPI 3.0, 3.1 and 3.2"));
            }
            return version;
        }
        if let Some(v) = root.get("swagger") {
            let text = scalar_text(v);
            if text.as_deref().is_some_and(|t| t == "2.0" || t == "2") {
                return Some(Version::Swagger2);
            }
            let shown = text.unwrap_or_else(|| describe(v));
            self.error(
                "/swagger",
                format!(
                    "swagger version {shown} is not supported; opbound reads Swagger 2.0 and OpenAPI 3.0, 3.1 and 3.2"
                ),
            );
            return None;
        }
        self.error("", "not an OpenAPI document: it has neither `openapi` nor `swagger` at the top");
        None
    }

    fn policies(&mut self, value: Option<&Value>) -> Vec<(String, Located<Value>)> {
        let at = push("", POLICIES);
        match value {
            None => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(name, v)| (name.clone(), Located { pointer: push(&at, name), value: v.clone() }))
                .collect(),
            Some(other) => {
                self.error(
                    at,
                    format!("x-rate-limit-policies must be a map from policy name to bound, found {}", describe(other)),
                );
                Vec::new()
            }
        }
    }
}
