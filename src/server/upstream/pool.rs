//! One worker's connections to the upstream: HTTP/1.1 connections (plain or TLS) kept idle
//! between requests, capped, and closed after an idle timeout. Every request goes over a
//! connection read in its own task (`h1`): one with its body whole, one that streams its body,
//! and one that switches protocols (its connection then the tunnel's).
//!
//! A connection goes back to its worker's idle list when the client has been sent the upstream's
//! whole response, and the next request takes the most recently used one: no lock shared between
//! workers and no task per response, which hyper's pooled client (`hyper_util::client::legacy`)
//! has.
//!
//! An upstream found writing bytes past a framed response is not trusted with reuse for a while
//! (`UpstreamPool::stray_pause`): bytes it writes late, after the next request went out on the
//! connection, would be read as that request's answer, and no proxy can tell them apart.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower_service::Service;

use crate::server::facts::fields::Fields;
use crate::server::upstream::h1::{self, Conn, Home, IdleList};

/// Why an upstream request got no response.
#[derive(Debug)]
pub(crate) enum PoolError {
    /// No connection could be made (refused, unreachable, TLS failed, timed out).
    Connect(String),
    /// No connection could be made for want of descriptors here: this server is full, not the
    /// upstream down.
    Exhausted(String),
    /// The connection failed while the request was sent or the response awaited.
    Direct(h1::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::Connect(cause) | PoolError::Exhausted(cause) => f.write_str(cause),
            PoolError::Direct(e) => write!(f, "{e}"),
        }
    }
}

/// How new connections are made.
enum Connector {
    /// TCP, with TLS for an `https://` upstream.
    Net(HttpsConnector<HttpConnector>),
    /// A scripted upstream, for the tests and fuzz targets that drive the pool over mock streams.
    #[cfg(any(test, feature = "fuzzing"))]
    Scripted(Box<dyn Fn() -> h1::Io + Send + Sync>),
}

/// A worker's upstream connections.
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Connector,
    /// Scheme and authority of the upstream, what the connector is asked for.
    base: Uri,
    settings: UpstreamPool,
    /// Idle connections, the most recently used last.
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    /// The most recently used last.
    direct: Vec<(Conn, Instant)>,
    /// Whether a task is closing connections idle too long.
    reaping: bool,
    /// Until when no connection is reused: the upstream wrote stray bytes.
    paused_until: Option<Instant>,
}

impl IdleList for Inner {
    fn take_back(self: Arc<Self>, conn: Conn) {
        self.give_back_direct(conn);
    }

    fn stray(&self) {
        self.pause_reuse();
    }
}

