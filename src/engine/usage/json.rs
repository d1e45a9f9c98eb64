//! The integers at some JSON pointers of a document that arrives in pieces, found without holding
//! the document: the scan keeps one frame per level of nesting that can still lead to a pointer,
//! skips everything else (strings byte by byte, containers by their depth), and remembers, per
//! pointer, the last non-negative integer found there.
//!
//! It is not a validator: bytes that are not JSON leave what was found so far, and nothing more
//! is found in a document that goes wrong. Streaming parsers that emit whole tokens would hold a
//! string as long as a completion until it ends; this one holds at most a key of 256 bytes.

use std::sync::Arc;

/// The longest object key compared with a pointer's token; a longer key matches none.
const MAX_KEY: usize = 256;

/// The most pointers one scan looks for (they are a bit mask).
pub const MAX_POINTERS: usize = 32;

/// The pointers a scan looks for, split into their unescaped reference tokens.
#[derive(Debug)]
pub struct Pointers {
    tokens: Vec<Vec<Token>>,
}

#[derive(Debug)]
struct Token {
    name: String,
    /// The token read as an array index: digits without a leading zero.
    index: Option<usize>,
}

impl Pointers {
    /// The pointers (`/usage/total_tokens`), at most [`MAX_POINTERS`]; an empty pointer (the
    /// whole document) is never an integer worth finding and matches nothing.
    pub fn new<'a>(pointers: impl IntoIterator<Item = &'a str>) -> Arc<Pointers> {
        let tokens = pointers
            .into_iter()
            .take(MAX_POINTERS)
            .map(|p| {
                p.split('/')
                    .skip(1)
                    .map(|t| {
                        let name = t.replace("~1", "/").replace("~0", "~");
                        let index = (!t.is_empty()
                            && (t == "0" || !t.starts_with('0'))
                            && t.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| t.parse().ok())
                        .flatten();
                        Token { name, index }
                    })
                    .collect()
            })
            .collect();
        Arc::new(Pointers { tokens })
    }

    /// How many pointers there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none (a scan for none finds nothing).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    fn all(&self) -> u32 {
        let n = self.tokens.len();
        if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
    }

    /// The pointers among `mask` whose token at `depth` is the key `name`.
    fn matching_key(&self, mask: u32, depth: usize, name: &str) -> u32 {
        self.filter(mask, |tokens| tokens.get(depth).is_some_and(|t| t.name == name))
    }

    /// The pointers among `mask` whose token at `depth` is the index `index`.
    fn matching_index(&self, mask: u32, depth: usize, index: usize) -> u32 {
        self.filter(mask, |tokens| tokens.get(depth).is_some_and(|t| t.index == Some(index)))
    }

    /// The pointers among `mask` exactly `depth` tokens long.
    fn ending_at(&self, mask: u32, depth: usize) -> u32 {
        self.filter(mask, |tokens| tokens.len() == depth)
    }

    fn filter(&self, mask: u32, keep: impl Fn(&[Token]) -> bool) -> u32 {
        let mut out = 0;
        let mut rest = mask;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if keep(&self.tokens[i]) {
                out |= 1 << i;
            }
        }
        out
    }
}

/// One level of nesting the scan follows.
#[derive(Debug)]
struct Frame {
    array: bool,
    /// The element being read, in an array.
    index: usize,
    /// The pointers that lead into this container.
    into: u32,
    /// The pointers that lead into the member being read.
    member: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A value may start here.
    Value,
    /// In an object, before a key (or its end).
    Key,
    /// After a value or a key: punctuation comes.
    After,
    /// Inside a key's quotes.
    InKey { escaped: bool },
    /// Inside a string value's quotes.
    InString { escaped: bool },
    /// Inside a number or a literal.
    InScalar,
    /// Bytes that are not JSON were met: nothing more is found.
    Broken,
}

/// A scan of one document.
#[derive(Debug)]
pub struct Scan {
    pointers: Arc<Pointers>,
    frames: Vec<Frame>,
    /// Levels of nesting below the followed frames that no pointer leads into.
    skipped: usize,
    state: State,
    key: Vec<u8>,
    /// The pointers the scalar being read is at.
    capturing: u32,
    scalar: Vec<u8>,
    /// The last non-negative integer found at each pointer.
    found: Vec<Option<u64>>,
}

impl Scan {
    /// A scan for `pointers`, at the start of a document.
    pub fn new(pointers: Arc<Pointers>) -> Scan {
        let n = pointers.len();
        Scan {
            pointers,
            frames: Vec::new(),
            skipped: 0,
            state: State::Value,
            key: Vec::new(),
            capturing: 0,
            scalar: Vec::new(),
            found: vec![None; n],
        }
    }

