//! `opbound document SPEC [-o FILE] [--format openapi|markdown] [--headers legacy|draft|both]`

use std::path::PathBuf;

use super::exit;
use super::failure::Failure;
use super::specs::{SpecOptions, load_or_report};
use crate::engine::headers::HeaderStyle;
use crate::publish;

#[derive(clap::Args)]
#[command(override_usage = "opbound document [OPTIONS] <SPEC>\n       opbound document [OPTIONS] --spec <SPEC>")]
pub(super) struct Args {
    /// The spec file, JSON or YAML. It may also be given without --spec.
    #[arg(long = "spec", value_name = "SPEC", display_order = 0, conflicts_with = "positional")]
    flagged: Option<PathBuf>,
    /// The spec file, as with --spec.
    #[arg(value_name = "SPEC", required_unless_present = "flagged")]
    positional: Option<PathBuf>,
    /// Write to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// `openapi`: the spec itself, in its own version and syntax, with 429 (400, 413) responses,
    /// RateLimit headers and the bounds in words added; `markdown`: a limits page.
    #[arg(long, value_enum, default_value_t = Format::Openapi)]
    format: Format,
    /// The RateLimit headers documented, as `serve --headers` sends them.
    #[arg(long, value_enum, default_value_t = Headers::Legacy)]
    headers: Headers,
    #[command(flatten)]
    spec: SpecOptions,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Openapi,
    Markdown,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Headers {
    Legacy,
    Draft,
    Both,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    let Some(path) = args.flagged.as_ref().or(args.positional.as_ref()) else {
        return Err(Failure::usage("document needs a spec"));
    };
    let loaded = load_or_report(path, &args.spec.options(false)?)?;
    // The spec loaded, so it parses; its tree is what gets documented.
    let tree = loaded.source.parse().map_err(|f| Failure::invalid(f.to_string()))?;
    let style = match args.headers {
        Headers::Legacy => HeaderStyle::Legacy,
        Headers::Draft => HeaderStyle::Draft,
        Headers::Both => HeaderStyle::Both,
    };
    let text = match args.format {
        Format::Openapi => publish::render(&publish::document(tree, &loaded.policy, style), loaded.source.format),
        Format::Markdown => {
            let title = tree.pointer("/info/title").and_then(|t| t.as_str());
            publish::markdown(&loaded.policy, title, style)
        }
    };
    match &args.output {
        Some(file) => std::fs::write(file, text)
            .map_err(|e| Failure::unreadable(format!("cannot write {}: {e}", file.display())))?,
        None => outln!("{}", text.strip_suffix('\n').unwrap_or(&text)),
    }
    Ok(exit::OK)
}
