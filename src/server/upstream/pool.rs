//! One worker's connections to the upstream: HTTP/1.1 connections kept idle between requests,
//! capped, and closed after an idle timeout. Most requests go over connections read in their own
//! task (`h1`); those that stream a body or switch protocols, and every request to a TLS
//! upstream, over hyper's client connections driven on the worker's runtime.
//!
//! A connection goes back to its worker's idle list when the client has been sent the upstream's
//! whole response, and the next request takes the most recently used one: no lock shared between
//! workers and no task per response, which hyper's pooled client (`hyper_util::client::legacy`)
//! has and which cost more per request than the limiter (docs/benchmarks.md).

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower_service::Service;

use crate::server::facts::fields::Fields;
use crate::server::upstream::client_body::ClientBody;
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
    Request(hyper::Error),
    /// The same, on a connection read in the request's task.
    Direct(h1::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::Connect(cause) | PoolError::Exhausted(cause) => f.write_str(cause),
            // hyper's own message is generic ("connection error"); its source says what happened.
            PoolError::Request(e) => match std::error::Error::source(e) {
                Some(source) => write!(f, "{e}: {source}"),
                None => write!(f, "{e}"),
            },
            PoolError::Direct(e) => write!(f, "{e}"),
        }
    }
}

/// A worker's upstream connections.
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    connector: HttpsConnector<HttpConnector>,
    /// Scheme and authority of the upstream, what the connector is asked for.
    base: Uri,
    settings: UpstreamPool,
    /// Idle connections, the most recently used last.
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    connections: Vec<(http1::SendRequest<ClientBody>, Instant)>,
    /// Connections read in the request's task, the most recently used last.
    direct: Vec<(Conn, Instant)>,
    /// Whether a task is closing connections idle too long.
    reaping: bool,
}

/// An upstream connection lent to one request: given back by [`Checkin::done`] once its response
/// has been read whole, closed if dropped before (a response cut short leaves the connection in
/// an unknown state).
pub struct Checkin {
    sender: http1::SendRequest<ClientBody>,
    pool: Weak<Inner>,
}

impl Checkin {
    /// The response has been read whole: the connection may carry the next request.
    pub fn done(self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(self.sender);
        }
    }
}

impl IdleList for Inner {
    fn take_back(self: Arc<Self>, conn: Conn) {
        self.give_back_direct(conn);
    }
}

impl Pool {
    /// A pool for `base` (scheme and authority), connecting through `connector`.
    pub(crate) fn new(connector: HttpsConnector<HttpConnector>, base: Uri, settings: UpstreamPool) -> Pool {
        Pool { inner: Arc::new(Inner { connector, base, settings, idle: Mutex::new(Idle::default()) }) }
    }

