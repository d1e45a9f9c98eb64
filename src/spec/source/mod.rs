//! A spec file's text: reading it, parsing JSON or YAML into one value tree, finding lines.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::finding::Finding;

mod yaml;

/// The syntax a spec is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

/// The text of a spec and where it came from.
#[derive(Clone, Debug)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
    pub format: Format,
}

/// A spec file that could not be read at all (as opposed to one that reads but is invalid).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl Source {
    /// Reads a file; the format comes from the extension, or from the first character.
    pub fn read(path: &Path) -> Result<Source, ReadError> {
        let bytes = std::fs::read(path).map_err(|source| ReadError { path: path.to_path_buf(), source })?;
        let text = String::from_utf8(bytes).map_err(|_| ReadError {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is not UTF-8 text"),
        })?;
        Ok(Source::from_text(path, text))
    }

    /// Wraps text that is already in memory.
    pub fn from_text(path: &Path, text: String) -> Source {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        let format = match ext.as_deref() {
            Some("json") => Format::Json,
            Some("yaml" | "yml") => Format::Yaml,
            _ if text.trim_start_matches('\u{feff}').trim_start().starts_with('{') => Format::Json,
            _ => Format::Yaml,
        };
        Source { path: path.to_path_buf(), text, format }
    }

    /// Parses the text into a JSON value tree, YAML merge keys applied. A syntax error is a
    /// finding located by line.
    pub fn parse(&self) -> Result<Value, Finding> {
        let text = self.text.strip_prefix('\u{feff}').unwrap_or(&self.text);
        match self.format {
            Format::Json => serde_json::from_str(text).map_err(|e| {
                let mut f = Finding::error("", format!("cannot parse JSON: {}", strip_position(&e.to_string())));
                f.line = Some(e.line());
                f
            }),
            Format::Yaml => {
                use serde::de::DeserializeSeed;
                let de = yaml_serde::Deserializer::from_str(text);
                let mut value = yaml::Tree.deserialize(de).map_err(|e| yaml_error(&e))?;
                yaml::apply_merges(&mut value);
                Ok(value)
            }
        }
    }

    /// Finds the line of each pointer that names a node written in the file. Pointers into
    /// merged or aliased YAML, or into text the locator cannot follow, get no line.
    pub fn locate(&self, pointers: &[&str]) -> HashMap<String, usize> {
        let wanted: HashSet<&str> = pointers.iter().copied().filter(|p| !p.is_empty()).collect();
        if wanted.is_empty() {
            return HashMap::new();
        }
        let text = self.text.strip_prefix('\u{feff}').unwrap_or(&self.text);
        locate_lines(text, &wanted)
    }
}

fn yaml_error(e: &yaml_serde::Error) -> Finding {
    let mut f = Finding::error("", format!("cannot parse YAML: {}", strip_position(&e.to_string())));
    f.line = e.location().map(|l| l.line());
    f
}

/// Parser messages end in " at line X column Y"; the finding carries the line itself.
fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

enum Frame {
    Map { key: Option<String>, len: usize },
    Seq { next: usize, len: usize },
}

