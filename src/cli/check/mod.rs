//! `opbound check --spec SPEC...` (or `opbound check SPEC...`), its findings as text, JSON,
//! GitHub Actions annotations or SARIF.

mod checked;
mod github;
mod json;
mod sarif;

use std::path::PathBuf;

use super::exit;
use super::failure::Failure;
use super::identity::IdentityArgs;
use super::specs::{SpecOptions, Specs};
use crate::LoadError;
use crate::finding::Finding;
use crate::policy::{IdentitySources, Loaded};
use checked::{Checked, Outcome};

#[derive(clap::Args)]
#[command(override_usage = "opbound check [OPTIONS] --spec <SPEC>...\n       opbound check [OPTIONS] <SPEC>...")]
pub(super) struct Args {
    #[command(flatten)]
    specs: Specs,
    #[command(flatten)]
    spec: SpecOptions,
    /// Check what serving by `opbound serve` needs, as it starts: with the identity flags it
    /// will be given (--identity-header, the JWT flags), a bound that needs an identity they do
    /// not supply is an error.
    #[arg(long, conflicts_with = "decide")]
    serve: bool,
    /// Check for serving by `opbound decide` (a decision service) rather than `opbound serve`,
    /// and what it needs as it starts (as --serve does).
    #[arg(long)]
    decide: bool,
    /// With --decide: it serves gRPC alone (decide --grpc --no-http), where Envoy's ext_authz
    /// may send the request body.
    #[arg(long, requires = "decide")]
    no_http: bool,
    /// Counts kept per instance by the in-memory store are intended (one instance, or limits
    /// already divided among the instances): no warning says so on every check.
    #[arg(long)]
    per_instance_ok: bool,
    #[command(flatten)]
    identity: IdentityArgs,
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

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    let mut options = args.spec.options(args.decide)?;
    options.decision_bodies = args.no_http;
    options.per_instance_ok = args.per_instance_ok;
    // What serving will be told about callers, when the check is for serving.
    let serving = if args.serve || args.decide {
        Some(args.identity.resolver()?.sources())
    } else if args.identity.given() {
        return Err(Failure::usage(
            "--identity-header and the JWT flags say what a server will be told about callers: give --serve or --decide with them",
        ));
    } else {
        None
    };
    let paths: Vec<&PathBuf> = args.specs.paths().collect();
    let checked: Vec<Checked> = paths
        .iter()
        .map(|path| {
            let outcome = match crate::load(path, &options) {
                Ok(loaded) => judged(loaded, serving),
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
    Ok(checked.iter().map(|c| c.outcome.code()).max().unwrap_or(exit::OK))
}

/// A spec that loads, judged for how it will be served: with `serving`'s identity sources, each
/// bound they cannot feed is an error (`serve` and `decide` refuse to start with it); without,
/// a warning says that serving needs a source for them.
fn judged(loaded: Loaded, serving: Option<IdentitySources>) -> Outcome {
    let unfed = loaded.policy.unfed(serving.unwrap_or(IdentitySources::NONE));
    let mut added = Vec::new();
    match serving {
        Some(_) => {
            for u in &unfed {
                added.push(Finding::error(
                    u.bound.pointer.clone(),
                    format!(
                        "bound {} {} and nothing tells opbound who the caller is, so serving refuses to start; give {}",
                        u.bound.id,
                        u.what,
                        crate::policy::identity::feeding(std::slice::from_ref(u))
                    ),
                ));
            }
        }
        None if unfed.is_empty() => {}
        None => {
            let why = format!(
                "a caller's identity, so serving needs an identity source: opbound serve and decide refuse to start \
                 without {}; check --serve (or --decide) with those flags checks it",
                crate::policy::identity::feeding(&unfed)
            );
            added.push(match unfed.as_slice() {
                [u] => Finding::warning(
                    u.bound.pointer.clone(),
                    format!("bound {} {}: it needs {why}", u.bound.id, u.what),
                ),
                many => {
                    let listing = crate::finding::listing(many.iter().map(|u| u.bound.id.clone()).collect());
                    Finding::warning("", format!("{} bounds need {why}{listing}", many.len()))
                }
            });
        }
    }
    let mut findings = loaded.policy.warnings.clone();
    if !added.is_empty() {
        loaded.locate(&mut added);
        findings.extend(added);
        crate::finding::sort(&mut findings);
    }
    let p = &loaded.policy;
    if findings.iter().any(Finding::is_error) {
        return Outcome::Invalid { findings };
    }
    Outcome::Valid { version: p.version.label(), operations: p.operations.len(), bounds: p.bounds.len(), findings }
}

/// Findings on stderr, one a line, and a summary per spec on stdout: what `check` always printed.
fn text(checked: &[Checked], many: bool) {
    for Checked { path, outcome } in checked {
        // With several specs, each finding line says which file it is about.
        let prefix = if many { format!("{}: ", path.display()) } else { String::new() };
        for f in outcome.findings() {
            errln!("{prefix}{f}");
        }
        if let Outcome::Unreadable { error } = outcome {
            errln!("{prefix}error: {error}");
        } else if let Some(line) = outcome.summary(&path.display().to_string()) {
            outln!("{line}");
        }
    }
}
