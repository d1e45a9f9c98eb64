//! `per`: what a bound counts requests per (route, address, user, token, org, or a named header,
//! cookie or query parameter, a field of the JSON or form body), with a suggestion for the words people write instead.

use serde_json::Value;

use crate::policy::bound::Per;
use crate::spec::read::describe;
use crate::suggest;

pub(super) const PER_HINT: &str =
    "route, address, user, token, org, header:NAME, cookie:NAME, query:NAME, json:/POINTER or form:NAME";

/// The most parts a key may be made of.
const MAX_PARTS: usize = 4;

/// Parses `per`: one kind, or a list of two to four (`[token, json:/model]`).
pub(super) fn per(value: &Value) -> Result<Per, String> {
    let Value::Array(items) = value else { return one(value) };
    if let [only] = items.as_slice() {
        return Err(format!(
            "per lists one kind; write it alone (per: {}) or list 2 to {MAX_PARTS}",
            describe_kind(only)
        ));
    }
    if !(2..=MAX_PARTS).contains(&items.len()) {
        return Err(format!(
            "per lists {} kinds; a key is made of one kind (per: token) or of 2 to {MAX_PARTS} (per: [token, json:/model])",
            items.len()
        ));
    }
    let mut parts: Vec<Per> = Vec::new();
    for item in items {
        if item.is_array() {
            return Err(
                "per lists a list; write the kinds of a key in one flat list, as in per: [token, json:/model]".into()
            );
        }
        let part = one(item)?;
        if part == Per::Route {
            return Err("per lists route, which adds nothing to a key made of others; leave it out".into());
        }
        if parts.contains(&part) {
            return Err(format!("per lists {part} twice"));
        }
        parts.push(part);
    }
    Ok(Per::Parts(parts.into()))
}

fn describe_kind(value: &Value) -> String {
    value.as_str().map_or_else(|| describe(value), str::to_string)
}

/// Parses one kind of key.
fn one(value: &Value) -> Result<Per, String> {
    let Some(text) = value.as_str() else {
        return Err(format!("per must be one of {PER_HINT}, found {}", describe(value)));
    };
    let (kind, name) = match text.split_once(':') {
        Some((k, n)) => (k, Some(n)),
        None => (text, None),
    };
    match (kind, name) {
        ("route", None) => Ok(Per::Route),
        ("address", None) => Ok(Per::Address),
        ("user", None) => Ok(Per::User),
        ("token", None) => Ok(Per::Token),
        ("org", None) => Ok(Per::Org),
        ("header" | "cookie" | "query", Some(n)) => {
            let n = n.trim();
            let valid = !n.is_empty() && n.bytes().all(crate::spec::read::is_token_byte);
            if !valid {
                return Err(format!("per {text} needs a valid {kind} name after the colon, as in {kind}:X-Api-Key"));
            }
            Ok(match kind {
                "header" => Per::Header(
                    http::HeaderName::from_bytes(n.as_bytes())
                        .map_err(|_| format!("per {text} needs a valid header name after the colon"))?,
                ),
                "cookie" => Per::Cookie(n.to_string()),
                _ => Per::Query(n.to_string()),
            })
        }
        ("json", Some(p)) => {
            crate::policy::JsonPointer::parse(p).map(Per::Json).map_err(|e| format!("per {text}: {e}"))
        }
        ("form", Some(n)) => {
            if n.is_empty() || n.chars().any(char::is_control) {
                return Err(format!("per {text} needs a field name after the colon, as in form:username"));
            }
            Ok(Per::Form(n.to_string()))
        }
        ("json", None) => Err(format!("per {text} needs a JSON pointer, as in json:/username")),
        ("form", None) => Err(format!("per {text} needs a field name, as in form:username")),
        ("header" | "cookie" | "query", None) => Err(format!("per {text} needs a name, as in {text}:X-Api-Key")),
        _ => {
            let synonyms = [
                ("ip", "address"),
                ("client", "address"),
                ("remote", "address"),
                ("addr", "address"),
                ("key", "token"),
                ("apikey", "token"),
                ("api-key", "token"),
                ("tenant", "org"),
                ("organization", "org"),
                ("organisation", "org"),
                ("account", "org"),
                ("global", "route"),
                ("all", "route"),
                ("operation", "route"),
                ("subject", "user"),
            ];
            let lower = text.to_ascii_lowercase();
            let meant = synonyms.iter().find(|(s, _)| *s == lower).map(|(_, m)| *m).or_else(|| {
                suggest::closest(
                    kind,
                    &["route", "address", "user", "token", "org", "header", "cookie", "query", "json", "form"],
                )
            });
            let hint = meant.map(|m| format!("did you mean {m}? ")).unwrap_or_default();
            Err(format!("per {text} is not something opbound can count per; {hint}use {PER_HINT}"))
        }
    }
}
