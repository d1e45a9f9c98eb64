//! A linear pass that refuses a document nested too deep before a parser spends on it.

use super::position::Position;

/// The deepest nesting of flow collections read: the parsers' own limit (serde_json's and the
/// YAML deserializer's), so that nothing they would read is refused here.
pub const MAX_NESTING: usize = 128;

/// Where the text first goes deeper than [`MAX_NESTING`], if it does.
// The YAML parser looks at a candidate key for every open flow collection (`[`, `{`) at every
// token, so a document nested n levels costs it n² steps before its own limit refuses it:
// 100,000 levels (200 KB) took 58 s. For YAML this pass follows the scanner's rules for where a
// flow collection, a quoted scalar, a comment or a block scalar can start, so no bracket inside
// text is counted and none outside is missed: on a document the parser would read that far, the
// depth found is the parser's.
pub(super) fn too_deep(text: &str, yaml: bool) -> Option<Position> {
    let mut scan = Scan { bytes: text.as_bytes(), at: 0, line_start: 0 };
    if yaml { scan.yaml() } else { scan.json() }
}

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Where the line `at` is on starts; its number is counted only for a refusal.
    line_start: usize,
}

/// A block scalar (`|`, `>`) being skipped: its lines are text.
struct BlockScalar {
    /// The indentation of its lines, once the first has set it.
    indent: Option<usize>,
    /// The innermost block collection's column when it started (`-1` at the top).
    parent: isize,
    /// An explicit indentation indicator (`|2`).
    explicit: Option<usize>,
}

fn blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

