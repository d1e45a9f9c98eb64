//! Reloading the spec while serving: on SIGHUP and when the file changes. The new spec is compiled
//! off the request path and swapped in whole; a bad one keeps the old policy serving.

use std::ffi::OsString;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::metrics::Stats;
use super::{Active, Shared};
use crate::engine::Limiter;
use crate::policy::{LoadError, Options};
use crate::spec::Source;

/// The log target of reload outcomes.
pub(crate) const TARGET: &str = "opbound::reload";

/// What a reload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reloaded {
    /// The new policy serves.
    Applied {
        /// Bounds that kept their counters (same id and definition).
        kept: usize,
        /// Bounds that start from zero.
        fresh: usize,
        /// Whether the text before it on disk had been refused.
        recovered: bool,
    },
    /// The file has the text already served.
    Unchanged,
    /// The file is back to the text being served after a refused one: the spec on disk is valid
    /// again, and nothing changed.
    Restored,
    /// The new spec did not load; the old policy keeps serving.
    Refused(String),
    /// The file still has the text last refused, which is not tried again.
    StillRefused(String),
}

/// What set a reload off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The spec's file changed, or may have (a watcher event, the periodic stat, the start).
    File,
    /// SIGHUP: an operator asked, so even "nothing changed" is an answer worth a line.
    Signal,
}

