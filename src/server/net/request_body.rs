//! A client's request body as its connection read it, and what a response body carries for the
//! head the connection writes (`Deferred`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::engine::headers::Pending;
use crate::server::facts::fields::Fields;

/// What a response body carries for its head: the RateLimit fields, kept as numbers until the
/// head is written. opbound's HTTP/1.1 writer puts them straight into the head; before hyper
/// writes one, they are set on the header map (`Pending::apply`).
pub(crate) trait Deferred {
    /// The fields for the head, taken out (so they are written once).
    fn take_rate(&mut self) -> Option<Pending> {
        None
    }

    /// The upstream's fields for the head, taken out, when they were kept as they were read
    /// rather than put in the response's map: written after the map's by opbound's HTTP/1.1
    /// writer; appended to the map before hyper writes one.
    fn take_fields(&mut self) -> Option<Fields> {
        None
    }
}

/// gRPC answers carry their fields in their header map.
impl Deferred for tonic::body::Body {}

/// A client's request body, as its connection was read: by hyper (a streamed body, HTTP/2), or
/// whole with its head by opbound's own HTTP/1.1 server (`net/http1`).
#[derive(Debug)]
pub enum RequestBody {
    /// Read by hyper's connection as it is polled.
    Hyper(Incoming),
    /// Arrived whole with the head (`None`: no body, or already taken); with the head's fields
    /// when they were read as a list and not put in the request's map. `http::Request` has room
    /// for a map only, so the list rides to the handler here ([`RequestBody::take_fields`]).
    Whole(Option<Bytes>, Option<Fields>),
}

impl RequestBody {
    /// The whole body, when it arrived with its head, taken out of this one (left empty).
    pub(crate) fn take_whole(&mut self) -> Option<Bytes> {
        match self {
            RequestBody::Hyper(_) => None,
            RequestBody::Whole(whole, _) => Some(whole.take().unwrap_or_default()),
        }
    }

    /// The request's fields, when they were read as a list: its map then has none. A handler
    /// reads them through [`Headers`](crate::server::facts::fields::Headers), or puts them in the map first
    /// ([`fields_in_map`]).
    pub fn take_fields(&mut self) -> Option<Fields> {
        match self {
            RequestBody::Hyper(_) => None,
            RequestBody::Whole(_, fields) => fields.take(),
        }
    }
}

/// Puts a request's fields read as a list into its map, for a handler that reads the map.
pub(crate) fn fields_in_map(req: &mut http::Request<RequestBody>) {
    if let Some(fields) = req.body_mut().take_fields() {
        fields.append_to(req.headers_mut());
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Hyper(inner) => Pin::new(inner).poll_frame(cx),
            RequestBody::Whole(whole, _) => Poll::Ready(whole.take().map(|data| Ok(Frame::data(data)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(inner) => inner.is_end_stream(),
            RequestBody::Whole(whole, _) => whole.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Hyper(inner) => inner.size_hint(),
            RequestBody::Whole(whole, _) => SizeHint::with_exact(whole.as_ref().map_or(0, |w| w.len() as u64)),
        }
    }
}
