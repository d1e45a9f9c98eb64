//! Path templates as written in a spec (`/files/{name}.json`), split into segments of literal
//! text and parameters.

use super::canonical::canonical_literal;

/// A part of one path segment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Piece {
    /// Canonicalized literal text.
    Literal(String),
    /// A parameter: one or more characters, never `/`.
    Param,
}

/// One segment of a template: literal text and parameters in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Segment(pub Vec<Piece>);

impl Segment {
    /// How many parameters the segment holds.
    pub fn params(&self) -> usize {
        self.0.iter().filter(|p| **p == Piece::Param).count()
    }

    /// Characters of literal text, for ordering candidates by specificity.
    pub fn literal_len(&self) -> usize {
        self.0.iter().map(|p| if let Piece::Literal(l) = p { l.len() } else { 0 }).sum()
    }

    /// Whether a request's segment matches this pattern. Linear in the segment's length whatever
    /// the pattern, so a hostile path cannot make matching slow.
    pub fn matches(&self, segment: &str) -> bool {
        let n = segment.len();
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        for piece in &self.0 {
            let mut next = vec![false; n + 1];
            match piece {
                Piece::Literal(l) => {
                    for p in 0..=n {
                        if reach[p] && segment[p..].starts_with(l.as_str()) {
                            next[p + l.len()] = true;
                        }
                    }
                }
                Piece::Param => {
                    if let Some(first) = reach.iter().position(|r| *r) {
                        for (q, slot) in next.iter_mut().enumerate().skip(first + 1) {
                            *slot = segment.is_char_boundary(q);
                        }
                    }
                }
            }
            reach = next;
        }
        reach[n]
    }
}

/// Why a template cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` opens a parameter that is never closed (`/a/{b`).
    #[error("`{{` without a closing `}}`")]
    Unclosed,
    /// A `}` closes a parameter that was never opened (`/a/b}`).
    #[error("`}}` without an opening `{{`")]
    Unopened,
}

/// Strips what follows `?` or `#` in a path key: some specs write variants of one path that way.
pub fn strip_suffix(key: &str) -> &str {
    match key.find(['?', '#']) {
        Some(i) => &key[..i],
        None => key,
    }
}

/// Splits a full path (base path already joined) into segments. `/a/` ends in an empty segment.
pub fn parse(path: &str) -> Result<Vec<Segment>, TemplateError> {
    let path = path.strip_prefix('/').unwrap_or(path);
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let mut segments = Vec::new();
    for raw in split_segments(path)? {
        let mut pieces = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            match rest.find('{') {
                Some(0) => {
                    let close = rest.find('}').ok_or(TemplateError::Unclosed)?;
                    if rest[1..close].contains('{') {
                        return Err(TemplateError::Unclosed);
                    }
                    pieces.push(Piece::Param);
                    rest = &rest[close + 1..];
                }
                Some(i) => {
                    push_literal(&mut pieces, &rest[..i])?;
                    rest = &rest[i..];
                }
                None => {
                    push_literal(&mut pieces, rest)?;
                    rest = "";
                }
            }
        }
        segments.push(Segment(pieces));
    }
    Ok(segments)
}

/// Splits on `/` outside braces, so a parameter name holding `/` does not break the template.
fn split_segments(path: &str) -> Result<Vec<&str>, TemplateError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in path.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.checked_sub(1).ok_or(TemplateError::Unopened)?,
            '/' if depth == 0 => {
                out.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(TemplateError::Unclosed);
    }
    out.push(&path[start..]);
    Ok(out)
}

fn push_literal(pieces: &mut Vec<Piece>, text: &str) -> Result<(), TemplateError> {
    if text.contains('}') {
        return Err(TemplateError::Unopened);
    }
    pieces.push(Piece::Literal(canonical_literal(text)));
    Ok(())
}

/// Joins a base path and a path key: `/v1` + `/pets` is `/v1/pets`; a root key under a base
/// path is the base path itself.
pub fn join(base: &str, key: &str) -> String {
    let key = if key.starts_with('/') { key.to_string() } else { format!("/{key}") };
    let base = base.trim_end_matches('/');
    if base.is_empty() {
        key
    } else if key == "/" {
        base.to_string()
    } else {
        format!("{base}{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Piece::*;

    fn lit(s: &str) -> Piece {
        Literal(s.to_string())
    }

    #[test]
    fn parses_segments() {
        assert_eq!(parse("/").unwrap(), vec![]);
        assert_eq!(parse("/a/").unwrap(), vec![Segment(vec![lit("a")]), Segment(vec![])]);
        assert_eq!(
            parse("/files/{name}.json").unwrap(),
            vec![Segment(vec![lit("files")]), Segment(vec![Param, lit(".json")])]
        );
        assert_eq!(parse("/compare/{base}...{head}").unwrap()[1], Segment(vec![Param, lit("..."), Param]));
        assert_eq!(parse("/{a/b}/x").unwrap().len(), 2);
        assert_eq!(parse("/a/{b"), Err(TemplateError::Unclosed));
        assert_eq!(parse("/a/b}"), Err(TemplateError::Unopened));
    }

    #[test]
    fn segment_matching() {
        let seg = &parse("/{base}...{head}").unwrap()[0];
        assert!(seg.matches("main...dev"));
        assert!(seg.matches("a....b"));
        assert!(!seg.matches("...b"));
        assert!(!seg.matches("main..dev"));
        let seg = &parse("/{name}:cancel").unwrap()[0];
        assert!(seg.matches("op1:cancel"));
        assert!(!seg.matches(":cancel"));
        let hostile = "-".repeat(5000);
        assert!(!parse("/{a}-{b}-{c}-{d}x").unwrap()[0].matches(&hostile));
    }

    #[test]
    fn joins() {
        assert_eq!(join("/", "/pets"), "/pets");
        assert_eq!(join("/v1", "/pets"), "/v1/pets");
        assert_eq!(join("/v1", "/"), "/v1");
        assert_eq!(join("/", "/"), "/");
        assert_eq!(join("/v1", "pets"), "/v1/pets");
    }

    #[test]
    fn strips_query_and_fragment() {
        assert_eq!(strip_suffix("/files/{id}#get_shared_link"), "/files/{id}");
        assert_eq!(strip_suffix("/search?type=user"), "/search");
    }
}
