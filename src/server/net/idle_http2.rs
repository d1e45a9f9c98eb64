//! A budget for idle HTTP/2 connections.
//!
//! An HTTP/1.1 connection with nothing to do holds no buffer: its socket waits alone, about 5 KiB. An
//! HTTP/2 connection cannot be: its HPACK tables, settings and stream numbers must outlive the
//! quiet, and hyper's h2 keeps about 40 KiB of buffers for it (a 16 KiB write buffer, an 8 KiB
//! read buffer, a 4 KiB header-block buffer, its stream slabs). Ten thousand clients that each
//! asked once over HTTP/2 would hold 400 MiB. So the connections quiet for [`IDLE_AFTER`] are
//! counted, and past the budget the one quiet longest is closed gracefully: a GOAWAY, after which
//! its client opens a new connection for its next request (RFC 9113 §6.8), and no request is lost.
//!
//! A connection costs a lock when it falls quiet and when it leaves the count, never per request:
//! one that got busy again keeps its place until its turn comes, and is then passed over (and
//! counted afresh once it is quiet again).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::server::net::activity::Activity;

/// How long an HTTP/2 connection has nothing in flight before it counts as idle.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// `--max-idle-http2-connections` when not given: about 20 MiB of hyper's buffers, kept for
/// the clients that ask again soonest.
pub(crate) const DEFAULT_MAX_IDLE: usize = 512;

/// The idle HTTP/2 connections of one listener, oldest first.
pub(crate) struct IdleHttp2 {
    budget: usize,
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    next: u64,
    /// By the order they fell quiet in.
    entries: BTreeMap<u64, Arc<Ticket>>,
}

/// One quiet connection's place in the count.
struct Ticket {
    activity: Arc<Activity>,
    /// Requests it had started when it fell quiet: more later means it was busy since.
    started: u32,
    /// Whether it is to close; otherwise it was told to count afresh.
    close: AtomicBool,
    told: Notify,
}

/// A connection's place in the count, given up when dropped.
struct Place<'a> {
    registry: &'a IdleHttp2,
    key: u64,
    ticket: Arc<Ticket>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.registry.idle.lock().unwrap_or_else(|e| e.into_inner()).entries.remove(&self.key);
    }
}

impl IdleHttp2 {
    /// At most `budget` idle connections.
    pub(crate) fn new(budget: usize) -> IdleHttp2 {
        IdleHttp2 { budget, idle: Mutex::new(Idle::default()) }
    }

    /// Resolves when the connection of `activity` is to be closed: it is idle, and among the
    /// idle ones over the budget, the one quiet longest.
    pub(crate) async fn evicted(&self, activity: &Arc<Activity>) {
        loop {
            activity.quiet_for(IDLE_AFTER).await;
            let place = self.enter(activity);
            place.ticket.told.notified().await;
            if place.ticket.close.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// Counts a quiet connection; past the budget, tells the one quiet longest to close (or, if
    /// it was busy since it fell quiet, to count afresh).
    fn enter(&self, activity: &Arc<Activity>) -> Place<'_> {
        let (started, _) = activity.counts();
        let ticket = Arc::new(Ticket {
            activity: activity.clone(),
            started,
            close: AtomicBool::new(false),
            told: Notify::new(),
        });
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let key = idle.next;
        idle.next += 1;
        idle.entries.insert(key, ticket.clone());
        while idle.entries.len() > self.budget {
            let Some((_, oldest)) = idle.entries.pop_first() else { break };
            let (started, in_flight) = oldest.activity.counts();
            if started == oldest.started && in_flight == 0 {
                oldest.close.store(true, Ordering::Release);
            }
            // A permit is kept if it is not waiting yet: it cannot miss this.
            oldest.told.notify_one();
        }
        Place { registry: self, key, ticket }
    }

    /// How many connections are counted idle now.
    #[cfg(test)]
    fn counted(&self) -> usize {
        self.idle.lock().unwrap().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `future` once: whether it has resolved.
    fn ready<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        future.poll(&mut std::task::Context::from_waker(waker)).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_budget_the_connection_quiet_longest_is_closed() {
        let registry = IdleHttp2::new(2);
        let activities: Vec<Arc<Activity>> = (0..4).map(|_| Activity::new()).collect();
        // Each asks once; they fall quiet 100 ms apart.
        let mut evictions = Vec::new();
        for activity in &activities {
            drop(activity.begin());
            evictions.push(Box::pin(registry.evicted(activity)));
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        for e in &mut evictions {
            assert!(!ready(e.as_mut()), "nobody is idle yet");
        }
        tokio::time::advance(IDLE_AFTER).await;
        // Each falls quiet in turn (its place counted), then looks whether it was told to close.
        for e in &mut evictions {
            assert!(!ready(e.as_mut()));
        }
        let closed: Vec<bool> = evictions.iter_mut().map(|e| ready(e.as_mut())).collect();
        assert_eq!(closed, [true, true, false, false], "the two quiet longest go");
        assert_eq!(registry.counted(), 2);

        // A connection that leaves gives its place back.
        drop(evictions.pop());
        assert_eq!(registry.counted(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_busy_again_is_passed_over_and_counted_afresh() {
        let registry = IdleHttp2::new(1);
        let (a, b, c) = (Activity::new(), Activity::new(), Activity::new());
        drop(a.begin());
        let mut evict_a = Box::pin(registry.evicted(&a));
        assert!(!ready(evict_a.as_mut()));
        tokio::time::advance(IDLE_AFTER).await;
        assert!(!ready(evict_a.as_mut()));
        assert_eq!(registry.counted(), 1, "a is idle, within the budget");

        // a asks again, and is still answering when b falls quiet: a is passed over.
        let in_flight = a.begin();
        drop(b.begin());
        let mut evict_b = Box::pin(registry.evicted(&b));
        assert!(!ready(evict_b.as_mut()));
        tokio::time::advance(IDLE_AFTER).await;
        assert!(!ready(evict_b.as_mut()));
        assert!(!ready(evict_a.as_mut()), "a was busy: it is not closed");
        assert_eq!(registry.counted(), 1, "b is counted, a not until it is quiet again");
        drop(in_flight);

        // a falls quiet again and is counted after b: b, quiet longer, is the one closed.
        tokio::time::advance(IDLE_AFTER).await;
        assert!(!ready(evict_a.as_mut()));
        assert!(ready(evict_b.as_mut()), "b has been quiet longest");

        // Busy since it fell quiet, even if idle now: counted afresh rather than closed.
        let _ = a.begin();
        drop(c.begin());
        let mut evict_c = Box::pin(registry.evicted(&c));
        assert!(!ready(evict_c.as_mut()));
        tokio::time::advance(IDLE_AFTER).await;
        assert!(!ready(evict_c.as_mut()));
        assert!(!ready(evict_a.as_mut()), "a asked again since it fell quiet");
        tokio::time::advance(IDLE_AFTER).await;
        assert!(!ready(evict_a.as_mut()));
        assert!(ready(evict_c.as_mut()), "now c is the one quiet longest");
    }
}
