//! One worker's connections to the upstream: HTTP/1.1 connections driven on the worker's own
//! runtime, kept idle between requests, capped, and closed after an idle timeout.
//!
//! hyper's pooled client (`hyper_util::client::legacy`) does the same with a shared pool behind
//! a lock, a task spawned per response to watch the connection become idle again, and more
//! hand-offs; in the profile of `serve` under load they cost more than the limiter. Here a
//! connection goes back to its worker's idle list when the client has been sent the upstream's
//! whole response, and the next request takes the most recently used one.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower_service::Service;

use super::body::ClientBody;
use super::upstream::UpstreamPool;

/// Why an upstream request got no response.
#[derive(Debug)]
pub(crate) enum PoolError {
    /// No connection could be made (refused, unreachable, TLS failed, timed out).
    Connect(String),
    /// The connection failed while the request was sent or the response awaited.
    Request(hyper::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::Connect(cause) => f.write_str(cause),
            // hyper's own message is generic ("connection error"); its source says what happened.
            PoolError::Request(e) => match std::error::Error::source(e) {
                Some(source) => write!(f, "{e}: {source}"),
                None => write!(f, "{e}"),
            },
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

    fn lend(&self, sender: http1::SendRequest<ClientBody>) -> Checkin {
        Checkin { sender, pool: Arc::downgrade(&self.inner) }
    }

    /// A new connection, its driver spawned on this worker's runtime.
    async fn connect(&self) -> Result<http1::SendRequest<ClientBody>, PoolError> {
        let mut connector = self.inner.connector.clone();
        let io = connector.call(self.inner.base.clone()).await.map_err(|e| {
            // The connector's error says "connect error"; its source says why.
            let cause = std::error::Error::source(&*e).map_or_else(|| e.to_string(), ToString::to_string);
            PoolError::Connect(cause)
        })?;
        let (sender, connection) = http1::Builder::new().handshake(io).await.map_err(PoolError::Request)?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "an upstream connection ended with an error");
            }
        });
        Ok(sender)
    }
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

    /// A connection whose response was read whole: kept for the next request, within the cap.
    fn give_back(self: &Arc<Self>, sender: http1::SendRequest<ClientBody>) {
        if self.settings.max_idle == 0 || sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.connections.len() >= self.settings.max_idle {
            // The least recently used goes: it is the likeliest to be closed by the upstream.
            idle.connections.remove(0);
        }
        idle.connections.push((sender, Instant::now()));
        if !idle.reaping {
            idle.reaping = true;
            // Outside a runtime (a unit test) connections are only closed when next looked at.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(reap(Arc::downgrade(self), self.settings.idle_timeout));
            }
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
        match idle.connections.first() {
            Some((_, oldest)) => wake = *oldest + timeout,
            None => {
                idle.reaping = false;
                return;
            }
        }
    }
}
