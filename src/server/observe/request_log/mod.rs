//! `serve --request-log`: one JSON line per request with exactly the facts the bounds read, for
//! `opbound replay` to judge again. A thread of its own writes them behind a bounded channel: a
//! request never waits for the disk, and a line that finds the channel full is dropped and counted.
//!
//! `settings` says how caller values are written (hashed with a secret, or as they came), `line`
//! renders a request's line.

mod line;
mod settings;

pub(crate) use line::{Judged, Request};
use line::{Keys, Reads, render};
pub(crate) use settings::{KeyMode, Settings, secret_from};

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use crate::policy::Policy;
use crate::request::Identity;
use crate::throttle::{self, Throttle};

/// Lines waiting for the writer: about a second of a busy server's traffic, a few MiB at most.
pub(crate) const CHANNEL_LINES: usize = 65_536;
/// How long a written line may sit in the buffer before it reaches the file.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The shortest time between two warnings about dropped lines or failed writes.
const WARN_PERIOD: Duration = Duration::from_secs(5);

/// What the writer thread is told.
enum Message {
    Line(String),
    /// Reopen the file: lines before this one go to the old file, lines after to the new.
    Reopen,
    /// Flush and end.
    Stop,
}

/// The request log of a server: the channel to its writer, and what it has dropped.
pub(crate) struct RequestLog {
    tx: SyncSender<Message>,
    keys: Keys,
    reads: ArcSwapOption<Reads>,
    reopen: Arc<AtomicBool>,
    dropped: AtomicU64,
    /// Warnings about dropped lines, at most one a period.
    drops: Arc<Throttle>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Why the request log cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// Its file cannot be opened for appending.
    #[error("cannot open --request-log {}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    /// No random secret could be drawn to hash keys with.
    #[error("cannot draw a secret for the request log: {0}")]
    Secret(String),
}

impl RequestLog {
    /// Opens the file (appending, created if missing) and starts the writer; or why it cannot.
    pub(crate) fn start(settings: &Settings) -> Result<Arc<RequestLog>, StartError> {
        let file = open(&settings.path).map_err(|e| StartError::Open { path: settings.path.clone(), source: e })?;
        let secret = match settings.secret {
            Some(s) => s,
            None => {
                if settings.keys == KeyMode::Hashed {
                    tracing::info!(
                        "the request log hashes keys with a random secret: hashes will not match across restarts or instances unless --request-log-secret-file is given"
                    );
                }
                let mut s = [0u8; 16];
                getrandom::fill(&mut s).map_err(|e| StartError::Secret(e.to_string()))?;
                s
            }
        };
        Ok(RequestLog::with_file(settings.path.clone(), file, Keys::new(settings.keys, secret)))
    }

    fn with_file(path: PathBuf, file: File, keys: Keys) -> Arc<RequestLog> {
        let (tx, rx) = std::sync::mpsc::sync_channel(CHANNEL_LINES);
        let reopen = Arc::new(AtomicBool::new(false));
        let thread = {
            let reopen = reopen.clone();
            std::thread::Builder::new()
                .name("opbound-request-log".to_string())
                .spawn(move || write_lines(path, file, rx, &reopen))
                .expect("a thread starts")
        };
        Arc::new(RequestLog {
            tx,
            keys,
            reads: ArcSwapOption::empty(),
            reopen,
            dropped: AtomicU64::new(0),
            drops: Arc::new(Throttle::new(WARN_PERIOD)),
            writer: Mutex::new(Some(thread)),
        })
    }

    /// Lines dropped because the writer fell behind.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The line of a request judged (`judged`) or refused as malformed before (`None`), under
    /// `policy`, to be finished with its status and sent when its response ends. `resolve` gives
    /// the identity when the policy reads one and `judge` did not resolve it.
    pub(crate) fn entry(
        self: &Arc<Self>,
        arrived: Instant,
        policy: &Arc<Policy>,
        request: &Request<'_>,
        judged: Option<&Judged<'_>>,
        resolve: &dyn Fn() -> Identity,
    ) -> Entry {
        let reads = self.reads_of(policy);
        let (head, tail) = render(&self.keys, &reads, request, judged, resolve);
        Entry { log: self.clone(), arrived, head, tail, status: None }
    }

    fn reads_of(&self, policy: &Arc<Policy>) -> Arc<Reads> {
        if let Some(reads) = &*self.reads.load()
            && Arc::ptr_eq(&reads.policy, policy)
        {
            return reads.clone();
        }
        let reads = Arc::new(Reads::of(policy));
        self.reads.store(Some(reads.clone()));
        reads
    }

