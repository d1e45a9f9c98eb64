//! A spec file's text: reading it, parsing JSON or YAML into one value tree, finding where a node
//! was written.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::finding::Finding;

mod depth;
mod json_events;
mod position;
mod yaml;

pub use depth::MAX_NESTING;
pub(crate) use position::Position;

/// The syntax a spec is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// JSON: a `.json` file, or one without a known extension whose text starts with `{`.
    Json,
    /// YAML: a `.yaml` or `.yml` file, or anything else that is not recognisably JSON.
    Yaml,
}

/// The text of a spec and where it came from.
#[derive(Clone, Debug)]
pub struct Source {
    /// The file it was read from (or the name given to text already in memory), shown as is in
    /// messages.
    pub path: PathBuf,
    /// The whole file, UTF-8; kept so findings can be given a line and column.
    pub text: String,
    /// Which parser reads `text`.
    pub format: Format,
}

/// A spec file that could not be read at all (as opposed to one that reads but is invalid).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ReadError {
    /// The file that could not be read.
    pub path: PathBuf,
    /// What the operating system said, or `InvalidData` when the file is not UTF-8.
    #[source]
    pub source: std::io::Error,
}

impl Source {
    /// Reads a file, or fetches an `http://` or `https://` URL; the format comes from the
    /// extension, or from the first character.
    pub fn read(path: &Path) -> Result<Source, ReadError> {
        Source::read_with(path, &super::fetch::Fetch::default())
    }

