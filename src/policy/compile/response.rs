//! Bounds settled from the response body, against the responses the operation declares: a
//! `settle` pointer that no success response's schema (its JSON body, or the events of its
//! `text/event-stream`) can hold is a term that always counts 0, usually a typo or a shape the
//! API does not answer in.

use serde_json::Value;

use super::Compiler;
use crate::finding::Finding;
use crate::policy::source::is_json;
use crate::policy::{BoundIndex, Operation, Settle};
use crate::spec::pointer::push;

/// How deep `$ref`s and compositions are followed before a schema is taken as holding anything.
const MAX_DEPTH: usize = 48;

impl Compiler {
    /// Warns for each term of a body-settled bound that none of the 2xx responses of the
    /// operations it is on can hold (`operations`: each one's pointer in `root`, id and bounds).
    /// Silent when they declare no schema for them: nothing is known.
    pub(super) fn settle_against_responses<'a>(
        &mut self,
        root: &Value,
        operations: impl Iterator<Item = (&'a str, &'a str, &'a [BoundIndex])> + Clone,
    ) {
        for (b, bound) in self.bounds.iter().enumerate() {
            let Some(Settle::Body(terms)) = &bound.def.counting.settle else { continue };
            let on: Vec<(&str, &str)> = operations
                .clone()
                .filter(|(.., bounds)| bounds.iter().any(|x| x.index() == b))
                .map(|(pointer, id, _)| (pointer, id))
                .collect();
            let schemas: Vec<(String, &Value)> =
                on.iter().flat_map(|(pointer, _)| success_schemas(root, pointer)).collect();
            if schemas.is_empty() {
                continue;
            }
            for term in terms {
                let tokens: Vec<String> =
                    term.pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
                if schemas.iter().any(|(_, schema)| holds(root, schema, &tokens, 0)) {
                    continue;
                }
                let mut declared: Vec<&str> = Vec::new();
                for (media, _) in &schemas {
                    if !declared.contains(&media.as_str()) {
                        declared.push(media);
                    }
                }
                let ids: Vec<&str> = on.iter().map(|(_, id)| *id).collect();
                let which = match ids.as_slice() {
                    [one] => format!("operation {one}"),
                    many => format!("operations {}", many.join(", ")),
                };
                self.findings.push(Finding::warning(
                    push(&bound.pointer, "settle"),
                    format!(
                        "bound {} settles from json:{}, which no success response of {which} declares (their {} \
                         schemas hold nothing there): that term will always count 0; check the pointer against the \
                         response the API sends",
                        bound.id,
                        term.pointer,
                        declared.join(" and ")
                    ),
                ));
            }
        }
    }
}

impl Compiler {
    /// Marks the operations where a stream's usage is asked for on the client's behalf: a bound
    /// on them (or a route bound) settles from the body, and their request declares
    /// `stream_options.include_usage`.
    pub(super) fn ask_usage(&self, root: &Value, operations: &mut [Operation], route_bounds: &[BoundIndex]) {
        let settled = |b: &BoundIndex| matches!(self.bounds[b.index()].def.counting.settle, Some(Settle::Body(_)));
        for op in operations {
            op.asks_usage = (op.bounds.iter().any(settled) || route_bounds.iter().any(settled))
                && takes_include_usage(root, &op.pointer);
        }
    }
}

/// The schemas of an operation's 2xx responses that a settle reads: JSON bodies and event
/// streams (OpenAPI 3.2's `itemSchema`, or the `schema` an event stream's content gives, as
/// OpenAI's document does), with their media types; Swagger 2.0's `schema`.
fn success_schemas<'a>(root: &'a Value, pointer: &str) -> Vec<(String, &'a Value)> {
    let mut out = Vec::new();
    let Some(responses) = root.pointer(pointer).and_then(|op| op.get("responses")).and_then(Value::as_object) else {
        return out;
    };
    for (status, response) in responses {
        if !(status.starts_with('2') || status.eq_ignore_ascii_case("2XX")) {
            continue;
        }
        let response = resolve(root, response, 0);
        if let Some(schema) = response.get("schema") {
            out.push(("JSON".to_string(), schema));
        }
        for (media, content) in response.get("content").and_then(Value::as_object).into_iter().flatten() {
            let media = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            let schema = if media == "text/event-stream" {
                content.get("itemSchema").or_else(|| content.get("schema"))
            } else if is_json(&media) {
                content.get("schema")
            } else {
                None
            };
            if let Some(schema) = schema {
                out.push((media, schema));
            }
        }
    }
    out
}

/// Whether the operation's JSON request body declares `stream_options.include_usage`: the API
/// takes it, so opbound may ask for a stream's usage on the client's behalf.
fn takes_include_usage(root: &Value, pointer: &str) -> bool {
    let Some(body) = root.pointer(pointer).and_then(|op| op.get("requestBody")) else { return false };
    let body = resolve(root, body, 0);
    let content = body.get("content").and_then(Value::as_object);
    let tokens = ["stream_options".to_string(), "include_usage".to_string()];
    content.into_iter().flatten().any(|(media, c)| {
        is_json(&media.to_ascii_lowercase()) && c.get("schema").is_some_and(|s| declares(root, s, &tokens, 0))
    })
}

