//! One client connection, from its accept to its close: HTTP/1.1 or h2c, told apart by its first
//! bytes. HTTP/1.1 is opbound's own (`net/http1`), every request of it, from the first byte to
//! the tunnel an upgrade makes; hyper serves HTTP/2.
//!
//! Between requests an HTTP/1.1 connection holds no buffer: the socket alone waits for the next
//! bytes (as nginx's keep-alive connections do), under the idle deadline.

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::server::net::activity::{Activity, TrackedBody};
use crate::server::net::admission::Peer;
use crate::server::net::client_io::{ClientIo, sniff};
use crate::server::net::http1::{self as own, After};
use crate::server::net::idle_http2::IdleHttp2;
use crate::server::net::request_body::{Deferred, RequestBody};

/// How long a connection being closed (idle, past its deadline, or at a stop) may take once
/// nothing is in flight: time for an HTTP/2 client to see the GOAWAY, not for a client that
/// never answers to hold its descriptor.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The two protocols a connection may speak, as configured for a listener.
pub(crate) struct Protocols {
    /// How long an HTTP/1.1 head may take from its first byte to its end: it bounds heads sent
    /// slowly, while the deadline from the accept (`Activity::expired`) bounds those never sent.
    header_read_timeout: Duration,
    http2: http2::Builder<TokioExecutor>,
    /// The HTTP/2 connections idle now, and how many may be.
    idle_http2: IdleHttp2,
}

impl Protocols {
    /// An HTTP/2 client may open `max_streams` streams at once on a connection: each may hold an
    /// upstream connection, so a connection's share is bounded as its address's is.
    pub(crate) fn new(header_read_timeout: Duration, max_idle_http2: usize, max_streams: u32) -> Protocols {
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2.timer(TokioTimer::new()).max_concurrent_streams(max_streams);
        Protocols { header_read_timeout, http2, idle_http2: IdleHttp2::new(max_idle_http2) }
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
    let service = service_fn({
        let activity = activity.clone();
        let client = client.clone();
        move |req: Request<Incoming>| {
            // The service is called once a request's headers are complete.
            let in_flight = activity.begin();
            // Made before it is boxed: the box then holds the request once, inside the future.
            let handled = handle(req.map(RequestBody::Hyper), client.clone());
            // Boxed: hyper keeps room for the service's future on every stream, and a proxy's
            // future is kilobytes; a box costs only requests.
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
    if h2 {
        let io = ClientIo { unread, stream: TokioIo::new(stream) };
        // Boxed: the task's own size is what a waiting HTTP/1.1 connection costs, so it holds
        // only what waiting needs.
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

    let (mut stream, mut unread) = (stream, unread);
    loop {
        if unread.is_empty() {
            // Between requests: the socket alone waits for the next.
            tokio::select! {
                biased;
                readable = stream.readable() => {
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
        // No deadline is watched meanwhile: a request is in flight whenever this waits but for
        // the rest of a head, which has its own (a response the client does not take comes back
        // unsent).
        let header_timeout = protocols.header_read_timeout;
        let after =
            own::serve(&mut stream, &mut unread, &client, &own_handle, &activity, &stop_asked, header_timeout).await;
        match after {
            After::Waiting => {}
            After::Closed => return,
            After::Upgraded(handover) => {
                crate::server::net::upgrade::hand_over(handover, stream, unread);
                return;
            }
            After::Unsent { bytes, close } => {
                // Nothing is in flight: a client that does not take its response is held to the
                // idle deadline, and to the grace at a stop.
                let written = tokio::select! {
                    written = own::write_all(&stream, &bytes) => written.is_ok(),
                    () = &mut stop => {
                        let _ = tokio::time::timeout(CLOSE_GRACE, own::write_all(&stream, &bytes)).await;
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
            }
        }
    }
}

/// Asks a connection to close (an HTTP/2 GOAWAY) and lets it finish what it has in flight; once nothing is, it has `CLOSE_GRACE` before it
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
