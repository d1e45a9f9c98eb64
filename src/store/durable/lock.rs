//! One process per state directory: a lock file taken before the state file is touched.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::StateError;

/// The lock on a state directory, held until dropped (the kernel also releases it when the
/// process dies, however it dies).
///
/// redb locks its own file too, but only while it has it open; this lock also covers what happens
/// before and around that: creating the file, and moving it aside to start over, which must never
/// pull the file out from under a running opbound.
#[derive(Debug)]
pub(super) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `path` (creating it), or says who holds it.
    pub(super) fn take(path: &Path) -> Result<DirLock, StateError> {
        let io = |source| StateError::io(path, source);
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StateError::Locked { path: path.to_path_buf(), holder: holder(&mut file) });
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        // The pid is for the message another opbound shows; the lock is what counts.
        file.set_len(0).map_err(io)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(io)?;
        Ok(DirLock { _file: file })
    }
}

/// The pid a holder wrote, if it wrote one yet.
fn holder(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The lock file of the state file `state`: `quotas.redb` → `quotas.lock`.
pub(super) fn lock_path(state: &Path) -> PathBuf {
    state.with_extension("lock")
}
