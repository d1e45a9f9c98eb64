//! Bodies: the upstream's response, streamed and holding the request's concurrency permits until
//! its last frame is sent (or the client goes away), or a small body of our own; and the client's
//! request body on its way upstream, which remembers whether the client broke it and can be read
//! ahead, up to a limit, for the bounds keyed on it, then forwarded unchanged.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::admission::Upstreaming;
use super::fields::Fields;
use super::pool::Checkin;
use super::request_log::Entry;
use super::upstream_h1;
use crate::engine::Permits;
use crate::engine::headers::Pending;

/// A response body the proxy sends.
pub enum ProxyBody {
    /// The upstream's body. The permits go back when it ends; if the client disconnects first,
    /// hyper drops the body and they go back then.
    Upstream {
        /// The upstream's body, streamed to the client as it comes.
        inner: UpstreamBody,
        /// Concurrency permits of the request, returned when the body ends or is dropped.
        permits: Option<Permits>,
        /// The request's place in the upstream budgets, given back with the permits.
        upstreaming: Option<Upstreaming>,
        /// The request's line in the request log, sent when the body ends or is dropped, after
        /// the permits went back: its duration is the request's whole time.
        logged: Option<Box<Entry>>,
        /// Fields taken out of the trailer section (`--strip-header`), when there are any.
        strip: Option<Arc<[http::HeaderName]>>,
        /// The RateLimit fields, for the server writing the head (see [`Deferred`]).
        rate: Option<Pending>,
        /// The upstream's header fields as they were read, when they are passed on as a list
        /// (the response's map then holds none of them; see [`Deferred`]).
        fields: Option<Fields>,
    },
    /// A body opbound wrote itself (a refusal, a problem, the admin pages), and the RateLimit
    /// fields for its head.
    Full(Full<Bytes>, Option<Pending>),
}

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

impl Deferred for ProxyBody {
    fn take_rate(&mut self) -> Option<Pending> {
        match self {
            ProxyBody::Upstream { rate, .. } | ProxyBody::Full(_, rate) => rate.take(),
        }
    }

    fn take_fields(&mut self) -> Option<Fields> {
        match self {
            ProxyBody::Upstream { fields, .. } => fields.take(),
            ProxyBody::Full(..) => None,
        }
    }
}

/// gRPC answers carry their fields in their header map.
impl Deferred for tonic::body::Body {}

/// A client's request body, as its connection was read: by hyper (a streamed body, HTTP/2), or
/// whole with its head by opbound's own HTTP/1.1 server (`http1.rs`).
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
    pub(super) fn take_whole(&mut self) -> Option<Bytes> {
        match self {
            RequestBody::Hyper(_) => None,
            RequestBody::Whole(whole, _) => Some(whole.take().unwrap_or_default()),
        }
    }

    /// The request's fields, when they were read as a list: its map then has none. A handler
    /// reads them through [`Headers`](super::fields::Headers), or puts them in the map first
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
    Direct(upstream_h1::Body),
}

/// What can go wrong reading the upstream's body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl ProxyBody {
    /// A body of these bytes.
    pub fn full(bytes: Bytes) -> ProxyBody {
        ProxyBody::Full(Full::new(bytes), None)
    }

    /// An empty body.
    pub fn empty() -> ProxyBody {
        ProxyBody::full(Bytes::new())
    }

    /// The upstream's body, holding the request's concurrency permits and its place in the
    /// upstream budgets.
    pub(crate) fn upstream(
        inner: UpstreamBody,
        fields: Option<Fields>,
        permits: Permits,
        strip: Option<Arc<[http::HeaderName]>>,
        upstreaming: Upstreaming,
    ) -> ProxyBody {
        ProxyBody::Upstream {
            inner,
            permits: Some(permits),
            upstreaming: Some(upstreaming),
            logged: None,
            strip,
            rate: None,
            fields,
        }
    }

    /// The RateLimit fields its head is to carry, replacing any it was given.
    pub(crate) fn set_rate(&mut self, pending: Option<Pending>) {
        match self {
            ProxyBody::Upstream { rate, .. } | ProxyBody::Full(_, rate) => *rate = pending,
        }
    }

    /// Sends a request's log line when this body ends: the upstream's when it has been sent
    /// whole (or the client went away), one of our own at once, since it is written in one go.
    pub(crate) fn log_at_end(&mut self, entry: Entry) {
        match self {
            // Boxed: only a request log has one, and every response body is moved on its way out.
            ProxyBody::Upstream { logged, .. } => *logged = Some(Box::new(entry)),
            ProxyBody::Full(..) => drop(entry),
        }
    }
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

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Upstream { inner, permits, upstreaming, logged, strip, .. } => {
                let mut polled = Pin::new(inner).poll_frame(cx);
                match &mut polled {
                    Poll::Ready(None | Some(Err(_))) => {
                        permits.take();
                        upstreaming.take();
                        logged.take();
                    }
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(strip), Some(trailers)) = (strip, frame.trailers_mut()) {
                            for name in strip.iter() {
                                trailers.remove(name);
                            }
                        }
                    }
                    Poll::Pending => {}
                }
                polled
            }
            ProxyBody::Full(full, _) => match Pin::new(full).poll_frame(cx) {
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
            ProxyBody::Full(full, _) => full.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream { inner, .. } => inner.size_hint(),
            ProxyBody::Full(full, _) => full.size_hint(),
        }
    }
}

/// Why a client's request body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientFault {
    /// Malformed, or cut short; why, as the reader said.
    Malformed(String),
    /// No part of it came for this long (`--client-body-timeout`).
    Stalled(Duration),
}

impl std::fmt::Display for ClientFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientFault::Malformed(why) => f.write_str(why),
            ClientFault::Stalled(after) => write!(f, "no part of the body arrived for {after:?}"),
        }
    }
}

