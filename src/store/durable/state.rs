//! The state file: opened once per process, read at startup, written behind the engine.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableError,
    WriteTransaction,
};

use super::entry::{StoredEntry, StoredKey};
use super::error::At;
use super::lock::{DirLock, lock_path};
use super::{Change, Entry, Key, StateError, SyncStats, TableInfo};

/// The version of the layout this build reads and writes. A file with another one is refused
/// with [`StateError::Version`]; change it with any change to a table's name or types.
pub const FORMAT: u32 = 1;

/// The state file's name in its directory.
const STATE_FILE: &str = "quotas.redb";
/// redb's page cache, which is memory kept besides the engine's own tables; its default is 1 GiB.
/// 32 MiB holds the pages of about 400,000 entries; past that, pages come from the OS's cache.
const CACHE_BYTES: usize = 32 << 20;

/// `"format"` → [`FORMAT`] (u32, little-endian); `"secret"` → the key-hash secret (16 bytes).
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Fingerprint → no entry of that bound ends before this (nanoseconds since the epoch;
/// `u64::MAX` when it has none). A lower bound, exact after a prune, so that finding which
/// bounds have something to prune reads this small table and nothing else.
const BOUNDS: TableDefinition<&str, u64> = TableDefinition::new("bounds");

/// The name of a bound's table; the prefix keeps fingerprints clear of `meta` and `bounds`.
fn table_name(fingerprint: &str) -> String {
    format!("quota:{fingerprint}")
}

fn counters(name: &str) -> TableDefinition<'_, StoredKey, StoredEntry> {
    TableDefinition::new(name)
}

/// An open state directory: its lock held, its file checked, its secret read.
pub struct StateStore {
    // Declared before the lock, so the file is closed before the lock is released.
    db: Database,
    path: PathBuf,
    secret: [u8; 16],
    discarded: Option<PathBuf>,
    _lock: DirLock,
}

impl StateStore {
    /// Opens the state in `dir` (created if missing), or creates it with a new secret.
    ///
    /// Refuses, naming the file, a directory another process has open ([`StateError::Locked`]),
    /// a damaged file ([`StateError::Corrupt`]: every page's checksum is verified on open, which
    /// takes about 50 ms for 110,000 entries) and one of another format ([`StateError::Version`]).
    /// None of these is ever answered with an empty state. With `start_over`, an existing file is
    /// first moved aside to `quotas.redb.discarded-<unix seconds>` (see
    /// [`discarded`](StateStore::discarded)), still under the lock, and a new one is created.
    pub fn open(dir: &Path, start_over: bool) -> Result<StateStore, StateError> {
        create_dir(dir)?;
        let path = dir.join(STATE_FILE);
        let lock = DirLock::take(&lock_path(&path))?;
        let discarded = if start_over && path.exists() { Some(move_aside(&path)?) } else { None };
        if !path.exists() {
            create(&path)?;
        }
        let db =
            redb::Builder::new().set_cache_size(CACHE_BYTES).set_check_integrity_on_open(true).open(&path).at(&path)?;
        let secret = read_meta(&db, &path)?;
        Ok(StateStore { db, path, secret, discarded, _lock: lock })
    }

    /// The secret to hash callers' keys with (`KeyHasher::with_secret`): drawn from the OS's
    /// randomness when the file was created and kept in it, so a key hashed before a restart
    /// finds its entry after it.
    pub fn secret(&self) -> [u8; 16] {
        self.secret
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where `open` moved the old file when asked to start over (none if there was no file).
    pub fn discarded(&self) -> Option<&Path> {
        self.discarded.as_deref()
    }

    /// The state file's size in bytes.
    pub fn file_bytes(&self) -> Result<u64, StateError> {
        fs::metadata(&self.path).map(|m| m.len()).map_err(|e| StateError::io(&self.path, e))
    }

    /// The entries of the bound `table` whose period has not ended at `now` (nanoseconds since
    /// the epoch): what the engine starts from. A bound never written to has none.
    pub fn load(&self, table: &str, now: u64) -> Result<Vec<(Key, Entry)>, StateError> {
        let tx = self.db.begin_read().at(&self.path)?;
        let name = table_name(table);
        let counters = match tx.open_table(counters(&name)) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(StateError::from_redb(&self.path, e)),
        };
        let mut out = Vec::with_capacity(usize::try_from(counters.len().at(&self.path)?).unwrap_or(0));
        for row in counters.iter().at(&self.path)? {
            let (key, entry) = row.at(&self.path)?;
            let entry = Entry::from_stored(entry.value());
            if entry.expires > now {
                out.push((Key::from_stored(key.value()), entry));
            }
        }
        Ok(out)
    }

