//! `opbound overlay SPEC OVERLAY... [-o FILE]`: the document OpenAPI Overlays make of a spec,
//! written in the spec's own syntax.

use std::path::PathBuf;

use super::exit;
use super::failure::Failure;
use crate::spec::Source;
use crate::spec::overlay::{Applied, Overlay};

#[derive(clap::Args)]
pub(super) struct Args {
    /// The spec, JSON or YAML: a file, or an http(s):// URL.
    #[arg(value_name = "SPEC")]
    spec: PathBuf,
    /// Overlays (1.0 or 1.1, JSON or YAML), applied in order.
    #[arg(value_name = "OVERLAY", required = true)]
    overlays: Vec<PathBuf>,
    /// Write to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    fetch: super::specs::SpecFetch,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    let how = args.fetch.fetch()?;
    let spec = Source::read_with(&args.spec, &how).map_err(|e| Failure::unreadable(e.to_string()))?;
    let mut tree = spec.parse().map_err(|f| {
        errln!("{f}");
        Failure::invalid(format!("{}: not JSON or YAML", spec.path.display()))
    })?;
    let mut applied = Applied::default();
    for path in &args.overlays {
        let source = Source::read_with(path, &how).map_err(|e| Failure::unreadable(e.to_string()))?;
        let done = Overlay::read(source).and_then(|overlay| overlay.apply(&mut tree, &mut applied));
        if let Err(findings) = done {
            for f in &findings {
                errln!("{f}");
            }
            errln!("{}: invalid; nothing written", path.display());
            return Err(Failure::quiet(exit::INVALID));
        }
    }
    for w in &applied.warnings {
        errln!("{w}");
    }
    let text = Source::render(&tree, spec.format);
    match &args.output {
        Some(file) => std::fs::write(file, text)
            .map_err(|e| Failure::unreadable(format!("cannot write {}: {e}", file.display())))?,
        None => outln!("{}", text.strip_suffix('\n').unwrap_or(&text)),
    }
    Ok(exit::OK)
}
