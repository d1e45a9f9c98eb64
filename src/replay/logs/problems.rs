//! What reading logs runs into: lines malformed or late, the formats found, the facts the logs
//! lack ([`Problems`], for the report), and the errors that stop reading ([`LogError`]).

use std::path::PathBuf;

use super::format::Format;
use crate::replay::Source;

/// How many malformed lines are kept as examples.
pub(super) const EXAMPLES: usize = 20;

/// What reading the logs ran into, for the report.
#[derive(Clone, Debug, Default)]
pub struct Problems {
    /// Lines that could not be read, skipped.
    pub malformed: u64,
    /// The first few of them, with why (the line is in the [`Source`]; the file is
    /// `formats[source.file]`).
    pub examples: Vec<(Source, String)>,
    /// Lines that came later than the reorder window allows: replayed at the latest time seen.
    pub late: u64,
    /// Each file given, in order, with its format: [`Format::Auto`] until a line was readable.
    pub formats: Vec<(PathBuf, Format)>,
    /// Facts the logs do not hold (see [`Format::lacks`]), and headers a log redacted, such as
    /// `header:authorization`; sorted, each once.
    pub lacks: Vec<String>,
}

impl Problems {
    pub(super) fn malformed(&mut self, source: Source, why: LineError) {
        self.malformed += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push((source, why.to_string()));
        }
    }

    pub(super) fn lack(&mut self, fact: &str) {
        if let Err(at) = self.lacks.binary_search_by(|lack| lack.as_str().cmp(fact)) {
            self.lacks.insert(at, fact.to_owned());
        }
    }
}

/// Why one line of a log is not read: it is counted as malformed, and the first few are kept as
/// examples.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LineError {
    /// A field the format needs is not on the line.
    #[error("no {0}")]
    Missing(&'static str),
    /// A field is there, but its value is not what it must be.
    #[error("{field} `{value}` is not {expected}")]
    Unreadable {
        /// The field, as the format or the mapping names it.
        field: String,
        /// Its value, as written.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// Not JSON at all.
    #[error("not JSON ({0})")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("not a JSON object")]
    NotObject,
    /// No format could be told from the lines.
    #[error("format not detected")]
    Undetected,
    /// The line is not one of any format known.
    #[error("not a line of any known log format")]
    UnknownFormat,
    /// The line is longer than a line is read.
    #[error("longer than {0} bytes")]
    TooLong(u64),
}

impl LineError {
    /// `field` is there with `value`, which is not `expected`.
    pub(super) fn unreadable(
        field: impl Into<String>,
        value: &(impl ToString + ?Sized),
        expected: &'static str,
    ) -> LineError {
        LineError::Unreadable { field: field.into(), value: value.to_string(), expected }
    }
}

/// A fatal error: a log that cannot be opened or read further.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file cannot be opened or read (a corrupt gzip stream is one).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A `--field` mapping names no fact.
    #[error("--field: {0}")]
    Mapping(MappingError),
}

/// The facts a `--field` mapping may name, as the refusal lists them.
const FACTS: &str = "user, org, roles, token, address, header:NAME, cookie:NAME";

/// Why a `--field` mapping cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// No `=` between the fact and the field.
    #[error("`{0}` is not fact=field (for example `user=remote_user`)")]
    NoEquals(String),
    /// Nothing after the `=`.
    #[error("`{0}` names no field after `=`")]
    NoField(String),
    /// A fact that is not one of `FACTS`.
    #[error("unknown fact `{0}`: expected one of {FACTS}")]
    UnknownFact(String),
    /// A fact mapped to an empty field.
    #[error("`{0}` is mapped to no field")]
    MappedToNothing(String),
}