/// Fingerprint of a spec's text, to skip reloads that change nothing.
pub(crate) fn fingerprint(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// What the reloader remembers between reloads.
#[derive(Debug)]
struct Texts {
    /// Fingerprint of the text being served.
    served: u64,
    /// Fingerprint of the last text refused (or of the error that kept the file from being
    /// read), and why, while it is still the newest thing seen on disk.
    refused: Option<(u64, String)>,
}

/// Reloads one spec file into a server's `Shared`.
pub(crate) struct Reloader {
    shared: Arc<Shared>,
    path: PathBuf,
    options: Options,
    texts: Mutex<Texts>,
}

impl Reloader {
    /// `served` is the fingerprint of the text the current policy came from.
    pub(crate) fn new(shared: Arc<Shared>, path: PathBuf, options: Options, served: u64) -> Reloader {
        Reloader { shared, path, options, texts: Mutex::new(Texts { served, refused: None }) }
    }

    /// Reads, compiles and swaps in the spec if it changed, and logs the outcome once: a text is
    /// tried once, refused or not, however many times the file is seen to change. Blocking: run
    /// it off the runtime's worker threads.
    pub(crate) fn reload(&self, trigger: Trigger) -> Reloaded {
        let mut texts = self.texts.lock().unwrap_or_else(|p| p.into_inner());
        let outcome = self.try_reload(&mut texts);
        let spec = self.path.display();
        let metrics = &self.shared.metrics;
        match &outcome {
            Reloaded::Applied { kept, fresh, recovered } => {
                metrics.reloads.fetch_add(1, Ordering::Relaxed);
                metrics.reload_succeeded();
                if *recovered {
                    tracing::info!(target: TARGET, %spec, kept, fresh, "reloaded: the spec is valid again; bounds that did not change kept their counts");
                } else {
                    tracing::info!(target: TARGET, %spec, kept, fresh, "reloaded: bounds that did not change kept their counts");
                }
            }
            Reloaded::Restored => {
                metrics.reload_succeeded();
                tracing::info!(target: TARGET, %spec, "the spec is valid again: it is the text already serving, so nothing changed");
            }
            Reloaded::Unchanged if trigger == Trigger::Signal => {
                tracing::info!(target: TARGET, %spec, "spec unchanged")
            }
            Reloaded::Unchanged => tracing::debug!(target: TARGET, %spec, "spec unchanged"),
            Reloaded::Refused(why) => {
                metrics.reload_failed(why);
                tracing::error!(target: TARGET, %spec, error = %why, "reload refused; the previous policy keeps serving");
            }
            Reloaded::StillRefused(why) if trigger == Trigger::Signal => {
                tracing::warn!(target: TARGET, %spec, error = %why, "spec unchanged since its reload was refused; the previous policy keeps serving");
            }
            Reloaded::StillRefused(_) => {
                tracing::debug!(target: TARGET, %spec, "spec unchanged since its reload was refused")
            }
        }
        outcome
    }

    fn try_reload(&self, texts: &mut Texts) -> Reloaded {
        let source = Source::read(&self.path);
        // An unreadable file is remembered by its error, so a file that stays missing is
        // reported once too.
        let print = match &source {
            Ok(s) => fingerprint(&s.text),
            Err(e) => fingerprint(&format!("\0unreadable: {e}")),
        };
        if print == texts.served {
            return if texts.refused.take().is_some() { Reloaded::Restored } else { Reloaded::Unchanged };
        }
        if let Some((refused, why)) = &texts.refused
            && *refused == print
        {
            return Reloaded::StillRefused(why.clone());
        }
        match source.map_err(|e| e.to_string()).and_then(|s| self.swap_in(s)) {
            Ok((kept, fresh)) => {
                texts.served = print;
                Reloaded::Applied { kept, fresh, recovered: texts.refused.take().is_some() }
            }
            Err(why) => {
                texts.refused = Some((print, why.clone()));
                Reloaded::Refused(why)
            }
        }
    }

    /// Compiles a spec and swaps it in: how many bounds kept their counters, how many start
    /// fresh; or why it cannot serve.
    fn swap_in(&self, source: Source) -> Result<(usize, usize), String> {
        let loaded = match crate::policy::load_source(source, &self.options) {
            Ok(l) => l,
            Err(LoadError::Read(e)) => return Err(e.to_string()),
            Err(LoadError::Invalid { findings, .. }) => {
                let errors: Vec<String> = findings.iter().filter(|f| f.is_error()).map(|f| f.to_string()).collect();
                return Err(errors.join("; "));
            }
        };
        if let Some(why) = self.shared.identity.unfed(&loaded.policy) {
            return Err(why);
        }
        for w in &loaded.policy.warnings {
            tracing::warn!(target: TARGET, spec = %self.path.display(), "{w}");
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
            let before = old.limiter.policy();
            kept = policy
                .bound_indices()
                .filter(|&i| before.bound_indices().any(|j| Arc::ptr_eq(limiter.table(i), old.limiter.table(j))))
                .count();
            let stats = Stats::new(&policy, Some(&old.stats));
            Arc::new(Active { limiter: Arc::new(limiter), stats: Arc::new(stats) })
        });
        Ok((kept, policy.bounds.len() - kept))
    }

    /// Reloads on SIGHUP and when the spec file changes, until the process ends. The directory is
    /// watched, not the file: editors and ConfigMaps replace files rather than write into them.
    /// A stat of the file every two seconds backs the watcher up where it cannot see (NFS).
    pub(crate) async fn run(self: Arc<Self>, watch: bool) {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Trigger>(16);
        let file = Arc::new(SpecFile::new(&self.path));
        let _watcher = if watch { self.watch(file.clone(), tx.clone()) } else { None };
        #[cfg(unix)]
        {
            let tx = tx.clone();
            if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        let _ = tx.send(Trigger::Signal).await;
                    }
                });
            }
        }
        if watch {
            let (tx, file) = (tx.clone(), file.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    // Shares what it has seen with the watcher, so a change both notice is
                    // reloaded once.
                    if file.changed() {
                        let _ = tx.send(Trigger::File).await;
                    }
                }
            });
        }
        // A change made between loading the spec and watching it would otherwise go unseen.
        let _ = tx.send(Trigger::File).await;
        while let Some(first) = rx.recv().await {
            // Editors write in bursts; let a burst settle, then read once.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut trigger = first;
            while let Ok(t) = rx.try_recv() {
                if t == Trigger::Signal {
                    trigger = t;
                }
            }
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.reload(trigger)).await;
        }
    }

    fn watch(&self, file: Arc<SpecFile>, tx: tokio::sync::mpsc::Sender<Trigger>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| file.concerned(&e)) {
                let _ = tx.try_send(Trigger::File);
            }
        }) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(target: TARGET, error = %e, "cannot watch the spec's directory; changes are picked up every 2 s or on SIGHUP");
                return None;
            }
        };
        if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(target: TARGET, error = %e, dir = %dir.display(), "cannot watch the spec's directory; changes are picked up every 2 s or on SIGHUP");
            return None;
        }
        Some(watcher)
    }
}

/// The spec's file as the watcher and the periodic stat see it: its name in the watched
/// directory, and what a stat of its path last said.
#[derive(Debug)]
pub(crate) struct SpecFile {
    path: PathBuf,
    name: Option<OsString>,
    seen: Mutex<Option<Stat>>,
}

/// What changes when a file is written or replaced: size, modification time, and which file.
type Stat = (u64, Option<SystemTime>, u64);

impl SpecFile {
    /// The file at `path`, as it is now.
    pub(crate) fn new(path: &Path) -> SpecFile {
        SpecFile { path: path.to_path_buf(), name: path.file_name().map(OsString::from), seen: Mutex::new(stat(path)) }
    }

