//! The upstream's response body, as the connection it came over is read: by hyper's client
//! connection, or in the request's task.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::client_body::BoxError;
use super::h1;
use crate::server::upstream::pool::Checkin;

/// The upstream's response body, as the connection it came over is read.
pub enum UpstreamBody {
    /// Read by hyper's client connection.
    Pooled {
        /// The body.
        inner: Incoming,
        /// The upstream connection it comes over, given back to the pool once the body has
        /// been read whole.
        checkin: Option<Checkin>,
    },
    /// Read in the request's task; its connection goes back to the pool by itself.
    Direct(h1::Body),
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // hyper never polls a body that is empty from the start (a 204, a HEAD's answer): the
        // connection it came over is as good as read whole.
        if let UpstreamBody::Pooled { inner, checkin } = self
            && inner.is_end_stream()
            && let Some(c) = checkin.take()
        {
            c.done();
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::Pooled { inner, checkin } => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(None) => {
                    if let Some(c) = checkin.take() {
                        c.done();
                    }
                    Poll::Ready(None)
                }
                Poll::Ready(Some(Err(e))) => {
                    checkin.take();
                    Poll::Ready(Some(Err(e.into())))
                }
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Pending => Poll::Pending,
            },
            UpstreamBody::Direct(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Pooled { inner, .. } => inner.is_end_stream(),
            UpstreamBody::Direct(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Pooled { inner, .. } => inner.size_hint(),
            UpstreamBody::Direct(body) => body.size_hint(),
        }
    }
}
