//! `serve --request-log`: one JSON line per request with exactly the facts the bounds read, for
//! `opbound replay` to judge again. A thread of its own writes them behind a bounded channel: a
//! request never waits for the disk, and a line that finds the channel full is dropped and counted.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::server::facts::fields::Headers;
use arc_swap::ArcSwapOption;
use siphasher::sip128::SipHasher13;

use crate::engine::Outcome;
use crate::engine::clock::Nanos;
use crate::policy::{Credential, Per, Policy};
use crate::request::{Facts, Identity, Key};
use crate::throttle::{self, Throttle};

use crate::server::facts::identity::HeaderFacts;

/// Lines waiting for the writer: about a second of a busy server's traffic, a few MiB at most.
pub(crate) const CHANNEL_LINES: usize = 65_536;
/// How long a written line may sit in the buffer before it reaches the file.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The shortest time between two warnings about dropped lines or failed writes.
const WARN_PERIOD: Duration = Duration::from_secs(5);

/// How values that identify a caller are written (`--request-log-keys`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KeyMode {
    // Plain comments, not docs: clap would print documented values one a line, and lay out the
    // whole of `serve --help` apart for them.
    // `h:` and 32 hex digits of a keyed hash: equal values stay equal, none can be read back.
    #[default]
    Hashed,
    // As the client sent them.
    Plain,
}

/// The key values are hashed with.
pub(crate) type Secret = [u8; 16];

/// The fewest bytes a `--request-log-secret-file` holds: a SipHash key's worth.
pub(crate) const MIN_SECRET: usize = 16;

/// `--request-log` and its companions, checked, with the secret file read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The file lines are appended to (created if missing; reopened on SIGHUP).
    pub path: PathBuf,
    /// Whether values are hashed or written as they came.
    pub keys: KeyMode,
    /// The hashing key from `--request-log-secret-file`; `None`: a random one per process.
    pub secret: Option<Secret>,
}

/// The hashing key of a secret file's bytes (a trailing newline removed), which may be longer
/// than a key: every byte counts. Or why the file cannot serve as one.
pub(crate) fn secret_from(mut bytes: &[u8]) -> Result<Secret, String> {
    while let [rest @ .., b'\n' | b'\r'] = bytes {
        bytes = rest;
    }
    if bytes.len() < MIN_SECRET {
        return Err(format!(
            "holds {} bytes, and a secret needs at least {MIN_SECRET}; write one with `head -c 32 /dev/urandom | base64`",
            bytes.len()
        ));
    }
    // A fixed key: the derivation only folds any length into 16 bytes; the secret is the input.
    Ok(SipHasher13::new_with_keys(0x6f70_626f_756e_6400, 0x7265_7175_6573_746c).hash(bytes).as_bytes())
}

/// How values are written: hashed with a key, or as they came.
enum Keys {
    Hashed(SipHasher13),
    Plain,
}

impl Keys {
    fn new(mode: KeyMode, secret: Secret) -> Keys {
        match mode {
            KeyMode::Hashed => Keys::Hashed(SipHasher13::new_with_key(&secret)),
            KeyMode::Plain => Keys::Plain,
        }
    }

    /// The value as a JSON string.
    fn value(&self, out: &mut String, bytes: &[u8]) {
        match self {
            Keys::Hashed(hasher) => {
                let _ = write!(out, "\"h:{:032x}\"", hasher.hash(bytes).as_u128());
            }
            Keys::Plain => json_str(out, &String::from_utf8_lossy(bytes)),
        }
    }

    /// The value as it goes back into a query string: hashed (which needs no escaping), or as
    /// written.
    fn query_value(&self, out: &mut String, decoded: &[u8], written: &str) {
        match self {
            Keys::Hashed(hasher) => {
                let _ = write!(out, "h:{:032x}", hasher.hash(decoded).as_u128());
            }
            Keys::Plain => out.push_str(written),
        }
    }
}

/// A JSON string. Control characters are escaped; anything else is written as is.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What some bound of a policy reads beyond the method, path and client address: computed once
/// per policy, since a reload may change it.
#[derive(Debug)]
struct Reads {
    policy: Arc<Policy>,
    /// Some bound counts per user, org or token, or applies to some callers only.
    identity: bool,
    /// Some bound counts `per: token`.
    token: bool,
    /// Query parameters counted per or holding credentials: hashed in the target.
    query: Vec<String>,
    /// Headers (lower case) and whether they identify a caller (hashed); `cost-from` headers
    /// are numbers, written as they came.
    headers: Vec<(String, bool)>,
    /// Cookies counted per or holding credentials.
    cookies: Vec<String>,
}