    /// Whether the file at the path differs from when this was last asked (or created). The path
    /// is followed through symlinks, so a ConfigMap swapping the link beside it changes it.
    pub(crate) fn changed(&self) -> bool {
        let now = stat(&self.path);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == now {
            return false;
        }
        *seen = now;
        true
    }

    /// Whether a watcher event in the spec's directory may have changed the spec: it names the
    /// spec (written, created, removed, renamed onto it), or the spec's path now leads elsewhere.
    /// Anything else in the directory (a log written beside the spec) sets off nothing, so a
    /// refused spec and its own log lines cannot feed each other.
    pub(crate) fn concerned(&self, event: &notify::Event) -> bool {
        // Reading the file is an access: counting it would reload on our own reads.
        if event.kind.is_access() {
            return false;
        }
        let names_spec = event.paths.iter().any(|p| p.file_name().is_some_and(|n| Some(n) == self.name.as_deref()));
        // Asked first, so what the watcher saw is not seen again by the periodic stat.
        self.changed() || names_spec
    }
}

fn stat(path: &Path) -> Option<Stat> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Some((m.len(), m.modified().ok(), inode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::Event;
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, EventKind, ModifyKind, RenameMode};

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("opbound-reload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn event(kind: EventKind, paths: &[&Path]) -> Event {
        paths.iter().fold(Event::new(kind), |e, p| e.add_path(p.to_path_buf()))
    }

    #[test]
    fn only_events_that_touch_the_spec_count() {
        let d = dir("events");
        let spec = d.join("api.yaml");
        std::fs::write(&spec, "a").unwrap();
        let file = SpecFile::new(&spec);
        let log = d.join("opbound.log");
        std::fs::write(&log, "a line").unwrap();
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert!(!file.concerned(&event(write, &[&log])), "a log written beside the spec");
        assert!(!file.concerned(&event(EventKind::Create(CreateKind::File), &[&d.join(".api.yaml.swp")])));
        assert!(!file.concerned(&event(EventKind::Access(AccessKind::Open(AccessMode::Any)), &[&spec])), "our read");
        assert!(!file.concerned(&event(EventKind::Access(AccessKind::Close(AccessMode::Read)), &[&spec])));

        assert!(file.concerned(&event(write, &[&spec])), "written in place");
        let tmp = d.join(".api.yaml.tmp");
        assert!(file.concerned(&event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&spec])));
        assert!(
            file.concerned(&event(EventKind::Modify(ModifyKind::Name(RenameMode::Both)), &[&tmp, &spec])),
            "renamed onto it"
        );
        // A relative spec path: the watcher reports `./api.yaml`.
        let relative =
            SpecFile { path: PathBuf::from("api.yaml"), name: Some("api.yaml".into()), seen: Mutex::new(None) };
        assert!(relative.concerned(&event(write, &[Path::new("./api.yaml")])));
        let _ = std::fs::remove_dir_all(d);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_swapped_beside_the_spec_counts_once() {
        // A ConfigMap: api.yaml -> ..data/api.yaml, and an update renames a new ..data link over
        // the old one. No event names api.yaml; its path now leads to another file.
        let d = dir("configmap");
        for (version, text) in [("v1", "openapi: 3.0.3 # one"), ("v2", "openapi: 3.0.3 # two, longer")] {
            std::fs::create_dir_all(d.join(version)).unwrap();
            std::fs::write(d.join(version).join("api.yaml"), text).unwrap();
        }
        std::os::unix::fs::symlink("v1", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/api.yaml", d.join("api.yaml")).unwrap();
        let file = SpecFile::new(&d.join("api.yaml"));
        std::os::unix::fs::symlink("v2", d.join("..data_tmp")).unwrap();
        std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        let swapped = event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&d.join("..data")]);
        assert!(file.concerned(&swapped), "the spec's path leads to a new file");
        assert!(!file.concerned(&swapped), "seen once");
        assert!(!file.changed(), "and not again by the periodic stat");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn what_the_watcher_saw_the_periodic_stat_does_not_see_again() {
        let d = dir("stat");
        let spec = d.join("api.yaml");
        std::fs::write(&spec, "one").unwrap();
        let file = SpecFile::new(&spec);
        assert!(!file.changed(), "nothing changed yet");
        std::fs::write(d.join("next"), "two, longer").unwrap();
        std::fs::rename(d.join("next"), &spec).unwrap();
        assert!(file.concerned(&event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&spec])));
        assert!(!file.changed(), "the stat two seconds later finds what the watcher saw");
        let _ = std::fs::remove_dir_all(d);
    }
}
