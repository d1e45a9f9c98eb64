//! A connection's exchanges served one after another, until the client sends no more for now,
//! or the connection ends or becomes a tunnel.

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::HeaderMap;
use http::{Request, Response, StatusCode};
use hyper::body::{Body, Frame};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::pump::{Ended, Pump};
use super::read::*;
use super::socket::*;
use super::write::*;
use crate::server::net::activity::Activity;
use crate::server::net::admission::Peer;
use crate::server::net::request_body::{Deferred, RequestBody};
use crate::server::net::upgrade::{self, Handover};
use crate::server::wire::Framing;

/// How long, at most, a connection closed with some of a request body unread goes on reading
/// and dropping it after its response, so that the client reads the response before the close
/// resets the connection (nginx's lingering close).
const LINGER: Duration = Duration::from_secs(2);

/// The most of a request body no one read that is read and dropped after its response, for the
/// connection to carry the next request (nginx discards such a body whole; hyper drains it).
const MAX_DRAIN: u64 = 1 << 20;

/// What serving requests here left a connection in.
#[derive(Debug)]
pub(crate) enum After {
    /// Every request read so far is answered and the client sent nothing more yet.
    Waiting,
    /// The connection is over.
    Closed,
    /// The last response is whole but for these bytes, which the client has not taken yet;
    /// then the connection closes if `close`, or goes on with `unread` (a request the client
    /// sent behind it). Nothing is in flight.
    Unsent { bytes: Vec<u8>, close: bool },
    /// The last response switched protocols: the socket goes to the tunnel, with `unread` (what
    /// the client sent after its request).
    Upgraded(Handover),
}

