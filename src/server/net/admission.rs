//! Which connections are let in, and how many requests they may have at the upstream: a cap on
//! all open connections and one on those from a single address, the same per-address cap on
//! requests in flight to the upstream (an HTTP/2 stream counts as a connection does, as nginx's
//! `limit_conn` counts it) with an overall one, and a short 503 for connections over a cap,
//! written without holding up the accept loop.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore, watch};

use crate::server::facts::address::{TrustedProxies, canonical};

/// Counts open connections, overall and per address, against their caps, and the requests they
/// have in flight to the upstream.
pub(crate) struct Admission {
    max_connections: usize,
    max_per_address: usize,
    /// The most requests in flight to the upstream at once, from every connection.
    max_upstream: usize,
    /// Exempt from the per-address caps: a gateway in front carries many clients.
    trusted: TrustedProxies,
    open: AtomicUsize,
    /// Requests in flight to the upstream.
    upstream: AtomicUsize,
    /// Only addresses with a connection open: an entry goes when its last connection closes, so
    /// the map is never larger than the connections themselves.
    per_address: Mutex<HashMap<IpAddr, Arc<AddressCount>>>,
    /// Woken when the last connection closes, for a graceful stop.
    all_closed: Notify,
    /// Turns true at a stop: what holds a place without a request in flight (a tunnel) ends.
    stopping: watch::Receiver<bool>,
}

/// What one address holds: its connections (changed under the map's lock) and its requests in
/// flight to the upstream (changed by each request, without it).
#[derive(Default)]
struct AddressCount {
    connections: AtomicUsize,
    upstream: AtomicUsize,
}

/// Why a connection was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` are open.
    Full,
    /// `max_connections_per_address` are open from this peer.
    AddressFull,
    /// The upstream budget (`max_upstream_connections`) is in flight.
    UpstreamFull,
    /// `max_connections_per_address` requests from this peer are in flight to the upstream.
    AddressBusy,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Full => "max-connections",
            Refused::AddressFull | Refused::AddressBusy => "max-connections-per-address",
            Refused::UpstreamFull => "max-upstream-connections",
        })
    }
}

/// An admitted connection's place under the caps, given back when the last holder drops it: the
/// connection, and an upgraded connection's tunnel, which outlives it.
pub(crate) struct Slot {
    admission: Arc<Admission>,
    /// What the connection counts under in `per_address`; None for an exempt peer.
    address: Option<(IpAddr, Arc<AddressCount>)>,
}

/// The caps of one listener.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    /// Connections open at once.
    pub connections: usize,
    /// Connections open at once from one address, and requests in flight to the upstream from it.
    pub per_address: usize,
    /// Requests in flight to the upstream at once.
    pub upstream: usize,
}

impl Admission {
    /// These caps, with peers in `trusted` exempt from the per-address ones; `stopping` turns
    /// true at a stop.
    pub(crate) fn new(caps: Caps, trusted: TrustedProxies, stopping: watch::Receiver<bool>) -> Arc<Admission> {
        Arc::new(Admission {
            max_connections: caps.connections,
            max_per_address: caps.per_address,
            max_upstream: caps.upstream,
            trusted,
            open: AtomicUsize::new(0),
            upstream: AtomicUsize::new(0),
            per_address: Mutex::new(HashMap::new()),
            all_closed: Notify::new(),
            stopping,
        })
    }

    /// Lets a connection from `peer` in, or says which cap it is over.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refused> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < self.max_connections).then_some(n + 1))
            .map_err(|_| Refused::Full)?;
        // Built now, so that an early return below gives the overall place back through Drop.
        let mut slot = Slot { admission: self.clone(), address: None };
        let peer = canonical(peer);
        if self.trusted.trusts(peer) {
            return Ok(slot);
        }
        let address = counted_address(peer);
        let mut per_address = self.per_address.lock().unwrap_or_else(PoisonError::into_inner);
        let count = per_address.entry(address).or_default();
        // Under the map's lock: the count and the entry's presence change together.
        let connections = count.connections.load(Ordering::Relaxed);
        if connections >= self.max_per_address {
            if connections == 0 {
                per_address.remove(&address);
            }
            return Err(Refused::AddressFull);
        }
        count.connections.store(connections + 1, Ordering::Relaxed);
        slot.address = Some((address, count.clone()));
        Ok(slot)
    }

    /// Requests in flight to the upstream now.
    #[cfg(test)]
    pub(crate) fn upstream(&self) -> usize {
        self.upstream.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Resolves once no connection is open.
    pub(crate) async fn all_closed(&self) {
        loop {
            let closed = self.all_closed.notified();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((address, count)) = &self.address {
            let mut per_address = self.admission.per_address.lock().unwrap_or_else(PoisonError::into_inner);
            if count.connections.fetch_sub(1, Ordering::Relaxed) == 1 {
                per_address.remove(address);
            }
        }
        if self.admission.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.admission.all_closed.notify_waiters();
        }
    }
}

