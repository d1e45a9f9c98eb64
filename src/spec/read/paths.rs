//! Path items and their operations: `$ref`s merged with their siblings, the fixed methods, 3.2's
//! `query` and `additionalOperations`, and the parameters an operation inherits.

use serde_json::{Map, Value};

use super::reader::{METHODS, POLICIES, RATE_LIMIT, Reader, describe, is_token_byte};
use crate::spec::model::*;
use crate::spec::pointer::{self, push, push_index};

impl Reader<'_> {
    pub(super) fn path_item(&mut self, key: &str, value: &Value, at: &str, version: Version) -> Option<PathItem> {
        // A path item may be a `$ref` with sibling fields; the siblings win.
        let mut merged: Map<String, Value>;
        let (fields, ops_at): (&Map<String, Value>, String) = match value.get("$ref").and_then(Value::as_str) {
            Some(reference) => match pointer::resolve(self.root, reference) {
                Ok((target, target_at)) => {
                    let Some(target) = target.as_object() else {
                        self.error(
                            push(at, "$ref"),
                            format!("$ref {reference} points at {}, not a path item", describe(target)),
                        );
                        return None;
                    };
                    merged = target.clone();
                    for (k, v) in value.as_object().into_iter().flatten() {
                        if k != "$ref" {
                            merged.insert(k.clone(), v.clone());
                        }
                    }
                    let only_ref = value.as_object().is_some_and(|m| m.len() == 1);
                    (&merged, if only_ref { target_at } else { at.to_string() })
                }
                Err(e) => {
                    self.error(push(at, "$ref"), e.to_string());
                    return None;
                }
            },
            None => match value.as_object() {
                Some(m) => (m, at.to_string()),
                None => {
                    if !value.is_null() {
                        self.warning(at, format!("path item {key} is {}, not a map; ignored", describe(value)));
                    }
                    return None;
                }
            },
        };

        if !key.starts_with('/') {
            self.warning(at, format!("path {key} does not start with `/`; read as /{key}"));
        }
        let base_paths = if version == Version::Swagger2 {
            None
        } else {
            self.servers(fields.get("servers"), &push(&ops_at, "servers"))
        };
        let shared_parameters = self.parameters(fields.get("parameters"), &push(&ops_at, "parameters"));
        self.misplaced_key_in(fields, &ops_at, "on a path item");
        self.near_misses(fields, &ops_at);

        let mut operations = Vec::new();
        // In the order written, so listings follow the spec.
        for (method, op) in fields.iter().filter(|(k, _)| METHODS.contains(&k.as_str())) {
            let method = method.as_str();
            if method == "query" && version < Version::OpenApi32 {
                self.warning(push(&ops_at, method), "the `query` method needs OpenAPI 3.2; this operation is ignored");
                continue;
            }
            let op_at = push(&ops_at, method);
            if let Some(op) = self.operation(method.to_ascii_uppercase(), op, &op_at, &shared_parameters, version) {
                operations.push(op);
            }
        }
        if let Some(extra) = fields.get("additionalOperations") {
            let extra_at = push(&ops_at, "additionalOperations");
            match extra.as_object() {
                Some(map) if version >= Version::OpenApi32 => {
                    for (method, op) in map {
                        let op_at = push(&extra_at, method);
                        if method.is_empty() || !method.bytes().all(is_token_byte) {
                            self.error(
                                &op_at,
                                format!("additionalOperations key {method:?} is not an HTTP method name"),
                            );
                            continue;
                        }
                        if METHODS.contains(&method.to_ascii_lowercase().as_str()) {
                            self.warning(&op_at, format!("{method} belongs in the path item itself, not in additionalOperations; ignored here"));
                            continue;
                        }
                        if let Some(op) = self.operation(method.clone(), op, &op_at, &shared_parameters, version) {
                            operations.push(op);
                        }
                    }
                }
                Some(_) => self.warning(&extra_at, "additionalOperations needs OpenAPI 3.2; ignored"),
                None => {
                    self.warning(&extra_at, "additionalOperations should be a map from method to operation; ignored")
                }
            }
        }
        Some(PathItem { key: key.to_string(), pointer: at.to_string(), base_paths, operations })
    }

    fn operation(
        &mut self,
        method: String,
        value: &Value,
        at: &str,
        shared: &[Parameter],
        version: Version,
    ) -> Option<Operation> {
        let Some(fields) = value.as_object() else {
            if !value.is_null() {
                self.warning(at, format!("operation is {}, not a map; ignored", describe(value)));
            }
            return None;
        };
        let operation_id = match fields.get("operationId") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(other) => {
                self.warning(
                    push(at, "operationId"),
                    format!("operationId should be a non-empty string, found {}; ignored", describe(other)),
                );
                None
            }
        };
        let base_paths =
            if version == Version::Swagger2 { None } else { self.servers(fields.get("servers"), &push(at, "servers")) };
        let security = self.security(fields.get("security"), &push(at, "security"));
        let own = self.parameters(fields.get("parameters"), &push(at, "parameters"));
        let mut parameters: Vec<Parameter> = shared
            .iter()
            .filter(|p| !own.iter().any(|o| o.name == p.name && o.location == p.location))
            .cloned()
            .collect();
        parameters.extend(own);
        if fields.contains_key(POLICIES) {
            self.misplaced_key(POLICIES, &push(at, POLICIES), "on an operation");
        }
        self.near_misses(fields, at);
        for child in ["requestBody", "responses", "callbacks", "externalDocs"] {
            if let Some(Value::Object(m)) = fields.get(child) {
                let child_at = push(at, child);
                self.misplaced_key_in(m, &child_at, &format!("in `{child}`"));
                if child == "responses" || child == "callbacks" {
                    for (k, v) in m {
                        if let Some(inner) = v.as_object() {
                            self.misplaced_key_in(inner, &push(&child_at, k), &format!("in `{child}`"));
                        }
                    }
                }
                if child == "callbacks" {
                    for (name, cb) in m {
                        for (expr, item) in cb.as_object().into_iter().flatten() {
                            self.scan_outgoing(item, &push(&push(&child_at, name), expr), "a callback");
                        }
                    }
                }
            }
        }
        let rate_limit = fields.get(RATE_LIMIT).map(|v| Located { pointer: push(at, RATE_LIMIT), value: v.clone() });
        // Tags that are not strings are none of ours; schema validators report them.
        let tags = fields
            .get("tags")
            .and_then(Value::as_array)
            .map(|t| t.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let body_media_types = match (version, fields.get("requestBody")) {
            (Version::Swagger2, _) => None,
            (_, None) => Some(Vec::new()),
            (_, Some(body)) => self.follow(body, &push(at, "requestBody")).and_then(|b| b.get("content")).map(|c| {
                let types = c.as_object().into_iter().flat_map(|m| m.keys());
                types.map(|t| t.split(';').next().unwrap_or("").trim().to_ascii_lowercase()).collect()
            }),
        };
        Some(Operation {
            method,
            operation_id,
            pointer: at.to_string(),
            base_paths,
            security,
            parameters,
            rate_limit,
            tags,
            body_media_types,
        })
    }

    fn parameters(&mut self, value: Option<&Value>, at: &str) -> Vec<Parameter> {
        let Some(list) = value.and_then(Value::as_array) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, p) in list.iter().enumerate() {
            let here = push_index(at, i);
            let Some(p) = self.follow(p, &here) else {
                continue;
            };
            if let Some(m) = p.as_object() {
                self.misplaced_key_in(m, &here, "on a parameter");
            }
            let (Some(name), Some(location)) =
                (p.get("name").and_then(Value::as_str), p.get("in").and_then(Value::as_str))
            else {
                continue;
            };
            let location = match location {
                "path" => ParameterIn::Path,
                "query" => ParameterIn::Query,
                "header" => ParameterIn::Header,
                "cookie" => ParameterIn::Cookie,
                _ => ParameterIn::Other,
            };
            out.push(Parameter { name: name.to_string(), location });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::read::read;
    use serde_json::json;

    #[test]
    fn path_item_refs_and_methods() {
        let doc = json!({
            "openapi": "3.2.0",
            "paths": {
                "/a": {"$ref": "#/components/pathItems/A"},
                "/b": {"query": {"operationId": "q"}, "additionalOperations": {"COPY": {}}}
            },
            "components": {"pathItems": {"A": {"get": {"operationId": "a"}}}}
        });
        let (d, findings) = read(&doc);
        assert!(findings.is_empty(), "{findings:?}");
        let d = d.unwrap();
        assert_eq!(d.path_items[0].operations[0].pointer, "/components/pathItems/A/get");
        let methods: Vec<_> = d.path_items[1].operations.iter().map(|o| o.method.as_str()).collect();
        assert_eq!(methods, ["QUERY", "COPY"]);
    }
}