    fn send(&self, line: String) {
        match self.tx.try_send(Message::Line(line)) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => self.drop_line(),
        }
    }

    fn drop_line(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let start = *STARTED;
        let now = move || start.elapsed().as_nanos() as u64;
        let Some(line) = self.drops.occurred(now) else { return };
        tracing::warn!(suppressed = line.suppressed, "the request log fell behind: lines dropped");
        // Outside a runtime there is no one to report the rest; the next line will.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(throttle::report_rest(self.drops.clone(), now, line, |line| {
                tracing::warn!(
                    suppressed = line.suppressed,
                    "the request log fell behind: lines dropped since the last warning"
                );
            }));
        }
    }

    /// Reopens the file on every SIGHUP from now on (logrotate's `postrotate kill -HUP`).
    /// Spawned on the current runtime.
    pub(crate) fn reopen_on_hangup(self: &Arc<Self>) {
        #[cfg(unix)]
        {
            let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
            let log = self.clone();
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    log.reopen();
                }
            });
        }
    }

    /// Asks the writer to reopen the file once it has written the lines already sent, which
    /// belong to the old file. With the channel full, the writer reopens before its next line.
    pub(crate) fn reopen(&self) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(Message::Reopen) {
            self.reopen.store(true, Ordering::SeqCst);
        }
    }

    /// Writes every line sent so far and stops the writer; waits for it. A graceful stop loses
    /// none.
    pub(crate) async fn finish(&self) {
        let Some(thread) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let tx = self.tx.clone();
        // `send` waits for room: the writer drains the channel meanwhile.
        let joined = tokio::task::spawn_blocking(move || {
            let _ = tx.send(Message::Stop);
            thread.join()
        })
        .await;
        if !matches!(joined, Ok(Ok(()))) {
            tracing::error!("the request log writer stopped abnormally");
        }
    }
}

/// When the process started, for the throttles' clock.
static STARTED: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// A request's line waiting for its end: sent when dropped, which is when the response body
/// ends (see `ProxyBody`), or at once for a response opbound wrote itself.
pub(crate) struct Entry {
    log: Arc<RequestLog>,
    arrived: Instant,
    head: String,
    tail: String,
    status: Option<u16>,
}

impl Entry {
    /// The status sent to the client.
    pub(crate) fn status(&mut self, status: u16) {
        self.status = Some(status);
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let millis = self.arrived.elapsed().as_nanos() as f64 / 1e6;
        let mut line = std::mem::take(&mut self.head);
        // No status: the client went away before one was sent.
        if let Some(status) = self.status {
            let _ = write!(line, ",\"status\":{status}");
        }
        let _ = write!(line, ",\"duration_ms\":{millis:.3}");
        line.push_str(&self.tail);
        self.log.send(line);
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

/// The writer thread: appends lines, flushes at least once a second, reopens the file when
/// asked, and flushes a last time when stopped or when every sender is gone.
fn write_lines(path: PathBuf, file: File, rx: Receiver<Message>, reopen: &AtomicBool) {
    let mut out = BufWriter::with_capacity(64 * 1024, file);
    let failures = Throttle::new(WARN_PERIOD);
    let start = Instant::now();
    let failed = |e: std::io::Error| {
        if let Some(line) = failures.occurred(|| start.elapsed().as_nanos() as u64) {
            tracing::warn!(path = %path.display(), error = %e, suppressed = line.suppressed, "cannot write the request log");
        }
    };
    // When the oldest line not yet flushed was written.
    let mut unflushed: Option<Instant> = None;
    loop {
        let wait = unflushed.map_or(FLUSH_EVERY, |at| FLUSH_EVERY.saturating_sub(at.elapsed()));
        let message = rx.recv_timeout(wait);
        if matches!(message, Ok(Message::Reopen)) | reopen.swap(false, Ordering::SeqCst) {
            if let Err(e) = out.flush() {
                failed(e);
            }
            unflushed = None;
            match open(&path) {
                Ok(file) => {
                    out = BufWriter::with_capacity(64 * 1024, file);
                    tracing::info!(path = %path.display(), "request log reopened");
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot reopen the request log; writing on to the file it had open")
                }
            }
        }
        match message {
            Ok(Message::Line(line)) => {
                if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.write_all(b"\n")) {
                    failed(e);
                }
                unflushed.get_or_insert_with(Instant::now);
            }
            Ok(Message::Reopen) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => {
                if let Err(e) = out.flush() {
                    failed(e);
                }
                return;
            }
        }
        if unflushed.is_some_and(|at| at.elapsed() >= FLUSH_EVERY) {
            if let Err(e) = out.flush() {
                failed(e);
            }
            unflushed = None;
        }
    }
}

#[cfg(test)]
mod tests;
