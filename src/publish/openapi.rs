//! The spec itself, with every bound made visible the way OpenAPI tools read it: refusal
//! responses with their headers and problem schemas, and the bounds in words in descriptions.

use serde_json::{Map, Value, json};

use super::refusals::refusals;
use super::words;
use crate::engine::headers::HeaderStyle;
use crate::policy::{BoundIndex, Policy};
use crate::spec::{Format, Version};

/// Opens the paragraph added to an operation's description; a later run finds it by this and
/// writes it afresh, so documenting twice adds it once.
const OPERATION_MARK: &str = "**Rate limits** (opbound): ";
/// Opens the section added to `info.description`, found again the same way.
const INFO_MARK: &str = "## Rate limits (opbound)";

const RATE_LIMITED: &str = "OpboundRateLimited";
const BAD_REQUEST: &str = "OpboundBadRequest";
const COST_TOO_HIGH: &str = "OpboundCostTooHigh";

/// The spec `doc` (the tree `policy` was compiled from) with its bounds documented. Only adds:
/// responses, headers and schemas already declared are kept as written.
pub fn document(mut doc: Value, policy: &Policy, style: HeaderStyle) -> Value {
    let swagger = policy.version == Version::Swagger2;
    let mut used = Used::default();
    let mut seen = std::collections::HashSet::new();
    for (i, op) in policy.operations.iter().enumerate() {
        // Path items reached through one `$ref` from two keys hold one operation object.
        if !seen.insert(op.pointer.as_str()) {
            continue;
        }
        let r = refusals(policy, i);
        if !r.bounded {
            continue;
        }
        let sentence = operation_sentence(policy, &op.bounds, !policy.route_bounds.is_empty());
        let Some(object) = doc.pointer_mut(&op.pointer).and_then(Value::as_object_mut) else { continue };
        set_section(object, OPERATION_MARK, &sentence);
        let responses = object.entry("responses").or_insert_with(|| json!({}));
        let Some(responses) = responses.as_object_mut() else { continue };
        let rate_headers = rate_headers(style);
        for (status, response) in responses.iter_mut() {
            if status.starts_with('2') {
                add_headers(response, &rate_headers, swagger);
            }
        }
        let mut limited_headers = rate_headers.clone();
        limited_headers.push("Retry-After");
        for status in &r.limited {
            let described = format!("{}: a rate limit of this operation was reached; see Retry-After", reason(*status));
            add_response(responses, *status, &described, &limited_headers, RATE_LIMITED, swagger);
            used.rate_limited = true;
        }
        if r.bad_request {
            let described =
                "Bad Request: a key a rate limit counts by is missing or given twice, or a stated cost is not a count";
            add_response(responses, 400, described, &[], BAD_REQUEST, swagger);
            used.bad_request = true;
        }
        if r.too_large {
            let described = "Content Too Large: the request states a cost above what one request may take; split it";
            add_response(responses, 413, described, &[], COST_TOO_HIGH, swagger);
            used.too_large = true;
        }
        used.headers = true;
    }
    if let Some(section) = info_section(policy)
        && let Some(root) = doc.as_object_mut()
    {
        let info = root.entry("info").or_insert_with(|| json!({}));
        if let Some(info) = info.as_object_mut() {
            set_section(info, INFO_MARK, &section);
        }
    }
    add_components(&mut doc, &used, style, swagger);
    doc
}

/// The document as text in the syntax it was written in: JSON (pretty, key order kept) or YAML.
pub fn render(doc: &Value, format: Format) -> String {
    crate::spec::Source::render(doc, format)
}

/// Which shared definitions some operation refers to.
#[derive(Default)]
struct Used {
    headers: bool,
    rate_limited: bool,
    bad_request: bool,
    too_large: bool,
}

/// The operation's own bounds in words, and a pointer to the API-wide ones.
fn operation_sentence(policy: &Policy, own: &[BoundIndex], route_bounds: bool) -> String {
    let own: Vec<String> = own
        .iter()
        .map(|&b| match words::shared(policy, b) {
            Some(shared) => format!("{} ({shared})", words::bound(&policy.bounds[b].def)),
            None => words::bound(&policy.bounds[b].def),
        })
        .collect();
    match (own.is_empty(), route_bounds) {
        (false, false) => format!("{}.", own.join("; ")),
        (false, true) => format!("{}; and the API-wide limits.", own.join("; ")),
        (true, _) => "the API-wide limits only.".to_string(),
    }
}

