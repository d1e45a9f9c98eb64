//! Reads the tolerant model out of a parsed document: paths, operations, servers, security and
//! the rate-limit extensions, following local `$ref`s. Every problem becomes a finding.

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::model::*;
use super::pointer::{self, push, push_index};
use crate::finding::Finding;
use crate::suggest;

/// The extension holding bounds.
pub const RATE_LIMIT: &str = "x-rate-limit";
/// The extension holding named bounds.
pub const POLICIES: &str = "x-rate-limit-policies";

const METHODS: [&str; 9] = ["get", "put", "post", "delete", "options", "head", "patch", "trace", "query"];

/// Reads the document. `None` only when it is not an OpenAPI document at all.
pub fn read(root: &Value) -> (Option<Document>, Vec<Finding>) {
    let mut reader = Reader { root, findings: Vec::new() };
    let document = reader.document();
    (document, reader.findings)
}

struct Reader<'a> {
    root: &'a Value,
    findings: Vec<Finding>,
}

impl<'a> Reader<'a> {
    fn error(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding::error(pointer, message));
    }

    fn warning(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding::warning(pointer, message));
    }

    fn document(&mut self) -> Option<Document> {
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

    /// Base paths of a `servers` list; `None` when absent or empty.
    fn servers(&mut self, value: Option<&Value>, at: &str) -> Option<Vec<String>> {
        let list = match value? {
            Value::Array(list) => list,
            Value::Null => return None,
            other => {
                self.warning(at, format!("`servers` should be a list, found {}; ignored", describe(other)));
                return None;
            }
        };
        let mut out: Vec<String> = Vec::new();
        for (i, server) in list.iter().enumerate() {
            let Some(url) = server.get("url").and_then(Value::as_str) else {
                self.warning(push_index(at, i), "server has no `url`; ignored");
                continue;
            };
            let url = substitute_variables(url, server.get("variables"));
            let base = server_base_path(&url);
            if !out.contains(&base) {
                out.push(base);
            }
        }
        (!out.is_empty()).then_some(out)
    }

    fn security(&mut self, value: Option<&Value>, at: &str) -> Option<Vec<Requirement>> {
        let list = value?.as_array().or_else(|| {
            self.warning(at, "`security` should be a list of requirements; ignored");
            None
        })?;
        Some(
            list.iter()
                .map(|req| Requirement(req.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()))
                .collect(),
        )
    }

    fn security_schemes(&mut self, root: &Map<String, Value>, version: Version) -> IndexMap<String, SecurityScheme> {
        let (map, at) = if version == Version::Swagger2 {
            (root.get("securityDefinitions"), "/securityDefinitions".to_string())
        } else {
            (root.get("components").and_then(|c| c.get("securitySchemes")), "/components/securitySchemes".to_string())
        };
        let mut out = IndexMap::new();
        let Some(map) = map.and_then(Value::as_object) else {
            return out;
        };
        for (name, value) in map {
            let here = push(&at, name);
            let Some(value) = self.follow(value, &here) else {
                continue;
            };
            out.insert(name.clone(), security_scheme(value));
        }
        out
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

    /// Follows a `$ref` if the value is one; reports a broken reference and returns `None`.
    fn follow<'v>(&mut self, value: &'v Value, at: &str) -> Option<&'v Value>
    where
        'a: 'v,
    {
        match value.get("$ref").and_then(Value::as_str) {
            None => Some(value),
            Some(reference) => match pointer::resolve(self.root, reference) {
                Ok((target, _)) => Some(target),
                Err(e) => {
                    self.error(push(at, "$ref"), e.to_string());
                    None
                }
            },
        }
    }

    fn path_item(&mut self, key: &str, value: &Value, at: &str, version: Version) -> Option<PathItem> {
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
        Some(Operation {
            method,
            operation_id,
            pointer: at.to_string(),
            base_paths,
            security,
            parameters,
            rate_limit,
            tags,
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

    /// Looks for the rate-limit extensions where they have no effect, so they do not sit there
    /// silently: components, info, servers, webhooks (and the policies map on tags).
    fn scan_elsewhere(&mut self, root: &Map<String, Value>, version: Version) {
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
    fn scan_outgoing(&mut self, item: &Value, at: &str, what: &str) {
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

    fn misplaced_key_in(&mut self, fields: &Map<String, Value>, at: &str, where_: &str) {
        for key in [RATE_LIMIT, POLICIES] {
            if fields.contains_key(key) {
                self.misplaced_key(key, &push(at, key), where_);
            }
        }
    }

    fn misplaced_key(&mut self, key: &str, at: &str, where_: &str) {
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
    fn near_misses(&mut self, fields: &Map<String, Value>, at: &str) {
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

fn security_scheme(value: &Value) -> SecurityScheme {
    let text = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or("");
    match text("type") {
        "apiKey" => {
            let location = match text("in") {
                "header" => ParameterIn::Header,
                "query" => ParameterIn::Query,
                "cookie" => ParameterIn::Cookie,
                _ => ParameterIn::Other,
            };
            if location == ParameterIn::Other || text("name").is_empty() {
                SecurityScheme::Opaque
            } else {
                SecurityScheme::ApiKey { name: text("name").to_string(), location }
            }
        }
        "http" => SecurityScheme::Authorization { scheme: text("scheme").to_ascii_lowercase() },
        "basic" => SecurityScheme::Authorization { scheme: "basic".to_string() },
        "oauth2" | "openIdConnect" => SecurityScheme::Authorization { scheme: "bearer".to_string() },
        _ => SecurityScheme::Opaque,
    }
}

fn swagger_base_path(value: Option<&Value>) -> String {
    match value.and_then(Value::as_str) {
        Some(p) if !p.is_empty() => normalize_base(p),
        _ => "/".to_string(),
    }
}

/// Replaces `{name}` in a server URL with the variable's default.
fn substitute_variables(url: &str, variables: Option<&Value>) -> String {
    if !url.contains('{') {
        return url.to_string();
    }
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let name = &rest[open + 1..open + close];
        match variables.and_then(|v| v.get(name)).and_then(|v| v.get("default")).and_then(scalar_text) {
            Some(default) => out.push_str(&default),
            // No default: keep the template so the segment routes as a parameter.
            None => out.push_str(&rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// The path part of a server URL: absolute (`https://h/v1`), scheme-relative (`//h/v1`) or
/// relative (`/v1`, `v1`).
pub fn server_base_path(url: &str) -> String {
    let without_scheme = match url.find("://") {
        Some(i) if url[..i].bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) => Some(&url[i + 3..]),
        _ => url.strip_prefix("//"),
    };
    let path = match without_scheme {
        Some(rest) => rest.find('/').map_or("", |i| &rest[i..]),
        None => url,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    normalize_base(path)
}

/// A base path with one leading slash and no trailing slash (`/` for none).
fn normalize_base(path: &str) -> String {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        "/".to_string()
    } else {
        format!("/{}", trimmed.strip_prefix("./").unwrap_or(trimmed))
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A short description of a value's type for messages.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a map".to_string(),
    }
}

pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_urls_give_base_paths() {
        for (url, want) in [
            ("https://api.stripe.com/", "/"),
            ("https://api.box.com/2.0", "/2.0"),
            ("//kubernetes.local", "/"),
            ("/v2", "/v2"),
            ("v2/", "/v2"),
            ("http://h:8080/a/b/?x=1", "/a/b"),
            (".", "/"),
        ] {
            assert_eq!(server_base_path(url), want, "{url}");
        }
        let vars = json!({"name": {"default": "demo"}, "basePath": {"default": "v2"}});
        assert_eq!(
            server_base_path(&substitute_variables("https://{name}.example.com:443/{basePath}", Some(&vars))),
            "/v2"
        );
    }

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