impl Reads {
    fn of(policy: &Arc<Policy>) -> Reads {
        fn add(list: &mut Vec<String>, name: &str) {
            if !list.iter().any(|n| n == name) {
                list.push(name.to_string());
            }
        }
        fn add_header(list: &mut Vec<(String, bool)>, name: &str, hashed: bool) {
            match list.iter_mut().find(|(n, _)| n == name) {
                Some((_, h)) => *h |= hashed,
                None => list.push((name.to_string(), hashed)),
            }
        }
        let mut reads = Reads {
            policy: policy.clone(),
            identity: false,
            token: false,
            query: Vec::new(),
            headers: Vec::new(),
            cookies: Vec::new(),
        };
        for bound in &policy.bounds {
            let def = &bound.def;
            reads.identity |= def.needs_identity();
            match &def.per {
                Per::Token => reads.token = true,
                Per::Header(name) => add_header(&mut reads.headers, name.as_str(), true),
                Per::Cookie(name) => add(&mut reads.cookies, name),
                Per::Query(name) => add(&mut reads.query, name),
                _ => {}
            }
            if let Some(cost) = &def.cost_from
                && let crate::policy::CostFrom::Header(name) = &cost.from
            {
                add_header(&mut reads.headers, name, false);
            }
        }
        for credential in policy.operations.iter().flat_map(|o| &o.credentials) {
            match credential {
                Credential::Authorization => {}
                Credential::Header(name) => add_header(&mut reads.headers, name, true),
                Credential::Query(name) => add(&mut reads.query, name),
                Credential::Cookie(name) => add(&mut reads.cookies, name),
            }
        }
        reads
    }
}

/// A request as the log records it, whatever became of it.
pub(crate) struct Request<'a> {
    /// The limiter's clock just before the request was judged.
    pub time: Nanos,
    /// Upper-cased, as judged.
    pub method: &'a str,
    /// The path and query as received.
    pub target: &'a str,
    /// The client address, as resolved from the peer and trusted proxies.
    pub client: IpAddr,
    pub headers: Headers<'a>,
}

/// What the bounds made of a request that was judged.
pub(crate) struct Judged<'a> {
    pub operation: Option<usize>,
    pub outcome: &'a Outcome,
    /// The identity `judge` resolved, if it did.
    pub identity: Option<&'a Identity>,
}

/// The name of an outcome in the log.
fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::Limited { .. } => "limited",
        Outcome::MissingKey { .. } => "missing-key",
        Outcome::UnclearKey { .. } => "unclear-key",
        Outcome::BadCost { .. } => "bad-cost",
        Outcome::CostTooHigh { .. } => "cost-too-high",
        Outcome::Unavailable { .. } => "unavailable",
    }
}

/// The bound that refused, if one did.
fn refusing_bound(outcome: &Outcome) -> Option<crate::policy::BoundIndex> {
    match outcome {
        Outcome::Allowed => None,
        Outcome::Limited { bound }
        | Outcome::MissingKey { bound, .. }
        | Outcome::UnclearKey { bound, .. }
        | Outcome::BadCost { bound, .. }
        | Outcome::CostTooHigh { bound, .. }
        | Outcome::Unavailable { bound } => Some(*bound),
    }
}

/// The request target with the values of the query parameters in `hashed` written by `keys`.
fn target(out: &mut String, keys: &Keys, target: &str, hashed: &[String]) {
    let Some((path, query)) = target.split_once('?').filter(|_| !hashed.is_empty() && matches!(keys, Keys::Hashed(_)))
    else {
        json_str(out, target);
        return;
    };
    let mut written = String::with_capacity(target.len());
    written.push_str(path);
    written.push('?');
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            written.push('&');
        }
        match pair.split_once('=') {
            Some((name, value)) if form_decode(name).is_some_and(|n| hashed.contains(&n)) => {
                written.push_str(name);
                written.push('=');
                // A malformed escape is hashed as written: the bound saw it unclear, and the
                // value still must not show.
                let decoded = form_decode(value).unwrap_or_else(|| value.to_string());
                keys.query_value(&mut written, decoded.as_bytes(), value);
            }
            _ => written.push_str(pair),
        }
    }
    json_str(out, &written);
}

/// A query name or value form-decoded as bounds read it (`+` is a space).
fn form_decode(s: &str) -> Option<String> {
    if !s.contains(['%', '+']) {
        return Some(s.to_string());
    }
    crate::spec::pointer::percent_decode(&s.replace('+', " "))
}

