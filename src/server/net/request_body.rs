//! A client's request body as its connection read it, and what a response body carries for the
//! head the connection writes (`Deferred`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::{mpsc, oneshot};

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

/// What can go wrong reading a request body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client's request body, as its connection was read: by hyper (HTTP/2), or by opbound's own
/// HTTP/1.1 server (`net/http1`), whole with its head or streamed as it arrives.
#[derive(Debug)]
pub enum RequestBody {
    /// Read by hyper's connection as it is polled.
    Hyper(Incoming),
    /// Arrived whole with the head (`None`: no body, or already taken); with the head's fields
    /// when they were read as a list and not put in the request's map. `http::Request` has room
    /// for a map only, so the list rides to the handler here ([`RequestBody::take_fields`]).
    Whole(Option<Bytes>, Option<Fields>),
    /// Read from the connection as it is polled, with the head's fields as for `Whole`.
    Streamed(Streamed, Option<Fields>),
}

/// A piece of a streamed request body, from the connection that reads it to the handler.
#[derive(Debug)]
pub(crate) enum Piece {
    Frame(Frame<Bytes>),
    /// The body's end: without it, a body whose reader went away is cut short, not over.
    End,
    /// The client's bytes are not a body (a malformed chunk), or the client left before its end.
    Failed(String),
}

/// A request body read from the connection as the handler polls it. The connection reads the
/// next piece only when the last was taken: one piece is in flight at a time, so a body costs
/// its reader's buffer and no more.
#[derive(Debug)]
pub struct Streamed {
    pieces: mpsc::Receiver<Piece>,
    /// Told when the body is first polled: the client asked to be told to go on (`Expect:
    /// 100-continue`), which is said only when the body is wanted.
    wanted: Option<oneshot::Sender<()>>,
    /// What is left of a declared length; `None` for a chunked body.
    left: Option<u64>,
    ended: bool,
}

/// The connection's side of a streamed body.
pub(crate) struct Feed {
    pub(crate) pieces: mpsc::Sender<Piece>,
    /// Resolves when the body is first wanted (given only for `Expect: 100-continue`).
    pub(crate) wanted: Option<oneshot::Receiver<()>>,
}

/// A streamed body of `length` (`None`: chunked), and the feed that fills it. With
/// `expect_continue`, the feed learns when the body is first wanted.
pub(crate) fn streamed(length: Option<u64>, expect_continue: bool) -> (Feed, Streamed) {
    let (tx, rx) = mpsc::channel(1);
    let (wanted_tx, wanted_rx) = if expect_continue {
        let (tx, rx) = oneshot::channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    (Feed { pieces: tx, wanted: wanted_rx }, Streamed { pieces: rx, wanted: wanted_tx, left: length, ended: false })
}

impl Streamed {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(wanted) = self.wanted.take() {
            let _ = wanted.send(());
        }
        let piece = std::task::ready!(self.pieces.poll_recv(cx));
        Poll::Ready(match piece {
            Some(Piece::Frame(frame)) => {
                if let (Some(left), Some(data)) = (&mut self.left, frame.data_ref()) {
                    *left = left.saturating_sub(data.len() as u64);
                }
                Some(Ok(frame))
            }
            Some(Piece::End) => {
                self.ended = true;
                None
            }
            Some(Piece::Failed(why)) => {
                self.ended = true;
                Some(Err(why.into()))
            }
            None => {
                self.ended = true;
                Some(Err("the connection stopped reading the body before its end".into()))
            }
        })
    }
}

impl RequestBody {
    /// The whole body, when it arrived with its head, taken out of this one (left empty).
    pub(crate) fn take_whole(&mut self) -> Option<Bytes> {
        match self {
            RequestBody::Hyper(_) | RequestBody::Streamed(..) => None,
            RequestBody::Whole(whole, _) => Some(whole.take().unwrap_or_default()),
        }
    }

    /// The request's fields, when they were read as a list: its map then has none. A handler
    /// reads them through [`Headers`](crate::server::facts::fields::Headers), or puts them in the map first
    /// ([`fields_in_map`]).
    pub fn take_fields(&mut self) -> Option<Fields> {
        match self {
            RequestBody::Hyper(_) => None,
            RequestBody::Whole(_, fields) | RequestBody::Streamed(_, fields) => fields.take(),
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
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Hyper(inner) => Pin::new(inner).poll_frame(cx).map_err(|e| {
                // hyper's message is generic ("error reading a body from connection"); its
                // source names what was wrong ("invalid chunk size line").
                let why = std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string);
                why.into()
            }),
            RequestBody::Whole(whole, _) => Poll::Ready(whole.take().map(|data| Ok(Frame::data(data)))),
            RequestBody::Streamed(streamed, _) => streamed.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(inner) => inner.is_end_stream(),
            RequestBody::Whole(whole, _) => whole.is_none(),
            RequestBody::Streamed(streamed, _) => streamed.ended,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Hyper(inner) => inner.size_hint(),
            RequestBody::Whole(whole, _) => SizeHint::with_exact(whole.as_ref().map_or(0, |w| w.len() as u64)),
            RequestBody::Streamed(streamed, _) => match streamed.left {
                _ if streamed.ended => SizeHint::with_exact(0),
                Some(left) => SizeHint::with_exact(left),
                None => SizeHint::default(),
            },
        }
    }
}
