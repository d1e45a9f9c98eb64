//! One client connection, from its accept to its close: HTTP/1.1 or h2c, told apart by its first
//! bytes; and an HTTP/1.1 connection that holds no buffers while it waits for its next request.
//!
//! hyper keeps a read and a write buffer (8 KiB each, the least it accepts) for as long as a
//! connection lives, and a keep-alive connection spends most of its life waiting. So an HTTP/1.1
//! connection is *parked* once an exchange is over,
//! as nginx does with its keep-alive connections: with nothing in flight and nothing left to
//! write, hyper's connection is ended without closing the socket, its buffers are freed, and the
//! socket waits alone for its next bytes, which start a new hyper connection. Bytes hyper had
//! already read (the start of a pipelined request) are handed to the next one first.
//!
//! hyper ends an idle connection at once when asked to (`graceful_shutdown`), flushing what it
//! has buffered; the socket's shutdown is skipped while parking. A connection that is not idle
//! when asked (it is still reading a request body no one will wait for) is not parked: it closes
//! once its exchange is done, as it would at a stop.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::server::net::activity::{Activity, TrackedBody};
use crate::server::net::admission::Peer;
use crate::server::net::client_io::{ClientIo, Link, join, parkable, sniff};
use crate::server::net::http1::{self as own, After};
use crate::server::net::idle_http2::IdleHttp2;
use crate::server::net::request_body::{Deferred, RequestBody};

/// How long a busy HTTP/1.1 connection stays quiet (nothing in flight, no new request) before it
/// is parked. A connection is busy when its next request came within this of its last parking:
/// such a client sends the next within it again, and its hyper connection carries on rather than
/// being rebuilt (buffers, timer and state) after every response. Any other connection is parked
/// as soon as it is idle, so that a crowd of connections that each asked once holds no buffers.
/// docs/benchmarks.md has the measurements behind both halves.
const PARK_AFTER: Duration = Duration::from_millis(100);

/// How long a connection being closed (idle, past its deadline, or at a stop) may take once
/// nothing is in flight: time for an HTTP/2 client to see the GOAWAY, not for a client that
/// never answers to hold its descriptor.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The two protocols a connection may speak, as configured for a listener.
pub(crate) struct Protocols {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// The HTTP/2 connections idle now, and how many may be.
    idle_http2: IdleHttp2,
}

impl Protocols {
    /// hyper's own timer starts at a request's first byte: it bounds headers sent slowly, while
    /// the deadline from the accept (`Activity::expired`) bounds those never sent at all.
    /// An HTTP/2 client may open `max_streams` streams at once on a connection: each may hold an
    /// upstream connection, so a connection's share is bounded as its address's is.
    pub(crate) fn new(header_read_timeout: Duration, max_idle_http2: usize, max_streams: u32) -> Protocols {
        let mut http1 = http1::Builder::new();
        http1.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2.timer(TokioTimer::new()).max_concurrent_streams(max_streams);
        Protocols { http1, http2, idle_http2: IdleHttp2::new(max_idle_http2) }
    }
}

/// The deadlines of one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// From the accept to the end of the first request's headers.
    pub header: Duration,
    /// With nothing in flight.
    pub idle: Duration,
}

