//! How the workers share one listener's connections: the worker that accepts a connection keeps
//! it unless it already holds more than one connection above the worker holding the fewest, and
//! then hands it to that one (Envoy's exact connection balance).
//!
//! The workers share the listening socket, so whichever is awake when a connection arrives
//! takes it. A client opening many connections at once (a load balancer's pool, a benchmark)
//! meets one worker awake and the others asleep, and one worker can end up holding three times
//! the connections of another: that worker's CPU is the bound while the others idle, and which
//! split a client gets changes from one start to the next.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use crate::server::net::admission::Slot;

/// How many more connections than the worker holding the fewest a worker may hold before it
/// hands new ones on: one, so that connections arriving one at a time, each served and closed
/// before the next, are never handed (a handing costs the two workers a wake-up each).
const LEAD: usize = 1;

/// The connections each worker holds, and the way to hand one to each.
pub(crate) struct Balance {
    workers: Box<[Worker]>,
}

/// One worker's count, on a cache line of its own: every accept and close writes it.
#[repr(align(64))]
struct Worker {
    open: AtomicUsize,
    inbox: mpsc::UnboundedSender<Handed>,
}

/// A connection accepted by one worker for another, with its place under the caps.
pub(crate) struct Handed {
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub slot: Slot,
    pub held: Held,
}

/// Where a connection just accepted is served.
pub(crate) enum Place {
    /// By the worker that accepted it.
    Here(Held),
    /// By another worker, which holds fewer connections.
    There(usize),
}

/// One worker's part in the balance: its number, and the connections others hand it.
pub(crate) struct Seat {
    pub balance: Arc<Balance>,
    pub me: usize,
    inbox: mpsc::UnboundedReceiver<Handed>,
}

impl Seat {
    pub(crate) fn new(balance: &Arc<Balance>, me: usize, inbox: mpsc::UnboundedReceiver<Handed>) -> Seat {
        Seat { balance: balance.clone(), me, inbox }
    }

    /// The next connection another worker handed this one; never, without a seat.
    pub(crate) async fn handed(seat: Option<&mut Seat>) -> Option<Handed> {
        match seat {
            Some(seat) => seat.inbox.recv().await,
            None => std::future::pending().await,
        }
    }
}

/// A connection counted to a worker; the count drops when this does.
pub(crate) struct Held {
    balance: Arc<Balance>,
    worker: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.balance.workers[self.worker].open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Balance {
    /// A balance over `workers` workers, with the inbox each reads handed connections from.
    pub(crate) fn new(workers: usize) -> (Arc<Balance>, Vec<mpsc::UnboundedReceiver<Handed>>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..workers.max(1)).map(|_| mpsc::unbounded_channel()).unzip();
        let workers = senders.into_iter().map(|inbox| Worker { open: AtomicUsize::new(0), inbox }).collect();
        (Arc::new(Balance { workers }), receivers)
    }

    /// Where worker `me` should serve the connection it has just accepted. Counted to the worker
    /// chosen at once, so that the next accept, on any worker, sees it.
    pub(crate) fn place(self: &Arc<Self>, me: usize) -> Place {
        let mine = self.workers[me].open.load(Ordering::Relaxed);
        let (least, fewest) = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (i, w.open.load(Ordering::Relaxed)))
            .min_by_key(|&(_, open)| open)
            .unwrap_or((me, mine));
        if mine <= fewest + LEAD {
            return Place::Here(self.hold(me));
        }
        Place::There(least)
    }

    /// Counts a connection to worker `worker` until the returned guard is dropped.
    pub(crate) fn hold(self: &Arc<Self>, worker: usize) -> Held {
        self.workers[worker].open.fetch_add(1, Ordering::Relaxed);
        Held { balance: self.clone(), worker }
    }

    /// Hands a connection to worker `to`. `Err` gives it back when that worker has stopped
    /// taking connections (the server is stopping).
    pub(crate) fn hand(
        self: &Arc<Self>,
        to: usize,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        slot: Slot,
    ) -> Result<(), Box<Handed>> {
        let handed = Handed { stream, peer, slot, held: self.hold(to) };
        self.workers[to].inbox.send(handed).map_err(|e| Box::new(e.0))
    }

    /// How many connections each worker holds.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> Vec<usize> {
        self.workers.iter().map(|w| w.open.load(Ordering::Relaxed)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_keeps_connections_until_it_leads_by_more_than_one() {
        let (balance, _inboxes) = Balance::new(2);
        let mut held = Vec::new();
        for _ in 0..2 {
            match balance.place(0) {
                Place::Here(h) => held.push(h),
                Place::There(_) => panic!("worker 0 leads by at most one"),
            }
        }
        assert_eq!(balance.counts(), [2, 0]);
        assert!(matches!(balance.place(0), Place::There(1)), "two ahead: the next goes to worker 1");
        held.pop();
        assert_eq!(balance.counts(), [1, 0]);
        assert!(matches!(balance.place(0), Place::Here(_)), "a close brings worker 0 back within one");
    }

    #[test]
    fn a_connection_goes_to_the_worker_holding_fewest() {
        let (balance, _inboxes) = Balance::new(3);
        let _a: Vec<Held> = (0..4).map(|_| balance.hold(0)).collect();
        let _b: Vec<Held> = (0..3).map(|_| balance.hold(1)).collect();
        let _c: Vec<Held> = (0..1).map(|_| balance.hold(2)).collect();
        assert!(matches!(balance.place(0), Place::There(2)));
        assert!(matches!(balance.place(1), Place::There(2)));
    }
}
