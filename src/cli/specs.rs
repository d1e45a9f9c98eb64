//! The spec flags every command shares (`--spec`, `--max-counters`, `--store`), and loading a
//! spec for a command: its findings printed, or a [`Failure`] with the exit code.

use std::path::PathBuf;

use super::exit;
use super::failure::Failure;

/// The specs `check` and `routes` read: `--spec` as every command takes it, or positionally, as
/// scripts written before `--spec` existed everywhere do.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Specs {
    /// A spec file, JSON or YAML (repeatable). It may also be given without --spec.
    #[arg(long = "spec", value_name = "SPEC", display_order = 0)]
    pub(super) flagged: Vec<PathBuf>,
    /// Spec files, as with --spec.
    #[arg(value_name = "SPEC", required_unless_present = "flagged")]
    pub(super) positional: Vec<PathBuf>,
}

impl Specs {
    /// Every spec named, those given with --spec first.
    pub(super) fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.flagged.iter().chain(&self.positional)
    }

    pub(super) fn many(&self) -> bool {
        self.flagged.len() + self.positional.len() > 1
    }
}

/// Options that change how a spec compiles, shared by the commands.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SpecOptions {
    /// The most counters all bound tables together may hold (the sum of their max-keys).
    #[arg(long, default_value_t = crate::policy::DEFAULT_MAX_COUNTERS, value_name = "N")]
    pub(super) max_counters: u64,
    /// The most operations the spec may have; one with more is refused before it compiles.
    #[arg(long, default_value_t = crate::policy::DEFAULT_MAX_OPERATIONS, value_name = "N")]
    pub(super) max_operations: usize,
    /// The store the spec will run with: `memory`, or a redis:// URL (counts shared).
    #[arg(long, default_value = "memory", value_parser = StoreChoice::parse, value_name = "STORE")]
    pub(super) store: StoreChoice,
    /// An OpenAPI Overlay (1.0 or 1.1, JSON or YAML) applied to the spec before it compiles
    /// (repeatable, applied in order): limits added beside a spec one does not edit.
    #[arg(long = "overlay", value_name = "OVERLAY")]
    pub(super) overlays: Vec<PathBuf>,
    #[command(flatten)]
    pub(super) fetch: SpecFetch,
}

/// How an `https://` spec or overlay is fetched: the flags `--upstream-ca-file` and
/// `--upstream-server-name` are for the upstream, these for the spec.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SpecFetch {
    /// CA certificates (PEM) trusted for an https:// spec or overlay URL, instead of the
    /// system's roots; a self-signed certificate given itself is trusted as the server's own.
    #[arg(long, value_name = "FILE")]
    pub(super) spec_ca_file: Option<PathBuf>,
    /// The name asked for and verified when fetching an https:// spec URL, when not the URL's
    /// host (a service reached by address whose certificate names a host).
    #[arg(long, value_name = "NAME")]
    pub(super) spec_server_name: Option<String>,
}

impl SpecFetch {
    /// The fetch these flags ask for, with the CA file read.
    pub(super) fn fetch(&self) -> Result<crate::spec::fetch::Fetch, Failure> {
        let ca = match &self.spec_ca_file {
            Some(p) => Some(
                std::fs::read(p)
                    .map_err(|e| Failure::unreadable(format!("cannot read --spec-ca-file {}: {e}", p.display())))?,
            ),
            None => None,
        };
        crate::spec::fetch::Fetch::new(ca.as_deref(), self.spec_server_name.as_deref())
            .map_err(|e| Failure::unreadable(e.to_string()))
    }
}

impl SpecOptions {
    pub(super) fn options(&self, decision_service: bool) -> Result<crate::Options, Failure> {
        let fetch = self.fetch.fetch()?;
        Ok(crate::Options {
            max_counters: self.max_counters,
            max_operations: self.max_operations,
            shared_store: matches!(self.store, StoreChoice::Redis(_)),
            decision_service,
            decision_bodies: false,
            shadow: false,
            per_instance_ok: false,
            overlays: self.overlays.clone(),
            fetch,
        })
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
    pub(super) fn parse(s: &str) -> Result<StoreChoice, crate::store::redis::TargetError> {
        match s {
            "memory" => Ok(StoreChoice::Memory),
            url => crate::store::redis::Target::parse(url).map(StoreChoice::Redis),
        }
    }
}

/// Loads one spec for a command that needs a valid one, printing findings on failure.
pub(super) fn load_or_report(path: &std::path::Path, options: &crate::Options) -> Result<crate::Loaded, Failure> {
    report(crate::load(path, options), "run opbound check for details")
}

/// Loads a spec, or fails: every finding is printed here, then `then`; an unreadable file is left
/// for the failure to say.
pub(super) fn report(loaded: Result<crate::Loaded, crate::LoadError>, then: &str) -> Result<crate::Loaded, Failure> {
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
