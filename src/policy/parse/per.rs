//! `per`: what a bound counts requests per (route, address, user, token, org, or a named header,
//! cookie or query parameter, a field of the JSON or form body), with a suggestion for the words people write instead.

use serde_json::Value;

use crate::policy::bound::Per;
use crate::spec::read::describe;
use crate::suggest;

pub(super) const PER_HINT: &str =
    "route, address, user, token, org, header:NAME, cookie:NAME, query:NAME, json:/POINTER or form:NAME";

/// Parses `per`.
pub(super) fn per(value: &Value) -> Result<Per, String> {
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
