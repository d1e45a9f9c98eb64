//! Reloading the spec while serving: on SIGHUP and when the file changes. The new spec is compiled
//! off the request path and swapped in whole; a bad one keeps the old policy serving.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, atomic::Ordering};
use std::time::Duration;

use crate::engine::{KeyHasher, Limiter};
use crate::policy::{LoadError, Options, Policy};
use crate::server::spec_file::SpecFile;
use crate::server::{durable_state::DurableState, judge::Active, judge::Shared, observe::metrics::Stats};
use crate::spec::Source;
use crate::store::durable::journal;

/// The log target of reload outcomes.
pub(crate) const TARGET: &str = "opbound::reload";

/// How long a reload may run before it is logged as late. A thread cannot be stopped, so a late
/// reload runs on; the reloader does not wait for it, so the polls and watches after it go on.
pub(crate) const RELOAD_DEADLINE: Duration = Duration::from_secs(30);

/// Why a reload was refused: the previous policy keeps serving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReloadError {
    /// The spec could not be read.
    Unreadable(String),
    /// The spec has errors: each, with its location.
    Invalid(Vec<String>),
    /// A bound needs an identity that no configured source gives.
    Unfed(String),
    /// The state directory durable bounds count in could not be opened or read back.
    State(String),
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::Unreadable(why) | ReloadError::Unfed(why) | ReloadError::State(why) => f.write_str(why),
            ReloadError::Invalid(findings) => f.write_str(&findings.join("; ")),
        }
    }
}

impl std::error::Error for ReloadError {}

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
    Refused(ReloadError),
    /// The file still has the text last refused, which is not tried again.
    StillRefused(ReloadError),
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
    refused: Option<(u64, ReloadError)>,
}

/// Reloads one spec file into a server's `Shared`.
pub(crate) struct Reloader {
    shared: Arc<Shared>,
    path: PathBuf,
    options: Options,
    texts: Mutex<Texts>,
    /// The state directory, with the in-memory store.
    durable_state: Option<Arc<DurableState>>,
}