impl Scan<'_> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.at + ahead).copied()
    }

    /// Moves one byte on.
    fn bump(&mut self) {
        if self.bytes[self.at] == b'\n' {
            self.line_start = self.at + 1;
        }
        self.at += 1;
    }

    /// Moves on to `to`, over whole lines too.
    fn skip_to(&mut self, to: usize) {
        if let Some(newline) = memchr::memrchr(b'\n', &self.bytes[self.at..to]) {
            self.line_start = self.at + newline + 1;
        }
        self.at = to;
    }

    /// The position of the byte at `at`, its column in characters.
    fn position(&self) -> Position {
        let line_start = memchr::memrchr(b'\n', &self.bytes[..self.at]).map_or(0, |n| n + 1);
        let line = memchr::memchr_iter(b'\n', &self.bytes[..line_start]).count() + 1;
        let column = self.bytes[line_start..self.at].iter().filter(|&&b| b & 0xC0 != 0x80).count() + 1;
        Position { line, column }
    }

    /// The column of the byte at `at`, in bytes: indentation is spaces, which is all it is used
    /// for.
    fn column(&self) -> usize {
        self.at - self.line_start
    }

    /// JSON: brackets outside strings. Lines do not matter until a refusal.
    fn json(&mut self) -> Option<Position> {
        let mut depth = 0usize;
        while let Some(&b) = self.bytes.get(self.at) {
            match b {
                b'"' => {
                    self.at += 1;
                    self.double_quoted();
                    continue;
                }
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some(self.position());
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.at += 1;
        }
        None
    }

    /// After an opening `"`: up to and past the closing one.
    fn double_quoted(&mut self) {
        while let Some(i) = memchr::memchr2(b'"', b'\\', &self.bytes[self.at..]) {
            let found = self.at + i;
            let escape = self.bytes[found] == b'\\';
            // An escape takes the byte after it, a line break too.
            self.skip_to((found + 1 + usize::from(escape)).min(self.bytes.len()));
            if !escape {
                return;
            }
        }
        self.skip_to(self.bytes.len());
    }

    /// After an opening `'`: up to and past the closing one (`''` is a quote inside).
    fn single_quoted(&mut self) {
        while let Some(i) = memchr::memchr(b'\'', &self.bytes[self.at..]) {
            self.skip_to(self.at + i + 1);
            if self.peek(0) == Some(b'\'') {
                self.at += 1;
            } else {
                return;
            }
        }
        self.skip_to(self.bytes.len());
    }

    fn skip_line(&mut self) {
        let end = memchr::memchr2(b'\n', b'\r', &self.bytes[self.at..]).map_or(self.bytes.len(), |i| self.at + i);
        self.at = end;
    }

    fn spaces(&mut self) {
        while matches!(self.peek(0), Some(b' ' | b'\t')) {
            self.bump();
        }
    }

    /// A flow collection from its opening bracket past its closing one, or to the bracket that
    /// goes too deep.
    fn flow(&mut self) -> Option<Position> {
        let mut depth = 0usize;
        // Inside a plain scalar, quotes are text; it runs to a flow indicator, `: ` or ` #`.
        let mut plain = false;
        let mut after_blank = false;
        while let Some(b) = self.peek(0) {
            match b {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some(self.position());
                    }
                    plain = false;
                }
                b']' | b'}' => {
                    plain = false;
                    depth -= 1;
                    if depth == 0 {
                        self.bump();
                        return None;
                    }
                }
                b',' => plain = false,
                b'#' if after_blank => {
                    plain = false;
                    self.skip_line();
                    continue;
                }
                b':' if self.peek(1).is_none_or(|n| blank(n) || flow_indicator(n)) => plain = false,
                b'"' if !plain => {
                    self.bump();
                    self.double_quoted();
                    after_blank = false;
                    continue;
                }
                b'\'' if !plain => {
                    self.bump();
                    self.single_quoted();
                    after_blank = false;
                    continue;
                }
                b' ' | b'\t' | b'\r' | b'\n' => {}
                // Anchors, tags and aliases are words of their own; a scalar may follow.
                b'&' | b'!' | b'*' if !plain => {
                    while self.peek(0).is_some_and(|b| !blank(b) && !flow_indicator(b)) {
                        self.bump();
                    }
                    after_blank = false;
                    continue;
                }
                _ => plain = true,
            }
            after_blank = blank(b);
            self.bump();
        }
        None
    }

    /// YAML: block structure line by line, to know where a node starts and which lines are
    /// text; flow collections by [`Scan::flow`].
    fn yaml(&mut self) -> Option<Position> {
        // The columns of the open block collections, as the scanner's indentation stack.
        let mut indents: Vec<usize> = Vec::new();
        let top = |indents: &Vec<usize>| indents.last().map_or(-1, |&c| c as isize);
        let roll = |indents: &mut Vec<usize>, column: usize| {
            if column as isize > top(indents) {
                indents.push(column);
            }
        };
        let mut block_scalar: Option<BlockScalar> = None;
        // A plain scalar ran to the end of its line and may go on on the next.
        let mut plain_open = false;
        while self.at < self.bytes.len() {
            // A line: its indentation first.
            self.spaces();
            let indent = self.column();
            let first = self.peek(0);
            let empty = first.is_none_or(|b| b == b'\n' || b == b'\r');
            if let Some(scalar) = &mut block_scalar {
                if empty {
                    self.skip_line();
                    self.next_line();
                    continue;
                }
                let wanted = *scalar.indent.get_or_insert_with(|| match scalar.explicit {
                    Some(n) => (scalar.parent.max(0) as usize) + n,
                    None => indent.max((scalar.parent + 1) as usize).max(1),
                });
                if indent >= wanted {
                    self.skip_line();
                    self.next_line();
                    continue;
                }
                block_scalar = None;
            }
            if empty {
                self.next_line();
                continue;
            }
            let document_marker = indent == 0
                && (self.bytes[self.at..].starts_with(b"---") || self.bytes[self.at..].starts_with(b"..."))
                && self.peek(3).is_none_or(blank);
            if plain_open {
                plain_open = false;
                if indent as isize > top(&indents) && first != Some(b'#') && !document_marker {
                    // The scalar goes on: this line is text up to `: ` or ` #`.
                    plain_open = self.plain_rest();
                    self.next_line();
                    continue;
                }
            }
            if document_marker {
                indents.clear();
                self.at += 3;
            } else if indent == 0 && first == Some(b'%') {
                self.skip_line();
                self.next_line();
                continue;
            } else {
                while indents.last().is_some_and(|&c| c > indent) {
                    indents.pop();
                }
            }
            // Nodes on the line, one after another.
            loop {
                self.spaces();
                let column = self.column();
                let Some(b) = self.peek(0) else { break };
                let next_blank = self.peek(1).is_none_or(blank);
                match b {
                    b'\n' | b'\r' => break,
                    b'#' => {
                        self.skip_line();
                        break;
                    }
                    b'-' | b'?' if next_blank => {
                        roll(&mut indents, column);
                        self.bump();
                    }
                    b':' if next_blank => {
                        self.bump();
                    }
                    b'|' | b'>' => {
                        self.bump();
                        let mut explicit = None;
                        while let Some(h) = self.peek(0).filter(|h| matches!(h, b'+' | b'-' | b'0'..=b'9')) {
                            if h.is_ascii_digit() {
                                explicit = Some(usize::from(h - b'0'));
                            }
                            self.bump();
                        }
                        self.skip_line();
                        block_scalar = Some(BlockScalar { indent: None, parent: top(&indents), explicit });
                        break;
                    }
                    b'&' | b'!' | b'*' => {
                        while self.peek(0).is_some_and(|b| !blank(b)) {
                            self.bump();
                        }
                    }
                    b'[' | b'{' | b'"' | b'\'' => {
                        match b {
                            b'"' => {
                                self.bump();
                                self.double_quoted();
                            }
                            b'\'' => {
                                self.bump();
                                self.single_quoted();
                            }
                            _ => {
                                if let Some(at) = self.flow() {
                                    return Some(at);
                                }
                            }
                        }
                        // A key, if a `:` follows on its line.
                        self.spaces();
                        if self.peek(0) == Some(b':') && self.peek(1).is_none_or(blank) {
                            roll(&mut indents, column);
                        }
                    }
                    _ => {
                        // A plain scalar: a key if it ends in `: `, else it may go on.
                        let (key, open) = self.plain();
                        if key {
                            roll(&mut indents, column);
                        }
                        plain_open = open;
                        if !key {
                            break;
                        }
                    }
                }
            }
            self.skip_line();
            self.next_line();
        }
        None
    }

    /// Past a line break: `\r\n`, `\n`, or a lone `\r`, which YAML breaks a line at too (left
    /// unread, a lone `\r` held the scan in place: found by fuzzing).
    fn next_line(&mut self) {
        if self.peek(0) == Some(b'\r') {
            self.bump();
        }
        if self.peek(0) == Some(b'\n') {
            self.bump();
        }
    }

    /// A plain scalar in block context from its first character: whether it is a key (ended by
    /// `: `, which is left to read), or else whether it ran to the end of its line.
    fn plain(&mut self) -> (bool, bool) {
        let mut after_blank = false;
        while let Some(b) = self.peek(0) {
            match b {
                b'\n' | b'\r' => return (false, true),
                b':' if self.peek(1).is_none_or(blank) => return (true, false),
                b'#' if after_blank => {
                    self.skip_line();
                    return (false, false);
                }
                _ => {}
            }
            after_blank = blank(b);
            self.bump();
        }
        (false, true)
    }

    /// The rest of a line that carries a plain scalar on: whether it goes on past this line too.
    fn plain_rest(&mut self) -> bool {
        let (key, open) = self.plain();
        if key {
            // A key cannot span lines: the parser stops here.
            self.skip_line();
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text, whether it is YAML, and where it is refused (line, column), if it is.
    type Case = (String, bool, Option<(usize, usize)>);

    fn depth_refused(text: &str, yaml: bool) -> Option<(usize, usize)> {
        too_deep(text, yaml).map(|p| (p.line, p.column))
    }

    /// What is counted and what is text, by the YAML scanner's rules; `None` where the document
    /// is within the limit.
    #[test]
    fn brackets_in_text_do_not_count_and_brackets_in_flow_do() {
        let deep =
            |open: &str, close: &str| format!("{}{}", open.repeat(MAX_NESTING + 1), close.repeat(MAX_NESTING + 1));
        let at_limit = "[".repeat(MAX_NESTING) + &"]".repeat(MAX_NESTING);
        let brackets = "[".repeat(200);
        let closers = "]".repeat(200);
        let cases: Vec<Case> = vec![
            // Lone carriage returns end lines (the scan once stopped at one and never moved on).
            ("\rx:\r".to_string(), true, None),
            ("a: 1\r\rb: [x]\r".to_string(), true, None),
            (deep("[", "]"), true, Some((1, 129))),
            (deep("[", "]"), false, Some((1, 129))),
            (deep("{\"a\":", "}"), true, Some((1, 129 * 5 - 4))),
            (format!("a: {at_limit}\n"), true, None),
            (format!("a:\n  - x\n  - {}\n", deep("[", "]")), true, Some((3, 133))),
            // JSON in a file named .yaml is read by the YAML parser.
            (format!("{{\"openapi\": \"3.0.3\", \"x\": {}}}", deep("[", "]")), true, Some((1, 154))),
            // Text: plain and quoted scalars, comments, block scalars, a plain scalar's next line.
            (format!("a: see {brackets}\n"), true, None),
            (format!("a: \"{brackets}\"\nb: '{brackets}'\n"), true, None),
            (format!("a: 1 # {brackets}\n# {brackets}\n"), true, None),
            (format!("a: |\n  {brackets}\n\n  {brackets}\nb: 1\n"), true, None),
            (format!("a: >2\n   {brackets}\nb: 1\n"), true, None),
            (format!("a: long\n  {brackets}\n  more\n"), true, None),
            (format!("- a\n  {brackets}\n"), true, None),
            (format!("[a, \"{brackets}\", '{closers}', b]\n"), true, None),
            // In flow, a bracket ends a plain scalar and opens a collection.
            (format!("[a, \"{brackets}\", '{closers}', b{brackets}]\n"), true, Some((1, 541))),
            (format!("{{\"a\": \"{closers}\\\"{closers}\"}}"), false, None),
            // Closing brackets in text do not hide opening ones outside it.
            (format!("a: \"{closers}\"\nb: {}\n", deep("[", "]")), true, Some((2, 132))),
            (format!("a: it's\nb: {}\nc: 'x'\n", deep("[", "]")), true, Some((2, 132))),
            (format!("a: x\n  y\nb: {}\n", deep("[", "]")), true, Some((3, 132))),
            (format!("a: |\n  {closers}\nb: {}\n", deep("[", "]")), true, Some((3, 132))),
            (format!("[\"{closers}\", {}]\n", deep("[", "]")), true, Some((1, 333))),
            (format!("[a\"b, {}]\n", deep("[", "]")), true, Some((1, 134))),
            (format!("[a #{closers}\n, {}]\n", deep("[", "]")), true, Some((2, 130))),
            (format!("a: b\n---\n{}\n", deep("[", "]")), true, Some((3, 129))),
            // Columns are characters.
            (format!("é: {}", deep("[", "]")), true, Some((1, 132))),
        ];
        for (text, yaml, expected) in &cases {
            let shown: String = text.chars().take(60).collect();
            assert_eq!(depth_refused(text, *yaml), *expected, "{shown:?} (yaml: {yaml})");
        }
    }
}
