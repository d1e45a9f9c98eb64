//! `opbound check --spec SPEC...` (or `opbound check SPEC...`), its findings as text, JSON,
//! GitHub Actions annotations or SARIF.

mod github;
mod json;
mod sarif;

use std::path::{Path, PathBuf};

use super::{SpecOptions, Specs, exit};
use crate::LoadError;
use crate::finding::Finding;

#[derive(clap::Args)]
#[command(override_usage = "opbound check [OPTIONS] --spec <SPEC>...\n       opbound check [OPTIONS] <SPEC>...")]
pub(super) struct Args {
    #[command(flatten)]
    specs: Specs,
    #[command(flatten)]
    spec: SpecOptions,
    /// Check for serving by `opbound decide` (a decision service) rather than `opbound serve`.
    #[arg(long)]
    decide: bool,
    /// How findings are printed: `text` (one line each on stderr, a summary per spec on stdout),
    /// `json` (one document on stdout), `github` (GitHub Actions annotations on stdout) or
    /// `sarif` (SARIF 2.1.0 on stdout). The exit code is the same in every format.
    #[arg(long, value_enum, default_value_t = Format::Text, value_name = "FORMAT")]
    format: Format,
}

/// What `--format` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Text,
    Json,
    Github,
    Sarif,
}

/// What checking one spec found.
struct Checked<'a> {
    /// The spec as it was named on the command line.
    path: &'a Path,
    outcome: Outcome,
}

/// A spec's verdict, with what it rests on.
enum Outcome {
    /// The spec loads; its findings are warnings.
    Valid { version: &'static str, operations: usize, bounds: usize, findings: Vec<Finding> },
    /// At least one finding is an error.
    Invalid { findings: Vec<Finding> },
    /// The file could not be read or parsed as a file at all.
    Unreadable { error: String },
}

impl Outcome {
    fn verdict(&self) -> &'static str {
        match self {
            Outcome::Valid { .. } => "valid",
            Outcome::Invalid { .. } => "invalid",
            Outcome::Unreadable { .. } => "unreadable",
        }
    }

    fn findings(&self) -> &[Finding] {
        match self {
            Outcome::Valid { findings, .. } | Outcome::Invalid { findings } => findings,
            Outcome::Unreadable { .. } => &[],
        }
    }

    fn code(&self) -> u8 {
        match self {
            Outcome::Valid { .. } => exit::OK,
            Outcome::Invalid { .. } => exit::INVALID,
            Outcome::Unreadable { .. } => exit::UNREADABLE,
        }
    }

    /// Errors and warnings among the findings.
    fn counts(&self) -> (usize, usize) {
        let errors = self.findings().iter().filter(|f| f.is_error()).count();
        (errors, self.findings().len() - errors)
    }
}

pub(super) fn run(args: Args) -> u8 {
    let options = args.spec.options(args.decide);
    let paths: Vec<&PathBuf> = args.specs.paths().collect();
    let checked: Vec<Checked> = paths
        .iter()
        .map(|path| {
            let outcome = match crate::load(path, &options) {
                Ok(loaded) => {
                    let p = loaded.policy;
                    Outcome::Valid {
                        version: p.version.label(),
                        operations: p.operations.len(),
                        bounds: p.bounds.len(),
                        findings: p.warnings,
                    }
                }
                Err(LoadError::Read(e)) => Outcome::Unreadable { error: e.to_string() },
                Err(LoadError::Invalid { findings, .. }) => Outcome::Invalid { findings },
            };
            Checked { path, outcome }
        })
        .collect();
    match args.format {
        Format::Text => text(&checked, args.specs.many()),
        Format::Json => outln!("{}", json::render(&checked)),
        Format::Github => github::render(&checked),
        Format::Sarif => outln!("{}", sarif::render(&checked)),
    }
    checked.iter().map(|c| c.outcome.code()).max().unwrap_or(exit::OK)
}

/// Findings on stderr, one a line, and a summary per spec on stdout: what `check` always printed.
fn text(checked: &[Checked], many: bool) {
    for Checked { path, outcome } in checked {
        // With several specs, each finding line says which file it is about.
        let prefix = if many { format!("{}: ", path.display()) } else { String::new() };
        for f in outcome.findings() {
            errln!("{prefix}{f}");
        }
        let (errors, warnings) = outcome.counts();
        match outcome {
            Outcome::Valid { version, operations, bounds, .. } => outln!(
                "{}: valid {version} spec: {operations} operations, {bounds} bounds, {warnings} warnings",
                path.display()
            ),
            Outcome::Invalid { .. } => {
                outln!("{}: invalid: {errors} errors, {warnings} warnings", path.display())
            }
            Outcome::Unreadable { error } => errln!("{prefix}error: {error}"),
        }
    }
}
