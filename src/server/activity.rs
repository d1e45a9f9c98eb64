//! What a connection is doing: the requests it has in flight, so a connection that never sends a
//! request, or sits idle between requests, can be told apart from a busy one and closed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::watch;

/// Requests on one connection (HTTP/1.1 keep-alive or HTTP/2 streams alike).
pub(crate) struct Activity {
    requests: watch::Sender<Requests>,
}

#[derive(Clone, Copy, Default)]
struct Requests {
    /// Ever started, so a wait can tell that a request came and went while it was not looking.
    started: u64,
    /// From the service being called (its headers have arrived) until its response body has
    /// been sent or dropped.
    in_flight: usize,
}

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
        Arc::new(Activity { requests: watch::Sender::new(Requests::default()) })
    }

    /// A request whose headers have arrived; in flight until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.requests.send_modify(|r| {
            r.started += 1;
            r.in_flight += 1;
        });
        InFlight { activity: self.clone() }
    }

    /// Resolves when the connection should be closed: no request within `header_deadline` of
    /// now (the accept), or, after one, no request in flight for `idle_timeout`.
    pub(crate) async fn expired(&self, header_deadline: Duration, idle_timeout: Duration) -> Expired {
        let mut requests = self.requests.subscribe();
        if tokio::time::timeout(header_deadline, requests.wait_for(|r| r.started > 0)).await.is_err() {
            return Expired::NoRequest;
        }
        self.quiet_for(idle_timeout).await;
        Expired::Idle
    }

    /// Resolves once no request has been in flight for `period` without a break.
    pub(crate) async fn quiet_for(&self, period: Duration) {
        let mut requests = self.requests.subscribe();
        loop {
            let started = match requests.wait_for(|r| r.in_flight == 0).await {
                Ok(r) => r.started,
                // Unreachable while `self` holds the sender; nothing can be in flight without it.
                Err(_) => return,
            };
            let busy = requests.wait_for(|r| r.in_flight > 0 || r.started != started);
            if tokio::time::timeout(period, busy).await.is_err() {
                return;
            }
        }
    }
}

/// A request in flight on its connection.
pub(crate) struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.activity.requests.send_modify(|r| r.in_flight -= 1);
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
}
