//! The client's request body on its way upstream: it remembers whether the client broke it and
//! can be read ahead, up to a limit, for the bounds keyed on it, then is forwarded unchanged.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::server::net::request_body::RequestBody;

pub(crate) use crate::server::net::request_body::BoxError;

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
    error: Option<BoxError>,
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

    /// Why the body could not be read, when that is known already (reading it ahead failed).
    pub(crate) fn broken(&self) -> Option<&ClientFault> {
        self.fault.as_ref().and_then(|fault| fault.get())
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

/// Records why the client's body could not be read.
fn record(fault: &mut Option<Arc<OnceLock<ClientFault>>>, e: &BoxError) {
    let fault = fault.get_or_insert_with(Arc::default);
    let _ = fault.set(ClientFault::Malformed(e.to_string()));
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
            return Poll::Ready(Some(Err(e)));
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
                Poll::Ready(polled)
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
