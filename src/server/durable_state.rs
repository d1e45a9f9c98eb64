//! The state directory of a server counting in memory: opened when the first durable bound (a
//! quota or a `count-when` bound) arrives (at the start or by a reload), written behind by a thread of its own, and written once more at
//! the stop.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::policy::Policy;
use crate::server::judge::Shared;
use crate::store::durable::{StateError, StateStore, journal};

/// Where durable bounds' counts are kept, and the writer once they are.
#[derive(Debug)]
pub(crate) struct DurableState {
    dir: PathBuf,
    start_over: bool,
    sync: Duration,
    store: OnceLock<Arc<StateStore>>,
    writer: Mutex<Option<StateWriter>>,
}

/// The thread writing durable bounds' counts behind to the state directory.
#[derive(Debug)]
struct StateWriter {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Result<(), StateError>>,
}

/// Why the state directory cannot be counted in: a locked, damaged or foreign state file.
#[derive(Debug, thiserror::Error)]
#[error("{0}; to count quotas and count-when bounds afresh, move the file away or pass --state-start-over")]
pub(crate) struct Unopened(pub StateError);

impl DurableState {
    /// The state directory `dir`, not opened yet.
    pub(crate) fn new(dir: PathBuf, start_over: bool, sync: Duration) -> DurableState {
        DurableState { dir, start_over, sync, store: OnceLock::new(), writer: Mutex::new(None) }
    }

    /// Whether `policy` has a durable bound (a quota, a `count-when` bound), whose counts belong
    /// in the state directory.
    pub(crate) fn needed(policy: &Policy) -> bool {
        policy.bounds.iter().any(|b| b.def.durable())
    }

    /// Opens the state directory once (later calls return the same store), or says why it
    /// cannot: a locked, damaged or foreign state file is never answered with an empty one.
    pub(crate) fn open(&self) -> Result<Arc<StateStore>, Unopened> {
        // Reloads are serialised and the start comes before them: no two opens race.
        if let Some(store) = self.store.get() {
            return Ok(store.clone());
        }
        let state = StateStore::open(&self.dir, self.start_over).map_err(Unopened)?;
        if let Some(old) = state.discarded() {
            tracing::warn!(discarded = %old.display(), "--state-start-over: the old state was moved aside");
        }
        tracing::info!(state = %state.path().display(), "quota and count-when counts kept in the state directory");
        Ok(self.store.get_or_init(|| Arc::new(state)).clone())
    }

    /// Starts writing behind what `shared` serves, if the store is open and no writer runs yet.
    pub(crate) fn start_writing(&self, shared: &Arc<Shared>) {
        let Some(state) = self.store.get().cloned() else { return };
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if writer.is_some() {
            return;
        }
        let (stop, stopped) = std::sync::mpsc::channel();
        let current = shared.clone();
        let interval = self.sync;
        let stats = Arc::new(journal::StateStats::default());
        let _ = shared.state.set(stats.clone());
        let thread = std::thread::Builder::new()
            .name("opbound-state".to_string())
            .spawn(move || {
                let current = move || current.active.load().limiter.clone();
                journal::write_behind(state, current, interval, stopped, &stats)
            })
            .expect("a thread starts");
        *writer = Some(StateWriter { stop, thread });
    }

    /// Stops writing behind after one last write, so a graceful stop loses nothing; waits for it.
    pub(crate) async fn finish(&self) {
        let Some(writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let _ = writer.stop.send(());
        let outcome = tokio::task::spawn_blocking(move || writer.thread.join()).await;
        match outcome {
            Ok(Ok(Ok(()))) => tracing::info!("durable state written"),
            Ok(Ok(Err(e))) => tracing::error!(error = %e, "the last write of the durable state failed"),
            _ => tracing::error!("the durable state writer stopped abnormally"),
        }
    }
}