impl Reloader {
    /// `served` is the fingerprint of the text the current policy came from; `durable_state` the
    /// state directory, with the in-memory store.
    pub(crate) fn new(
        shared: Arc<Shared>,
        path: PathBuf,
        options: Options,
        served: u64,
        durable_state: Option<Arc<DurableState>>,
    ) -> Reloader {
        Reloader { shared, path, options, texts: Mutex::new(Texts { served, refused: None }), durable_state }
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
                metrics.reload_failed(&why.to_string());
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
        let source = Source::read_with(&self.path, &self.options.fetch);
        // An unreadable file is remembered by its error, so a file that stays missing is
        // reported once too.
        let print = match &source {
            Ok(s) => fingerprint(&crate::policy::inputs(&s.text, &self.options)),
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
        match source.map_err(|e| ReloadError::Unreadable(e.to_string())).and_then(|s| self.swap_in(s)) {
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
    fn swap_in(&self, source: Source) -> Result<(usize, usize), ReloadError> {
        let loaded = match crate::policy::load_source(source, &self.options) {
            Ok(l) => l,
            Err(LoadError::Read(e)) => return Err(ReloadError::Unreadable(e.to_string())),
            Err(LoadError::Invalid { findings, .. }) => {
                let errors = findings.iter().filter(|f| f.is_error()).map(|f| f.to_string()).collect();
                return Err(ReloadError::Invalid(errors));
            }
        };
        if let Some(why) = self.shared.identity.unfed(&loaded.policy) {
            return Err(ReloadError::Unfed(why));
        }
        for w in &loaded.policy.warnings {
            tracing::warn!(target: TARGET, spec = %self.path.display(), "{w}");
        }
        let policy = Arc::new(loaded.policy);
        if let Some(durable_state) = &self.durable_state
            && DurableState::needed(&policy)
        {
            return self.swap_in_durable(policy, durable_state);
        }
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

    /// Swaps in a policy with durable bounds (quotas, `count-when`), counting in memory: opens
    /// the state directory if no durable bound had (refusing the reload if it cannot), and reads
    /// back what the state file holds for the bounds that start fresh here, so a bound removed
    /// and brought back in time finds its counts. The first durable bound rekeys: callers' keys
    /// hash with the state file's secret from then on, and the other bounds, whose keys change
    /// with it, start afresh.
    fn swap_in_durable(
        &self,
        policy: Arc<Policy>,
        durable_state: &DurableState,
    ) -> Result<(usize, usize), ReloadError> {
        let state = durable_state.open().map_err(|e| ReloadError::State(e.to_string()))?;
        let old = self.shared.active.load_full();
        let hasher = KeyHasher::with_secret(state.secret());
        let previous = (hasher.id() == old.limiter.hasher().id()).then_some(&*old.limiter);
        if previous.is_none() {
            tracing::warn!(target: TARGET, "the first durable bound: caller keys now hash with the state file's secret, so rate bounds start afresh");
        }
        let clock = old.limiter.clock().clone();
        let limiter = Limiter::carrying_over(policy.clone(), clock.clone(), hasher, previous);
        let carried: Vec<String> =
            previous.map(|p| p.policy().bounds.iter().filter_map(journal::table_name).collect()).unwrap_or_default();
        let restored = journal::restore_where(&state, &limiter, clock.now(), |name| !carried.iter().any(|c| c == name))
            .map_err(|e| ReloadError::State(e.to_string()))?;
        if restored > 0 {
            tracing::info!(target: TARGET, restored, "durable counts read back from the state directory");
        }
        let limiter = Arc::new(limiter);
        let before = old.limiter.policy();
        let kept = policy
            .bound_indices()
            .filter(|&i| before.bound_indices().any(|j| Arc::ptr_eq(limiter.table(i), old.limiter.table(j))))
            .count();
        // Reloads are serialised, and a rekey only follows a shared store's secret: nothing else
        // swaps an in-memory policy, so storing over `old` loses nothing.
        let stats = Arc::new(Stats::new(&policy, Some(&old.stats)));
        self.shared.active.store(Arc::new(Active { limiter, stats }));
        durable_state.start_writing(&self.shared);
        Ok((kept, policy.bounds.len() - kept))
    }

    /// Reloads on SIGHUP and when the spec file (or an overlay) changes, until the process ends.
    /// The directories are watched, not the files: editors and ConfigMaps replace files rather
    /// than write into them. A stat of each file every two seconds backs the watcher up where it
    /// cannot see (NFS).
    /// With `poll`, a spec fetched from a URL is fetched again that often (an unchanged document
    /// is not reloaded); while the last reload was refused (the service down, a version that does
    /// not compile), twice as long each time, up to sixteen times as long.
    pub(crate) async fn run(self: Arc<Self>, watch: bool, poll: Option<Duration>) {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Trigger>(16);
        let mut runner = Runner::new(RELOAD_DEADLINE, tx.clone());
        if let Some(every) = poll.filter(|_| crate::spec::fetch::is_url(&self.path)) {
            let (tx, me) = (tx.clone(), self.clone());
            tokio::spawn(async move {
                let mut wait = every;
                loop {
                    tokio::time::sleep(wait).await;
                    let _ = tx.send(Trigger::File).await;
                    wait = if me.refused() { (wait * 2).min(every * 16) } else { every };
                }
            });
        }
        let files: Arc<Vec<SpecFile>> = Arc::new(self.files().map(SpecFile::new).collect());
        let _watcher = if watch { self.watch(files.clone(), tx.clone()) } else { None };
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
            let (tx, files) = (tx.clone(), files.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    // Shares what it has seen with the watcher, so a change both notice is
                    // reloaded once. Every file is asked, so each remembers its own stat.
                    if files.iter().filter(|f| f.changed()).count() > 0 {
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
            let spec = self.path.display().to_string();
            match runner.run(move || me.reload(trigger)).await {
                Ran::Done(_) => {}
                Ran::Panicked => {
                    tracing::error!(target: TARGET, %spec, "the reload failed unexpectedly; the previous policy keeps serving")
                }
                Ran::Late => tracing::error!(
                    target: TARGET,
                    %spec,
                    deadline = ?RELOAD_DEADLINE,
                    "the reload is still running past its deadline; the previous policy keeps serving, and the spec is read again once it ends"
                ),
                Ran::Busy => {
                    tracing::debug!(target: TARGET, %spec, "a late reload is still running; the spec is read again once it ends")
                }
            }
        }
    }

    /// Whether the newest text seen (or the error that kept it from being read) was refused; not
    /// while a reload runs, which holds the texts: the poll timer must not wait on it.
    fn refused(&self) -> bool {
        match self.texts.try_lock() {
            Ok(texts) => texts.refused.is_some(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().refused.is_some(),
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// The files a reload reads: the spec's, unless it is fetched from a URL, and the overlays'.
    fn files(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(&self.path)
            .filter(|p| !crate::spec::fetch::is_url(p))
            .chain(&self.options.overlays)
            .map(PathBuf::as_path)
    }

    fn watch(
        &self,
        files: Arc<Vec<SpecFile>>,
        tx: tokio::sync::mpsc::Sender<Trigger>,
    ) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let mut dirs: Vec<&Path> =
            self.files().map(|p| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))).collect();
        dirs.dedup();
        let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| files.iter().any(|f| f.concerned(&e))) {
                let _ = tx.try_send(Trigger::File);
            }
        }) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(target: TARGET, error = %e, "cannot watch the spec's directory; changes are picked up every 2 s or on SIGHUP");
                return None;
            }
        };
        for dir in dirs {
            if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
                tracing::warn!(target: TARGET, error = %e, dir = %dir.display(), "cannot watch the spec's directory; changes are picked up every 2 s or on SIGHUP");
                return None;
            }
        }
        Some(watcher)
    }
}

