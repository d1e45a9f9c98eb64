//! Accepting connections: HTTP/1.1 and h2c on one port; deadlines for connections that send
//! nothing or sit idle; caps on open connections; accept errors that back off; and a graceful
//! stop that lets requests in flight finish, within a bound.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Body;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::server::facts::address::TrustedProxies;
use crate::server::net::admission::{Admission, Caps, Peer, Refuser, Slot};
use crate::server::net::balance::{Balance, Handed, Held, Place, Seat};
use crate::server::net::connection::{self, Deadlines, Protocols};
use crate::server::net::descriptors::DescriptorLimit;
use crate::server::net::request_body::{Deferred, RequestBody};
use crate::throttle::{Throttle, monotonic_now};

/// Timeouts and limits of the listener.
#[derive(Clone, Debug)]
pub(crate) struct ListenSettings {
    /// How long a client may take from the moment its connection is accepted to finish sending
    /// its first request's headers, and from the first byte of any later request to the end of
    /// its headers. (Between requests, `idle_timeout` applies.)
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight (HTTP/1.1 keep-alive, an
    /// HTTP/2 connection without streams) before it is closed.
    pub idle_timeout: Duration,
    /// How long requests in flight may take to finish once a stop is asked for.
    pub shutdown_timeout: Duration,
    /// The most connections open at once; more are refused with a 503 and closed.
    pub max_connections: usize,
    /// The most connections open at once from one peer address, and the most requests in flight
    /// to the upstream from it (trusted proxies excepted).
    pub max_connections_per_address: usize,
    /// The most requests in flight to the upstream at once (each holds an upstream connection);
    /// past it, a request is answered 503 at once.
    pub max_upstream_connections: usize,
    /// The most streams an HTTP/2 client may have open at once on one connection
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub max_streams_per_connection: u32,
    /// The most HTTP/2 connections idle at once; past it, the one idle longest is closed
    /// gracefully (an idle HTTP/2 connection cannot give up its buffers as an HTTP/1.1 one does).
    pub max_idle_http2: usize,
    /// Peers exempt from the per-address cap: the gateways in front carry many clients.
    pub trusted: TrustedProxies,
}

impl Default for ListenSettings {
    fn default() -> Self {
        ListenSettings {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
            max_connections_per_address: 256,
            max_upstream_connections: default_max_connections(),
            max_streams_per_connection: DEFAULT_MAX_STREAMS,
            max_idle_http2: crate::server::net::idle_http2::DEFAULT_MAX_IDLE,
            trusted: TrustedProxies::default(),
        }
    }
}

/// `SETTINGS_MAX_CONCURRENT_STREAMS` when not given: what nginx (`http2_max_concurrent_streams`)
/// and Envoy's guidance for edge proxies advertise. Browsers open a few; gRPC clients open more
/// connections when they need more.
pub(crate) const DEFAULT_MAX_STREAMS: u32 = 100;

impl ListenSettings {
    /// What in these settings works against itself, to say at start. `upstream_idle` is how
    /// many idle upstream connections may be kept besides (0 where nothing is proxied).
    pub(crate) fn warnings(&self, upstream_idle: Option<usize>) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Ok(limit) = DescriptorLimit::current()
            && self.max_connections > limit.connections()
        {
            warnings.push(format!(
                "max-connections {} is more than the descriptor limit ({}) has room for ({}): accepts will fail \
                 before the cap refuses anyone; raise the limit (`ulimit -n`, LimitNOFILE=) or lower the cap",
                self.max_connections,
                limit.soft,
                limit.connections()
            ));
        } else if let Ok(limit) = DescriptorLimit::current()
            && let Some(idle) = upstream_idle
            && !limit.fits(self.max_connections, self.max_upstream_connections + idle)
        {
            warnings.push(format!(
                "max-connections {} and max-upstream-connections {} (with {idle} idle upstream connections) are more \
                 than the descriptor limit ({}) has room for: connections to the upstream or accepts will fail \
                 before a cap answers 503; raise the limit (`ulimit -n`, LimitNOFILE=) or lower the caps",
                self.max_connections, self.max_upstream_connections, limit.soft,
            ));
        }
        if self.max_connections_per_address >= self.max_connections {
            warnings.push(format!(
                "max-connections-per-address {} is not below max-connections {}: one address can hold every \
                 connection",
                self.max_connections_per_address, self.max_connections
            ));
        }
        warnings
    }
}

/// The first wait after an accept fails for want of resources, doubled on each failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_millis(5);

/// The longest wait between accepts that fail.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The least time between two log lines about the same repeated trouble (accept failures,
/// refused connections): a flood must not become a flood of log lines.
const REPEAT_INTERVAL: Duration = Duration::from_secs(5);

