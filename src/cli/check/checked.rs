//! What checking one spec found ([`Checked`]), which every format renders: its verdict, what
//! the verdict rests on, and its exit code.

use std::path::Path;

use crate::cli::exit;
use crate::finding::Finding;

/// What checking one spec found.
pub(super) struct Checked<'a> {
    /// The spec as it was named on the command line.
    pub(super) path: &'a Path,
    pub(super) outcome: Outcome,
}

/// A spec's verdict, with what it rests on.
pub(super) enum Outcome {
    /// The spec loads; its findings are warnings.
    Valid { version: &'static str, operations: usize, bounds: usize, findings: Vec<Finding> },
    /// At least one finding is an error.
    Invalid { findings: Vec<Finding> },
    /// The file could not be read or parsed as a file at all.
    Unreadable { error: String },
}

impl Outcome {
    pub(super) fn verdict(&self) -> &'static str {
        match self {
            Outcome::Valid { .. } => "valid",
            Outcome::Invalid { .. } => "invalid",
            Outcome::Unreadable { .. } => "unreadable",
        }
    }

    pub(super) fn findings(&self) -> &[Finding] {
        match self {
            Outcome::Valid { findings, .. } | Outcome::Invalid { findings } => findings,
            Outcome::Unreadable { .. } => &[],
        }
    }

    pub(super) fn code(&self) -> u8 {
        match self {
            Outcome::Valid { .. } => exit::OK,
            Outcome::Invalid { .. } => exit::INVALID,
            Outcome::Unreadable { .. } => exit::UNREADABLE,
        }
    }

    /// Errors and warnings among the findings.
    pub(super) fn counts(&self) -> (usize, usize) {
        let errors = self.findings().iter().filter(|f| f.is_error()).count();
        (errors, self.findings().len() - errors)
    }

    /// The line that sums a loaded spec up (`FILE: valid ...`), the same in every text format;
    /// none for a spec that could not be read.
    pub(super) fn summary(&self, file: &str) -> Option<String> {
        use crate::numbers::counted;
        let (errors, warnings) = self.counts();
        match self {
            Outcome::Valid { version, operations, bounds, .. } => Some(format!(
                "{file}: valid {version} spec: {}, {}, {}",
                counted(operations, "operation"),
                counted(bounds, "bound"),
                counted(warnings, "warning")
            )),
            Outcome::Invalid { .. } => {
                Some(format!("{file}: invalid: {}, {}", counted(errors, "error"), counted(warnings, "warning")))
            }
            Outcome::Unreadable { .. } => None,
        }
    }
}