    /// Starts over for another document, keeping the buffers.
    pub fn reset(&mut self) {
        self.frames.clear();
        self.skipped = 0;
        self.state = State::Value;
        self.key.clear();
        self.capturing = 0;
        self.scalar.clear();
        self.found.iter_mut().for_each(|f| *f = None);
    }

    /// What was found at each pointer, in the order given.
    pub fn found(&self) -> &[Option<u64>] {
        &self.found
    }

    /// Ends the document: a number still being read (a document that is one) is complete.
    pub fn finish(&mut self) {
        if self.state == State::InScalar {
            self.end_scalar();
            self.state = State::After;
        }
    }

    /// Reads the next bytes of the document.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Broken => return,
                State::InString { escaped } => {
                    if escaped {
                        self.state = State::InString { escaped: false };
                        bytes = rest;
                        continue;
                    }
                    // Most of a long string is skipped in one step.
                    match memchr::memchr2(b'"', b'\\', bytes) {
                        None => return,
                        Some(at) => {
                            self.state =
                                if bytes[at] == b'"' { State::After } else { State::InString { escaped: true } };
                            bytes = &bytes[at + 1..];
                        }
                    }
                    continue;
                }
                State::InKey { escaped } => {
                    if escaped {
                        self.state = State::InKey { escaped: false };
                    } else if b == b'\\' {
                        self.state = State::InKey { escaped: true };
                    } else if b == b'"' {
                        self.end_key();
                        bytes = rest;
                        continue;
                    }
                    if self.key.len() <= MAX_KEY {
                        self.key.push(b);
                    }
                }
                State::InScalar => {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        self.end_scalar();
                        self.state = State::After;
                        // The delimiter is read as punctuation.
                        continue;
                    }
                    if self.capturing != 0 && self.scalar.len() <= 24 {
                        self.scalar.push(b);
                    }
                }
                _ => self.structural(b),
            }
            bytes = rest;
        }
    }

    /// The pointers the path so far leads to: every pointer at the top.
    fn leading(&self) -> u32 {
        self.frames.last().map_or(self.pointers.all(), |f| f.member)
    }

    fn structural(&mut self, b: u8) {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'{' | b'[' if self.state == State::Value => self.open(b == b'['),
            b'"' if self.state == State::Key && self.skipped == 0 => {
                self.key.clear();
                self.state = State::InKey { escaped: false };
            }
            b'"' if matches!(self.state, State::Value | State::Key) => self.state = State::InString { escaped: false },
            b':' if self.state == State::After => self.state = State::Value,
            b',' if self.state == State::After => self.next_member(),
            b'}' if self.state == State::Value => self.state = State::Broken,
            b'}' | b']' => self.close(),
            _ if self.state == State::Value => {
                let depth = self.frames.len();
                self.capturing = if self.skipped == 0 { self.pointers.ending_at(self.leading(), depth) } else { 0 };
                self.scalar.clear();
                if self.capturing != 0 {
                    self.scalar.push(b);
                }
                self.state = State::InScalar;
            }
            _ => self.state = State::Broken,
        }
    }

    fn open(&mut self, array: bool) {
        if self.skipped > 0 {
            self.skipped += 1;
        } else {
            let depth = self.frames.len();
            let into = self.pointers.filter(self.leading(), |tokens| tokens.len() > depth);
            if into == 0 {
                self.skipped = 1;
            } else {
                let member = if array { self.pointers.matching_index(into, depth, 0) } else { 0 };
                self.frames.push(Frame { array, index: 0, into, member });
            }
        }
        // In a skipped object, keys are read as strings: nothing there is compared.
        self.state = if array || self.skipped > 0 { State::Value } else { State::Key };
    }

    fn close(&mut self) {
        if self.skipped > 0 {
            self.skipped -= 1;
        } else if self.frames.pop().is_none() {
            self.state = State::Broken;
            return;
        }
        self.state = State::After;
    }

    fn next_member(&mut self) {
        if self.skipped > 0 {
            self.state = State::Value;
            return;
        }
        let depth = self.frames.len().saturating_sub(1);
        let pointers = self.pointers.clone();
        match self.frames.last_mut() {
            Some(f) if f.array => {
                f.index += 1;
                f.member = pointers.matching_index(f.into, depth, f.index);
                self.state = State::Value;
            }
            Some(_) => self.state = State::Key,
            None => self.state = State::Broken,
        }
    }

    fn end_key(&mut self) {
        self.state = State::After;
        let depth = self.frames.len().saturating_sub(1);
        let name = if self.key.len() > MAX_KEY {
            None
        } else if self.key.contains(&b'\\') {
            let mut quoted = Vec::with_capacity(self.key.len() + 2);
            quoted.push(b'"');
            quoted.extend_from_slice(&self.key);
            quoted.push(b'"');
            serde_json::from_slice::<String>(&quoted).ok()
        } else {
            String::from_utf8(self.key.clone()).ok()
        };
        let pointers = self.pointers.clone();
        if let Some(f) = self.frames.last_mut() {
            f.member = name.map_or(0, |name| pointers.matching_key(f.into, depth, &name));
        }
    }

    fn end_scalar(&mut self) {
        if self.capturing == 0 {
            return;
        }
        let digits = &self.scalar;
        if !digits.is_empty()
            && digits.len() <= 20
            && digits.iter().all(u8::is_ascii_digit)
            && let Some(n) = std::str::from_utf8(digits).ok().and_then(|s| s.parse::<u64>().ok())
        {
            let mut rest = self.capturing;
            while rest != 0 {
                let i = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                self.found[i] = Some(n);
            }
        }
        self.capturing = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(doc: &str, pointers: &[&str], piece: usize) -> Vec<Option<u64>> {
        let mut scan = Scan::new(Pointers::new(pointers.iter().copied()));
        for chunk in doc.as_bytes().chunks(piece.max(1)) {
            scan.feed(chunk);
        }
        scan.finish();
        scan.found().to_vec()
    }

    /// What serde_json finds at each pointer, as the scan should.
    fn expected(doc: &str, pointers: &[&str]) -> Vec<Option<u64>> {
        let value: serde_json::Value = serde_json::from_str(doc).unwrap();
        pointers.iter().map(|p| value.pointer(p).and_then(serde_json::Value::as_u64)).collect()
    }

    #[test]
    fn finds_what_serde_json_finds_in_any_pieces() {
        let docs = [
            r#"{"id":"chatcmpl-1","choices":[{"index":0,"message":{"content":"a } ] \" \\ {"}}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#,
            r#"{"object":"list","data":[{"embedding":[0.1,-2e-3,3],"index":0},{"embedding":[1,2],"index":1}],"usage":{"prompt_tokens":8,"total_tokens":8}}"#,
            r#"{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}"#,
            r#" { "a~b" : { "c/d" : 7 } , "list" : [ 1 , [ 2 , 3 ] , { "x" : 4 } ] , "esc\u0061ped": 5 } "#,
            r#"{"usage":null,"n":-3,"f":1.5,"big":18446744073709551615,"over":18446744073709551616,"t":true}"#,
            r#"17"#,
        ];
        let pointers = [
            "/usage/total_tokens",
            "/usage/prompt_tokens",
            "/message/usage/input_tokens",
            "/a~0b/c~1d",
            "/list/0",
            "/list/1/1",
            "/list/2/x",
            "/escaped",
            "/n",
            "/f",
            "/big",
            "/over",
            "/t",
            "/data/1/index",
            "/choices/0/index",
        ];
        for doc in docs {
            let want = if doc == "17" { vec![None; pointers.len()] } else { expected(doc, &pointers) };
            for piece in [1, 2, 3, 7, 64, 4096] {
                assert_eq!(scan_in_pieces(doc, &pointers, piece), want, "{doc} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn the_last_value_wins_and_broken_json_keeps_what_was_found() {
        let p = ["/usage/output_tokens"];
        // Two documents back to back are not one; the scan stops at the second.
        assert_eq!(scan_in_pieces(r#"{"usage":{"output_tokens":3}} {"usage":{"output_tokens":9}}"#, &p, 5), [Some(3)]);
        assert_eq!(scan_in_pieces(r#"{"usage":{"output_tokens":3,"output_tokens":5}}"#, &p, 5), [Some(5)]);
        assert_eq!(scan_in_pieces(r#"{"usage":{"output_tokens":3}, ]]]] garbage"#, &p, 5), [Some(3)]);
        assert_eq!(scan_in_pieces("[DONE]", &p, 5), [None]);
        assert_eq!(scan_in_pieces("", &p, 5), [None]);
    }

    #[test]
    fn a_long_key_matches_nothing_and_deep_nesting_costs_no_frames() {
        let long = "k".repeat(1000);
        let doc = format!(r#"{{"{long}":1,"usage":{{"total_tokens":4}}}}"#);
        assert_eq!(scan_in_pieces(&doc, &["/usage/total_tokens"], 3), [Some(4)]);
        let deep =
            format!(r#"{{"other":{}1{},"usage":{{"total_tokens":4}}}}"#, "[".repeat(100_000), "]".repeat(100_000));
        let mut scan = Scan::new(Pointers::new(["/usage/total_tokens"]));
        scan.feed(deep.as_bytes());
        assert_eq!(scan.found(), [Some(4)]);
        assert!(scan.frames.capacity() <= 4, "skipped levels hold no frame");
    }
}