/// A client connection as a request's handler sees it: the peer's address, and the connection's
/// place under the caps, which the requests it carries to the upstream count against and an
/// upgraded connection's tunnel keeps.
#[derive(Clone)]
pub(crate) struct Peer {
    /// The peer's address.
    pub addr: SocketAddr,
    slot: Option<Arc<Slot>>,
}

impl Peer {
    /// A connection from `addr` holding `slot`.
    pub(crate) fn new(addr: SocketAddr, slot: Arc<Slot>) -> Peer {
        Peer { addr, slot: Some(slot) }
    }

    /// A peer under no cap (a connection served outside a listener, in a test).
    #[cfg(test)]
    pub(crate) fn uncapped(addr: SocketAddr) -> Peer {
        Peer { addr, slot: None }
    }

    /// A request to the upstream from this connection, within the overall budget and its
    /// address's; the place is given back when the [`Upstreaming`] is dropped.
    pub(crate) fn to_upstream(&self) -> Result<Upstreaming, Refused> {
        let Some(slot) = &self.slot else { return Ok(Upstreaming(None)) };
        let admission = &slot.admission;
        admission
            .upstream
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < admission.max_upstream).then_some(n + 1))
            .map_err(|_| Refused::UpstreamFull)?;
        if let Some((_, count)) = &slot.address
            && count
                .upstream
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < admission.max_per_address).then_some(n + 1)
                })
                .is_err()
        {
            admission.upstream.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::AddressBusy);
        }
        Ok(Upstreaming(Some(slot.clone())))
    }

    /// The connection's place, for what outlives the connection's own task (a tunnel): the
    /// connection counts under the caps until every holder has let go.
    pub(crate) fn hold(&self) -> Option<Arc<Slot>> {
        self.slot.clone()
    }

    /// Resolves when the listener stops (never, for a peer under no cap).
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let stopping = self.slot.as_ref().map(|s| s.admission.stopping.clone());
        async move {
            if let Some(mut rx) = stopping
                && rx.wait_for(|s| *s).await.is_ok()
            {
                return;
            }
            std::future::pending::<()>().await;
        }
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.addr.fmt(f)
    }
}

/// A request's place in the upstream budgets, overall and its address's, while it is in flight
/// there (until its response ends, or its tunnel closes).
pub(crate) struct Upstreaming(Option<Arc<Slot>>);