/// Whether the schema declares a property at `tokens` by name (through `$ref`s and
/// compositions): what a schema merely leaves open does not count.
fn declares(root: &Value, schema: &Value, tokens: &[String], depth: usize) -> bool {
    let Some((first, rest)) = tokens.split_first() else { return true };
    if depth > MAX_DEPTH {
        return false;
    }
    let schema = resolve(root, schema, depth);
    if let Some(property) = schema.get("properties").and_then(|p| p.get(first.as_str())) {
        return declares(root, property, rest, depth + 1);
    }
    ["allOf", "anyOf", "oneOf"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_array))
        .flatten()
        .any(|branch| declares(root, branch, tokens, depth + 1))
}

/// A local `$ref` followed (several in a row at most [`MAX_DEPTH`]); anything else as it is.
fn resolve<'a>(root: &'a Value, node: &'a Value, depth: usize) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) {
        Some(target) if depth < MAX_DEPTH => root.pointer(target).map_or(node, |t| resolve(root, t, depth + 1)),
        _ => node,
    }
}

/// Whether a value the schema describes can hold something at `tokens`. Lenient: a schema that
/// does not say (no `properties`, a remote `$ref`, open `additionalProperties`) holds anything;
/// an object whose `properties` lack the key holds nothing there, as does a scalar.
fn holds(root: &Value, schema: &Value, tokens: &[String], depth: usize) -> bool {
    let Some((first, rest)) = tokens.split_first() else { return true };
    if depth > MAX_DEPTH {
        return true;
    }
    let schema = resolve(root, schema, depth);
    let Some(fields) = schema.as_object() else { return true };
    if fields.get("$ref").is_some_and(|r| r.as_str().is_some_and(|r| !r.starts_with('#'))) {
        return true;
    }
    let composed: Vec<&Value> =
        ["allOf", "anyOf", "oneOf"].iter().filter_map(|k| fields.get(*k).and_then(Value::as_array)).flatten().collect();
    if composed.iter().any(|branch| holds(root, branch, tokens, depth + 1)) {
        return true;
    }
    if let Some(property) = fields.get("properties").and_then(|p| p.get(first.as_str())) {
        return holds(root, property, rest, depth + 1);
    }
    if let Ok(index) = first.parse::<usize>() {
        let item = fields.get("prefixItems").and_then(|p| p.get(index)).or_else(|| fields.get("items"));
        if let Some(item) = item {
            return holds(root, item, rest, depth + 1);
        }
    }
    if fields.contains_key("patternProperties") {
        return true;
    }
    match fields.get("additionalProperties") {
        Some(Value::Bool(false)) => return false,
        Some(extra @ Value::Object(_)) => return holds(root, extra, rest, depth + 1),
        Some(_) => return true,
        None => {}
    }
    let described = fields.contains_key("properties") || fields.contains_key("items") || !composed.is_empty();
    let scalar = fields.get("type").and_then(Value::as_str).is_some_and(|t| !matches!(t, "object" | "array"));
    // Declared without the key, or a scalar: nothing there. An open object or array: anything.
    !(described || scalar)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::holds;

    fn tokens(p: &str) -> Vec<String> {
        p.split('/').skip(1).map(str::to_string).collect()
    }

    #[test]
    fn schemas_hold_what_they_declare_and_whatever_they_leave_open() {
        let root = json!({"components": {"schemas": {
            "Usage": {"type": "object", "properties": {"total_tokens": {"type": "integer"}}},
            "Chat": {"type": "object", "properties": {"usage": {"$ref": "#/components/schemas/Usage"}, "choices": {"type": "array", "items": {"type": "object", "properties": {"index": {"type": "integer"}}}}}},
            "Event": {"oneOf": [{"$ref": "#/components/schemas/Chat"}, {"type": "object", "properties": {"response": {"$ref": "#/components/schemas/Chat"}}}]},
            "Open": {"type": "object"},
            "Closed": {"type": "object", "properties": {"a": {}}, "additionalProperties": false}
        }}});
        let chat = json!({"$ref": "#/components/schemas/Chat"});
        assert!(holds(&root, &chat, &tokens("/usage/total_tokens"), 0));
        assert!(!holds(&root, &chat, &tokens("/usage/total_token"), 0), "a typo");
        assert!(!holds(&root, &chat, &tokens("/response/usage/total_tokens"), 0));
        assert!(holds(&root, &chat, &tokens("/choices/0/index"), 0));
        let event = json!({"$ref": "#/components/schemas/Event"});
        assert!(holds(&root, &event, &tokens("/response/usage/total_tokens"), 0), "one branch holds it");
        assert!(holds(&root, &json!({"$ref": "#/components/schemas/Open"}), &tokens("/x/y"), 0), "open");
        assert!(!holds(&root, &json!({"$ref": "#/components/schemas/Closed"}), &tokens("/b"), 0));
        assert!(!holds(&root, &json!({"type": "string"}), &tokens("/b"), 0), "a scalar");
        assert!(holds(&root, &json!({"$ref": "other.yaml#/X"}), &tokens("/b"), 0), "remote: unknown");
        let looped = json!({"components": {"schemas": {"L": {"$ref": "#/components/schemas/L"}}}});
        assert!(holds(&looped, &json!({"$ref": "#/components/schemas/L"}), &tokens("/a"), 0), "a loop ends");
    }
}