/// The section on route bounds and on refusals in general, for `info.description`.
fn info_section(policy: &Policy) -> Option<String> {
    if policy.bounds.is_empty() {
        return None;
    }
    let mut s = format!("{INFO_MARK}\n\n");
    if policy.route_bounds.is_empty() {
        s.push_str("No API-wide limits: each operation's description says its own.\n\n");
    } else {
        s.push_str(
            "Every request, whatever its operation, counts towards these API-wide limits (each is \
             one count that all operations share):\n\n",
        );
        for &b in &policy.route_bounds {
            s.push_str(&format!("- {}\n", words::bound(&policy.bounds[b].def)));
        }
        s.push_str("\nEach operation's description says its own limits, on top of these.\n\n");
    }
    s.push_str(
        "A refused request gets a 429 Too Many Requests (unless a limit names another status) with an \
         application/problem+json body naming the limit, and a Retry-After header: the whole seconds \
         to wait before that request could pass. Every response of a limited operation carries the \
         RateLimit headers of the limit with the least left.",
    );
    Some(s)
}

/// Replaces what an earlier run added to `object.description` (from `mark` to the end) with
/// `section`, or appends it after a blank line.
fn set_section(object: &mut Map<String, Value>, mark: &str, section: &str) {
    let section = if section.starts_with(mark) { section.to_string() } else { format!("{mark}{section}") };
    let current = object.get("description").and_then(Value::as_str).unwrap_or("");
    let kept = match current.rfind(mark) {
        Some(at) if at == 0 || current[..at].ends_with("\n\n") => &current[..at],
        _ => current,
    };
    // Trailing line breaks go, or a second run would find one more than the first wrote.
    let kept = kept.trim_end_matches('\n');
    let text = if kept.is_empty() { section } else { format!("{kept}\n\n{section}") };
    object.insert("description".to_string(), Value::String(text));
}

/// The RateLimit header names of a style.
fn rate_headers(style: HeaderStyle) -> Vec<&'static str> {
    let mut names = Vec::new();
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        names.extend(["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]);
    }
    if matches!(style, HeaderStyle::Draft | HeaderStyle::Both) {
        names.extend(["RateLimit-Policy", "RateLimit"]);
    }
    names
}

/// Adds the headers a response lacks. A response given as a `$ref` is left as it is: it is
/// shared with other operations, and siblings of a `$ref` mean nothing in OpenAPI 3.0.
fn add_headers(response: &mut Value, names: &[&str], swagger: bool) {
    let Some(response) = response.as_object_mut() else { return };
    if response.contains_key("$ref") || names.is_empty() {
        return;
    }
    let headers = response.entry("headers").or_insert_with(|| json!({}));
    let Some(headers) = headers.as_object_mut() else { return };
    for name in names {
        // Header names are case-insensitive: one the spec declares in other capitals is kept.
        if headers.keys().any(|k| k.eq_ignore_ascii_case(name)) {
            continue;
        }
        let value =
            if swagger { header_definition(name) } else { json!({ "$ref": format!("#/components/headers/{name}") }) };
        headers.insert(name.to_string(), value);
    }
}

