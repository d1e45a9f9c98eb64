//! JSON pointers (RFC 6901): building them while walking, and resolving local `$ref`s.

use serde_json::Value;

/// Appends one reference token to a pointer, escaping `~` and `/`.
pub fn push(pointer: &str, token: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + token.len() + 1);
    out.push_str(pointer);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

/// Appends an array index to a pointer.
pub fn push_index(pointer: &str, index: usize) -> String {
    format!("{pointer}/{index}")
}

/// Splits a pointer into its unescaped reference tokens.
pub fn tokens(pointer: &str) -> Vec<String> {
    if pointer.is_empty() {
        return Vec::new();
    }
    pointer.strip_prefix('/').unwrap_or(pointer).split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect()
}

/// What a `$ref` string points at.
#[derive(Debug, PartialEq, Eq)]
pub enum Reference {
    /// A pointer into this document (already percent-decoded).
    Local(String),
    /// Another file or URL, which opbound does not read.
    External(String),
}

/// Why a `$ref` could not be followed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// The reference names another file or URL; holds the `$ref` as written.
    #[error(
        "$ref {0} points into another document; opbound reads one file, so bundle the spec first (for example with `redocly bundle`)"
    )]
    External(String),
    /// The pointer resolves to no value in this document.
    #[error("$ref {reference} points at nothing in this document")]
    Dangling {
        /// The `$ref` in the chain that points at nothing, which may not be the first one.
        reference: String,
    },
    /// The fragment has a malformed `%` escape or decodes to bytes that are not UTF-8; holds the
    /// `$ref` as written.
    #[error("$ref {0} is not valid percent-encoding")]
    BadEncoding(String),
    /// The chain of references comes back to one already followed; holds the `$ref` the lookup
    /// started from.
    #[error("$ref {0} goes round in a circle")]
    Circular(String),
}

/// Parses a `$ref` value: `#/a/b` is local, anything with a document part is external.
pub fn parse_ref(reference: &str) -> Result<Reference, RefError> {
    match reference.strip_prefix('#') {
        Some(fragment) => {
            let decoded = percent_decode(fragment).ok_or_else(|| RefError::BadEncoding(reference.to_string()))?;
            Ok(Reference::Local(decoded))
        }
        None => Ok(Reference::External(reference.to_string())),
    }
}

/// Looks up a local reference, following chains of `$ref` objects until a value that is not a
/// bare reference. Returns the value and the pointer where it was finally found.
pub fn resolve<'a>(root: &'a Value, reference: &str) -> Result<(&'a Value, String), RefError> {
    let mut seen: Vec<String> = Vec::new();
    let mut current = reference.to_string();
    loop {
        let pointer = match parse_ref(&current)? {
            Reference::Local(p) => p,
            Reference::External(r) => return Err(RefError::External(r)),
        };
        if seen.contains(&pointer) {
            return Err(RefError::Circular(reference.to_string()));
        }
        let value = root.pointer(&pointer).ok_or_else(|| RefError::Dangling { reference: current.clone() })?;
        seen.push(pointer.clone());
        match value.get("$ref").and_then(Value::as_str) {
            Some(next) => current = next.to_string(),
            None => return Ok((value, pointer)),
        }
    }
}

/// Percent-decodes a string; `None` when an escape is malformed or the result is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex(*bytes.get(i + 1)?)?;
            let lo = hex(*bytes.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub(crate) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn push_escapes_slash_and_tilde() {
        assert_eq!(push("/paths", "/a/{b}~c"), "/paths/~1a~1{b}~0c");
        assert_eq!(tokens("/paths/~1a~1{b}~0c"), vec!["paths", "/a/{b}~c"]);
    }

    #[test]
    fn refs_are_percent_decoded_then_unescaped() {
        let doc = json!({"paths": {"/pets/{id}": {"get": {}}}});
        let (value, at) = resolve(&doc, "#/paths/~1pets~1%7Bid%7D").unwrap();
        assert_eq!(at, "/paths/~1pets~1{id}");
        assert!(value.get("get").is_some());
    }

    #[test]
    fn chains_dangling_circles_and_external() {
        let doc = json!({"a": {"$ref": "#/b"}, "b": {"x": 1}, "c": {"$ref": "#/d"}, "d": {"$ref": "#/c"}});
        assert_eq!(resolve(&doc, "#/a").unwrap().1, "/b");
        assert_eq!(resolve(&doc, "#/zz"), Err(RefError::Dangling { reference: "#/zz".into() }));
        assert_eq!(resolve(&doc, "#/c"), Err(RefError::Circular("#/c".into())));
        assert_eq!(resolve(&doc, "other.yaml#/a"), Err(RefError::External("other.yaml#/a".into())));
        assert_eq!(resolve(&doc, "#/%zz"), Err(RefError::BadEncoding("#/%zz".into())));
    }
}