    /// Applies `changes` in one transaction, durable on disk when this returns, and in the same
    /// transaction prunes the bounds that have entries whose period ended at `now`.
    ///
    /// Pruning a bound reads its whole table (about 25–60 ms for 110,000 entries), each time the
    /// earliest of its entries ends: once a period when a bound's periods end together
    /// (calendar months), more often when each key's period ends on its own.
    ///
    /// Changes to one key apply in order: the last one wins. A removal from a bound with no
    /// table is nothing to do. When there is nothing to change and nothing has ended, the disk
    /// is not touched, so calling this on every tick costs one small read when idle.
    ///
    /// On an error nothing of this call is on disk (the file is as the last successful write left
    /// it): keep the changes and write them again next time. Writing a change twice is harmless.
    pub fn write(&self, changes: &[Change<'_>], now: u64) -> Result<SyncStats, StateError> {
        let mut tx = self.db.begin_write().at(&self.path)?;
        tx.set_durability(Durability::Immediate).at(&self.path)?;
        let mut stats = SyncStats::default();
        let dirty = apply(&tx, changes, now, &mut stats).at(&self.path)?;
        if dirty {
            tx.commit().at(&self.path)?;
            stats.committed = true;
        } else {
            tx.abort().at(&self.path)?;
        }
        stats.file_bytes = self.file_bytes()?;
        Ok(stats)
    }

    /// Removes every entry whose period ended at `now`; returns how many. `write` does this as
    /// it goes; this is for when there is nothing to write (after `load` at startup, say).
    pub fn prune(&self, now: u64) -> Result<usize, StateError> {
        self.write(&[], now).map(|stats| stats.pruned)
    }

    /// Every bound with a table, and how many entries it holds.
    pub fn tables(&self) -> Result<Vec<TableInfo>, StateError> {
        let tx = self.db.begin_read().at(&self.path)?;
        let bounds = tx.open_table(BOUNDS).at(&self.path)?;
        let mut out = Vec::new();
        for row in bounds.iter().at(&self.path)? {
            let (name, _) = row.at(&self.path)?;
            let name = name.value().to_string();
            let entries = match tx.open_table(counters(&table_name(&name))) {
                Ok(t) => t.len().at(&self.path)?,
                Err(TableError::TableDoesNotExist(_)) => 0,
                Err(e) => return Err(StateError::from_redb(&self.path, e)),
            };
            out.push(TableInfo { name, entries });
        }
        Ok(out)
    }

    /// Deletes the table of a bound that no longer exists, durably; returns whether there was
    /// one. Which bounds are gone is the caller's call (a reload that drops a bound may be undone
    /// by the next one).
    pub fn drop_table(&self, table: &str) -> Result<bool, StateError> {
        let mut tx = self.db.begin_write().at(&self.path)?;
        tx.set_durability(Durability::Immediate).at(&self.path)?;
        let name = table_name(table);
        let had_table = tx.delete_table(counters(&name)).at(&self.path)?;
        let had_row = tx.open_table(BOUNDS).and_then(|mut b| Ok(b.remove(table)?.is_some())).at(&self.path)?;
        tx.commit().at(&self.path)?;
        Ok(had_table || had_row)
    }

    /// Gives the file's free pages back to the file system; returns whether it shrank.
    ///
    /// redb reuses freed pages for later writes, so a file does not grow past its high-water
    /// mark without this; call it at startup after a prune (it needs the store to itself) if a
    /// file once grew much larger than its live entries.
    pub fn compact(&mut self) -> Result<bool, StateError> {
        self.db.compact().at(&self.path)
    }

    /// Closes the file, reporting what dropping would ignore, then releases the lock.
    pub fn close(self) -> Result<(), StateError> {
        let StateStore { db, path, _lock, .. } = self;
        db.close().at(&path)
    }
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("StateStore").field("path", &self.path).finish_non_exhaustive()
    }
}