/// What the accept loops of one listener share, on one runtime or across workers: the
/// connection caps, the graceful stop, and the repeated-trouble log throttles.
struct Hub {
    settings: ListenSettings,
    protocols: Protocols,
    admission: Arc<Admission>,
    refuser: Refuser,
    accept_failures: Throttle,
    refusals: Throttle,
    stopping: watch::Sender<bool>,
}

impl Hub {
    fn new(settings: ListenSettings) -> Hub {
        let protocols =
            Protocols::new(settings.header_read_timeout, settings.max_idle_http2, settings.max_streams_per_connection);
        let stopping = watch::channel(false).0;
        let caps = Caps {
            connections: settings.max_connections,
            per_address: settings.max_connections_per_address,
            upstream: settings.max_upstream_connections,
        };
        let admission = Admission::new(caps, settings.trusted.clone(), stopping.subscribe());
        Hub {
            settings,
            protocols,
            admission,
            refuser: Refuser::default(),
            accept_failures: Throttle::new(REPEAT_INTERVAL),
            refusals: Throttle::new(REPEAT_INTERVAL),
            stopping,
        }
    }

    /// Tells every connection to finish what it has in flight and close, then waits (at most
    /// `shutdown_timeout`) until all have.
    async fn stop(&self) {
        let _ = self.stopping.send(true);
        self.drained().await;
    }

    /// Waits (at most `shutdown_timeout`) until every connection has closed.
    async fn drained(&self) {
        if tokio::time::timeout(self.settings.shutdown_timeout, self.admission.all_closed()).await.is_err() {
            tracing::warn!(open = self.admission.open(), "stopped with connections still open");
        }
    }
}

/// Serves connections from `listener` with `handle` on the current runtime until `stop`
/// resolves, then waits (at most `shutdown_timeout`) for connections to finish what they are
/// doing. For the admin listener and the demo; traffic goes through [`serve_workers`].
pub(crate) async fn serve<H, F, B>(
    listener: TcpListener,
    settings: ListenSettings,
    handle: H,
    stop: impl Future<Output = ()>,
) where
    H: Fn(Request<RequestBody>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = bytes::Bytes> + Deferred + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let hub = Arc::new(Hub::new(settings));
    accept(listener, &hub, handle, stop, None).await;
    hub.stop().await;
}

/// Serves connections from `listener` on `workers` threads, each with a runtime of its own
/// (thread-per-core, as nginx's workers): a connection lives on the worker that accepted it, so
/// its requests never cross threads, and each worker's handler (from `make`, called once per
/// worker) keeps its own upstream connections. The workers share the listener: an idle worker
/// takes the next connection, a busy one leaves it to the others, and a worker holding more
/// connections than another hands it the ones it takes (`balance`). The caps count across all
/// workers. Returns once `stop` has resolved and every connection has finished (or
/// `shutdown_timeout` has passed); `Err` if a worker could not start.
pub(crate) async fn serve_workers<M, H, F, B>(
    listener: TcpListener,
    settings: ListenSettings,
    workers: usize,
    make: M,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    M: Fn() -> H,
    H: Fn(Request<RequestBody>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = bytes::Bytes> + Deferred + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = listener.into_std()?;
    let hub = Arc::new(Hub::new(settings));
    let mut threads = Vec::with_capacity(workers);
    let (balance, inboxes) = Balance::new(workers);
    for (i, inbox) in inboxes.into_iter().enumerate() {
        let listener = listener.try_clone()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (hub, handle) = (hub.clone(), make());
        let mut stopping = hub.stopping.subscribe();
        let seat = (workers > 1).then(|| Seat::new(&balance, i, inbox));
        let thread = std::thread::Builder::new().name(format!("opbound-worker-{i}")).spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => accept(listener, &hub, handle, stopped(&mut stopping), seat).await,
                    Err(e) => tracing::error!(error = %e, "a worker could not take the listener"),
                }
                // This worker's connections run on this runtime: it must outlive them.
                hub.drained().await;
            });
        })?;
        threads.push(thread);
    }
    drop(listener);
    stop.await;
    let _ = hub.stopping.send(true);
    // Joining blocks: off the runtime, so the tasks on it (the store's connections) keep going.
    let joined = tokio::task::spawn_blocking(move || {
        for thread in threads {
            let _ = thread.join();
        }
    });
    let _ = joined.await;
    Ok(())
}

