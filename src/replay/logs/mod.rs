//! Access logs read into [`Record`]s: nginx `combined`, the JSON logs of nginx, Caddy and Envoy,
//! and opbound's own request log; gzip read directly; malformed lines counted and reported.

mod caddy;
mod combined;
mod envoy;
mod field;
mod file;
mod format;
mod json;
mod opbound;
mod order;
mod problems;
#[cfg(test)]
pub(super) mod tests;
mod time;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flate2::read::MultiGzDecoder;

pub use field::{Mapping, MappingError};
pub use format::Format;
pub use problems::{LogError, Problems};

use super::Record;
use crate::engine::clock::Nanos;
use field::Field;
use file::LogFile;
use order::{Merge, Records, Reorder};

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

/// How many records may wait in one file's reorder buffer: memory stays bounded however far
/// apart in time a log's lines are.
const REORDER_CAP: usize = 1_000_000;

/// Records from one or more logs, merged by time.
///
/// Memory stays bounded: each file is read a line at a time, and at most a reorder window's
/// worth of records (capped at a million per file) waits to be put in order.
pub struct Logs {
    records: Merge<Reorder<LogFile>>,
    problems: Problems,
}

impl Logs {
    /// Opens the logs; each is read as it is needed, a line at a time.
    pub fn open(paths: &[PathBuf], options: Options) -> Result<Logs, LogError> {
        let fields: std::sync::Arc<[Field]> = options.mapping.compile()?.into();
        let window = Nanos::try_from(options.reorder.as_nanos()).unwrap_or(Nanos::MAX);
        let mut problems = Problems::default();
        let mut files = Vec::with_capacity(paths.len());
        for (index, path) in paths.iter().enumerate() {
            let file = LogFile::open(index, path, options.format, fields.clone())?;
            problems.formats.push((path.clone(), options.format));
            files.push(Reorder::new(file, window, REORDER_CAP));
        }
        Ok(Logs { records: Merge::new(files), problems })
    }

    /// Records from one log already open (`name` stands for its path in reports): what the
    /// fuzz target and tests read from memory. Gzip is detected as for a file.
    pub fn from_reader(name: &Path, reader: impl Read + Send + 'static, options: Options) -> Result<Logs, LogError> {
        let fields: std::sync::Arc<[Field]> = options.mapping.compile()?.into();
        let window = Nanos::try_from(options.reorder.as_nanos()).unwrap_or(Nanos::MAX);
        let io = |source| LogError::Io { path: name.to_owned(), source };
        let mut raw = BufReader::new(reader);
        let gzip = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let lines: Box<dyn BufRead + Send> =
            if gzip { Box::new(BufReader::new(MultiGzDecoder::new(raw))) } else { Box::new(raw) };
        let file = LogFile::new(0, name, lines, options.format, fields);
        let problems = Problems { formats: vec![(name.to_owned(), options.format)], ..Problems::default() };
        Ok(Logs { records: Merge::new(vec![Reorder::new(file, window, REORDER_CAP)]), problems })
    }

    /// What reading has run into so far.
    pub fn problems(&self) -> &Problems {
        &self.problems
    }
}

impl Iterator for Logs {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.records.pull(&mut self.problems)
    }
}
