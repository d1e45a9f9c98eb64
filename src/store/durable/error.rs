//! Why the state store cannot be used: each error names the file it is about.

use std::io;
use std::path::{Path, PathBuf};

/// A state file that cannot be opened, read or written. Opening never falls back to an empty
/// state: starting over is the caller's explicit choice (`start_over`), and even then the old file
/// is moved aside, not deleted.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another process (another opbound) has this state directory open.
    #[error(
        "{}: another opbound{} is running on this state directory; stop it, or give this one a state directory of its own",
        path.display(),
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    Locked {
        /// The lock file (or the state file, if redb's own lock refused).
        path: PathBuf,
        /// The pid the holder wrote into the lock file, when it could be read.
        holder: Option<u32>,
    },
    /// The file is damaged: changed since opbound wrote it, truncated, or not a state file.
    #[error(
        "{}: the state file is damaged ({detail}); restore it from a backup, or start over (the damaged file is kept beside it)",
        path.display()
    )]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What redb or the format check found.
        detail: String,
    },
    /// The file was written by a version of opbound (or of redb) that this one cannot read.
    #[error(
        "{}: written in {what} {found}, and this opbound reads {expected}; run the opbound that wrote it, or start over (the old file is kept beside it)",
        path.display()
    )]
    Version {
        /// The state file.
        path: PathBuf,
        /// Which format: `"opbound state format"` or `"redb file format"`.
        what: &'static str,
        /// The version in the file.
        found: u32,
        /// The version this build reads and writes.
        expected: u32,
    },
    /// The operating system refused: permissions, a full disk, a missing directory.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// redb refused an operation for a reason of its own (a bug, or the store closing).
    #[error("{}: the state store failed ({detail})", path.display())]
    Storage {
        /// The state file.
        path: PathBuf,
        /// redb's message.
        detail: String,
    },
}

impl StateError {
    /// The file (or directory) the error is about.
    pub fn path(&self) -> &Path {
        match self {
            StateError::Locked { path, .. }
            | StateError::Corrupt { path, .. }
            | StateError::Version { path, .. }
            | StateError::Io { path, .. }
            | StateError::Storage { path, .. } => path,
        }
    }

    /// Sorts one of redb's errors about the state file at `path`.
    pub(super) fn from_redb(path: &Path, error: impl Into<redb::Error>) -> StateError {
        let path = path.to_path_buf();
        match error.into() {
            redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
                StateError::Locked { path, holder: None }
            }
            redb::Error::Corrupted(detail) => StateError::Corrupt { path, detail },
            // A file that redb's checksums or header reject: its magic number, an unknown layout.
            redb::Error::Io(source) if source.kind() == io::ErrorKind::InvalidData => {
                StateError::Corrupt { path, detail: source.to_string() }
            }
            redb::Error::Io(source) => StateError::Io { path, source },
            redb::Error::UpgradeRequired(found) => {
                StateError::Version { path, what: "redb file format", found: found.into(), expected: REDB_FORMAT }
            }
            // A table whose types differ from ours: written by another program, or a change of
            // encoding without a new `FORMAT`.
            error @ (redb::Error::TableTypeMismatch { .. }
            | redb::Error::TypeDefinitionChanged { .. }
            | redb::Error::TableIsMultimap(_)) => StateError::Corrupt { path, detail: error.to_string() },
            error => StateError::Storage { path, detail: error.to_string() },
        }
    }

    pub(super) fn io(path: &Path, source: io::Error) -> StateError {
        StateError::Io { path: path.to_path_buf(), source }
    }

    pub(super) fn corrupt(path: &Path, detail: impl Into<String>) -> StateError {
        StateError::Corrupt { path: path.to_path_buf(), detail: detail.into() }
    }
}

/// Turns redb's many error types into a [`StateError`] about one file.
pub(super) trait At<T> {
    /// The error, about the state file at `path`.
    fn at(self, path: &Path) -> Result<T, StateError>;
}

impl<T, E: Into<redb::Error>> At<T> for Result<T, E> {
    fn at(self, path: &Path) -> Result<T, StateError> {
        self.map_err(|e| StateError::from_redb(path, e))
    }
}

/// The file format redb 4 writes; an older one is refused with `UpgradeRequired`.
const REDB_FORMAT: u32 = 3;
