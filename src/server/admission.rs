//! Which connections are let in: a cap on all open connections and one on those from a single
//! address, and a short 503 for the rest, written without holding up the accept loop.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};

use super::address::{TrustedProxies, canonical};

/// Counts open connections, overall and per address, against their caps.
pub(crate) struct Admission {
    max_connections: usize,
    max_per_address: usize,
    /// Exempt from the per-address cap: a gateway in front carries many clients.
    trusted: TrustedProxies,
    open: AtomicUsize,
    /// Only addresses with a connection open: an entry goes when its count reaches zero, so the
    /// map is never larger than the connections themselves.
    per_address: Mutex<HashMap<IpAddr, usize>>,
    /// Woken when the last connection closes, for a graceful stop.
    all_closed: Notify,
}

/// Why a connection was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` are open.
    Full,
    /// `max_connections_per_address` are open from this peer.
    AddressFull,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Full => "max-connections",
            Refused::AddressFull => "max-connections-per-address",
        })
    }
}

/// An admitted connection's place under the caps, given back when dropped.
pub(crate) struct Slot {
    admission: Arc<Admission>,
    /// What the connection counts under in `per_address`; None for an exempt peer.
    address: Option<IpAddr>,
}

impl Admission {
    /// Caps of `max_connections` open at once, and `max_per_address` from one peer that is not
    /// in `trusted`.
    pub(crate) fn new(max_connections: usize, max_per_address: usize, trusted: TrustedProxies) -> Arc<Admission> {
        Arc::new(Admission {
            max_connections,
            max_per_address,
            trusted,
            open: AtomicUsize::new(0),
            per_address: Mutex::new(HashMap::new()),
            all_closed: Notify::new(),
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
        let count = per_address.get(&address).copied().unwrap_or(0);
        if count >= self.max_per_address {
            return Err(Refused::AddressFull);
        }
        per_address.insert(address, count + 1);
        slot.address = Some(address);
        Ok(slot)
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
        if let Some(address) = self.address {
            let mut per_address = self.admission.per_address.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(count) = per_address.get_mut(&address) {
                *count -= 1;
                if *count == 0 {
                    per_address.remove(&address);
                }
            }
        }
        if self.admission.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.admission.all_closed.notify_waiters();
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
    use crate::server::address::Cidr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_is_held_to_its_cap_and_others_are_not() {
        let admission = Admission::new(10, 2, TrustedProxies::default());
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
        let admission = Admission::new(2, 5, trusted);
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
        let admission = Admission::new(100, 1, trusted);
        let held: Vec<Slot> = (0..5).map(|_| admission.admit(ip("10.1.2.3")).unwrap()).collect();
        assert_eq!(held.len(), 5);
        assert!(admission.per_address.lock().unwrap().is_empty(), "exempt peers are not counted per address");
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let admission = Admission::new(100, 1, TrustedProxies::default());
        let _a = admission.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(admission.admit(ip("2001:db8:1:2:ffff::9")).err(), Some(Refused::AddressFull));
        assert!(admission.admit(ip("2001:db8:1:3::1")).is_ok());
        let _b = admission.admit(ip("192.0.2.7")).unwrap();
        assert_eq!(admission.admit(ip("::ffff:192.0.2.7")).err(), Some(Refused::AddressFull));
    }

    #[test]
    fn addresses_leave_the_map_when_their_last_connection_closes() {
        let admission = Admission::new(100, 3, TrustedProxies::default());
        let slots: Vec<Slot> = (0..50).map(|i| admission.admit(IpAddr::from([192, 0, 2, i])).unwrap()).collect();
        assert_eq!(admission.per_address.lock().unwrap().len(), 50);
        drop(slots);
        assert!(admission.per_address.lock().unwrap().is_empty());
        assert_eq!(admission.open(), 0);
    }
}