/// Serves the requests at the start of `unread` and those the socket already holds, one after
/// another, with `handle`, until the client sends no more for now, or the connection ends or is
/// upgraded. Each is in flight on `activity` from its head to its response's last frame. A head
/// begun must be whole within `header_timeout`. Once `stopping`, no further request is read and
/// the response in flight says it closes.
pub(crate) async fn serve<H, F, B>(
    stream: &mut TcpStream,
    unread: &mut Bytes,
    peer: &Peer,
    handle: &H,
    activity: &Arc<Activity>,
    stopping: &watch::Receiver<bool>,
    header_timeout: Duration,
) -> After
where
    H: Fn(Request<RequestBody>, Peer) -> F,
    F: Future<Output = Response<B>>,
    B: Body<Data = Bytes> + Deferred + Unpin,
{
    let mut buf = crate::server::buffers::take_read(READ_SIZE.max(unread.len()));
    buf.extend_from_slice(unread);
    *unread = Bytes::new();
    let mut out = crate::server::buffers::take(0);
    loop {
        if *stopping.borrow() {
            return After::Closed;
        }
        let mut begun: Option<tokio::time::Instant> = None;
        let (mut request, exchange) = loop {
            // Nothing read yet is nothing to parse (the usual case, between requests).
            let head = if buf.is_empty() { Head::Partial } else { read_head(&mut buf) };
            match head {
                Head::Request(request, exchange) => break (request, exchange),
                Head::Malformed(status) => {
                    Box::pin(refuse(stream, status)).await;
                    return After::Closed;
                }
                Head::Partial if buf.is_empty() => match fill_now(stream, &mut buf).await {
                    Ok(true) => {}
                    Ok(false) => {
                        crate::server::buffers::give_read(buf);
                        return After::Waiting;
                    }
                    Err(_) => return After::Closed,
                },
                // A head begun, or a short body behind it: the rest must come within the header
                // timeout, from the first byte.
                Head::Partial => {
                    let deadline = *begun.get_or_insert_with(tokio::time::Instant::now) + header_timeout;
                    // Boxed, as are the other rare ways below: the connection's task holds this
                    // future whole while it waits, and every waiting connection would pay for them.
                    if !Box::pin(rest_of_head(stream, &mut buf, deadline, stopping)).await {
                        return After::Closed;
                    }
                }
            }
        };
        let mut pump = None;
        if exchange.body != Framing::Empty {
            let length = match exchange.body {
                Framing::Length(n) => Some(n),
                _ => None,
            };
            let (feed, streamed) = crate::server::net::request_body::streamed(length, exchange.expect_continue);
            let fields = request.body_mut().take_fields();
            *request.body_mut() = RequestBody::Streamed(streamed, fields);
            pump = Some(Pump::new(exchange.body, feed));
        }
        let mut handover = None;
        if exchange.upgrade {
            let (tx, pending) = upgrade::pending();
            request.extensions_mut().insert(pending);
            handover = Some(tx);
        }
        let in_flight = activity.begin();
        // Boxed: a proxy's future is kilobytes, and the connection's task is what a waiting
        // connection costs. The box is taken before the future is made, so that the future is
        // written into it: made first, all of it was copied in, the room for what it awaits
        // included, though only its captures were set.
        let mut answer = Box::into_pin(Box::write(Box::new_uninit(), handle(request, peer.clone())));
        let response = loop {
            tokio::select! {
                biased;
                response = &mut answer => break response,
                event = body_or_left(&mut pump, stream, &mut buf) => {
                    if event == Event::ClientLeft {
                        return After::Closed;
                    }
                }
            }
        };
        drop(answer);
        // The rest of a body not read to its end is never read as requests: it is read and
        // dropped after the response, or the connection closes. It closes when the body was
        // broken, or when the client still waits to be told to send it (and may never).
        let body_read = pump.as_ref().is_none_or(|p| p.ended() == Some(Ended::Whole));
        let unreadable = pump.as_ref().is_some_and(|p| p.ended() == Some(Ended::Broken) || p.awaits_continue());
        let (parts, mut body) = response.into_parts();
        let switching = parts.status == StatusCode::SWITCHING_PROTOCOLS && handover.is_some() && body_read;
        let keep_alive = exchange.keep_alive && !*stopping.borrow() && !unreadable;
        let exchange = Exchange { keep_alive, ..exchange };
        out.clear();
        let rate = body.take_rate();
        let read = body.take_fields();
        let fields = HeadFields { map: &parts.headers, read: read.as_ref() };
        let (mut encoder, last) = write_head(&parts, fields, rate.as_ref(), Length::of(&body), exchange, &mut out);
        drop(read);
        crate::server::buffers::give_map(parts.headers);
        if !encoder.done() {
            match send_body(stream, &mut buf, &mut body, &mut encoder, &mut out, &mut pump).await {
                Ok(true) => {}
                // The body failed, or ended short of its length: the client must not take what it
                // got for the whole.
                Ok(false) | Err(_) => return After::Closed,
            }
        }
        drop(body);
        drop(in_flight);
        if switching && let Some(handover) = handover {
            if write_all(stream, &out).await.is_err() {
                return After::Closed;
            }
            *unread = Bytes::copy_from_slice(&buf);
            return After::Upgraded(handover);
        }
        if let Some(pump) = &mut pump
            && pump.ended() != Some(Ended::Whole)
        {
            // Written first: the client may wait for its answer before it sends the rest.
            if !Box::pin(finish_body(stream, &mut buf, &out, last, pump, header_timeout)).await {
                return After::Closed;
            }
            out.clear();
        }
        match write_now(stream, &out) {
            Ok(n) if n == out.len() => {}
            Ok(n) => {
                // A request the client sent behind this one waits for the rest to be taken.
                if !last && !buf.is_empty() {
                    *unread = Bytes::copy_from_slice(&buf);
                }
                return After::Unsent { bytes: out.split_off(n), close: last };
            }
            Err(_) => return After::Closed,
        }
        if last {
            let _ = tokio::io::AsyncWriteExt::shutdown(stream).await;
            return After::Closed;
        }
    }
}

/// Reads the rest of a head begun, until `deadline`: whether more came. A head that stops coming
/// is answered 408; nothing more is read once `stopping`.
async fn rest_of_head(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    deadline: tokio::time::Instant,
    stopping: &watch::Receiver<bool>,
) -> bool {
    let mut stop = stopping.clone();
    tokio::select! {
        filled = tokio::time::timeout_at(deadline, fill(stream, buf)) => match filled {
            Ok(Ok(n)) => n > 0,
            Ok(Err(_)) => false,
            Err(_) => {
                refuse(stream, StatusCode::REQUEST_TIMEOUT).await;
                false
            }
        },
        () = stopped(&mut stop) => false,
    }
}