/// Walks the parser's events, keeping the pointer of the current node, and records the line of
/// every wanted pointer. JSON is read by the same YAML 1.2 parser: lines are all it needs.
fn locate_lines(text: &str, wanted: &HashSet<&str>) -> HashMap<String, usize> {
    use yaml_rust2::parser::{Event, Parser};
    let mut found = HashMap::new();
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut pointer = String::new();
    while let Ok((event, mark)) = parser.next_token() {
        // A node starts: work out its pointer from the frame it sits in.
        let starts_node =
            matches!(event, Event::Scalar(..) | Event::MappingStart(..) | Event::SequenceStart(..) | Event::Alias(..));
        if starts_node {
            match stack.last_mut() {
                Some(Frame::Map { key: key @ None, .. }) => {
                    // This node is a key; only a scalar key can be named by a pointer.
                    if let Event::Scalar(s, ..) = &event {
                        *key = Some(s.clone());
                        continue;
                    }
                    // A list or map used as a key: no pointer can name what follows, so stop here.
                    break;
                }
                Some(Frame::Map { key: Some(k), len }) => {
                    let k = std::mem::take(k);
                    *len = pointer.len();
                    pointer = super::pointer::push(&pointer, &k);
                }
                Some(Frame::Seq { next, len }) => {
                    *len = pointer.len();
                    pointer = super::pointer::push_index(&pointer, *next);
                    *next += 1;
                }
                None => {}
            }
            if wanted.contains(pointer.as_str()) && !found.contains_key(&pointer) {
                found.insert(pointer.clone(), mark.line());
            }
        }
        match event {
            Event::MappingStart(..) => stack.push(Frame::Map { key: None, len: 0 }),
            Event::SequenceStart(..) => stack.push(Frame::Seq { next: 0, len: 0 }),
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            Event::StreamEnd => break,
            _ => {}
        }
        // A finished value (scalar, alias or closed container) returns the pointer to its parent.
        let finished = matches!(event, Event::Scalar(..) | Event::Alias(..) | Event::MappingEnd | Event::SequenceEnd);
        if finished {
            match stack.last_mut() {
                Some(Frame::Map { key: key @ Some(_), len }) => {
                    pointer.truncate(*len);
                    *key = None;
                }
                Some(Frame::Seq { len, .. }) => pointer.truncate(*len),
                Some(Frame::Map { key: None, .. }) | None => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Source {
        Source::from_text(Path::new("t.yaml"), text.to_string())
    }

    #[test]
    fn yaml_merge_keys_are_applied_and_scalar_keys_become_strings() {
        let src = yaml("base: &b {per: user, limit: 5}\nderived:\n  <<: *b\n  limit: 7\nresponses:\n  200: {}\n");
        let v = src.parse().unwrap();
        assert_eq!(v["derived"]["per"], "user");
        assert_eq!(v["derived"]["limit"], 7);
        assert!(v["responses"].get("200").is_some());
    }

    #[test]
    fn yaml_that_real_specs_contain() {
        let src = yaml(
            "min: -9223372036854776000\nbig: 99999999999999999999\ntagged: !custom {a: 1}\nlist: [&x {k: 1}, {<<: [*x], j: 2}]\n",
        );
        let v = src.parse().unwrap();
        assert!(v["min"].as_f64().unwrap() < -9.2e18);
        assert!(v["big"].as_f64().unwrap() > 9.9e19);
        assert_eq!(v["tagged"]["a"], 1);
        assert_eq!(v["list"][1]["k"], 1);
        assert_eq!(v["list"][1]["j"], 2);
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = yaml("a: 1\nb: [1, 2\nc: 3\n").parse().unwrap_err();
        assert!(err.message.starts_with("cannot parse YAML"), "{}", err.message);
        assert!(err.line.is_some());
        let err = Source::from_text(Path::new("t.json"), "{\n\"a\": 1,\n}".into()).parse().unwrap_err();
        assert_eq!(err.line, Some(3));
    }

    #[test]
    fn locates_block_and_flow_nodes() {
        let text = "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      x-rate-limit:\n        - {per: user, limit: 1}\n        - per: address\n          window: PT0.5S\n";
        let lines = yaml(text).locate(&[
            "/paths/~1a/get/x-rate-limit/0/limit",
            "/paths/~1a/get/x-rate-limit/1/window",
            "/paths/~1a",
            "/nope",
        ]);
        assert_eq!(lines.get("/paths/~1a/get/x-rate-limit/0/limit"), Some(&6));
        assert_eq!(lines.get("/paths/~1a/get/x-rate-limit/1/window"), Some(&8));
        assert_eq!(lines.get("/paths/~1a"), Some(&4));
        assert_eq!(lines.get("/nope"), None);
    }

    #[test]
    fn locates_json() {
        let text = "{\n  \"paths\": {\n    \"/a\": {\n      \"get\": {\"x-rate-limit\": [{\"per\": \"user\"}]}\n    }\n  }\n}\n";
        let src = Source::from_text(Path::new("t.json"), text.to_string());
        let lines = src.locate(&["/paths/~1a/get/x-rate-limit/0/per"]);
        assert_eq!(lines.get("/paths/~1a/get/x-rate-limit/0/per"), Some(&4));
    }
}
