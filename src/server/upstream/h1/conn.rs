//! A connection to the upstream read in the request's task: one exchange at a time, the body
//! read from the socket as the client's connection polls it, and the connection given back to its
//! worker's idle list once the body was read to its exact end and a read found nothing after it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use super::head::*;
use super::io::{Filled, Idle, Io};
use crate::server::wire::{Chunked, Decoded};
use std::io::Write;

use bytes::{Bytes, BytesMut};
use hyper::body::{Frame, SizeHint};

/// Where a connection read in the request's task goes back to once its response has been read
/// whole: its worker's idle list.
pub(crate) struct Home(pub(crate) std::sync::Weak<dyn IdleList>);

impl Home {
    pub(crate) fn give_back(&self, conn: Conn) {
        if let Some(pool) = self.0.upgrade() {
            pool.take_back(conn);
        }
    }

    fn stray(&self) {
        if let Some(pool) = self.0.upgrade() {
            pool.stray();
        }
    }
}

/// A list of idle connections a connection can be given back to.
pub(crate) trait IdleList: Send + Sync {
    /// Keeps `conn` for the next request (or closes it, when the list has no room).
    fn take_back(self: std::sync::Arc<Self>, conn: Conn);

    /// The upstream wrote bytes past a framed response on one of the list's connections.
    fn stray(&self) {}
}

/// A connection to the upstream, with what was read from it and not yet used.
pub(crate) struct Conn {
    io: Io,
    buf: BytesMut,
    /// Whether the last read left nothing behind on the socket (see [`Filled`]).
    drained: bool,
    /// Whether a request was sent on it before: bytes found on it before the next request is
    /// sent are then stray bytes of an earlier answer, and the request goes on another
    /// connection.
    used: bool,
    /// The response timeout's timer, kept from one exchange to the next (see [`Conn::exchange`]).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// An exchange that failed, and whether the request can be sent again on another connection:
/// nothing came back, so the upstream closed this one (an idle connection's usual end) rather
/// than answer.
pub(crate) struct Failed {
    pub error: Error,
    pub retryable: bool,
    /// Nothing of the request was sent: an idle connection had stray bytes on it, so it was
    /// closed unused. Any request, idempotent or not, can go on another.
    pub unsent: bool,
}

impl Failed {
    fn fatal(error: Error) -> Failed {
        Failed { error, retryable: false, unsent: false }
    }
}

impl Conn {
    pub(crate) fn new(io: Io) -> Conn {
        Conn { io, buf: BytesMut::new(), drained: true, used: false, timer: None }
    }

    /// What an idle connection holds: nothing left unread here and nothing on the socket, a
    /// close, or stray bytes. One system call.
    pub(crate) fn look(&mut self) -> Idle {
        if !self.buf.is_empty() {
            return Idle::Bytes;
        }
        self.io.look()
    }

    /// Reads what the socket has into the buffer; `Ok(0)` at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        let Filled { n, drained } = ready!(self.io.poll_read_into(cx, &mut self.buf))?;
        self.drained = drained;
        Poll::Ready(Ok(n))
    }

    /// Checked just before a request is written: nothing may be waiting on the connection, since
    /// whatever is there would be read as the request's answer. On a connection used before such
    /// bytes are the tail of an earlier answer (a body on a `HEAD`, junk after a framed body, a
    /// response nobody asked for): it is closed and the request goes on another. On a new one the
    /// upstream spoke first.
    fn check_silent(&mut self) -> Result<(), Failed> {
        let found = self.look();
        let used = std::mem::replace(&mut self.used, true);
        match found {
            Idle::Empty => Ok(()),
            Idle::Closed if used => Err(Failed { error: Error::Closed, retryable: true, unsent: true }),
            Idle::Bytes if used => Err(Failed { error: Error::Stray, retryable: true, unsent: true }),
            Idle::Closed => Err(Failed::fatal(Error::Closed)),
            Idle::Bytes => Err(Failed::fatal(Error::Unasked)),
        }
    }

