//! Where in a request's body or head a bound reads a value: a JSON pointer, a form field (and
//! the media types those are read from), and the sources of a request's cost.

use std::fmt;
use std::num::NonZeroU32;

/// Whether a media type is JSON: `application/json` or any `+json` suffix. An operation that
/// declares one takes the bodies a `json:` key or cost reads.
pub(crate) fn is_json(media_type: &str) -> bool {
    media_type == "application/json" || (media_type.starts_with("application/") && media_type.ends_with("+json"))
}

/// The form media type: a `form:` key reads a body of this type alone.
pub(crate) const FORM: &str = "application/x-www-form-urlencoded";

/// Why a text is not an RFC 6901 JSON pointer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// Neither empty nor starting with `/`.
    #[error("the JSON pointer {0:?} must start with /, as in /username")]
    NoSlash(String),
    /// A `~` not followed by `0` or `1`.
    #[error("the JSON pointer {0:?} has a ~ that is not ~0 (for ~) or ~1 (for /)")]
    StrayTilde(String),
}

/// An RFC 6901 JSON pointer (`/items`, `/user/name`, `/a~1b`), parsed into its reference tokens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    tokens: Vec<String>,
}

impl JsonPointer {
    /// Parses a pointer: empty (the whole document) or `/`-separated tokens, with `~0` for `~`
    /// and `~1` for `/` (RFC 6901 section 3); any other `~` is an error.
    pub fn parse(text: &str) -> Result<JsonPointer, PointerError> {
        if text.is_empty() {
            return Ok(JsonPointer { text: String::new(), tokens: Vec::new() });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::NoSlash(text.to_string()));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => token.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => token.push('~'),
                        Some('1') => token.push('/'),
                        _ => {
                            return Err(PointerError::StrayTilde(text.to_string()));
                        }
                    },
                }
            }
            tokens.push(token);
        }
        Ok(JsonPointer { text: text.to_string(), tokens })
    }

    /// The reference tokens, unescaped.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Where a request states its own cost (`cost-from`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CostFrom {
    /// A query parameter's integer, by its name as written.
    Query(String),
    /// A header's integer; the name is stored lower case.
    Header(String),
    /// A JSON body's integer, or the length of its array, at this pointer.
    Json(JsonPointer),
}

impl CostFrom {
    /// Whether the cost is read from the body.
    pub fn needs_body(&self) -> bool {
        matches!(self, CostFrom::Json(_))
    }
}

impl fmt::Display for CostFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostFrom::Query(n) => write!(f, "query:{n}"),
            CostFrom::Header(n) => write!(f, "header:{n}"),
            CostFrom::Json(p) => write!(f, "json:{p}"),
        }
    }
}

/// A cost the request states (`cost-from`), capped by `max-cost`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestCost {
    /// Where it is read.
    pub from: CostFrom,
    /// The most one request may state; above it the request is refused with 413 uncounted.
    /// Never more than the bound can ever admit.
    pub max: NonZeroU32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_unescape_their_tokens_and_refuse_stray_tildes() {
        let tokens = |t: &str| JsonPointer::parse(t).map(|p| p.tokens().to_vec());
        assert_eq!(tokens(""), Ok(vec![]));
        assert_eq!(tokens("/username"), Ok(vec!["username".to_string()]));
        assert_eq!(tokens("/a~1b/~01"), Ok(vec!["a/b".to_string(), "~1".to_string()]));
        assert_eq!(tokens("/"), Ok(vec![String::new()]));
        assert!(tokens("username").unwrap_err().to_string().contains("must start with /"));
        assert!(tokens("/a~2").unwrap_err().to_string().contains("~0"));
        assert!(tokens("/a~").is_err());
    }
}
