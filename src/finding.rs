//! Problems found in a spec, each located by JSON pointer and, where feasible, by line.

use std::fmt;

/// How serious a finding is: an error makes a spec invalid, a warning does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem, located in the document.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// JSON pointer to the offending value (`/paths/~1a/get/x-rate-limit/0/window`); empty for the
    /// whole document.
    pub pointer: String,
    /// 1-based line of the offending value in the file, when it could be found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// Lowercase, self-contained, carries the offending value and, where one helps, a hint.
    pub message: String,
}

impl Finding {
    /// An error: the spec is invalid.
    pub fn error(pointer: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding { severity: Severity::Error, pointer: pointer.into(), line: None, message: message.into() }
    }

    /// A warning: the spec loads, but something deserves a look.
    pub fn warning(pointer: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding { severity: Severity::Warning, pointer: pointer.into(), line: None, message: message.into() }
    }

    /// Whether this finding makes the spec invalid.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Finding {
    /// `error: /paths/~1a/get/x-rate-limit/0/window (line 9): window PT0.5S is below the minimum PT1S`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.severity)?;
        let pointer = if self.pointer.is_empty() { "/" } else { &self.pointer };
        f.write_str(pointer)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Sorts findings into a stable order: errors first, then by position in the document.
pub fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        (a.severity, a.line.unwrap_or(usize::MAX), &a.pointer, &a.message).cmp(&(
            b.severity,
            b.line.unwrap_or(usize::MAX),
            &b.pointer,
            &b.message,
        ))
    });
}