impl Pool {
    /// A pool for `base` (scheme and authority), connecting through `connector`.
    pub(crate) fn new(connector: HttpsConnector<HttpConnector>, base: Uri, settings: UpstreamPool) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                connector: Connector::Net(connector),
                base,
                settings,
                idle: Mutex::new(Idle::default()),
            }),
        }
    }

    /// A pool whose new connections are the streams `connect` makes (a scripted upstream).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn scripted(connect: impl Fn() -> h1::Io + Send + Sync + 'static, settings: UpstreamPool) -> Pool {
        let inner = Inner {
            connector: Connector::Scripted(Box::new(connect)),
            base: Uri::from_static("http://scripted"),
            settings,
            idle: Mutex::new(Idle::default()),
        };
        Pool { inner: Arc::new(inner) }
    }

    /// Sends a request written by `h1::write_request` (`body` when it did not carry
    /// it) over an idle connection, or a new one, and returns the response head, the answer to
    /// what was `asked`, and its body. A request whose idle connection the upstream closed as it
    /// was sent (nothing came back) is sent again over a new one when it is `idempotent` (RFC
    /// 9110 §9.2.2). An idle connection found with stray bytes on it before anything was sent is
    /// closed, and the next one tried.
    pub(crate) async fn exchange(
        &self,
        head: &[u8],
        body: Option<&[u8]>,
        asked: h1::Asked,
        idempotent: bool,
        timeout: Duration,
    ) -> Result<(http::response::Parts, Fields, h1::Body), PoolError> {
        while let Some(mut conn) = self.inner.take_idle_direct() {
            match conn.exchange(head, body, asked, timeout).await {
                Ok(response) => return Ok(self.body(conn, response)),
                Err(failed) if failed.unsent => self.inner.after_unsent(&failed.error),
                Err(failed) if failed.retryable && idempotent => break,
                Err(failed) => return Err(PoolError::Direct(failed.error)),
            }
        }
        let mut conn = Box::pin(self.connect_direct()).await?;
        match conn.exchange(head, body, asked, timeout).await {
            Ok(response) => Ok(self.body(conn, response)),
            Err(failed) => Err(PoolError::Direct(failed.error)),
        }
    }

    /// Sends a request whose body is streamed (`head` says how it is framed: as chunks when
    /// `chunked`) over an idle connection, or a new one, and returns the response head and its
    /// body. An idle connection that could not take the head (the upstream closed it) is
    /// replaced by a new one: nothing of the body had been taken.
    pub(crate) async fn exchange_streamed<B>(
        &self,
        head: &[u8],
        body: &mut B,
        chunked: bool,
        asked: h1::Asked,
    ) -> Result<(http::response::Parts, Fields, h1::Body), PoolError>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        while let Some(mut conn) = self.inner.take_idle_direct() {
            match conn.exchange_streamed(head, body, chunked, asked).await {
                Ok(response) => return Ok(self.body(conn, response)),
                Err(failed) if failed.unsent => self.inner.after_unsent(&failed.error),
                Err(failed) if failed.retryable => break,
                Err(failed) => return Err(PoolError::Direct(failed.error)),
            }
        }
        let mut conn = Box::pin(self.connect_direct()).await?;
        match conn.exchange_streamed(head, body, chunked, asked).await {
            Ok(response) => Ok(self.body(conn, response)),
            Err(failed) => Err(PoolError::Direct(failed.error)),
        }
    }

    fn body(&self, conn: Conn, head: h1::Head) -> (http::response::Parts, Fields, h1::Body) {
        let body = h1::Body::new(conn, &head, Home(Arc::downgrade(&self.inner) as Weak<dyn IdleList>));
        (head.parts, head.fields, body)
    }

    /// A new connection to the upstream, to be read in the request's task.
    async fn connect_direct(&self) -> Result<Conn, PoolError> {
        #[allow(clippy::infallible_destructuring_match, reason = "the scripted arm exists in tests")]
        let connector = match &self.inner.connector {
            Connector::Net(connector) => connector,
            #[cfg(any(test, feature = "fuzzing"))]
            Connector::Scripted(connect) => return Ok(Conn::new(connect())),
        };
        Ok(Conn::new(match self.connect_io(connector).await? {
            hyper_rustls::MaybeHttpsStream::Http(io) => h1::Io::Plain(io.into_inner()),
            hyper_rustls::MaybeHttpsStream::Https(io) => h1::Io::Stream(Box::new(io.into_inner())),
        }))
    }

    async fn connect_io(
        &self,
        connector: &HttpsConnector<HttpConnector>,
    ) -> Result<hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>, PoolError> {
        let mut connector = connector.clone();
        connector.call(self.inner.base.clone()).await.map_err(|e| {
            // The connector's error says "connect error"; its source says why.
            let mut cause = std::error::Error::source(&*e).map_or_else(|| e.to_string(), ToString::to_string);
            if ca_used_as_server(&*e) {
                cause.push_str(
                    "; the upstream's certificate says CA:TRUE (as `openssl req -x509` makes by default): give that \
                     certificate itself in --upstream-ca-file to trust it as the upstream's own, or make the server \
                     certificate with basicConstraints=CA:FALSE",
                );
            }
            if out_of_descriptors(&*e) { PoolError::Exhausted(cause) } else { PoolError::Connect(cause) }
        })
    }
}

/// Whether an error, or one it was caused by, is the process or the system out of descriptors.
/// Whether a connect failed because the upstream's certificate is a CA's that was not given
/// itself in `--upstream-ca-file`. The TLS error sits inside an `io::Error`, whose `source`
/// skips it, so the chain is walked through `get_ref` too.
fn ca_used_as_server(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return crate::trust::ca_used_as_server(tls);
        }
        if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            cause = Some(inner as &(dyn std::error::Error + 'static));
            continue;
        }
        cause = e.source();
    }
    false
}

fn out_of_descriptors(e: &(dyn std::error::Error + 'static)) -> bool {
    // EMFILE and ENFILE on Linux and the BSDs alike.
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    let mut cause = Some(e);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(EMFILE | ENFILE))
        {
            return true;
        }
        cause = e.source();
    }
    false
}