    /// Sends `req` (its URI in origin form) over an idle connection, or a new one, and returns
    /// the response head with the connection lent to it. A request an idle connection could not
    /// take (the upstream closed it meanwhile) is sent again over a new one: nothing of it had
    /// been written.
    pub(crate) async fn send(&self, req: Request<ClientBody>) -> Result<(Response<Incoming>, Checkin), PoolError> {
        let mut req = req;
        if let Some(mut sender) = self.inner.take_idle() {
            match sender.try_send_request(req).await {
                Ok(response) => return Ok((response, self.lend(sender))),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(PoolError::Request(e.into_error())),
                },
            }
        }
        // Boxed: a connect (TLS included) is a large future that few requests need.
        let mut sender = Box::pin(self.connect()).await?;
        match sender.send_request(req).await {
            Ok(response) => Ok((response, self.lend(sender))),
            Err(e) => Err(PoolError::Request(e)),
        }
    }

    /// Sends a request written by [`h1::write_request`] (`body` when it did not carry
    /// it) over an idle connection, or a new one, and returns the response head and its body. A
    /// request whose idle connection the upstream closed as it was sent (nothing came back) is
    /// sent again over a new one when it is `idempotent` (RFC 9110 §9.2.2).
    pub(crate) async fn exchange(
        &self,
        head: &[u8],
        body: Option<&[u8]>,
        head_request: bool,
        idempotent: bool,
        timeout: Duration,
    ) -> Result<(http::response::Parts, Fields, h1::Body), PoolError> {
        if let Some(mut conn) = self.inner.take_idle_direct() {
            match conn.exchange(head, body, head_request, timeout).await {
                Ok(response) => return Ok(self.body(conn, response)),
                Err(failed) if failed.retryable && idempotent => {}
                Err(failed) => return Err(PoolError::Direct(failed.error)),
            }
        }
        let mut conn = Box::pin(self.connect_direct()).await?;
        match conn.exchange(head, body, head_request, timeout).await {
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
        Ok(Conn::new(match self.connect_io().await? {
            hyper_rustls::MaybeHttpsStream::Http(io) => h1::Io::Plain(io.into_inner()),
            hyper_rustls::MaybeHttpsStream::Https(io) => h1::Io::Tls(Box::new(io.into_inner())),
        }))
    }

    async fn connect_io(
        &self,
    ) -> Result<hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>, PoolError> {
        let mut connector = self.inner.connector.clone();
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

    fn lend(&self, sender: http1::SendRequest<ClientBody>) -> Checkin {
        Checkin { sender, pool: Arc::downgrade(&self.inner) }
    }

    /// A new connection, its driver spawned on this worker's runtime.
    async fn connect(&self) -> Result<http1::SendRequest<ClientBody>, PoolError> {
        let io = self.connect_io().await?;
        let (sender, connection) = http1::Builder::new().handshake(io).await.map_err(PoolError::Request)?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "an upstream connection ended with an error");
            }
        });
        Ok(sender)
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
            return super::tls::ca_used_as_server(tls);
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
    /// The most recently used idle connection that can take a request; closes those past the
    /// idle timeout or closed by the upstream on the way.
    fn take_idle(&self) -> Option<http1::SendRequest<ClientBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while let Some((sender, since)) = idle.connections.pop() {
            if sender.is_ready() && now.duration_since(since) < self.settings.idle_timeout {
                return Some(sender);
            }
            // Closed, or not yet idle again (a response read whole whose connection has not
            // caught up): not worth waiting for, a new connection is made instead.
        }
        None
    }

    /// The most recently used idle connection read in the request's task that can take a
    /// request; closes those past the idle timeout, closed, or sent something unasked.
    fn take_idle_direct(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while let Some((mut conn, since)) = idle.direct.pop() {
            if now.duration_since(since) < self.settings.idle_timeout && conn.is_reusable() {
                return Some(conn);
            }
        }
        None
    }

    /// A connection whose response was read whole: kept for the next request, within the cap.
    fn give_back(self: &Arc<Self>, sender: http1::SendRequest<ClientBody>) {
        if self.settings.max_idle == 0 || sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.make_room(self.settings.max_idle);
        idle.connections.push((sender, Instant::now()));
        self.reap_later(&mut idle);
    }

    /// The same for a connection read in the request's task.
    fn give_back_direct(self: &Arc<Self>, conn: Conn) {
        if self.settings.max_idle == 0 {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.make_room(self.settings.max_idle);
        idle.direct.push((conn, Instant::now()));
        self.reap_later(&mut idle);
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
    /// Closes the least recently used connection when `max` are idle: it is the likeliest to be
    /// closed by the upstream.
    fn make_room(&mut self, max: usize) {
        if self.connections.len() + self.direct.len() < max {
            return;
        }
        let hyper = self.connections.first().map(|(_, since)| *since);
        match (hyper, self.direct.first().map(|(_, since)| *since)) {
            (Some(a), Some(b)) if a <= b => drop(self.connections.remove(0)),
            (Some(_), None) => drop(self.connections.remove(0)),
            (_, Some(_)) => drop(self.direct.remove(0)),
            (None, None) => {}
        }
    }

    /// When the oldest idle connection was last used.
    fn oldest(&self) -> Option<Instant> {
        let hyper = self.connections.first().map(|(_, since)| *since);
        match (hyper, self.direct.first().map(|(_, since)| *since)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
        idle.connections.retain(|(sender, since)| !sender.is_closed() && now.duration_since(*since) < timeout);
        idle.direct.retain_mut(|(conn, since)| now.duration_since(*since) < timeout && conn.is_reusable());
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
        UpstreamPool { idle_timeout: Duration::from_secs(30), max_idle: 64 }
    }
}
