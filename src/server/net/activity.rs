//! What a connection is doing: the requests it has in flight, so a connection that never sends a
//! request, or sits idle between requests, can be told apart from a busy one and closed.
//!
//! A request costs two atomic updates here and nothing else: no channel is notified and no timer
//! is set per request. The connection's one timer wakes at the earliest moment it could have
//! expired, looks at what happened meanwhile, and sleeps again if the connection was busy.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

/// Requests on one connection (HTTP/1.1 keep-alive or HTTP/2 streams alike).
pub(crate) struct Activity {
    /// When the connection was accepted; the times below count from it.
    born: Instant,
    /// Requests ever started (high 32 bits) and in flight (low 32 bits), in one word so a reader
    /// sees both as of one moment. A request is in flight from the service being called (its
    /// headers have arrived) until its response body has been sent or dropped.
    requests: AtomicU64,
    /// When the last request in flight ended, in nanoseconds from `born`.
    last_end: AtomicU64,
}

/// One request started, in `Activity::requests`.
const STARTED: u64 = 1 << 32;
/// The in-flight count, in `Activity::requests`.
const IN_FLIGHT: u64 = STARTED - 1;

/// Why a connection is being closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No request's headers arrived within the header-read timeout of the accept.
    NoRequest,
    /// No request was in flight for the idle timeout.
    Idle,
}

impl Activity {
    /// A connection with nothing done yet.
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity { born: Instant::now(), requests: AtomicU64::new(0), last_end: AtomicU64::new(0) })
    }

    /// A request whose headers have arrived; in flight until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(STARTED + 1, Ordering::AcqRel);
        InFlight { activity: self.clone() }
    }

    /// Requests started so far (counting modulo 2³²) and requests in flight, as of one moment.
    pub(crate) fn counts(&self) -> (u32, u32) {
        let requests = self.requests.load(Ordering::Acquire);
        ((requests >> 32) as u32, (requests & IN_FLIGHT) as u32)
    }

    /// Resolves when the connection should be closed: no request within `header_deadline` of
    /// its accept, or, after one, no request in flight for `idle_timeout`.
    pub(crate) async fn expired(&self, header_deadline: Duration, idle_timeout: Duration) -> Expired {
        // Looked at every `idle_timeout` until the first request: after it, the connection may
        // already have been idle that long.
        let deadline = self.born + header_deadline;
        let mut look = self.born + idle_timeout;
        loop {
            tokio::time::sleep_until(look.min(deadline)).await;
            if self.requests.load(Ordering::Acquire) >= STARTED {
                self.quiet_from(self.born, idle_timeout).await;
                return Expired::Idle;
            }
            if Instant::now() >= deadline {
                return Expired::NoRequest;
            }
            look = Instant::now() + idle_timeout;
        }
    }

    /// Resolves once no request has been in flight for `period` without a break, counting from
    /// now at the earliest.
    pub(crate) async fn quiet_for(&self, period: Duration) {
        self.quiet_from(Instant::now(), period).await;
    }

    /// Resolves once no request has been in flight for `period` without a break, counting from
    /// `from` at the earliest.
    async fn quiet_from(&self, from: Instant, period: Duration) {
        loop {
            // `requests` before `last_end`: a request that ends updates them the other way round.
            let before = self.requests.load(Ordering::Acquire);
            let quiet_since = self.quiet_since().max(from);
            let wake = if before & IN_FLIGHT > 0 {
                // Busy: it cannot have been quiet for `period` before `period` from now.
                Instant::now() + period
            } else {
                quiet_since + period
            };
            tokio::time::sleep_until(wake).await;
            // Unchanged and idle: nothing started (so nothing ended) since the look above.
            let after = self.requests.load(Ordering::Acquire);
            if after == before && after & IN_FLIGHT == 0 {
                return;
            }
        }
    }

    /// When the last request in flight ended (the accept, before any).
    fn quiet_since(&self) -> Instant {
        self.born + Duration::from_nanos(self.last_end.load(Ordering::Acquire))
    }
}

/// A request in flight on its connection.
pub(crate) struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.activity;
        let ended = u64::try_from(activity.born.elapsed().as_nanos()).unwrap_or(u64::MAX);
        activity.last_end.fetch_max(ended, Ordering::AcqRel);
        activity.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until its last frame is sent, or until
/// hyper drops it (the client went away, or the body was empty and never polled).
pub(crate) struct TrackedBody<B> {
    inner: B,
    in_flight: Option<InFlight>,
}

impl<B> TrackedBody<B> {
    /// `inner`, holding `in_flight` until it ends.
    pub(crate) fn new(inner: B, in_flight: InFlight) -> TrackedBody<B> {
        TrackedBody { inner, in_flight: Some(in_flight) }
    }
}

impl<B: Body + Unpin> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.in_flight.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_a_request_expires_at_the_header_deadline() {
        let activity = Activity::new();
        let started = tokio::time::Instant::now();
        let why = activity.expired(Duration::from_secs(10), Duration::from_secs(60)).await;
        assert_eq!(why, Expired::NoRequest);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_clock_runs_only_with_nothing_in_flight() {
        let activity = Activity::new();
        let started = tokio::time::Instant::now();
        let request = activity.begin();
        let expired = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(Duration::from_secs(10), Duration::from_secs(60)).await }
        });
        // In flight for far longer than the idle timeout: still open.
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!expired.is_finished());
        drop(request);
        assert_eq!(expired.await.unwrap(), Expired::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(360));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_comes_and_goes_restarts_the_idle_clock() {
        let activity = Activity::new();
        drop(activity.begin());
        let started = tokio::time::Instant::now();
        let quiet = tokio::spawn({
            let activity = activity.clone();
            async move { activity.quiet_for(Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_secs(50)).await;
        drop(activity.begin());
        quiet.await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(110));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_period_asked_for_counts_from_the_asking() {
        let activity = Activity::new();
        drop(activity.begin());
        tokio::time::sleep(Duration::from_secs(300)).await;
        // Long idle already: a close still gives the client its grace from now.
        let asked = tokio::time::Instant::now();
        activity.quiet_for(Duration::from_secs(1)).await;
        assert_eq!(asked.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_clock_starts_when_the_last_request_ends() {
        let activity = Activity::new();
        let started = tokio::time::Instant::now();
        let expired = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(Duration::from_secs(10), Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let first = activity.begin();
        let second = activity.begin();
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(20)).await;
        // One of two ended: still in flight, the idle clock has not started.
        assert!(!expired.is_finished());
        drop(second);
        assert_eq!(expired.await.unwrap(), Expired::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(85), "60 s after the last one ended, at 25 s");
    }
}
