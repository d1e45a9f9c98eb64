//! Problems found in a spec, each located by JSON pointer and, where feasible, by line and column.

use std::fmt;

/// How serious a finding is: an error makes a spec invalid, a warning does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The spec cannot be loaded until this is fixed; `check` exits 1.
    Error,
    /// The spec loads and runs; this is worth a look (a named policy nobody uses, say).
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
    /// Whether this finding makes the spec invalid or only deserves a look.
    pub severity: Severity,
    /// JSON pointer to the offending value (`/paths/~1a/get/x-rate-limit/0/window`); empty for the
    /// whole document.
    pub pointer: String,
    /// 1-based line of the offending value in the file, when it could be found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based column of the offending value on its line, in characters, when it could be found.
    /// A minified JSON spec is one line: without a column every finding would say `line 1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// The operation the pointer is inside, in words (`POST /v1/customers`): a pointer into a
    /// long spec is hard to read, and the operation is what its author knows it by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// Lowercase, self-contained, carries the offending value and, where one helps, a hint.
    pub message: String,
    /// Where it was written when that is not the spec itself: an overlay's file and action
    /// (`limits.yaml, action 2`); `line` and `column` are then in that file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<Box<str>>,
}

impl Finding {
    /// An error: the spec is invalid.
    pub fn error(pointer: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding {
            severity: Severity::Error,
            pointer: pointer.into(),
            line: None,
            column: None,
            operation: None,
            message: message.into(),
            file: None,
        }
    }

    /// A warning: the spec loads, but something deserves a look.
    pub fn warning(pointer: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding {
            severity: Severity::Warning,
            pointer: pointer.into(),
            line: None,
            column: None,
            operation: None,
            message: message.into(),
            file: None,
        }
    }

    /// Whether this finding makes the spec invalid.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Finding {
    /// `error: /paths/~1a/get/x-rate-limit/0/window in GET /a (line 9, column 17): window PT0.5S
    /// is below the minimum PT1S`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.severity)?;
        let pointer = if self.pointer.is_empty() { "/" } else { &self.pointer };
        f.write_str(pointer)?;
        if let Some(operation) = &self.operation {
            write!(f, " in {operation}")?;
        }
        let file = self.file.as_ref().map(|file| format!("{file}, ")).unwrap_or_default();
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " ({file}line {line}, column {column})")?,
            (Some(line), None) => write!(f, " ({file}line {line})")?,
            _ if !file.is_empty() => write!(f, " ({})", file.trim_end_matches(", "))?,
            _ => {}
        }
        write!(f, ": {}", self.message)
    }
}

/// How many names a finding that stands for many places shows.
pub const FEW: usize = 3;

/// `a`, `a and b`, `a, b and c`, or `a, b, c and 448 more`: enough to recognise, never a wall.
pub fn few(mut names: Vec<String>) -> String {
    if names.len() > FEW + 1 {
        let more = names.len() - FEW;
        names.truncate(FEW);
        names.push(format!("{more} more"));
    }
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The tail of a finding that stands for several places, after the count it gives:
/// `; they are a and b`, or `; among them a, b and c` when there are too many to list.
pub fn listing(mut names: Vec<String>) -> String {
    if names.len() > FEW + 1 {
        names.truncate(FEW);
        format!("; among them {}", few(names))
    } else {
        format!("; they are {}", few(names))
    }
}

/// Sorts findings into a stable order: errors first, then by position in the document.
pub fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        let position = |f: &Finding| (f.line.unwrap_or(usize::MAX), f.column.unwrap_or(usize::MAX));
        (a.severity, position(a), &a.pointer, &a.message).cmp(&(b.severity, position(b), &b.pointer, &b.message))
    });
}