    /// Reads a file, or fetches a URL as `how` says.
    pub fn read_with(path: &Path, how: &super::fetch::Fetch) -> Result<Source, ReadError> {
        if super::fetch::is_url(path) {
            let text = super::fetch::fetch(&path.to_string_lossy(), how)
                .map_err(|why| ReadError { path: path.to_path_buf(), source: std::io::Error::other(why) })?;
            return Ok(Source::from_text(path, text));
        }
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
    /// finding located by line and column.
    // A finding is as large as it is so it can name an overlay's action too; a parse fails once
    // per load at most, so boxing it would buy nothing.
    #[allow(clippy::result_large_err)]
    pub fn parse(&self) -> Result<Value, Finding> {
        let text = self.text.strip_prefix('\u{feff}').unwrap_or(&self.text);
        if let Some(at) = depth::too_deep(text, self.format == Format::Yaml) {
            let mut f = Finding::error(
                "",
                format!(
                    "the document nests lists and maps more than {MAX_NESTING} levels deep here; it is refused before it is parsed"
                ),
            );
            (f.line, f.column) = (Some(at.line), Some(at.column));
            return Err(f);
        }
        match self.format {
            Format::Json => serde_json::from_str(text).map_err(|e| {
                let mut f = Finding::error("", format!("cannot parse JSON: {}", strip_position(&e.to_string())));
                f.line = Some(e.line());
                f.column = Some(char_column(text, e.line(), e.column()));
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

    /// A tree written as text in `format`: pretty JSON with a final newline, or YAML.
    pub fn render(tree: &Value, format: Format) -> String {
        match format {
            Format::Json => {
                let mut text = serde_json::to_string_pretty(tree).expect("json values serialize");
                text.push('\n');
                text
            }
            Format::Yaml => yaml_serde::to_string(tree).expect("json values serialize as yaml"),
        }
    }

    /// Finds where each pointer that names a node written in the file starts. Pointers into
    /// merged or aliased YAML, or into text the locator cannot follow, get no position.
    pub fn locate(&self, pointers: &[&str]) -> HashMap<String, Position> {
        let wanted: HashSet<&str> = pointers.iter().copied().filter(|p| !p.is_empty()).collect();
        if wanted.is_empty() {
            return HashMap::new();
        }
        let text = self.text.strip_prefix('\u{feff}').unwrap_or(&self.text);
        if self.format == Format::Json {
            // The YAML parser reads JSON too, but holds every token of a flow collection until
            // it ends, to know whether it is a key: a 20 MB spec took 650 MB to locate in.
            locate_positions(json_events::JsonEvents::new(text), &wanted)
        } else {
            let mut parser = yaml_rust2::parser::Parser::new_from_str(text);
            // yaml-rust2 counts columns from 0, in characters.
            let events = std::iter::from_fn(move || {
                let (event, mark) = parser.next_token().ok()?;
                Some((event, Position { line: mark.line(), column: mark.col() + 1 }))
            });
            locate_positions(events, &wanted)
        }
    }
}

fn yaml_error(e: &yaml_serde::Error) -> Finding {
    let mut f = Finding::error("", format!("cannot parse YAML: {}", strip_position(&e.to_string())));
    // libyaml counts columns in characters already.
    f.line = e.location().map(|l| l.line());
    f.column = e.location().map(|l| l.column());
    f
}

/// serde_json counts columns in bytes; editors, and the YAML parsers, count characters.
fn char_column(text: &str, line: usize, byte_column: usize) -> usize {
    let Some(start) = text.split('\n').nth(line.saturating_sub(1)) else {
        return byte_column;
    };
    let mut end = byte_column.min(start.len());
    while !start.is_char_boundary(end) {
        end -= 1;
    }
    start[..end].chars().count().max(1)
}

/// Parser messages end in " at line X column Y"; the finding carries the position itself.
fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

enum Frame {
    /// `starts` is true until the map's first key has been seen.
    Map {
        key: Option<String>,
        len: usize,
        starts: bool,
    },
    Seq {
        next: usize,
        len: usize,
    },
}

/// Walks a parser's events, keeping the pointer of the current node, and records where every
/// wanted pointer starts.
fn locate_positions(
    events: impl Iterator<Item = (yaml_rust2::Event, Position)>,
    wanted: &HashSet<&str>,
) -> HashMap<String, Position> {
    use yaml_rust2::Event;
    let mut found: HashMap<String, Position> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut pointer = String::new();
    for (event, mark) in events {
        // A node starts: work out its pointer from the frame it sits in.
        let starts_node =
            matches!(event, Event::Scalar(..) | Event::MappingStart(..) | Event::SequenceStart(..) | Event::Alias(..));
        if starts_node {
            match stack.last_mut() {
                Some(Frame::Map { key: key @ None, starts, .. }) => {
                    // This node is a key; only a scalar key can be named by a pointer.
                    if let Event::Scalar(s, ..) = &event {
                        *key = Some(s.clone());
                        // A block map's start event is marked after its first key; the key
                        // itself is where the map starts. A flow map's `{` comes first and stays.
                        if std::mem::take(starts)
                            && let Some(at) = found.get_mut(&pointer)
                            && (mark.line, mark.column) < (at.line, at.column)
                        {
                            *at = mark;
                        }
                        continue;
                    }
                    // A list or map used as a key: no pointer can name what follows, so stop here.
                    break;
                }
                Some(Frame::Map { key: Some(k), len, .. }) => {
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
                found.insert(pointer.clone(), mark);
            }
        }
        match event {
            Event::MappingStart(..) => stack.push(Frame::Map { key: None, len: 0, starts: true }),
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
                Some(Frame::Map { key: key @ Some(_), len, .. }) => {
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
    fn syntax_errors_carry_a_line_and_a_column() {
        let err = yaml("a: 1\nb: [1, 2\nc: 3\n").parse().unwrap_err();
        assert!(err.message.starts_with("cannot parse YAML"), "{}", err.message);
        assert!(err.line.is_some() && err.column.is_some());
        let err = Source::from_text(Path::new("t.json"), "{\n\"a\": 1,\n}".into()).parse().unwrap_err();
        assert_eq!((err.line, err.column), (Some(3), Some(1)));
        // serde_json counts bytes; the column is in characters, like every other one.
        let err = Source::from_text(Path::new("t.json"), "{\"é\": 1,}".into()).parse().unwrap_err();
        assert_eq!((err.line, err.column), (Some(1), Some(9)));
    }

    fn positions(src: &Source, pointers: &[&str]) -> Vec<Option<(usize, usize)>> {
        let found = src.locate(pointers);
        pointers.iter().map(|p| found.get(*p).map(|at| (at.line, at.column))).collect()
    }

    #[test]
    fn locates_block_and_flow_nodes() {
        let text = "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      x-rate-limit:\n        - {per: user, limit: 1}\n        - per: address\n          window: PT0.5S\n";
        let pointers =
            ["/paths/~1a/get/x-rate-limit/0/limit", "/paths/~1a/get/x-rate-limit/1/window", "/paths/~1a", "/nope"];
        assert_eq!(positions(&yaml(text), &pointers), [Some((6, 30)), Some((8, 19)), Some((4, 5)), None]);
    }

    #[test]
    fn locates_json() {
        let text = "{\n  \"paths\": {\n    \"/a\": {\n      \"get\": {\"x-rate-limit\": [{\"per\": \"user\"}]}\n    }\n  }\n}\n";
        let src = Source::from_text(Path::new("t.json"), text.to_string());
        assert_eq!(positions(&src, &["/paths/~1a/get/x-rate-limit/0/per"]), [Some((4, 40))]);
    }

    /// JSON is located by a reader of its own (the YAML parser held a 20 MB document's every
    /// token at once): escaped keys, nodes after long strings, and the same places the YAML
    /// parser gives.
    #[test]
    fn locates_json_as_the_yaml_parser_did() {
        let text = "{\"a\\/b\": {\"c\\u00e9\": [1, \"x\\\"y\", {\"d\": null}]},\n \"e\": true}";
        let json = Source::from_text(Path::new("t.json"), text.to_string());
        let mut yaml = json.clone();
        yaml.format = Format::Yaml;
        let pointers = ["/a~1b", "/a~1b/cé", "/a~1b/cé/1", "/a~1b/cé/2/d", "/e", "/nope"];
        let expected = [Some((1, 10)), Some((1, 22)), Some((1, 26)), Some((1, 40)), Some((2, 7)), None];
        assert_eq!(positions(&json, &pointers), expected);
        assert_eq!(positions(&yaml, &pointers), expected);
    }

    /// Stripe ships its spec as one line: the column is what tells findings apart.
    #[test]
    fn locates_minified_json_by_column_in_characters() {
        let text =
            r#"{"info":{"title":"café"},"paths":{"/v1/customers":{"post":{"x-rate-limit":[{"per":"adress"}]}}}}"#;
        let src = Source::from_text(Path::new("t.json"), text.to_string());
        let value = text.find(r#""adress""#).unwrap();
        let column = text[..value].chars().count() + 1;
        let pointers = ["/paths/~1v1~1customers/post/x-rate-limit/0/per", "/info/title"];
        assert_eq!(positions(&src, &pointers), [Some((1, column)), Some((1, 18))]);
    }
}