impl std::error::Error for ClientFault {}

/// The client's request body, streamed to the upstream. A failure to read it (a malformed chunk,
/// a body cut short, a body that stops coming) fails the upstream request too; what it records
/// tells the client's fault from the upstream's. What was read ahead for keys is sent first,
/// frame for frame, then the rest as it comes.
pub(crate) struct ClientBody {
    inner: RequestBody,
    /// Where the first error reading `inner` is recorded; made when first needed (a body read
    /// whole never fails, and most are).
    fault: Option<Arc<OnceLock<ClientFault>>>,
    /// How long the client may send nothing while the rest of its body is awaited: without a
    /// bound, a client that stops mid-body holds an upstream connection for as long as it likes
    /// (nginx's `client_body_timeout`).
    patience: Duration,
    /// Armed while a frame is awaited, from the first wait after the last frame.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Frames read ahead (data and trailers), in order, not yet sent upstream.
    ahead: VecDeque<Frame<Bytes>>,
    /// The error that ended reading ahead, sent after the frames before it.
    error: Option<hyper::Error>,
    /// Whether reading ahead reached the body's end.
    ended: bool,
}

impl ClientBody {
    /// The body to send upstream, which may go `patience` without a frame.
    pub(crate) fn new(inner: RequestBody, patience: Duration) -> ClientBody {
        ClientBody { inner, fault: None, patience, stall: None, ahead: VecDeque::new(), error: None, ended: false }
    }

    /// Where the first error reading the body is recorded, to be read once the body has been
    /// handed to what sends it. Take it before the body goes.
    pub(crate) fn fault(&mut self) -> Arc<OnceLock<ClientFault>> {
        self.fault.get_or_insert_with(Arc::default).clone()
    }

    /// Reads the whole body ahead if it is at most `limit` bytes, for a bound keyed on it. `None`
    /// when it is longer (a declared length is believed, and nothing is read; otherwise reading
    /// stops at the frame that passes the limit) or cannot be read. Call it once, before sending.
    pub(crate) async fn read_ahead(&mut self, limit: usize) -> Option<Bytes> {
        if self.inner.size_hint().lower() > limit as u64 {
            return None;
        }
        let mut total = 0usize;
        loop {
            match std::future::poll_fn(|cx| Pin::new(&mut self.inner).poll_frame(cx)).await {
                None => {
                    self.ended = true;
                    break;
                }
                Some(Err(e)) => {
                    record(&mut self.fault, &e);
                    self.error = Some(e);
                    return None;
                }
                Some(Ok(frame)) => {
                    total += frame.data_ref().map_or(0, Bytes::len);
                    self.ahead.push_back(frame);
                    if total > limit {
                        return None;
                    }
                }
            }
        }
        let mut whole = Vec::with_capacity(total);
        for data in self.ahead.iter().filter_map(Frame::data_ref) {
            whole.extend_from_slice(data);
        }
        Some(Bytes::from(whole))
    }

    /// The whole body, when it is empty or was read ahead whole, taken out of this one (which is
    /// left empty). `None` while some of it is still to come, when reading it failed, or when
    /// it ended with trailers: such a body is streamed.
    pub(crate) fn take_whole(&mut self) -> Option<Bytes> {
        if self.ahead.is_empty() && !self.ended && self.error.is_none() {
            // Arrived with its head: nothing to gather.
            if let Some(whole) = self.inner.take_whole() {
                self.ended = true;
                return Some(whole);
            }
        }
        if self.error.is_some() || !(self.ended || (self.ahead.is_empty() && self.inner.is_end_stream())) {
            return None;
        }
        if self.ahead.iter().any(|frame| !frame.is_data()) {
            return None;
        }
        let mut frames = std::mem::take(&mut self.ahead).into_iter().filter_map(|f| f.into_data().ok());
        let whole = match (frames.next(), frames.next()) {
            (None, _) => Bytes::new(),
            (Some(only), None) => only,
            (Some(first), Some(second)) => {
                let mut whole = Vec::from(first.as_ref());
                whole.extend_from_slice(&second);
                frames.for_each(|data| whole.extend_from_slice(&data));
                Bytes::from(whole)
            }
        };
        self.ended = true;
        Some(whole)
    }

    fn ahead_len(&self) -> u64 {
        self.ahead.iter().filter_map(Frame::data_ref).map(|d| d.len() as u64).sum()
    }
}

/// Records why the client's body could not be read. hyper's message is generic ("error reading
/// a body from connection"); its source names what was wrong ("invalid chunk size line").
fn record(fault: &mut Option<Arc<OnceLock<ClientFault>>>, e: &hyper::Error) {
    let fault = fault.get_or_insert_with(Arc::default);
    let why = std::error::Error::source(e).map_or_else(|| e.to_string(), |s| s.to_string());
    let _ = fault.set(ClientFault::Malformed(why));
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(frame) = this.ahead.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = this.error.take() {
            return Poll::Ready(Some(Err(e.into())));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(polled) => {
                this.stall = None;
                if let Some(Err(e)) = &polled {
                    record(&mut this.fault, e);
                }
                Poll::Ready(polled.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let patience = this.patience;
                let stall = this.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(patience)));
                if stall.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.ended = true;
                let fault = ClientFault::Stalled(patience);
                let _ = this.fault.get_or_insert_with(Arc::default).set(fault.clone());
                Poll::Ready(Some(Err(fault.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && self.error.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // hyper counts a declared length down as frames are read: the rest plus what was read
        // ahead is the length the client declared.
        let ahead = self.ahead_len();
        if self.ended {
            return SizeHint::with_exact(ahead);
        }
        let rest = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + ahead);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + ahead);
        }
        hint
    }
}
