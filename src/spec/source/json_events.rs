//! JSON read as the YAML parser's events, with each node's position, in one pass and in memory
//! as deep as the document: what locating a node in a JSON spec needs.

use yaml_rust2::Event;
use yaml_rust2::scanner::TScalarStyle;

use super::position::Position;

/// The events of a JSON text, each with where it starts; ends with `StreamEnd`.
pub(super) struct JsonEvents<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
    line: usize,
    column: usize,
    ended: bool,
}

impl<'a> JsonEvents<'a> {
    pub(super) fn new(text: &'a str) -> JsonEvents<'a> {
        JsonEvents { bytes: text.as_bytes(), text, at: 0, line: 1, column: 1, ended: false }
    }

    /// Moves one byte on, counting lines and characters.
    fn bump(&mut self) {
        match self.bytes[self.at] {
            b'\n' => (self.line, self.column) = (self.line + 1, 1),
            b if b & 0xC0 != 0x80 => self.column += 1,
            _ => {}
        }
        self.at += 1;
    }

    /// A string from its opening quote: its text, escapes read.
    fn string(&mut self) -> String {
        let start = self.at;
        let mut escaped = false;
        self.bump();
        while let Some(&b) = self.bytes.get(self.at) {
            self.bump();
            match b {
                b'\\' if self.at < self.bytes.len() => {
                    escaped = true;
                    self.bump();
                }
                b'"' => break,
                _ => {}
            }
        }
        let quoted = &self.text[start..self.at];
        if escaped {
            serde_json::from_str(quoted).unwrap_or_else(|_| quoted.to_string())
        } else {
            quoted.trim_matches('"').to_string()
        }
    }
}

impl Iterator for JsonEvents<'_> {
    type Item = (Event, Position);

    fn next(&mut self) -> Option<(Event, Position)> {
        while let Some(&b) = self.bytes.get(self.at) {
            let here = Position { line: self.line, column: self.column };
            let event = match b {
                b' ' | b'\t' | b'\r' | b'\n' | b',' | b':' => {
                    self.bump();
                    continue;
                }
                b'{' => Event::MappingStart(0, None),
                b'[' => Event::SequenceStart(0, None),
                b'}' => Event::MappingEnd,
                b']' => Event::SequenceEnd,
                b'"' => return Some((Event::Scalar(self.string(), TScalarStyle::DoubleQuoted, 0, None), here)),
                _ => {
                    // A number, true, false or null: up to the next delimiter.
                    let start = self.at;
                    while self.bytes.get(self.at).is_some_and(|b| !b" \t\r\n,:]}".contains(b)) {
                        self.bump();
                    }
                    let word = self.text[start..self.at].to_string();
                    return Some((Event::Scalar(word, TScalarStyle::Plain, 0, None), here));
                }
            };
            self.bump();
            return Some((event, here));
        }
        if self.ended {
            return None;
        }
        self.ended = true;
        Some((Event::StreamEnd, Position { line: self.line, column: self.column }))
    }
}
