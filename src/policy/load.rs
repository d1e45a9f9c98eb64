//! Loading a spec: read, parse, compile, and every finding placed at its line and column.

use std::path::Path;

use super::compile::{compile, name_operations};
use super::compiled::Policy;
use super::options::Options;
use crate::finding::{self, Finding};
use crate::spec::{ReadError, Source};

/// Why a spec did not become a policy.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read (exit 2).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The spec is invalid (exit 1): at least one error, plus any warnings.
    #[error("{} is invalid: {} error(s)", .path, .findings.iter().filter(|f| f.is_error()).count())]
    Invalid {
        /// The spec file, as it was named.
        path: String,
        /// Every problem found, errors and warnings, sorted, with lines and columns where known.
        findings: Vec<Finding>,
    },
}

/// A loaded spec: its source (for line numbers) and the compiled policy.
#[derive(Debug)]
pub struct Loaded {
    /// The spec's text and its file: what the policy's warnings were located in, and what the
    /// server fingerprints to tell whether a reload changed anything.
    pub source: Source,
    /// What the spec compiled to.
    pub policy: Policy,
}

impl Loaded {
    /// Places findings about this policy made after it loaded (by a command that knows how it
    /// will be served) as the load placed its own: the operation each sits in, its line and
    /// column; then sorts them.
    pub fn locate(&self, findings: &mut Vec<Finding>) {
        name_operations(&self.policy.operations, findings);
        add_positions(&self.source, findings);
    }
}

/// Reads, parses and compiles a spec file; findings carry lines and columns.
pub fn load(path: &Path, options: &Options) -> Result<Loaded, LoadError> {
    let source = Source::read(path)?;
    load_source(source, options)
}

/// Parses and compiles a spec already in memory.
pub fn load_source(source: Source, options: &Options) -> Result<Loaded, LoadError> {
    let invalid = |source: &Source, mut findings: Vec<Finding>| {
        add_positions(source, &mut findings);
        LoadError::Invalid { path: source.path.display().to_string(), findings }
    };
    let value = match source.parse() {
        Ok(v) => v,
        Err(f) => return Err(invalid(&source, vec![f])),
    };
    match compile(&value, options) {
        Ok(mut policy) => {
            add_positions(&source, &mut policy.warnings);
            Ok(Loaded { source, policy })
        }
        Err(findings) => Err(invalid(&source, findings)),
    }
}

/// Fills in lines and columns (a pointer to something absent gets its nearest written
/// ancestor's position), dedupes and sorts findings.
fn add_positions(source: &Source, findings: &mut Vec<Finding>) {
    let mut wanted: Vec<&str> = Vec::new();
    for f in findings.iter().filter(|f| f.line.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() {
            wanted.push(p);
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
    let positions = source.locate(&wanted);
    for f in findings.iter_mut().filter(|f| f.line.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() && f.line.is_none() {
            if let Some(at) = positions.get(p) {
                f.line = Some(at.line);
                f.column = Some(at.column);
            }
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
    finding::sort(findings);
    findings.dedup();
}