/// Serves one accepted connection with `handle` until it ends, or closes it: when no request
/// arrives within the header deadline, when it has nothing in flight for the idle deadline, or
/// at a stop (`stopping` turning true).
pub(crate) async fn serve<H, F, B>(
    stream: TcpStream,
    client: Peer,
    handle: H,
    protocols: &Protocols,
    deadlines: Deadlines,
    mut stopping: watch::Receiver<bool>,
) where
    H: Fn(Request<RequestBody>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Deferred + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let activity = Activity::new();
    let peer = client.addr;
    let stop_asked = stopping.clone();
    let own_handle = handle.clone();
    let link = Arc::new(Link::default());
    let service = service_fn({
        let activity = activity.clone();
        let client = client.clone();
        let link = link.clone();
        move |req: Request<Incoming>| {
            // The service is called once a request's headers are complete.
            let in_flight = activity.begin();
            if !parkable(&req) {
                link.unparkable.store(true, Ordering::Relaxed);
            }
            // Made before it is boxed: the box then holds the request once, inside the future.
            let handled = handle(req.map(RequestBody::Hyper), client.clone());
            // Boxed: hyper keeps room for the service's future on every connection, and a
            // proxy's future is kilobytes; a box costs only requests.
            Box::pin(async move {
                let mut response = handled.await;
                // hyper writes this head: the fields kept for it go into its map, the upstream's
                // first, so that the RateLimit fields replace any of theirs.
                if let Some(fields) = response.body_mut().take_fields() {
                    fields.append_to(response.headers_mut());
                }
                if let Some(rate) = response.body_mut().take_rate() {
                    rate.apply(response.headers_mut());
                }
                Ok::<_, Infallible>(response.map(|body| TrackedBody::new(body, in_flight)))
            })
        }
    });
    let expired = activity.expired(deadlines.header, deadlines.idle);
    let stop = stopped(&mut stopping);
    tokio::pin!(expired, stop);

    // The protocol, from the first bytes, before hyper holds any buffer.
    let sniffed = tokio::select! {
        sniffed = sniff(&stream) => sniffed,
        () = &mut stop => return,
        expired = &mut expired => {
            tracing::debug!(%peer, ?expired, "closing a connection");
            return;
        }
    };
    let (h2, unread) = match sniffed {
        Ok(sniffed) => sniffed,
        Err(e) => {
            tracing::debug!(error = %e, %peer, "connection ended before its first request");
            return;
        }
    };
    let mut io = ClientIo { unread, stream: TokioIo::new(stream), link: link.clone() };

    if h2 {
        // Boxed, as is hyper's HTTP/1.1 connection below: the task's own size is what a parked
        // connection costs, so it holds only what waiting needs.
        let result = Box::pin(async {
            let conn = protocols.http2.serve_connection(io, service);
            let evicted = protocols.idle_http2.evicted(&activity);
            tokio::pin!(conn, evicted);
            tokio::select! {
                result = conn.as_mut() => result,
                () = &mut stop => close(conn, &activity).await,
                expired = &mut expired => {
                    tracing::debug!(%peer, ?expired, "closing a connection");
                    close(conn, &activity).await
                }
                () = &mut evicted => {
                    tracing::debug!(%peer, "closing the HTTP/2 connection idle longest: over --max-idle-http2-connections");
                    close(conn, &activity).await
                }
            }
        })
        .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        }
        return;
    }

    let mut service = service;
    // Requests started when hyper last took the connection, or when it was last parked: it is
    // parked again only after another.
    let mut parked_after;
    let mut quiet = Quiet::default();
    // When it was last parked, and whether it is busy: asked again within `PARK_AFTER` of that.
    let mut parked_at: Option<tokio::time::Instant> = None;
    loop {
        // Pipelined bytes left when hyper's connection was parked: busy by any measure. (The
        // first request's bytes, read to tell the protocol, say nothing.)
        let left_unread = parked_at.is_some() && !io.unread.is_empty();
        if io.unread.is_empty() {
            // Parked: the socket alone waits for the next request.
            tokio::select! {
                biased;
                readable = io.stream.inner().readable() => {
                    if readable.is_err() {
                        return;
                    }
                }
                () = &mut stop => return,
                expired = &mut expired => {
                    tracing::debug!(%peer, ?expired, "closing a connection");
                    return;
                }
            }
        }
        // The usual request is answered here; hyper gets the connection for anything else. No
        // deadline is watched meanwhile: a request is in flight whenever this waits, and with one
        // in flight nothing expires (a response the client does not take comes back unsent).
        let after =
            own::serve(io.stream.inner_mut(), &mut io.unread, &client, &own_handle, &activity, &stop_asked).await;
        match after {
            After::Waiting => continue,
            After::Closed => return,
            After::Unsent { bytes, close } => {
                // Nothing is in flight: a client that does not take its response is held to the
                // idle deadline, and to the grace at a stop.
                let stream = io.stream.inner();
                let written = tokio::select! {
                    written = own::write_all(stream, &bytes) => written.is_ok(),
                    () = &mut stop => {
                        let _ = tokio::time::timeout(CLOSE_GRACE, own::write_all(stream, &bytes)).await;
                        false
                    }
                    expired = &mut expired => {
                        tracing::debug!(%peer, ?expired, "closing a connection");
                        false
                    }
                };
                if !written || close {
                    return;
                }
                continue;
            }
            // Counted from here: hyper's connection is parked only once it has served a request
            // of its own (those answered above are over).
            After::Hyper => parked_after = activity.counts().0,
        }
        // Busy: hyper's connection was parked less than `PARK_AFTER` ago (the clock is read only
        // for the requests hyper takes).
        let busy = left_unread || parked_at.is_some_and(|at| at.elapsed() < PARK_AFTER);
        let mut conn = Box::new(protocols.http1.serve_connection(io, service).with_upgrades());
        let served = tokio::select! {
            served = std::future::poll_fn(|cx| {
                let quiet = busy.then_some(&mut quiet);
                exchange(&mut *conn, cx, &activity, &link, &mut parked_after, quiet)
            }) => served,
            () = &mut stop => close(Pin::new(&mut *conn), &activity).await.map(|()| Served::Ended),
            expired = &mut expired => {
                tracing::debug!(%peer, ?expired, "closing a connection");
                close(Pin::new(&mut *conn), &activity).await.map(|()| Served::Ended)
            }
        };
        match served {
            Ok(Served::Parked) => {
                parked_at = Some(tokio::time::Instant::now());
                // `None` once an upgrade took the socket; a connection that asked for one is
                // never parked (`parkable`).
                let Some(parts) = conn.into_parts() else { return };
                io = parts.io;
                service = parts.service;
                io.unread = join(&parts.read_buf, &io.unread);
                link.parking.store(false, Ordering::Relaxed);
            }
            Ok(Served::Ended) => return,
            Err(e) => {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
                return;
            }
        }
    }
}