/// The line of a request, but for its status and duration, which only its end knows: what comes
/// before them and what comes after.
fn render(
    keys: &Keys,
    reads: &Reads,
    request: &Request<'_>,
    judged: Option<&Judged<'_>>,
    resolve: &dyn Fn() -> Identity,
) -> (String, String) {
    let mut head = String::with_capacity(256);
    head.push_str("{\"time\":");
    match jiff::Timestamp::from_nanosecond(i128::from(request.time)) {
        Ok(t) => {
            let _ = write!(head, "\"{t:.9}\"");
        }
        Err(_) => head.push_str("null"),
    }
    head.push_str(",\"method\":");
    json_str(&mut head, request.method);
    head.push_str(",\"target\":");
    target(&mut head, keys, request.target, &reads.query);
    let _ = write!(head, ",\"client\":\"{}\"", request.client);

    let mut tail = String::with_capacity(128);
    let Some(judged) = judged else {
        tail.push_str(",\"outcome\":\"malformed\"}");
        return (head, tail);
    };
    let policy = &reads.policy;
    if let Some(op) = judged.operation.and_then(|o| policy.operations.get(o)) {
        tail.push_str(",\"operation\":");
        json_str(&mut tail, &op.id);
    }
    let _ = write!(tail, ",\"outcome\":\"{}\"", outcome_name(judged.outcome));
    if let Some(bound) = refusing_bound(judged.outcome).and_then(|b| policy.bounds.get(b.index())) {
        tail.push_str(",\"bound\":");
        json_str(&mut tail, &bound.id);
    }
    if reads.identity {
        let resolved;
        let identity = match judged.identity {
            Some(i) => i,
            None => {
                resolved = resolve();
                &resolved
            }
        };
        if let Some(user) = &identity.user {
            tail.push_str(",\"user\":");
            keys.value(&mut tail, user.as_bytes());
        }
        if let Some(org) = &identity.org {
            tail.push_str(",\"org\":");
            keys.value(&mut tail, org.as_bytes());
        }
        if !identity.roles.is_empty() {
            tail.push_str(",\"roles\":[");
            for (i, role) in identity.roles.iter().enumerate() {
                if i > 0 {
                    tail.push(',');
                }
                json_str(&mut tail, role);
            }
            tail.push(']');
        }
    }
    let query = request.target.split_once('?').map(|(_, q)| q);
    let facts = HeaderFacts { address: request.client, headers: request.headers, query };
    if reads.token {
        let credentials = judged.operation.and_then(|o| policy.operations.get(o)).map_or(&[][..], |o| &o.credentials);
        if let Key::Present(token) = crate::request::token(&facts, credentials) {
            tail.push_str(",\"token\":");
            keys.value(&mut tail, &token);
        }
    }
    let mut first = true;
    for (name, hashed) in &reads.headers {
        let mut values = request.headers.get_all(name.as_str());
        let Some(value) = values.next() else { continue };
        tail.push_str(if first { ",\"headers\":{" } else { "," });
        first = false;
        json_str(&mut tail, name);
        tail.push(':');
        let write = |out: &mut String, v: &[u8]| match hashed {
            true => keys.value(out, v),
            false => json_str(out, &String::from_utf8_lossy(v)),
        };
        // A header sent more than once is an array of its values, in order: a bound refuses it
        // as unclear when they differ, and replay must see that they do.
        let rest: Vec<_> = values.collect();
        if rest.is_empty() {
            write(&mut tail, value);
        } else {
            tail.push('[');
            write(&mut tail, value);
            for v in rest {
                tail.push(',');
                write(&mut tail, v);
            }
            tail.push(']');
        }
    }
    if !first {
        tail.push('}');
    }
    let mut first = true;
    for name in &reads.cookies {
        let Some(value) = facts.cookie(name) else { continue };
        tail.push_str(if first { ",\"cookies\":{" } else { "," });
        first = false;
        json_str(&mut tail, name);
        tail.push(':');
        keys.value(&mut tail, &value);
    }
    if !first {
        tail.push('}');
    }
    tail.push('}');
    (head, tail)
}

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

impl RequestLog {
    /// Opens the file (appending, created if missing) and starts the writer; or why it cannot.
    pub(crate) fn start(settings: &Settings) -> Result<Arc<RequestLog>, String> {
        let file =
            open(&settings.path).map_err(|e| format!("cannot open --request-log {}: {e}", settings.path.display()))?;
        let secret = match settings.secret {
            Some(s) => s,
            None => {
                if settings.keys == KeyMode::Hashed {
                    tracing::info!(
                        "the request log hashes keys with a random secret: hashes will not match across restarts or instances unless --request-log-secret-file is given"
                    );
                }
                let mut s = [0u8; 16];
                getrandom::fill(&mut s).map_err(|e| format!("cannot draw a secret for the request log: {e}"))?;
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
pub struct Entry {
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
#[path = "request_log_tests.rs"]
mod tests;
