//! Command-line parsing and dispatch. Exit codes: 0 success, 1 an invalid spec (or request),
//! 2 a file that cannot be read, a usage error, or output lost to something other than a reader
//! that left (a closed pipe ends printing quietly); `suggest` alone adds 3, proposals that did
//! not compile.

// Every line goes through `outln!`/`errln!`, which stop quietly on a closed pipe; `println!`
// would panic there (`opbound routes spec.yaml | head`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
mod output;

mod check;
#[cfg(test)]
mod config_tests;
mod decide;
mod demo;
mod diff;
mod document;
mod exit;
mod explain;
mod failure;
mod flags;
mod identity;
mod overlay;
mod replay;
mod routes;
mod schema;
mod serve;
mod server;
mod snippet;
mod specs;
mod start;
mod suggest;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use failure::Failure;

/// Rate limits from an OpenAPI document's `x-rate-limit`, run beside the API.
#[derive(Parser)]
#[command(name = "opbound", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate specs: one line per finding on stderr; exit 0 valid, 1 invalid, 2 unreadable.
    Check(check::Args),
    /// List every operation with its method, template, id and bounds.
    Routes(routes::Args),
    /// Show which operation a request reaches and which bounds apply to it.
    Explain(explain::Args),
    /// Run as a reverse proxy in front of an API, enforcing the spec's bounds.
    Serve(Box<serve::Args>),
    /// Run as a decision service for a gateway (nginx, Envoy, Traefik, Caddy).
    Decide(Box<decide::Args>),
    /// Run a stub API with opbound in front of it, and show a 200 turning into a 429.
    Demo(demo::Args),
    /// Compare two specs' limits: exit 0 nothing to review, 1 an operation lost every bound, 2 unreadable or invalid.
    Diff(diff::Args),
    /// Print the JSON Schema of `x-rate-limit` and `x-rate-limit-policies`, for editors and linters.
    Schema(schema::Args),
    /// Publish the limits: the spec with 429 responses, RateLimit headers and the bounds in
    /// words added (or a Markdown limits page); exit 0, 1 invalid, 2 unreadable.
    Document(document::Args),
    /// Run recorded traffic (access logs) through the spec's bounds on the log's own clock and
    /// report what they would have refused; exit 0, 1 invalid spec, 2 unreadable.
    Replay(replay::Args),
    /// Write the document OpenAPI Overlays make of a spec (JSON for a JSON spec, YAML for YAML);
    /// exit 0, 1 an invalid overlay, 2 unreadable.
    Overlay(overlay::Args),
    /// Propose bounds from recorded traffic, with their evidence, written into a copy of the
    /// spec; exit 0, 1 invalid spec, 2 unreadable, 3 no proposals that compile.
    Suggest(suggest::Args),
}

/// The `opbound` command: parses the process's arguments, runs the subcommand, and returns its
/// exit code (0 success, 1 an invalid spec or request, 2 unreadable input or a usage error).
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::UNREADABLE } else { exit::OK });
        }
    };
    let ran = match cli.command {
        Command::Check(args) => check::run(args),
        Command::Routes(args) => Ok(routes::run(args)),
        Command::Explain(args) => explain::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Decide(args) => decide::run(*args),
        Command::Demo(args) => demo::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Schema(args) => Ok(schema::run(args)),
        Command::Document(args) => document::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Suggest(args) => suggest::run(args),
        Command::Overlay(args) => overlay::run(args),
    };
    let code = ran.unwrap_or_else(Failure::print);
    ExitCode::from(output::exit_code(code))
}
