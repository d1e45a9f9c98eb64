//! `opbound check --spec SPEC...` (or `opbound check SPEC...`)

use super::{SpecOptions, Specs, exit};
use crate::LoadError;

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
}

pub(super) fn run(args: Args) -> u8 {
    let options = args.spec.options(args.decide);
    let many = args.specs.many();
    let mut code = exit::OK;
    for path in args.specs.paths() {
        // With several specs, each finding line says which file it is about.
        let prefix = if many { format!("{}: ", path.display()) } else { String::new() };
        match crate::load(path, &options) {
            Ok(loaded) => {
                for w in &loaded.policy.warnings {
                    errln!("{prefix}{w}");
                }
                let p = &loaded.policy;
                outln!(
                    "{}: valid {} spec: {} operations, {} bounds, {} warnings",
                    path.display(),
                    p.version.label(),
                    p.operations.len(),
                    p.bounds.len(),
                    p.warnings.len()
                );
            }
            Err(LoadError::Read(e)) => {
                errln!("{prefix}error: {e}");
                code = code.max(exit::UNREADABLE);
            }
            Err(LoadError::Invalid { findings, .. }) => {
                for f in &findings {
                    errln!("{prefix}{f}");
                }
                let errors = findings.iter().filter(|f| f.is_error()).count();
                outln!("{}: invalid: {} errors, {} warnings", path.display(), errors, findings.len() - errors);
                code = code.max(exit::INVALID);
            }
        }
    }
    code
}