/// The changes, then the prune, inside `tx`; whether anything changed.
fn apply(tx: &WriteTransaction, changes: &[Change<'_>], now: u64, stats: &mut SyncStats) -> Result<bool, redb::Error> {
    let mut dirty = false;
    let mut bounds = tx.open_table(BOUNDS)?;
    // One table at a time; the sort is stable, so changes to a key keep their order.
    let mut order: Vec<&Change<'_>> = changes.iter().collect();
    order.sort_by_key(|change| change.table);
    for run in order.chunk_by(|a, b| a.table == b.table) {
        let fingerprint = run[0].table;
        let known = bounds.get(fingerprint)?.map(|earliest| earliest.value());
        let earliest_new = run.iter().filter_map(|change| change.entry).map(|entry| entry.expires).min();
        if known.is_none() && earliest_new.is_none() {
            continue;
        }
        let name = table_name(fingerprint);
        let mut table = tx.open_table(counters(&name))?;
        for change in run {
            match change.entry {
                Some(entry) => {
                    table.insert(change.key.stored(), entry.stored())?;
                    stats.written += 1;
                    dirty = true;
                }
                None => {
                    if table.remove(change.key.stored())?.is_some() {
                        stats.removed += 1;
                        dirty = true;
                    }
                }
            }
        }
        let earliest = known.unwrap_or(u64::MAX).min(earliest_new.unwrap_or(u64::MAX));
        if Some(earliest) != known {
            bounds.insert(fingerprint, earliest)?;
            dirty = true;
        }
    }

    let mut due = Vec::new();
    for row in bounds.iter()? {
        let (fingerprint, earliest) = row?;
        if earliest.value() <= now {
            due.push(fingerprint.value().to_string());
        }
    }
    for fingerprint in due {
        let mut earliest = u64::MAX;
        let name = table_name(&fingerprint);
        let mut table = tx.open_table(counters(&name))?;
        table.retain(|_, (_, _, _, expires)| {
            if expires <= now {
                stats.pruned += 1;
                false
            } else {
                earliest = earliest.min(expires);
                true
            }
        })?;
        bounds.insert(fingerprint.as_str(), earliest)?;
        dirty = true;
    }
    Ok(dirty)
}

fn create_dir(dir: &Path) -> Result<(), StateError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    // The file holds the key-hash secret: for this user only.
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| StateError::io(dir, e))
}

/// Creates a state file with its format and a new secret, whole or not at all: it is written
/// beside `path` and renamed into place, so a crash part way leaves no file to mistake for one.
fn create(path: &Path) -> Result<(), StateError> {
    let fresh = path.with_extension("redb.new");
    match fs::remove_file(&fresh) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(StateError::io(&fresh, e)),
        _ => {}
    }
    let db = Database::create(&fresh).at(&fresh)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&fresh, fs::Permissions::from_mode(0o600)).map_err(|e| StateError::io(&fresh, e))?;
    }
    let mut secret = [0u8; 16];
    getrandom::fill(&mut secret).map_err(|e| StateError::io(&fresh, std::io::Error::other(e)))?;
    let mut tx = db.begin_write().at(&fresh)?;
    tx.set_durability(Durability::Immediate).at(&fresh)?;
    {
        let mut meta = tx.open_table(META).at(&fresh)?;
        meta.insert("format", FORMAT.to_le_bytes().as_slice()).at(&fresh)?;
        meta.insert("secret", secret.as_slice()).at(&fresh)?;
        tx.open_table(BOUNDS).at(&fresh)?;
    }
    tx.commit().at(&fresh)?;
    db.close().at(&fresh)?;
    fs::rename(&fresh, path).map_err(|e| StateError::io(path, e))?;
    sync_dir(path)
}

/// Checks the format and reads the secret.
fn read_meta(db: &Database, path: &Path) -> Result<[u8; 16], StateError> {
    let tx = db.begin_read().at(path)?;
    let meta = match tx.open_table(META) {
        Ok(meta) => meta,
        Err(TableError::TableDoesNotExist(_)) => {
            return Err(StateError::corrupt(path, "it has no format record, so opbound did not write it"));
        }
        Err(e) => return Err(StateError::from_redb(path, e)),
    };
    let format = meta.get("format").at(path)?.map(|v| v.value().to_vec());
    let found = match format.as_deref().map(<[u8; 4]>::try_from) {
        Some(Ok(bytes)) => u32::from_le_bytes(bytes),
        _ => return Err(StateError::corrupt(path, "its format record is missing or malformed")),
    };
    if found != FORMAT {
        return Err(StateError::Version {
            path: path.to_path_buf(),
            what: "opbound state format",
            found,
            expected: FORMAT,
        });
    }
    let secret = meta.get("secret").at(path)?.map(|v| <[u8; 16]>::try_from(v.value()));
    match secret {
        Some(Ok(secret)) => Ok(secret),
        _ => Err(StateError::corrupt(path, "its key-hash secret is missing or malformed")),
    }
}

/// Renames `path` to `<path>.discarded-<unix seconds>` (plus `-N` if taken) and returns that.
fn move_aside(path: &Path) -> Result<PathBuf, StateError> {
    let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let base = format!("{}.discarded-{seconds}", path.display());
    let mut aside = PathBuf::from(&base);
    let mut n = 1;
    while aside.exists() {
        aside = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    fs::rename(path, &aside).map_err(|e| StateError::io(path, e))?;
    sync_dir(path)?;
    Ok(aside)
}

/// Makes a rename in `path`'s directory durable.
fn sync_dir(path: &Path) -> Result<(), StateError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| StateError::io(dir, e))
}