    /// Sends a request (`head`, then `body` when the head did not carry it) and reads the
    /// response head, the answer to what was `asked`, within `timeout`.
    ///
    /// The timer is the connection's, re-armed only once it has fired (nginx's lazy timers do
    /// the same): armed for an earlier exchange, it fires before this one's deadline, which is
    /// then looked at and the timer set to it if the response is still awaited. A timer set per
    /// request, inserted into the runtime's wheel and taken out again, was a few percent of
    /// serve's user time.
    pub(crate) async fn exchange(
        &mut self,
        head: &[u8],
        body: Option<&[u8]>,
        asked: Asked,
        timeout: std::time::Duration,
    ) -> Result<Head, Failed> {
        let now = tokio::time::Instant::now();
        let deadline = now + timeout;
        let mut timer = self.timer.take().unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() <= now || timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
        let answered = {
            let mut exchange = std::pin::pin!(self.send_and_read(head, body, asked));
            std::future::poll_fn(|cx| {
                if let Poll::Ready(answered) = exchange.as_mut().poll(cx) {
                    return Poll::Ready(answered);
                }
                while timer.as_mut().poll(cx).is_ready() {
                    if tokio::time::Instant::now() >= deadline {
                        return Poll::Ready(Err(Failed::fatal(Error::TimedOut(timeout))));
                    }
                    timer.as_mut().reset(deadline);
                }
                Poll::Pending
            })
            .await
        };
        self.timer = Some(timer);
        answered
    }

    async fn send_and_read(&mut self, head: &[u8], body: Option<&[u8]>, asked: Asked) -> Result<Head, Failed> {
        // Sent after the worker's other ready requests have been read and judged: written in one
        // burst, they reach the upstream together and it answers them in one wake-up. Written
        // as each is judged, the upstream was woken about once per request (nginx: 0.65 context
        // switches per request, against 0.22 this way), and serve did 10% fewer requests.
        tokio::task::yield_now().await;
        // After the yield: bytes that came while this task waited are found too.
        self.check_silent()?;
        let mut written = self.io.send(head).await;
        if let (Ok(()), Some(body)) = (&written, body) {
            written = self.io.send(body).await;
        }
        if let Err(e) = written {
            return Err(Failed { error: Error::Io(e), retryable: true, unsent: false });
        }
        let mut received = false;
        let mut interim = 0;
        loop {
            if !self.buf.is_empty()
                && let Some(head) = parse_head_for(&mut self.buf, asked, &mut interim).map_err(Failed::fatal)?
            {
                return Ok(head);
            }
            match std::future::poll_fn(|cx| self.poll_fill(cx)).await {
                Ok(0) => return Err(Failed { error: Error::Closed, retryable: !received, unsent: false }),
                Ok(_) => received = true,
                Err(e) => {
                    let reset = matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe
                    );
                    return Err(Failed { error: Error::Io(e), retryable: reset && !received, unsent: false });
                }
            }
        }
    }

    /// Sends a request whose body is streamed: `head` (which says how the body is framed), then
    /// `body`'s frames as they come, as chunks when `chunked`; and reads the response head, the
    /// answer to what was `asked`. The upstream may answer before it has the whole body (a
    /// refusal): sending stops there, and the connection is not used again. Retryable only when
    /// the head could not be written: then nothing of the body was taken.
    pub(crate) async fn exchange_streamed<B>(
        &mut self,
        head: &[u8],
        body: &mut B,
        chunked: bool,
        asked: Asked,
    ) -> Result<Head, Failed>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let fatal = Failed::fatal;
        self.check_silent()?;
        if let Err(e) = self.io.send(head).await {
            return Err(Failed { error: Error::Io(e), retryable: true, unsent: false });
        }
        let mut sending = !body.is_end_stream();
        let mut out = Vec::new();
        let mut interim = 0;
        loop {
            if !self.buf.is_empty()
                && let Some(mut head) = parse_head_for(&mut self.buf, asked, &mut interim).map_err(fatal)?
            {
                if sending {
                    head.keep_alive = false;
                }
                return Ok(head);
            }
            let frame = tokio::select! {
                biased;
                filled = std::future::poll_fn(|cx| self.poll_fill(cx)) => match filled {
                    Ok(0) => return Err(fatal(Error::Closed)),
                    Ok(_) => continue,
                    Err(e) => return Err(fatal(Error::Io(e))),
                },
                frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)), if sending => frame,
            };
            out.clear();
            match frame {
                None => {
                    sending = false;
                    if chunked {
                        out.extend_from_slice(b"0\r\n\r\n");
                    }
                }
                Some(Err(e)) => return Err(fatal(Error::Body(e.to_string()))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => continue,
                    Ok(data) => {
                        if chunked {
                            let _ = write!(out, "{:X}\r\n", data.len());
                            self.io.send(&out).await.map_err(|e| fatal(Error::Io(e)))?;
                            out.clear();
                        }
                        self.io.send(&data).await.map_err(|e| fatal(Error::Io(e)))?;
                        if chunked {
                            out.extend_from_slice(b"\r\n");
                        }
                    }
                    // A request's trailers are not passed on: they could bring back an identity
                    // field stripped from its head.
                    Err(_trailers) => {
                        sending = false;
                        if chunked {
                            out.extend_from_slice(b"0\r\n\r\n");
                        }
                    }
                },
            }
            if !out.is_empty() {
                self.io.send(&out).await.map_err(|e| fatal(Error::Io(e)))?;
            }
        }
    }
}

