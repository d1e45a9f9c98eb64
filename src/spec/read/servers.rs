//! Base paths: a `servers` list (or Swagger's `basePath`) down to the path part each request's
//! template is joined to.

use serde_json::Value;

use super::reader::{Reader, describe, scalar_text};
use crate::spec::pointer::push_index;

impl Reader<'_> {
    /// Base paths of a `servers` list; `None` when absent or empty.
    pub(super) fn servers(&mut self, value: Option<&Value>, at: &str) -> Option<Vec<String>> {
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
}

pub(super) fn swagger_base_path(value: Option<&Value>) -> String {
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
}
