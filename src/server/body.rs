//! Bodies: the upstream's response, streamed and holding the request's concurrency permits until
//! its last frame is sent (or the client goes away), or a small body of our own; and the client's
//! request body on its way upstream, which remembers whether the client broke it.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::engine::Permits;

/// A response body the proxy sends.
pub enum ProxyBody {
    /// The upstream's body. The permits go back when it ends; if the client disconnects first,
    /// hyper drops the body and they go back then.
    Upstream {
        /// The upstream's body, streamed to the client as it comes.
        inner: Incoming,
        /// Concurrency permits of the request, returned when the body ends or is dropped.
        permits: Option<Permits>,
    },
    /// A body opbound wrote itself: a refusal, a problem, the admin pages.
    Full(Full<Bytes>),
}

impl ProxyBody {
    /// A body of these bytes.
    pub fn full(bytes: Bytes) -> ProxyBody {
        ProxyBody::Full(Full::new(bytes))
    }

    /// An empty body.
    pub fn empty() -> ProxyBody {
        ProxyBody::full(Bytes::new())
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Upstream { inner, permits } => {
                let polled = Pin::new(inner).poll_frame(cx);
                if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
                    permits.take();
                }
                polled
            }
            ProxyBody::Full(full) => match Pin::new(full).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream { inner, .. } => inner.is_end_stream(),
            ProxyBody::Full(full) => full.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream { inner, .. } => inner.size_hint(),
            ProxyBody::Full(full) => full.size_hint(),
        }
    }
}

/// The client's request body, streamed to the upstream. A failure to read it (a malformed chunk,
/// a body cut short) fails the upstream request too; what it records tells the two apart.
pub(crate) struct ClientBody {
    inner: Incoming,
    fault: Arc<OnceLock<String>>,
}

impl ClientBody {
    /// The body to send upstream, and where the first error reading `inner` is recorded.
    pub(crate) fn new(inner: Incoming) -> (ClientBody, Arc<OnceLock<String>>) {
        let fault = Arc::new(OnceLock::new());
        (ClientBody { inner, fault: fault.clone() }, fault)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled {
            // hyper's message is generic ("error reading a body from connection"); its source
            // names what was wrong ("invalid chunk size line").
            let _ = this.fault.set(std::error::Error::source(e).map_or_else(|| e.to_string(), |s| s.to_string()));
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