/// What became of a reload run by a [`Runner`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It ended within the deadline (and logged its outcome).
    Done(Reloaded),
    /// It panicked.
    Panicked,
    /// It ran past the deadline and runs on; when it ends, a trigger asks for another.
    Late,
    /// A late reload still runs; this one was not started.
    Busy,
}

/// Runs reloads on blocking threads, one at a time, each waited for until a deadline.
pub(crate) struct Runner {
    deadline: Duration,
    /// Set while a late reload runs on.
    late: Arc<std::sync::atomic::AtomicBool>,
    /// Where the end of a late reload asks for the spec to be read again: what changed while it
    /// ran was not read.
    again: tokio::sync::mpsc::Sender<Trigger>,
}

impl Runner {
    pub(crate) fn new(deadline: Duration, again: tokio::sync::mpsc::Sender<Trigger>) -> Runner {
        Runner { deadline, late: Arc::default(), again }
    }

    pub(crate) async fn run(&mut self, reload: impl FnOnce() -> Reloaded + Send + 'static) -> Ran {
        if self.late.load(Ordering::Acquire) {
            return Ran::Busy;
        }
        let mut handle = tokio::task::spawn_blocking(reload);
        match tokio::time::timeout(self.deadline, &mut handle).await {
            Ok(Ok(outcome)) => Ran::Done(outcome),
            Ok(Err(_)) => Ran::Panicked,
            Err(_) => {
                self.late.store(true, Ordering::Release);
                let (late, again) = (self.late.clone(), self.again.clone());
                tokio::spawn(async move {
                    let _ = handle.await;
                    late.store(false, Ordering::Release);
                    tracing::info!(target: TARGET, "the late reload has ended");
                    let _ = again.send(Trigger::File).await;
                });
                Ran::Late
            }
        }
    }
}

#[cfg(test)]
#[path = "reload_tests.rs"]
mod tests;
