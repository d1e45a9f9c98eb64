//! What `suggest -o` writes: the copy of the spec with the proposals in it, or (`--as overlay`)
//! the proposals alone as an OpenAPI Overlay.

use std::path::Path;

use super::super::failure::Failure;
use crate::replay::suggest::{self, Proposal};

/// What `--as` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Written {
    Spec,
    Overlay,
}

/// Writes `out`: the annotated copy already at `scratch`, moved there, or the overlay of the
/// proposals for `spec` (YAML, or JSON for a `.json` file), removing the bounds written where a
/// proposal goes when `replace`.
pub(super) fn write(
    out: &Path,
    written: Written,
    scratch: &Path,
    spec: &Path,
    replace: bool,
    loaded: &crate::Loaded,
    proposals: &[Proposal],
) -> Result<(), Failure> {
    let done = match written {
        Written::Spec => std::fs::rename(scratch, out),
        Written::Overlay => {
            let tree = loaded.source.parse().map_err(|f| Failure::invalid(f.to_string()))?;
            let title = format!("bounds opbound suggest proposed for {}", spec.display());
            let overlay = suggest::overlay(&tree, &loaded.policy, proposals, replace, &title);
            let json = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
            let format = if json { crate::spec::Format::Json } else { crate::spec::Format::Yaml };
            std::fs::write(out, crate::spec::Source::render(&overlay, format))
        }
    };
    done.map_err(|e| Failure::unreadable(format!("cannot write {}: {e}", out.display())))
}
