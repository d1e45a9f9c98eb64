//! [`Node`]: one Redis server the store talks to (the single one, a cluster master, or the
//! primary a Sentinel names), its connection, and its circuit breaker: a node that refused,
//! dropped the connection, or let a few calls in a row go unanswered is *open*, and calls for its
//! keys fail at once (their bounds follow `on-store-error`) until a probe in the background,
//! with backoff, finds it answering again.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use crate::throttle::{Throttle, monotonic_now};
use redis::aio::MultiplexedConnection;

/// Calls in a row left unanswered that open a node's circuit: one slow answer is a slow
/// answer, three are a node that hangs.
pub(super) const TIMEOUTS_TO_OPEN: u32 = 3;

/// How often a node's outages are logged: a node that keeps dropping out and coming back (an
/// overloaded one) writes two lines per ten seconds, not two per outage.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Longest wait between two probes of an open node.
pub(super) const PROBE_MAX: Duration = Duration::from_secs(2);

/// One Redis server.
pub(super) struct Node {
    /// `host:port`, as logs, metrics and the cluster's slot map name it.
    pub addr: String,
    /// The URL it is reached by: the operator's scheme, credentials and database, this address.
    pub url: String,
    conn: ArcSwapOption<MultiplexedConnection>,
    open: AtomicBool,
    timeouts: AtomicU32,
    /// Whether a probe task runs for it.
    pub probing: AtomicBool,
    /// Since when it is open, why, and the store's fallbacks then.
    outage: Mutex<Option<Outage>>,
    /// When its outages may be logged.
    log: Throttle,
}

/// What a node's outage is, for the line logged when it ends.
pub(super) struct Outage {
    pub since: Instant,
    pub fallbacks: u64,
    /// Whether its start was logged (then so is its end).
    pub logged: bool,
}

/// What a call's outcome says about its node.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing new.
    Same,
    /// It just opened: log it and start probing.
    Opened,
}

impl Node {
    /// A node not yet connected: open until its first connection is made.
    pub(super) fn new(addr: String, url: String) -> Node {
        Node {
            addr,
            url,
            conn: ArcSwapOption::empty(),
            open: AtomicBool::new(true),
            timeouts: AtomicU32::new(0),
            probing: AtomicBool::new(false),
            outage: Mutex::new(None),
            log: Throttle::new(LOG_EVERY),
        }
    }

    /// Whether calls for its keys are made.
    pub(super) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Its connection, unless its circuit is open.
    pub(super) fn connection(&self) -> Option<MultiplexedConnection> {
        if self.is_open() {
            return None;
        }
        self.conn.load_full().map(|c| (*c).clone())
    }

    /// A call it answered (with a value or an error of its own): it is there.
    pub(super) fn answered(&self) {
        if self.timeouts.load(Ordering::Relaxed) != 0 {
            self.timeouts.store(0, Ordering::Relaxed);
        }
    }

    /// A call it did not answer in time: the third in a row opens it.
    pub(super) fn timed_out(&self, fallbacks: u64) -> Verdict {
        if self.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_TO_OPEN {
            self.trip(fallbacks)
        } else {
            Verdict::Same
        }
    }

    /// The connection refused, reset or dropped: open at once.
    pub(super) fn trip(&self, fallbacks: u64) -> Verdict {
        if self.open.swap(true, Ordering::Relaxed) {
            return Verdict::Same;
        }
        self.conn.store(None);
        *self.outage() = Some(Outage { since: Instant::now(), fallbacks, logged: false });
        Verdict::Opened
    }

    /// Starts an outage for a node whose first connection failed (it was open already).
    pub(super) fn start_outage(&self, fallbacks: u64) {
        let mut outage = self.outage();
        if outage.is_none() {
            *outage = Some(Outage { since: Instant::now(), fallbacks, logged: false });
        }
    }

    /// Whether the outage that just started is to be logged, and how many outages before it were
    /// not: at most one a [`LOG_EVERY`].
    pub(super) fn log_outage(&self) -> Option<u64> {
        let line = self.log.occurred(monotonic_now)?;
        if let Some(outage) = self.outage().as_mut() {
            outage.logged = true;
        }
        Some(line.suppressed)
    }

    /// Closes it on a connection that answered a probe; the outage it ends, if any (none for a
    /// node's first connection).
    pub(super) fn close(&self, conn: MultiplexedConnection) -> Option<Outage> {
        self.conn.store(Some(Arc::new(conn)));
        self.timeouts.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Relaxed);
        self.outage().take()
    }

    fn outage(&self) -> MutexGuard<'_, Option<Outage>> {
        self.outage.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The outage it is in, ended without it coming back (it left the cluster's slot map).
    pub(super) fn forget_outage(&self) -> Option<Outage> {
        self.outage().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_in_a_row_open_and_an_answer_between_them_resets() {
        let node = Node::new("h:1".into(), "redis://h:1".into());
        // A node is open until connected; pretend it was.
        node.open.store(false, Ordering::Relaxed);
        assert_eq!(node.timed_out(0), Verdict::Same);
        assert_eq!(node.timed_out(0), Verdict::Same);
        node.answered();
        assert_eq!(node.timed_out(0), Verdict::Same);
        assert_eq!(node.timed_out(0), Verdict::Same);
        assert_eq!(node.timed_out(7), Verdict::Opened, "the third in a row");
        assert!(node.is_open());
        assert_eq!(node.timed_out(8), Verdict::Same, "opened once");
        assert_eq!(node.trip(9), Verdict::Same);
        assert!(node.connection().is_none());
        assert_eq!(node.forget_outage().map(|o| o.fallbacks), Some(7));
    }

    #[test]
    fn a_node_that_keeps_dropping_out_logs_its_first_outage_only() {
        let node = Node::new("h:1".into(), "redis://h:1".into());
        node.open.store(false, Ordering::Relaxed);
        assert_eq!(node.trip(0), Verdict::Opened);
        assert_eq!(node.log_outage(), Some(0), "the first is logged");
        assert!(node.forget_outage().is_some_and(|o| o.logged), "and so is its end");
        node.open.store(false, Ordering::Relaxed);
        assert_eq!(node.trip(0), Verdict::Opened);
        assert_eq!(node.log_outage(), None, "the next, within ten seconds, is not");
        assert!(node.forget_outage().is_some_and(|o| !o.logged), "nor its end");
    }
}