/// Adds a refusal response, or only the headers missing from one the spec already declares:
/// what the spec says about its own responses is never overwritten.
fn add_response(
    responses: &mut Map<String, Value>,
    status: u16,
    description: &str,
    headers: &[&str],
    schema: &str,
    swagger: bool,
) {
    let key = status.to_string();
    if let Some(existing) = responses.get_mut(&key) {
        add_headers(existing, headers, swagger);
        return;
    }
    let mut response = Map::new();
    response.insert("description".to_string(), json!(description));
    let mut with_headers = Value::Object(response);
    add_headers(&mut with_headers, headers, swagger);
    let Value::Object(mut response) = with_headers else { return };
    if swagger {
        // Swagger 2.0 says media types per operation (`produces`), not per response.
        response.insert("schema".to_string(), json!({ "$ref": format!("#/definitions/{schema}") }));
    } else {
        response.insert(
            "content".to_string(),
            json!({ "application/problem+json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } }),
        );
    }
    responses.insert(key, Value::Object(response));
}

/// The reason phrase of a status, for a response's description.
fn reason(status: u16) -> &'static str {
    http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Refused")
}

/// What one header means and holds, as a Swagger 2.0 header (type inline).
fn header_definition(name: &str) -> Value {
    let (kind, description) = header_meaning(name);
    json!({ "type": kind, "description": description })
}

/// The type and meaning of each header opbound sends (see `engine::headers`).
fn header_meaning(name: &str) -> (&'static str, &'static str) {
    match name {
        "RateLimit-Limit" => {
            ("integer", "The limit of the rate limit with the least left: requests (or cost units) per its window.")
        }
        "RateLimit-Remaining" => ("integer", "What is left of that limit now."),
        "RateLimit-Reset" => {
            ("integer", "Whole seconds until that limit's window ends (0 for a limit on requests in flight).")
        }
        "RateLimit-Policy" => (
            "string",
            "The limit with the least left, as draft-ietf-httpapi-ratelimit-headers writes it: \"NAME\";q=LIMIT;w=WINDOW_SECONDS.",
        ),
        "RateLimit" => ("string", "What is left of it: \"NAME\";r=REMAINING;t=SECONDS_TO_RESET."),
        _ => ("integer", "Whole seconds to wait before this request could pass."),
    }
}

/// Adds the shared headers and problem schemas the operations refer to, unless the spec already
/// has something by that name.
fn add_components(doc: &mut Value, used: &Used, style: HeaderStyle, swagger: bool) {
    let Some(root) = doc.as_object_mut() else { return };
    let mut schemas = Vec::new();
    if used.rate_limited {
        schemas.push((RATE_LIMITED, rate_limited_schema()));
    }
    if used.bad_request {
        schemas.push((BAD_REQUEST, bad_request_schema()));
    }
    if used.too_large {
        schemas.push((COST_TOO_HIGH, cost_too_high_schema()));
    }
    if swagger {
        if !schemas.is_empty() {
            let definitions = root.entry("definitions").or_insert_with(|| json!({}));
            insert_missing(definitions, schemas);
        }
        return;
    }
    if !used.headers && schemas.is_empty() {
        return;
    }
    let Some(components) = root.entry("components").or_insert_with(|| json!({})).as_object_mut() else { return };
    if used.headers {
        let mut names = rate_headers(style);
        if used.rate_limited {
            names.push("Retry-After");
        }
        let headers = names
            .into_iter()
            .map(|name| {
                let (kind, description) = header_meaning(name);
                (name, json!({ "description": description, "schema": { "type": kind } }))
            })
            .collect();
        insert_missing(components.entry("headers").or_insert_with(|| json!({})), headers);
    }
    if !schemas.is_empty() {
        insert_missing(components.entry("schemas").or_insert_with(|| json!({})), schemas);
    }
}

/// Inserts each definition whose name the map does not hold yet.
fn insert_missing(map: &mut Value, entries: Vec<(&str, Value)>) {
    let Some(map) = map.as_object_mut() else { return };
    for (name, value) in entries {
        map.entry(name).or_insert(value);
    }
}

/// The fields every opbound problem body has (RFC 9457, `engine::problem`).
fn problem(description: &str, types: &[&str], extra: Value, required: &[&str]) -> Value {
    let mut properties = json!({
        "type": { "type": "string", "enum": types },
        "title": { "type": "string" },
        "status": { "type": "integer" },
        "detail": { "type": "string", "description": "What was refused and why, in plain words." },
        "bound": { "type": "string", "description": "The id of the rate limit that refused the request." },
    });
    if let (Some(properties), Value::Object(extra)) = (properties.as_object_mut(), extra) {
        properties.extend(extra);
    }
    let mut all = vec!["type", "title", "status", "detail", "bound"];
    all.extend(required);
    json!({ "type": "object", "description": description, "required": all, "properties": properties })
}

fn rate_limited_schema() -> Value {
    problem(
        "opbound's refusal of a request over a rate limit.",
        &["tag:opbound.dev,2026:rate-limited"],
        json!({
            "retry_after": { "type": "integer", "minimum": 1, "description": "Whole seconds to wait before this request could pass, as in Retry-After." },
            "quota_period": { "type": "string", "description": "A quota's period (ISO 8601), when a quota refused." },
            "quota_resets_at": { "type": "string", "format": "date-time", "description": "When the quota's period ends, in its time zone." },
        }),
        &["retry_after"],
    )
}

fn bad_request_schema() -> Value {
    problem(
        "opbound's refusal of a request whose key or stated cost it cannot count.",
        &["tag:opbound.dev,2026:missing-key", "tag:opbound.dev,2026:unclear-key", "tag:opbound.dev,2026:bad-cost"],
        json!({ "missing": { "type": "string", "description": "What the request lacks (missing-key only)." } }),
        &[],
    )
}

fn cost_too_high_schema() -> Value {
    problem(
        "opbound's refusal of a request that states a cost above what one request may take.",
        &["tag:opbound.dev,2026:cost-too-high"],
        json!({ "max_cost": { "type": "integer", "description": "The most one request may state." } }),
        &["max_cost"],
    )
}
