//! What the state file holds for a bound: counters by key, each with the end of its period.

/// Whose counter an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A caller's own counter, under its keyed hash (`engine::KeyHasher` with
    /// [`StateStore::secret`](super::StateStore::secret)).
    Caller(u64),
    /// The bound's one shared counter for callers past `max-keys`. Stored apart from every hash,
    /// so no caller's hash can ever land on it.
    Overflow,
}

/// A counter as the engine keeps it (the fields of `engine::Counter`), and when its period ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Entry {
    /// `Counter::a`.
    pub a: u64,
    /// `Counter::b`.
    pub b: u32,
    /// `Counter::c`.
    pub c: u32,
    /// When the period this count belongs to ends, in nanoseconds since the Unix epoch. From then
    /// on the entry is over: never loaded, and pruned.
    pub expires: u64,
}

/// One counter to write: its whole new value, or its removal. Never a delta, so writing the same
/// change twice leaves the same state (nothing is counted twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change<'a> {
    /// The bound's fingerprint, the name its table goes by.
    pub table: &'a str,
    /// Whose counter.
    pub key: Key,
    /// The new value, or `None` to remove the entry.
    pub entry: Option<Entry>,
}

impl<'a> Change<'a> {
    /// The counter `key` of `table` is now `entry`.
    pub fn put(table: &'a str, key: Key, entry: Entry) -> Change<'a> {
        Change { table, key, entry: Some(entry) }
    }

    /// The counter `key` of `table` is gone (swept, or dropped from memory).
    pub fn remove(table: &'a str, key: Key) -> Change<'a> {
        Change { table, key, entry: None }
    }
}

/// What one [`StateStore::write`](super::StateStore::write) did, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Entries inserted or replaced.
    pub written: usize,
    /// Entries removed because a change said so.
    pub removed: usize,
    /// Entries removed because their period had ended.
    pub pruned: usize,
    /// Whether a transaction was committed (no: nothing to write and nothing ended, so the disk
    /// was not touched).
    pub committed: bool,
    /// The state file's size after the write, in bytes.
    pub file_bytes: u64,
}

/// A bound's table on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// The bound's fingerprint.
    pub name: String,
    /// Entries stored, including any whose period ended since the last prune.
    pub entries: u64,
}

/// How a [`Key`] is stored: `None` is the overflow counter.
pub(super) type StoredKey = Option<u64>;
/// How an [`Entry`] is stored: `(a, b, c, expires)`, 24 bytes.
pub(super) type StoredEntry = (u64, u32, u32, u64);

impl Key {
    pub(super) fn stored(self) -> StoredKey {
        match self {
            Key::Caller(hash) => Some(hash),
            Key::Overflow => None,
        }
    }

    pub(super) fn from_stored(key: StoredKey) -> Key {
        key.map_or(Key::Overflow, Key::Caller)
    }
}

impl Entry {
    pub(super) fn stored(self) -> StoredEntry {
        (self.a, self.b, self.c, self.expires)
    }

    pub(super) fn from_stored((a, b, c, expires): StoredEntry) -> Entry {
        Entry { a, b, c, expires }
    }
}