impl Drop for Upstreaming {
    fn drop(&mut self) {
        if let Some(slot) = &self.0 {
            if let Some((_, count)) = &slot.address {
                count.upstream.fetch_sub(1, Ordering::Relaxed);
            }
            slot.admission.upstream.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What a peer counts under: an IPv4 address, or an IPv6 address's /64, since one host commonly
/// holds a whole /64 (as `per: address` bounds count it).
fn counted_address(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
    }
}

/// What a refused connection is told: come back in a second, on another connection.
const REFUSAL: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n";

/// Refusals written at once; past that a refused connection is closed without a word, so a
/// flood of connections costs a bounded number of descriptors and tasks.
const REFUSALS_AT_ONCE: usize = 32;

/// How long one refusal may take, reading included.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// Tells refused connections so, a bounded number at a time.
pub(crate) struct Refuser {
    budget: Arc<Semaphore>,
}

impl Default for Refuser {
    fn default() -> Self {
        Refuser { budget: Arc::new(Semaphore::new(REFUSALS_AT_ONCE)) }
    }
}

impl Refuser {
    /// Answers `stream` with a 503 in the background, or closes it if too many refusals are
    /// being written already. Never waits.
    pub(crate) fn refuse(&self, mut stream: TcpStream) {
        let Ok(permit) = self.budget.clone().try_acquire_owned() else {
            return;
        };
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REFUSAL_TIME, async {
                stream.write_all(REFUSAL).await?;
                stream.shutdown().await?;
                // Read what the client sent until it closes: closing with unread bytes resets
                // the connection, and a reset can discard the 503 before the client reads it.
                let mut sink = [0u8; 512];
                while stream.read(&mut sink).await? > 0 {}
                Ok::<_, std::io::Error>(())
            })
            .await;
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::facts::address::Cidr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn caps(connections: usize, per_address: usize, trusted: TrustedProxies) -> Arc<Admission> {
        let upstream = connections;
        Admission::new(Caps { connections, per_address, upstream }, trusted, watch::channel(false).1)
    }

    fn peer(admission: &Arc<Admission>, address: &str) -> Peer {
        let addr = SocketAddr::new(ip(address), 40000);
        Peer::new(addr, Arc::new(admission.admit(addr.ip()).unwrap()))
    }

    #[test]
    fn one_address_is_held_to_its_cap_and_others_are_not() {
        let admission = caps(10, 2, TrustedProxies::default());
        let first = admission.admit(ip("192.0.2.1")).unwrap();
        let _second = admission.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(admission.admit(ip("192.0.2.1")).err(), Some(Refused::AddressFull));
        assert_eq!(admission.open(), 2, "a refusal holds no place");
        assert!(admission.admit(ip("192.0.2.2")).is_ok());
        drop(first);
        assert!(admission.admit(ip("192.0.2.1")).is_ok(), "a closed connection gives its place back");
    }

    #[test]
    fn the_overall_cap_holds_for_everyone() {
        let trusted = TrustedProxies::new(vec!["10.0.0.0/8".parse::<Cidr>().unwrap()]);
        let admission = caps(2, 5, trusted);
        let _a = admission.admit(ip("192.0.2.1")).unwrap();
        let b = admission.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(admission.admit(ip("192.0.2.3")).err(), Some(Refused::Full));
        assert_eq!(admission.admit(ip("10.0.0.1")).err(), Some(Refused::Full), "trusted peers too");
        drop(b);
        assert!(admission.admit(ip("192.0.2.3")).is_ok());
    }

    #[test]
    fn trusted_proxies_are_exempt_from_the_per_address_cap() {
        let trusted = TrustedProxies::new(vec!["10.0.0.0/8".parse::<Cidr>().unwrap()]);
        let admission = caps(100, 1, trusted);
        let held: Vec<Slot> = (0..5).map(|_| admission.admit(ip("10.1.2.3")).unwrap()).collect();
        assert_eq!(held.len(), 5);
        assert!(admission.per_address.lock().unwrap().is_empty(), "exempt peers are not counted per address");
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let admission = caps(100, 1, TrustedProxies::default());
        let _a = admission.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(admission.admit(ip("2001:db8:1:2:ffff::9")).err(), Some(Refused::AddressFull));
        assert!(admission.admit(ip("2001:db8:1:3::1")).is_ok());
        let _b = admission.admit(ip("192.0.2.7")).unwrap();
        assert_eq!(admission.admit(ip("::ffff:192.0.2.7")).err(), Some(Refused::AddressFull));
    }

    #[test]
    fn addresses_leave_the_map_when_their_last_connection_closes() {
        let admission = caps(100, 3, TrustedProxies::default());
        let slots: Vec<Slot> = (0..50).map(|i| admission.admit(IpAddr::from([192, 0, 2, i])).unwrap()).collect();
        assert_eq!(admission.per_address.lock().unwrap().len(), 50);
        drop(slots);
        assert!(admission.per_address.lock().unwrap().is_empty());
        assert_eq!(admission.open(), 0);
    }

    #[test]
    fn requests_to_the_upstream_count_per_address_like_connections() {
        // Two connections from one address may carry two requests upstream between them, however
        // many streams each has: a stream is a connection for the caps.
        let admission = caps(100, 2, TrustedProxies::default());
        let (a, b) = (peer(&admission, "192.0.2.1"), peer(&admission, "192.0.2.1"));
        let first = a.to_upstream().unwrap();
        let _second = a.to_upstream().unwrap();
        assert_eq!(b.to_upstream().err(), Some(Refused::AddressBusy));
        assert_eq!(admission.upstream(), 2, "a refusal holds no place");
        let other = peer(&admission, "192.0.2.2");
        let _third = other.to_upstream().expect("another address has its own budget");
        drop(first);
        assert!(b.to_upstream().is_ok(), "a request that ended gives its place back");
    }

    #[test]
    fn the_upstream_budget_holds_for_everyone_and_trusted_proxies_too() {
        let trusted = TrustedProxies::new(vec!["10.0.0.0/8".parse::<Cidr>().unwrap()]);
        let admission =
            Admission::new(Caps { connections: 100, per_address: 50, upstream: 3 }, trusted, watch::channel(false).1);
        let gateway = peer(&admission, "10.0.0.1");
        let held: Vec<Upstreaming> = (0..3).map(|_| gateway.to_upstream().unwrap()).collect();
        assert_eq!(gateway.to_upstream().err(), Some(Refused::UpstreamFull));
        assert_eq!(peer(&admission, "192.0.2.9").to_upstream().err(), Some(Refused::UpstreamFull));
        drop(held);
        assert_eq!(admission.upstream(), 0);
        assert!(peer(&admission, "192.0.2.9").to_upstream().is_ok());
    }

    #[test]
    fn a_held_place_keeps_the_connection_counted_until_its_last_holder_lets_go() {
        let admission = caps(100, 1, TrustedProxies::default());
        let connection = peer(&admission, "192.0.2.1");
        let tunnel = connection.hold().unwrap();
        drop(connection);
        assert_eq!(admission.open(), 1, "the tunnel still holds the connection's place");
        assert_eq!(admission.admit(ip("192.0.2.1")).err(), Some(Refused::AddressFull));
        drop(tunnel);
        assert_eq!(admission.open(), 0);
        assert!(admission.per_address.lock().unwrap().is_empty());
    }
}