/// Accepts connections from `listener` and serves each on the current runtime, until `stop`;
/// with a seat, hands a connection to the worker holding the fewest when this one leads.
async fn accept<H, F, B>(
    listener: TcpListener,
    hub: &Arc<Hub>,
    handle: H,
    stop: impl Future<Output = ()>,
    mut seat: Option<Seat>,
) where
    H: Fn(Request<RequestBody>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = bytes::Bytes> + Deferred + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut backoff = FIRST_BACKOFF;
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => {
                    backoff = FIRST_BACKOFF;
                    pair
                }
                // The connection died in the queue; the next one is unaffected.
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of descriptors or memory: accepting again at once fails again and
                    // spins, so wait, longer each time, for connections to close.
                    if let Some(line) = hub.accept_failures.occurred(monotonic_now) {
                        tracing::warn!(error = %e, suppressed = line.suppressed, retry_in = ?backoff, "accept failed");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = &mut stop => break,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
            Some(handed) = Seat::handed(seat.as_mut()) => {
                match TcpStream::from_std(handed.stream) {
                    Ok(stream) => start(hub, &handle, stream, handed.peer, handed.slot, Some(handed.held)),
                    Err(e) => tracing::warn!(error = %e, peer = %handed.peer, "a connection handed from another worker was lost"),
                }
                continue;
            }
            () = &mut stop => break,
        };
        let slot = match hub.admission.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(cap) => {
                if let Some(line) = hub.refusals.occurred(monotonic_now) {
                    let suppressed = line.suppressed;
                    tracing::warn!(%peer, cap = %cap, suppressed, open = hub.admission.open(), "refused a connection over a cap");
                }
                hub.refuser.refuse(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let held = match &seat {
            None => None,
            Some(seat) => match seat.balance.place(seat.me) {
                Place::Here(held) => Some(held),
                Place::There(to) => {
                    hand(seat, to, stream, peer, slot, hub, &handle);
                    continue;
                }
            },
        };
        start(hub, &handle, stream, peer, slot, held);
        // Let the connection just accepted start before taking the next: another worker that
        // is idle takes that one meanwhile, so connections spread over the workers.
        tokio::task::yield_now().await;
    }
}

/// Hands a connection to worker `to`, or serves it here when that cannot be done.
fn hand<H, F, B>(seat: &Seat, to: usize, stream: TcpStream, peer: SocketAddr, slot: Slot, hub: &Arc<Hub>, handle: &H)
where
    H: Fn(Request<RequestBody>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = bytes::Bytes> + Deferred + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Taken off this worker's reactor; the other registers it with its own.
    let stream = match stream.into_std() {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(error = %e, %peer, "a connection could not be handed to another worker");
            return;
        }
    };
    if let Err(back) = seat.balance.hand(to, stream, peer, slot) {
        // That worker has stopped taking connections: this one serves it while it still runs.
        let Handed { stream, peer, slot, held } = *back;
        drop(held);
        match TcpStream::from_std(stream) {
            Ok(stream) => start(hub, handle, stream, peer, slot, Some(seat.balance.hold(seat.me))),
            Err(e) => tracing::warn!(error = %e, %peer, "a connection handed back was lost"),
        }
    }
}

/// Serves one accepted connection on the current runtime, holding its place under the caps and
/// its count in the balance until it ends.
fn start<H, F, B>(hub: &Arc<Hub>, handle: &H, stream: TcpStream, peer: SocketAddr, slot: Slot, held: Option<Held>)
where
    H: Fn(Request<RequestBody>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = bytes::Bytes> + Deferred + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let handle = handle.clone();
    let hub = hub.clone();
    let stopping = hub.stopping.subscribe();
    tokio::spawn(async move {
        let _held = held;
        let deadlines = Deadlines { header: hub.settings.header_read_timeout, idle: hub.settings.idle_timeout };
        // Shared with the connection's requests: a tunnel keeps the place once the
        // connection's own task has ended.
        let peer = Peer::new(peer, Arc::new(slot));
        connection::serve(stream, peer, handle, &hub.protocols, deadlines, stopping).await;
    });
}

/// Errors of one connection that died between the handshake and the accept, as opposed to
/// errors of the listener (out of descriptors, out of memory).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionRefused
    )
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves on SIGTERM or Ctrl-C. The handlers are installed when this is called, not when the
/// future is first polled: workers serve before the caller gets round to awaiting it, and a
/// SIGTERM that arrived before the handler would end the process with requests in flight.
pub(crate) fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::terminate()).and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
    };
    async move {
        #[cfg(unix)]
        match signals {
            Ok((mut term, mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("stopping: finishing requests in flight");
    }
}

/// The connection cap when none is given: half of the descriptors left after a reserve, since a
/// proxied request holds one descriptor towards the client and one towards the upstream.
pub(crate) fn default_max_connections() -> usize {
    crate::server::net::descriptors::default_max_connections()
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
