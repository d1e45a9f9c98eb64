//! The response body the server sends: the upstream's, streamed and holding the request's
//! concurrency permits until its last frame is sent (or the client goes away), or a small body of
//! its own.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, SizeHint};

use crate::engine::Permits;
use crate::engine::headers::Pending;
use crate::engine::usage::Meter;
use crate::engine::usage::ask::Unasked;
use crate::server::facts::fields::Fields;
use crate::server::net::admission::Upstreaming;
use crate::server::net::request_body::Deferred;
use crate::server::observe::request_log::Entry;
use crate::server::upstream::client_body::BoxError;
use crate::server::upstream::response::UpstreamBody;

/// A response body the proxy sends.
pub(crate) enum ProxyBody {
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
        /// Reads the body for what bounds settled from it wait for: settled when it ends, or as
        /// cut short when it breaks off or the client goes away (dropped with the body).
        meter: Option<Box<Meter>>,
        /// Takes out of an event stream what asking for its usage added (after the meter read
        /// it); whether the upstream's body has ended (the filter's last bytes then sent).
        unasked: Option<Box<(Unasked, bool)>>,
    },
    /// A body opbound wrote itself (a refusal, a problem, the admin pages), and the RateLimit
    /// fields for its head.
    Full(Full<Bytes>, Option<Pending>),
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

impl ProxyBody {
    /// A body of these bytes.
    pub(crate) fn full(bytes: Bytes) -> ProxyBody {
        ProxyBody::Full(Full::new(bytes), None)
    }

    /// An empty body.
    pub(crate) fn empty() -> ProxyBody {
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
            meter: None,
            unasked: None,
        }
    }

    /// Takes out of the stream what asking for its usage on the client's behalf added.
    pub(crate) fn unasked(&mut self) {
        if let ProxyBody::Upstream { unasked, .. } = self {
            *unasked = Some(Box::default());
        }
    }

    /// Reads the upstream's body for what it reports as it passes (see [`Meter`]).
    pub(crate) fn meter(&mut self, m: Box<Meter>) {
        if let ProxyBody::Upstream { meter, .. } = self {
            *meter = Some(m);
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

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Upstream { inner, permits, upstreaming, logged, strip, meter, unasked, .. } => loop {
                if unasked.as_ref().is_some_and(|u| u.1) {
                    return Poll::Ready(None);
                }
                let mut polled = Pin::new(&mut *inner).poll_frame(cx);
                match &mut polled {
                    Poll::Ready(None | Some(Err(_))) => {
                        // Settled before the permits go back: a client whose stream ended sees
                        // its usage counted when it asks again.
                        if let (Some(m), Poll::Ready(None)) = (meter.take(), &polled) {
                            m.end();
                        }
                        // A broken body drops its meter here, cut short.
                        meter.take();
                        permits.take();
                        upstreaming.take();
                        logged.take();
                        // What the filter held of an unfinished event goes out as it came.
                        if let (Some(u), Poll::Ready(None)) = (unasked.as_mut(), &polled) {
                            u.1 = true;
                            let rest = u.0.finish();
                            if !rest.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(rest))));
                            }
                        }
                    }
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(m), Some(data)) = (meter.as_mut(), frame.data_ref()) {
                            m.feed(data);
                        }
                        // The server may not ask again once the body says it has ended.
                        if meter.is_some() && inner.is_end_stream() {
                            meter.take().into_iter().for_each(|m| m.end());
                        }
                        if let (Some(strip), Some(trailers)) = (strip.as_ref(), frame.trailers_mut()) {
                            for name in strip.iter() {
                                trailers.remove(name);
                            }
                        }
                        if let (Some(u), Some(data)) = (unasked.as_mut(), frame.data_ref()) {
                            let kept = u.0.filter(data);
                            if kept.is_empty() {
                                // Nothing whole to send yet: an empty frame could end a chunked body.
                                continue;
                            }
                            *frame = Frame::data(kept);
                        }
                    }
                    Poll::Pending => {}
                }
                return polled;
            },
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
            // A filter may hold bytes to send once the upstream's body ends.
            ProxyBody::Upstream { unasked: Some(u), .. } => u.1,
            ProxyBody::Upstream { inner, .. } => inner.is_end_stream(),
            ProxyBody::Full(full, _) => full.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            // Filtered, its length is not the upstream's.
            ProxyBody::Upstream { unasked: Some(_), .. } => SizeHint::default(),
            ProxyBody::Upstream { inner, .. } => inner.size_hint(),
            ProxyBody::Full(full, _) => full.size_hint(),
        }
    }
}