impl Inner {
    /// The most recently used idle connection within the idle timeout; closes those past it.
    /// Whether anything arrived on it is asked just before the request is written (`Conn`).
    fn take_idle_direct(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if idle.paused(now) {
            return None;
        }
        while let Some((conn, since)) = idle.direct.pop() {
            if now.duration_since(since) < self.settings.idle_timeout {
                return Some(conn);
            }
        }
        None
    }

    /// A connection whose response was read whole: kept for the next request, within the cap.
    fn give_back_direct(self: &Arc<Self>, conn: Conn) {
        if self.settings.max_idle == 0 {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.paused(Instant::now()) {
            return;
        }
        idle.make_room(self.settings.max_idle);
        idle.direct.push((conn, Instant::now()));
        self.reap_later(&mut idle);
    }

    /// An idle connection was closed unused: stray bytes on it pause reuse.
    fn after_unsent(&self, error: &h1::Error) {
        if matches!(error, h1::Error::Stray) {
            self.pause_reuse();
        }
    }

    /// The upstream wrote bytes nobody asked for: its idle connections are closed, and none is
    /// kept for `stray_pause`. Said once a pause.
    fn pause_reuse(&self) {
        let pause = self.settings.stray_pause;
        if pause.is_zero() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if !idle.paused(now) {
            tracing::warn!(
                pause = ?pause,
                "the upstream wrote bytes past the end of a response; its connections are not reused for a while"
            );
        }
        idle.paused_until = Some(now + pause);
        idle.direct.clear();
    }

    /// Starts the task closing idle connections, unless it runs.
    fn reap_later(self: &Arc<Self>, idle: &mut Idle) {
        if !idle.reaping {
            idle.reaping = true;
            // Outside a runtime (a unit test) connections are only closed when next looked at.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(reap(Arc::downgrade(self), self.settings.idle_timeout));
            }
        }
    }
}

impl Idle {
    /// Whether reuse is paused at `now`.
    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }

    /// Closes the least recently used connection when `max` are idle: it is the likeliest to be
    /// closed by the upstream.
    fn make_room(&mut self, max: usize) {
        if self.direct.len() >= max && !self.direct.is_empty() {
            drop(self.direct.remove(0));
        }
    }

    /// When the oldest idle connection was last used.
    fn oldest(&self) -> Option<Instant> {
        self.direct.first().map(|(_, since)| *since)
    }
}

/// Closes connections idle longer than `timeout`, looking again when the next one would be;
/// ends when none is left idle (the next one given back starts it again) or the pool is gone.
async fn reap(pool: Weak<Inner>, timeout: Duration) {
    let mut wake = Instant::now() + timeout;
    loop {
        tokio::time::sleep_until(wake).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut idle = pool.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut stray = false;
        idle.direct.retain_mut(|(conn, since)| {
            let found = conn.look();
            stray |= found == h1::Idle::Bytes;
            now.duration_since(*since) < timeout && found == h1::Idle::Empty
        });
        if stray {
            drop(idle);
            pool.pause_reuse();
            idle = pool.idle.lock().unwrap_or_else(PoisonError::into_inner);
        }
        match idle.oldest() {
            Some(oldest) => wake = oldest + timeout,
            None => {
                idle.reaping = false;
                return;
            }
        }
    }
}

/// Idle connections to the upstream kept for reuse. Each holds a descriptor here and a worker or
/// a descriptor at the upstream, so they are capped and closed when unused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamPool {
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// The most idle connections kept; a connection freed beyond that is closed.
    pub max_idle: usize,
    /// How long no connection is reused once the upstream wrote bytes past a framed response
    /// (zero: reuse goes on, every connection still checked).
    pub stray_pause: Duration,
}

impl UpstreamPool {
    /// One worker's share of the pool, when `workers` each keep their own idle connections: the
    /// cap split evenly, and at least one each (unless the cap is 0, no pooling at all).
    pub(crate) fn per_worker(self, workers: usize) -> UpstreamPool {
        let max_idle = match self.max_idle {
            0 => 0,
            n => (n / workers.max(1)).max(1),
        };
        UpstreamPool { max_idle, ..self }
    }
}

impl Default for UpstreamPool {
    fn default() -> Self {
        UpstreamPool { idle_timeout: Duration::from_secs(30), max_idle: 64, stray_pause: Duration::from_secs(10) }
    }
}
