//! Loading a spec: read, parse, compile, and every finding placed at its line and column.

use std::path::Path;

use super::compile::{compile, name_operations};
use super::compiled::Policy;
use super::options::Options;
use crate::finding::{self, Finding};
use crate::spec::overlay::{Applied, Overlay};
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
    /// The document the policy was compiled from, as text: the spec file's, or with overlays,
    /// the document they made (what `document` and `suggest` start from).
    pub source: Source,
    /// What the spec compiled to.
    pub policy: Policy,
    /// The spec's text and every overlay's, as read: what the server fingerprints to tell
    /// whether a reload changed anything.
    pub inputs: String,
    /// Where findings are placed: the spec file as written, and the nodes overlays wrote.
    written: Written,
}

/// Where the nodes of a loaded document were written.
#[derive(Debug)]
struct Written {
    /// The spec file as read.
    spec: Source,
    /// Nodes overlay actions wrote.
    overlays: Applied,
}

impl Loaded {
    /// Where the nodes at `pointers` were written, as `routes` and `explain` say it: the overlay
    /// action that wrote one (`limits.yaml, action 2`), or, when bounds may come from more than
    /// one place (overlays given) or from a URL, the spec and line
    /// (`http://127.0.0.1:8000/openapi.json, line 40`). `None` for a spec file read alone: every
    /// bound is in the file the user named.
    pub fn written_at(&self, pointers: &[&str]) -> Vec<Option<String>> {
        let spec = &self.written.spec.path;
        let named = self.written.overlays.origins.is_empty() && !crate::spec::fetch::is_url(spec);
        let unwritten: Vec<&str> =
            pointers.iter().copied().filter(|p| self.written.overlays.origin_of(p).is_none()).collect();
        let positions = if named { Default::default() } else { self.written.spec.locate(&unwritten) };
        pointers
            .iter()
            .map(|p| match self.written.overlays.origin_of(p) {
                Some(origin) => Some(origin.action.clone()),
                None if named => None,
                None => Some(match positions.get(*p) {
                    Some(at) => format!("{}, line {}", spec.display(), at.line),
                    None => spec.display().to_string(),
                }),
            })
            .collect()
    }

    /// Places findings about this policy made after it loaded (by a command that knows how it
    /// will be served) as the load placed its own: the operation each sits in, its line and
    /// column; then sorts them.
    pub fn locate(&self, findings: &mut Vec<Finding>) {
        name_operations(&self.policy.operations, findings);
        add_positions(&self.written, findings);
    }
}

/// Reads, parses and compiles a spec file; findings carry lines and columns.
pub fn load(path: &Path, options: &Options) -> Result<Loaded, LoadError> {
    let source = Source::read_with(path, &options.fetch)?;
    load_source(source, options)
}

/// The spec's text and the overlays' named in `options`, read now: what a load from them would
/// read (an overlay that cannot be read stands as its error).
pub fn inputs(spec: &str, options: &Options) -> String {
    let mut all = spec.to_string();
    for path in &options.overlays {
        all.push('\0');
        // A URL too: an overlay served beside the spec changes without its file changing.
        match Source::read_with(path, &options.fetch) {
            Ok(source) => all.push_str(&source.text),
            Err(e) => all.push_str(&format!("unreadable {e}")),
        }
    }
    all
}

/// Parses, applies the overlays `options` names, and compiles a spec already in memory.
pub fn load_source(source: Source, options: &Options) -> Result<Loaded, LoadError> {
    let invalid = |written: &Written, mut findings: Vec<Finding>| {
        add_positions(written, &mut findings);
        LoadError::Invalid { path: written.spec.path.display().to_string(), findings }
    };
    let inputs = inputs(&source.text, options);
    let mut written = Written { spec: source, overlays: Applied::default() };
    let mut value = match written.spec.parse() {
        Ok(v) => v,
        Err(f) => return Err(invalid(&written, vec![f])),
    };
    for path in &options.overlays {
        let overlay = Overlay::read(Source::read_with(path, &options.fetch)?).map_err(|mut findings| {
            for f in &mut findings {
                f.file.get_or_insert_with(|| path.display().to_string().into());
            }
            LoadError::Invalid { path: path.display().to_string(), findings }
        })?;
        overlay
            .apply(&mut value, &mut written.overlays)
            .map_err(|findings| LoadError::Invalid { path: path.display().to_string(), findings })?;
    }
    let source = if options.overlays.is_empty() {
        written.spec.clone()
    } else {
        Source::from_text(&written.spec.path, Source::render(&value, written.spec.format))
    };
    match compile(&value, options) {
        Ok(mut policy) => {
            add_positions(&written, &mut policy.warnings);
            policy.warnings.extend(written.overlays.warnings.iter().cloned());
            finding::sort(&mut policy.warnings);
            Ok(Loaded { source, policy, inputs, written })
        }
        Err(mut findings) => {
            findings.extend(written.overlays.warnings.iter().cloned());
            Err(invalid(&written, findings))
        }
    }
}

/// Fills in lines and columns (a pointer to something absent gets its nearest written
/// ancestor's position), dedupes and sorts findings. A finding inside a node an overlay action
/// wrote is placed at that action, in its file.
fn add_positions(written: &Written, findings: &mut Vec<Finding>) {
    for f in findings.iter_mut().filter(|f| f.line.is_none() && f.file.is_none()) {
        if let Some(origin) = written.overlays.origin_of(&f.pointer) {
            f.file = Some(origin.action.as_str().into());
            (f.line, f.column) = (origin.line, origin.column);
        }
    }
    let mut wanted: Vec<&str> = Vec::new();
    for f in findings.iter().filter(|f| f.line.is_none() && f.file.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() {
            wanted.push(p);
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
    let positions = written.spec.locate(&wanted);
    for f in findings.iter_mut().filter(|f| f.line.is_none() && f.file.is_none()) {
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
