//! A connection's exchanges served one after another, until one is for hyper, the client sends
//! no more for now, or the connection ends.

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::HeaderMap;
use http::{Request, Response};
use hyper::body::{Body, Frame};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::read::*;
use super::write::*;
use crate::server::net::activity::Activity;
use crate::server::net::admission::Peer;
use crate::server::net::request_body::{Deferred, RequestBody};

/// What serving requests here left a connection in.
#[derive(Debug)]
pub(crate) enum After {
    /// Every request read so far is answered and the client sent nothing more yet.
    Waiting,
    /// A request for hyper's connection, whose bytes are in `unread`.
    Hyper,
    /// The connection is over.
    Closed,
    /// The last response is whole but for these bytes, which the client has not taken yet;
    /// then the connection closes if `close`, or goes on with `unread` (a request the client
    /// sent behind it). Nothing is in flight.
    Unsent { bytes: Vec<u8>, close: bool },
}

/// Serves the requests at the start of `unread` and those the socket already holds, one after
/// another, with `handle`, until one is for hyper, the client sends no more for now, or the
/// connection ends. Each is in flight on `activity` from its head to its response's last frame.
/// Once `stopping`, no further request is read and the response in flight says it closes.
pub(crate) async fn serve<H, F, B>(
    stream: &mut TcpStream,
    unread: &mut Bytes,
    peer: &Peer,
    handle: &H,
    activity: &Arc<Activity>,
    stopping: &watch::Receiver<bool>,
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
        let (request, exchange) = loop {
            // Nothing read yet is nothing to parse (the usual case, between requests).
            let head = if buf.is_empty() { Head::Partial } else { read_head(&mut buf) };
            match head {
                Head::Request(request, exchange) => break (request, exchange),
                Head::Hyper => {
                    // Copied: a view would keep the whole buffer alive while hyper's connection
                    // lives, and hyper reads it out at once.
                    *unread = Bytes::copy_from_slice(&buf);
                    return After::Hyper;
                }
                Head::Partial => match fill_now(stream, &mut buf).await {
                    Ok(true) => {}
                    Ok(false) if buf.is_empty() => {
                        crate::server::buffers::give_read(buf);
                        return After::Waiting;
                    }
                    // The rest is not here yet: hyper waits for it under its header timer.
                    Ok(false) => {
                        *unread = Bytes::copy_from_slice(&buf);
                        return After::Hyper;
                    }
                    Err(_) => return After::Closed,
                },
            }
        };
        let in_flight = activity.begin();
        // Boxed: a proxy's future is kilobytes, and the connection's task is what a waiting
        // connection costs. The box is taken before the future is made, so that the future is
        // written into it: made first, all of it was copied in, the room for what it awaits
        // included, though only its captures were set.
        let answer = Box::into_pin(Box::write(Box::new_uninit(), handle(request, peer.clone())));
        let response = tokio::select! {
            biased;
            response = answer => response,
            () = client_left(stream, &mut buf) => return After::Closed,
        };
        let (parts, mut body) = response.into_parts();
        let exchange = Exchange { keep_alive: exchange.keep_alive && !*stopping.borrow(), ..exchange };
        out.clear();
        let rate = body.take_rate();
        let read = body.take_fields();
        let fields = HeadFields { map: &parts.headers, read: read.as_ref() };
        let (mut encoder, last) = write_head(&parts, fields, rate.as_ref(), Length::of(&body), exchange, &mut out);
        drop(read);
        crate::server::buffers::give_map(parts.headers);
        if !encoder.done() {
            match send_body(stream, &mut buf, &mut body, &mut encoder, &mut out).await {
                Ok(true) => {}
                // The body failed, or ended short of its length: the client must not take what it
                // got for the whole.
                Ok(false) | Err(_) => return After::Closed,
            }
        }
        drop(body);
        drop(in_flight);
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

/// Sends `body` framed by `encoder`, after `out` (the head); leaves in `out` what is still to be
/// written at its end. `Ok(false)` when the body failed or ended short.
async fn send_body<B>(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    body: &mut B,
    encoder: &mut Encoder,
    out: &mut Vec<u8>,
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
                tokio::select! {
                    biased;
                    frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)) => Step::from(frame),
                    () = client_left(stream, buf) => return Ok(false),
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

/// One read into `buf` through `AsyncRead`, which marks the socket drained when a read comes
/// back shorter than the room it was given: the next look then waits for the runtime's word
/// instead of asking the kernel for nothing (`try_read` would, once per request).
fn poll_fill(stream: &mut TcpStream, buf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < READ_SIZE / 4 {
        buf.reserve(READ_SIZE);
    }
    std::pin::pin!(tokio::io::AsyncReadExt::read_buf(stream, buf)).poll(cx)
}

/// Reads what the socket holds now into `buf`, without waiting: whether anything came. A closed
/// socket is an error.
async fn fill_now(stream: &mut TcpStream, buf: &mut BytesMut) -> io::Result<bool> {
    std::future::poll_fn(|cx| match poll_fill(stream, buf, cx) {
        Poll::Ready(Ok(0)) => Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
        Poll::Ready(Ok(_)) => Poll::Ready(Ok(true)),
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Ready(Ok(false)),
    })
    .await
}

/// Resolves when the client closes its connection (or it fails) while its request is answered,
/// as hyper's does: bytes that come meanwhile (the next request) are kept in `buf`, and once
/// some have come, nothing more is read until this request is over.
async fn client_left(stream: &mut TcpStream, buf: &mut BytesMut) {
    std::future::poll_fn(|cx| {
        if !buf.is_empty() {
            return Poll::Pending;
        }
        match poll_fill(stream, buf, cx) {
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) | Poll::Pending => Poll::Pending,
        }
    })
    .await;
}

/// Writes what the socket takes now: how much.
fn write_now(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<usize> {
    let total = bytes.len();
    while !bytes.is_empty() {
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total - bytes.len())
}

/// Writes all of `bytes`, waiting for the client to take them.
pub(crate) async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    loop {
        let n = write_now(stream, bytes)?;
        bytes = &bytes[n..];
        if bytes.is_empty() {
            return Ok(());
        }
        stream.writable().await?;
    }
}