/// A response body read from the upstream's connection as the client's connection polls it. The
/// connection goes home as soon as the body's last byte has been read, if it may carry another
/// request; otherwise, or if the body is dropped before, it is closed.
pub(crate) struct Body {
    conn: Option<Conn>,
    state: BodyState,
    keep_alive: bool,
    home: Home,
}

pub(super) enum BodyState {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
    /// No body: the connection is a tunnel now ([`Body::into_tunnel`]).
    Tunnel,
}

impl Body {
    /// The body of the response `head` read from `conn`; `home` takes the connection back.
    pub(crate) fn new(conn: Conn, head: &Head, home: Home) -> Body {
        let state = match head.framing {
            Framing::Empty => BodyState::Length(0),
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(Chunked::default()),
            Framing::UntilClose => BodyState::UntilClose,
        };
        let state = if head.tunnel { BodyState::Tunnel } else { state };
        let mut body = Body { conn: Some(conn), state, keep_alive: head.keep_alive, home };
        if matches!(body.state, BodyState::Length(0)) {
            body.finish();
        }
        body
    }

    /// The body has been read to its end: the connection goes home if nothing follows it, neither
    /// in what was read nor on the socket. Bytes past a framed end (junk after a body, a body on
    /// a `HEAD`, `204` or `304`) close it: the next request would read them as its answer.
    fn finish(&mut self) {
        self.state = BodyState::Done;
        let Some(mut conn) = self.conn.take() else { return };
        if !self.keep_alive {
            return;
        }
        // A read that filled all its room may have left more behind: asked.
        let after = if conn.buf.is_empty() && conn.drained { Idle::Empty } else { conn.look() };
        match after {
            Idle::Empty => {
                // The runtime still reports the socket readable for the response just read:
                // cleared, so that the read after the next request waits for its answer.
                // Whether anything came meanwhile is asked of the socket itself before that
                // request is written.
                conn.io.clear_readable();
                self.home.give_back(conn);
            }
            Idle::Bytes => self.home.stray(),
            Idle::Closed => {}
        }
    }

    /// The connection of a response that made it a tunnel, with what the upstream sent after its
    /// head.
    pub(crate) fn into_tunnel(mut self) -> Option<Tunnel> {
        if !matches!(self.state, BodyState::Tunnel) {
            return None;
        }
        let conn = self.conn.take()?;
        Some(Tunnel::new(conn.buf.freeze(), conn.io))
    }

    fn fail(&mut self, error: Error) -> Error {
        self.state = BodyState::Done;
        self.conn = None;
        error
    }
}

pub(super) type Polled = Poll<Option<Result<Frame<Bytes>, Error>>>;

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else { return Poll::Ready(None) };
            match &mut this.state {
                BodyState::Done | BodyState::Tunnel => return Poll::Ready(None),
                BodyState::Length(left) if !conn.buf.is_empty() => {
                    let n = (*left).min(conn.buf.len() as u64);
                    let data = conn.buf.split_to(n as usize).freeze();
                    *left -= n;
                    if *left == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                BodyState::Chunked(decoder) if !conn.buf.is_empty() => match decoder.decode(&mut conn.buf) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::Trailers(trailers)) => {
                        this.finish();
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Ok(Decoded::End) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::More) => {}
                    Err(e) => return Poll::Ready(Some(Err(this.fail(Error::Chunk(e))))),
                },
                BodyState::UntilClose if !conn.buf.is_empty() => {
                    let data = conn.buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                _ => {}
            }
            // Nothing (usable) buffered: read more.
            let conn = this.conn.as_mut().expect("checked above");
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.state, BodyState::UntilClose) => {
                    this.state = BodyState::Done;
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return Poll::Ready(Some(Err(this.fail(Error::CutShort)))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(this.fail(Error::Io(e))))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done | BodyState::Tunnel)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            BodyState::Length(n) => SizeHint::with_exact(n),
            BodyState::Done | BodyState::Tunnel => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// The upstream's side of a tunnel: what it sent after its head first, then its socket.
pub(crate) type Tunnel = crate::server::net::upgrade::Prefixed<Io>;
