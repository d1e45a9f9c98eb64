//! Reloading the spec while serving: on SIGHUP and when the file changes. The new spec is compiled
//! off the request path and swapped in whole; a bad one keeps the old policy serving.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::metrics::Stats;
use super::{Active, Shared};
use crate::engine::Limiter;
use crate::policy::{LoadError, Options};
use crate::spec::Source;

/// What a reload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The new policy serves; `kept` bounds kept their counters, `fresh` start from zero.
    Applied { kept: usize, fresh: usize },
    /// The file has the content already served.
    Unchanged,
    /// The new spec did not load; the old policy keeps serving.
    Refused(String),
}

/// Fingerprint of a spec's text, to skip reloads that change nothing.
pub fn fingerprint(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

pub struct Reloader {
    shared: Arc<Shared>,
    path: PathBuf,
    options: Options,
    last: Mutex<u64>,
}

impl Reloader {
    /// `served` is the fingerprint of the text the current policy came from.
    pub fn new(shared: Arc<Shared>, path: PathBuf, options: Options, served: u64) -> Reloader {
        Reloader { shared, path, options, last: Mutex::new(served) }
    }

    /// Reads, compiles and swaps in the spec if it changed. Blocking: run it off the runtime's
    /// worker threads.
    pub fn reload(&self) -> Reloaded {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let outcome = self.try_reload(&mut last);
        let spec = self.path.display();
        match &outcome {
            Reloaded::Applied { kept, fresh } => {
                self.shared.metrics.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%spec, kept, fresh, "reloaded: bounds that did not change kept their counts");
            }
            Reloaded::Unchanged => tracing::debug!(%spec, "spec unchanged"),
            Reloaded::Refused(why) => {
                self.shared.metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%spec, error = %why, "reload refused; the previous policy keeps serving");
            }
        }
        outcome
    }

    fn try_reload(&self, last: &mut u64) -> Reloaded {
        let source = match Source::read(&self.path) {
            Ok(s) => s,
            Err(e) => return Reloaded::Refused(e.to_string()),
        };
        let print = fingerprint(&source.text);
        if print == *last {
            return Reloaded::Unchanged;
        }
        let loaded = match crate::policy::load_source(source, &self.options) {
            Ok(l) => l,
            Err(LoadError::Read(e)) => return Reloaded::Refused(e.to_string()),
            Err(LoadError::Invalid { findings, .. }) => {
                let errors: Vec<String> = findings.iter().filter(|f| f.is_error()).map(|f| f.to_string()).collect();
                return Reloaded::Refused(errors.join("; "));
            }
        };
        if let Some(why) = self.shared.identity.unfed(&loaded.policy) {
            return Reloaded::Refused(why);
        }
        for w in &loaded.policy.warnings {
            tracing::warn!(spec = %self.path.display(), "{w}");
        }
        let policy = Arc::new(loaded.policy);
        // `rcu`: if a rekey swaps the policy meanwhile, build again on top of it.
        let mut kept = 0;
        self.shared.active.rcu(|old| {
            let limiter = Limiter::carrying_over(
                policy.clone(),
                old.limiter.clock().clone(),
                old.limiter.hasher().clone(),
                Some(&old.limiter),
            );
            let before = old.limiter.policy().bounds.len();
            kept = (0..policy.bounds.len())
                .filter(|&i| (0..before).any(|j| Arc::ptr_eq(limiter.table(i), old.limiter.table(j))))
                .count();
            let stats = Stats::new(&policy, Some(&old.stats));
            Arc::new(Active { limiter: Arc::new(limiter), stats: Arc::new(stats) })
        });
        *last = print;
        Reloaded::Applied { kept, fresh: policy.bounds.len() - kept }
    }

    /// Reloads on SIGHUP and when the spec file changes, until the process ends. The directory is
    /// watched, not the file: editors and ConfigMaps replace files rather than write into them.
    /// A stat of the file every two seconds backs the watcher up where it cannot see (NFS).
    pub async fn run(self: Arc<Self>, watch: bool) {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(16);
        let _watcher = if watch { self.watch(tx.clone()) } else { None };
        #[cfg(unix)]
        {
            let tx = tx.clone();
            if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reloading the spec");
                        let _ = tx.send(()).await;
                    }
                });
            }
        }
        if watch {
            let (tx, path) = (tx.clone(), self.path.clone());
            tokio::spawn(async move {
                let mut seen = stat(&path);
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    let now = stat(&path);
                    if now != seen {
                        seen = now;
                        let _ = tx.send(()).await;
                    }
                }
            });
        }
        // A change made between loading the spec and watching it would otherwise go unseen.
        let _ = tx.send(()).await;
        while rx.recv().await.is_some() {
            // Editors write in bursts; let a burst settle, then read once.
            tokio::time::sleep(Duration::from_millis(100)).await;
            while rx.try_recv().is_ok() {}
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.reload()).await;
        }
    }

    fn watch(&self, tx: tokio::sync::mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access()) {
                let _ = tx.try_send(());
            }
        }) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the spec's directory; changes are picked up every 2 s or on SIGHUP");
                return None;
            }
        };
        if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot watch the spec's directory; changes are picked up every 2 s or on SIGHUP");
            return None;
        }
        Some(watcher)
    }
}

/// What changes when a file is written or replaced: size, modification time, and which file.
fn stat(path: &Path) -> Option<(u64, Option<std::time::SystemTime>, u64)> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Some((m.len(), m.modified().ok(), inode))
}