/// After a response whose request body was not read to its end: writes `out` (the response's
/// last bytes), then reads the rest of the body and drops it, within `patience`: whether the
/// connection can read its next request. Otherwise it is closed, lingering.
async fn finish_body(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    out: &[u8],
    last: bool,
    pump: &mut Pump,
    patience: Duration,
) -> bool {
    // Within `patience` too: a client that sends a body no one wants and reads nothing holds
    // the connection no longer than one that sends a head slowly.
    if last {
        let _ = tokio::time::timeout(LINGER, linger(stream, out)).await;
        return false;
    }
    if !matches!(tokio::time::timeout(patience, write_all(stream, out)).await, Ok(Ok(()))) {
        return false;
    }
    let drained = tokio::time::timeout(patience, pump.drain(stream, buf, MAX_DRAIN)).await;
    if drained != Ok(true) {
        let _ = tokio::time::timeout(LINGER, linger(stream, &[])).await;
        return false;
    }
    true
}

/// What happened while a request was answered.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// Its body was read to its end, or will not be read further.
    BodyEnded,
    /// The client closed its connection.
    ClientLeft,
}

/// Reads the request's body as the handler takes it, while it is being read; then watches for
/// the client leaving.
async fn body_or_left(pump: &mut Option<Pump>, stream: &mut TcpStream, buf: &mut BytesMut) -> Event {
    match pump {
        Some(pump) if pump.ended().is_none() => {
            // Boxed: few requests stream their body (see `rest_of_head`).
            Box::pin(pump.run(stream, buf)).await;
            Event::BodyEnded
        }
        _ => {
            client_left(stream, buf).await;
            Event::ClientLeft
        }
    }
}

/// Writes `out` (a response that says it closes), then reads and drops what the client still
/// sends (the rest of a body no one read) until it closes its side.
async fn linger(stream: &mut TcpStream, out: &[u8]) {
    if write_all(stream, out).await.is_err() {
        return;
    }
    let _ = tokio::io::AsyncWriteExt::shutdown(stream).await;
    // On the heap: a buffer in the future would be held by every waiting connection's task.
    let mut sink = vec![0u8; 8192];
    loop {
        match tokio::io::AsyncReadExt::read(stream, &mut sink).await {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// Answers a request that cannot be read with `status` and no body; the connection closes.
async fn refuse(stream: &mut TcpStream, status: StatusCode) {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = tokio::time::timeout(LINGER, linger(stream, &out)).await;
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Sends `body` framed by `encoder`, after `out` (the head); leaves in `out` what is still to be
/// written at its end. `Ok(false)` when the body failed or ended short.
async fn send_body<B>(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    body: &mut B,
    encoder: &mut Encoder,
    out: &mut Vec<u8>,
    pump: &mut Option<Pump>,
) -> io::Result<bool>
where
    B: Body<Data = Bytes> + Unpin,
{
    loop {
        let polled = {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            std::pin::Pin::new(&mut *body).poll_frame(&mut cx).map(Step::from)
        };
        let step = match polled {
            Poll::Ready(step) => step,
            Poll::Pending => {
                // Nothing more for now: what there is goes out while the rest comes.
                write_all(stream, out).await?;
                out.clear();
                loop {
                    tokio::select! {
                        biased;
                        frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)) => break Step::from(frame),
                        // A request body still being read goes on being read: the upstream may
                        // answer before it has all of it.
                        event = body_or_left(pump, stream, buf) => if event == Event::ClientLeft {
                            return Ok(false);
                        },
                    }
                }
            }
        };
        match step {
            Step::End => {
                if let Encoder::Length(left) = encoder
                    && *left > 0
                {
                    return Ok(false);
                }
                encoder.end(None, out);
                return Ok(true);
            }
            Step::Failed => return Ok(false),
            Step::Trailers(trailers) => {
                encoder.end(Some(&trailers), out);
                return Ok(true);
            }
            Step::Data(data) => {
                if let Some(large) = encoder.data(data, out) {
                    write_all(stream, out).await?;
                    out.clear();
                    write_all(stream, &large).await?;
                    if matches!(encoder, Encoder::Chunked(_)) {
                        out.extend_from_slice(b"\r\n");
                    }
                }
                if encoder.done() {
                    return Ok(true);
                }
                if out.len() > COPY_DATA {
                    write_all(stream, out).await?;
                    out.clear();
                }
            }
        }
    }
}

/// A body's next frame, as the writer takes it.
enum Step {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body ended.
    End,
    /// Reading it failed.
    Failed,
}

impl<E> From<Option<Result<Frame<Bytes>, E>>> for Step {
    fn from(frame: Option<Result<Frame<Bytes>, E>>) -> Step {
        match frame {
            None => Step::End,
            Some(Err(_)) => Step::Failed,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Step::Data(data),
                Err(frame) => frame.into_trailers().map_or(Step::End, Step::Trailers),
            },
        }
    }
}
