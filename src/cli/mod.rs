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
mod explain;
mod flags;
mod identity;
mod replay;
mod routes;
mod schema;
mod serve;
mod server;
mod snippet;
mod start;
mod suggest;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Propose bounds from recorded traffic, with their evidence, written into a copy of the
    /// spec; exit 0, 1 invalid spec, 2 unreadable, 3 no proposals that compile.
    Suggest(suggest::Args),
}

/// The specs `check` and `routes` read: `--spec` as every command takes it, or positionally, as
/// scripts written before `--spec` existed everywhere do.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Specs {
    /// A spec file, JSON or YAML (repeatable). It may also be given without --spec.
    #[arg(long = "spec", value_name = "SPEC", display_order = 0)]
    flagged: Vec<PathBuf>,
    /// Spec files, as with --spec.
    #[arg(value_name = "SPEC", required_unless_present = "flagged")]
    positional: Vec<PathBuf>,
}

impl Specs {
    /// Every spec named, those given with --spec first.
    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.flagged.iter().chain(&self.positional)
    }

    fn many(&self) -> bool {
        self.flagged.len() + self.positional.len() > 1
    }
}

/// Options that change how a spec compiles, shared by the commands.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SpecOptions {
    /// The most counters all bound tables together may hold (the sum of their max-keys).
    #[arg(long, default_value_t = crate::policy::DEFAULT_MAX_COUNTERS, value_name = "N")]
    max_counters: u64,
    /// The store the spec will run with: `memory`, or a redis:// URL (counts shared).
    #[arg(long, default_value = "memory", value_parser = StoreChoice::parse, value_name = "STORE")]
    store: StoreChoice,
}

impl SpecOptions {
    fn options(&self, decision_service: bool) -> crate::Options {
        crate::Options {
            max_counters: self.max_counters,
            shared_store: matches!(self.store, StoreChoice::Redis(_)),
            decision_service,
            decision_bodies: false,
            shadow: false,
            per_instance_ok: false,
        }
    }
}

/// Where counters live, as `--store` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreChoice {
    /// Each instance counts on its own.
    Memory,
    /// Every instance counts in one Redis (or cluster).
    Redis(crate::store::redis::Target),
}

impl StoreChoice {
    /// `memory`, or what [`crate::store::redis::Target::parse`] takes.
    fn parse(s: &str) -> Result<StoreChoice, String> {
        match s {
            "memory" => Ok(StoreChoice::Memory),
            url => crate::store::redis::Target::parse(url).map(StoreChoice::Redis),
        }
    }
}

/// The exit codes every command shares.
pub(crate) mod exit {
    pub(crate) const OK: u8 = 0;
    pub(crate) const INVALID: u8 = 1;
    pub(crate) const UNREADABLE: u8 = 2;
    /// `suggest` could not make proposals that compile within the counter budget.
    pub(crate) const NOT_PROPOSED: u8 = 3;
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
    };
    let code = ran.unwrap_or_else(Failure::print);
    ExitCode::from(output::exit_code(code))
}

/// Why a command stopped: the exit code, and what to say (`error: {message}`), said once by
/// [`run`]. `message` is `None` when the details were already printed (a spec's findings).
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    message: Option<String>,
}

impl Failure {
    /// Something could not be read or started: a file, a flag's value, a listener (exit 2).
    pub(crate) fn unreadable(message: impl Into<String>) -> Failure {
        Failure { code: exit::UNREADABLE, message: Some(message.into()) }
    }

    /// Flags that do not go together, or that a command needs (exit 2, as clap's own).
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::unreadable(message)
    }

    /// What was asked for is invalid: a spec, a request (exit 1).
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure { code: exit::INVALID, message: Some(message.into()) }
    }

    /// A failure whose details were printed where they arose.
    pub(crate) fn quiet(code: u8) -> Failure {
        Failure { code, message: None }
    }

    /// Says why, if not said already, and gives the exit code.
    fn print(self) -> u8 {
        if let Some(message) = &self.message {
            errln!("error: {message}");
        }
        self.code
    }
}

/// Loads one spec for a command that needs a valid one, printing findings on failure.
fn load_or_report(path: &std::path::Path, options: &crate::Options) -> Result<crate::Loaded, Failure> {
    report(crate::load(path, options), "run opbound check for details")
}

/// Loads a spec, or fails: every finding is printed here, then `then`; an unreadable file is left
/// for the failure to say.
fn report(loaded: Result<crate::Loaded, crate::LoadError>, then: &str) -> Result<crate::Loaded, Failure> {
    match loaded {
        Ok(loaded) => Ok(loaded),
        Err(crate::LoadError::Read(e)) => Err(Failure::unreadable(e.to_string())),
        Err(crate::LoadError::Invalid { path, findings }) => {
            for f in &findings {
                errln!("{f}");
            }
            errln!("{path}: invalid; {then}");
            Err(Failure::quiet(exit::INVALID))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StoreChoice;
    use crate::store::redis::Target;

    #[test]
    fn store_is_memory_or_a_redis_target() {
        assert_eq!(StoreChoice::parse("memory"), Ok(StoreChoice::Memory));
        let single = StoreChoice::parse("redis://127.0.0.1:6379");
        assert_eq!(single, Ok(StoreChoice::Redis(Target::Single("redis://127.0.0.1:6379".to_string()))));
        // Once any string but `memory` was taken as shared; a typo now stops at the flag.
        for bad in ["Memory", "memroy", "http://127.0.0.1:6379", "redis+cluster://"] {
            assert!(StoreChoice::parse(bad).is_err(), "{bad}");
        }
    }
}
