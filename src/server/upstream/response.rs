//! The upstream's response body, read from its connection in the request's task as the client's
//! connection polls it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::client_body::BoxError;
use super::h1;

/// The upstream's response body; its connection goes back to the pool by itself once the body
/// has been read whole.
pub(crate) struct UpstreamBody(pub(crate) h1::Body);

impl UpstreamBody {
    /// The connection of a response that made it a tunnel.
    pub(crate) fn into_tunnel(self) -> Option<h1::Tunnel> {
        self.0.into_tunnel()
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().0).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}