/// How a hyper connection ended.
enum Served {
    /// Closed (by either side), or upgraded to a tunnel that now owns the socket.
    Ended,
    /// Ended idle with its socket open, to be served again by a new one.
    Parked,
}

/// Drives `conn` through its exchanges until it ends by itself, or until it can be parked: it
/// waits with nothing in flight, nothing unsent, and a request served since it was last parked,
/// and, for a busy connection (`quiet` given), has been so for [`PARK_AFTER`].
fn exchange<C>(
    conn: &mut C,
    cx: &mut Context<'_>,
    activity: &Activity,
    link: &Link,
    parked_after: &mut u32,
    quiet: Option<&mut Quiet>,
) -> Poll<hyper::Result<Served>>
where
    C: Future<Output = hyper::Result<()>> + GracefulShutdown + Unpin,
{
    if let Poll::Ready(result) = Pin::new(&mut *conn).poll(cx) {
        return Poll::Ready(result.map(|()| Served::Ended));
    }
    let (started, in_flight) = activity.counts();
    if in_flight > 0
        || started == *parked_after
        || link.write_blocked.load(Ordering::Relaxed)
        || link.unparkable.load(Ordering::Relaxed)
    {
        return Poll::Pending;
    }
    if let Some(quiet) = quiet
        && !quiet.for_a_while(started, cx)
    {
        return Poll::Pending;
    }
    *parked_after = started;
    link.parking.store(true, Ordering::Relaxed);
    Pin::new(&mut *conn).graceful_shutdown();
    match Pin::new(&mut *conn).poll(cx) {
        // Idle: hyper flushed what it had and ended, leaving the socket open.
        Poll::Ready(result) => Poll::Ready(result.map(|()| Served::Parked)),
        // Not idle (a request body is still being read): it closes once that is done.
        Poll::Pending => {
            link.parking.store(false, Ordering::Relaxed);
            Poll::Pending
        }
    }
}

/// Whether a connection seen idle has stayed quiet for [`PARK_AFTER`]. One timer per connection,
/// armed when the connection is first seen idle and looked at when it fires, not re-armed per
/// request: a busy connection costs a timer every `PARK_AFTER`, not one a request.
#[derive(Default)]
struct Quiet {
    /// Armed, with the count of requests started when it was armed.
    timer: Option<(Pin<Box<tokio::time::Sleep>>, u32)>,
}

impl Quiet {
    /// Called with the connection idle and `started` requests so far: true once no request has
    /// started for a whole period, then disarmed (the connection is parked).
    fn for_a_while(&mut self, started: u32, cx: &mut Context<'_>) -> bool {
        let Some((timer, mark)) = &mut self.timer else {
            self.timer = Some((Box::pin(tokio::time::sleep(PARK_AFTER)), started));
            return self.for_a_while(started, cx);
        };
        if timer.as_mut().poll(cx).is_pending() {
            return false;
        }
        if *mark == started {
            self.timer = None;
            return true;
        }
        // Requests came and went since it was armed: quiet from now on, maybe.
        *mark = started;
        timer.as_mut().reset(tokio::time::Instant::now() + PARK_AFTER);
        let _ = timer.as_mut().poll(cx);
        false
    }
}

/// Asks a connection to close (an HTTP/2 GOAWAY; HTTP/1.1 closes once the response in flight is
/// sent) and lets it finish what it has in flight; once nothing is, it has `CLOSE_GRACE` before it
/// is dropped, which closes its socket.
async fn close<C, E>(mut conn: Pin<&mut C>, activity: &Activity) -> Result<(), E>
where
    C: Future<Output = Result<(), E>> + GracefulShutdown,
{
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        result = conn => result,
        () = activity.quiet_for(CLOSE_GRACE) => Ok(()),
    }
}

/// A connection that can be asked to close once its requests in flight are answered.
trait GracefulShutdown {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, B> GracefulShutdown for http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, S, B> GracefulShutdown for http2::Connection<I, S, TokioExecutor>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    TokioExecutor: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http2::Connection::graceful_shutdown(self);
    }
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
