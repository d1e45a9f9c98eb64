//! Where a node or an error sits in a spec's text.

/// Where a node or an error sits in the text: 1-based line, and 1-based column in characters
/// (what editors show).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}
