//! Quota counts kept on disk, so they survive a restart: an embedded redb file that a background
//! task writes the engine's changed counters behind to, and that startup reads them back from.
//!
//! The count in memory stays the authority; this is its copy. The promise it helps keep: a clean
//! stop loses nothing (a last [`StateStore::write`] before [`StateStore::close`]); a hard kill
//! loses at most the changes since the last write (every write is one transaction, durable when
//! it returns, and a killed one leaves no trace); nothing is counted twice (a change carries the
//! counter's whole value, never a delta, so writing it again changes nothing); a period that ended
//! while opbound was down is over when it comes back ([`StateStore::load`] returns only entries
//! whose `expires` is after `now`).
//!
//! Layout of a state directory:
//!
//! - `quotas.redb` — the redb file: a `meta` table (format version, key-hash secret), a `bounds`
//!   table (each bound's fingerprint and the earliest time one of its entries ends), and one table
//!   per bound, `quota:<fingerprint>`, from [`Key`] to [`Entry`].
//! - `quotas.lock` — locked (`flock`) for as long as a [`StateStore`] is open, holding its pid.
//!   It is never deleted: deleting a lock file lets two processes each lock a different file.
//! - `quotas.redb.discarded-<unix seconds>` — a file set aside by `start_over`, never read again.
//!
//! Size: under 80 bytes an entry (docs/benchmarks.md has the file it was measured on), so a
//! directory holds about bounds × (`max-keys` + 1) × 80 bytes, and up to twice that while a
//! transaction rewrites pages (copy on write). Freed pages are reused by the next write, so the
//! file does not grow past its high-water mark; [`StateStore::compact`] gives the rest back. The
//! store keeps what it is told: it stays within `max-keys` a bound because the engine's table
//! does, as long as every key the engine drops from memory is written as a removal. Entries of an
//! ended period go at the next write.
//!
//! Every call blocks on the disk (a write waits for `fsync`): call them from a thread of their own
//! or `spawn_blocking`, never from an async task. A [`StateStore`] is `Send + Sync`; calls from
//! several threads are serialised by redb.

mod entry;
mod error;
pub mod journal;
mod lock;
mod state;
#[cfg(test)]
mod tests;

pub use entry::{Change, Entry, Key, SyncStats, TableInfo};
pub use error::StateError;
pub use state::{FORMAT, StateStore};
