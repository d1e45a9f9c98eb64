//! An upstream connection's socket: plain TCP, read through the runtime's readiness, or any other
//! stream of bytes (TLS; a scripted peer in tests).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;

/// What a TLS stream (or a scripted peer) is to a connection: bytes both ways.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// An upstream connection's socket.
pub(crate) enum Io {
    Plain(TcpStream),
    /// TLS, or in tests a scripted upstream: read through its own `AsyncRead`.
    Stream(Box<dyn Stream>),
}

/// What a look at an idle connection found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idle {
    /// Nothing: it can carry a request.
    Empty,
    /// The upstream closed it (or it failed): an idle connection's usual end.
    Closed,
    /// Bytes nobody asked for.
    Bytes,
}

/// What one read found: how many bytes, and whether the socket had no more than that (it may
/// have more only when the read filled all the room it was given).
pub(super) struct Filled {
    pub n: usize,
    pub drained: bool,
}

impl Io {
    /// Reads what there is into `buf` (which has room); `n == 0` at the end.
    pub(super) fn poll_read_into(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<Filled>> {
        match self {
            Io::Plain(io) => loop {
                ready!(io.poll_read_ready(cx))?;
                let room = buf.capacity() - buf.len();
                match io.try_read_buf(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    // TCP hands over less than asked only when it has no more (tokio's own rule
                    // for clearing readiness).
                    done => return Poll::Ready(done.map(|n| Filled { n, drained: n < room })),
                }
            },
            Io::Stream(io) => std::pin::pin!(tokio::io::AsyncReadExt::read_buf(io, buf))
                .poll(cx)
                .map_ok(|n| Filled { n, drained: false }),
        }
    }

    /// What has arrived on the connection, found by reading it without waiting. For plain TCP
    /// this asks the socket itself, not the runtime's record of its readiness: bytes already
    /// there when the record was last cleared raise no new event.
    pub(super) fn look(&mut self) -> Idle {
        match self {
            Io::Plain(io) => {
                let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
                // The socket does not block; a peek leaves what is there (it is closed anyway).
                match socket2::SockRef::from(&*io).peek(&mut byte) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Idle::Empty,
                    Ok(n) if n > 0 => Idle::Bytes,
                    _ => Idle::Closed,
                }
            }
            // A read that would wait: nothing came, not even a close_notify.
            Io::Stream(io) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                let mut byte = [0u8; 1];
                let mut read = ReadBuf::new(&mut byte);
                match Pin::new(io).poll_read(&mut cx, &mut read) {
                    Poll::Pending => Idle::Empty,
                    Poll::Ready(Ok(())) if !read.filled().is_empty() => Idle::Bytes,
                    Poll::Ready(_) => Idle::Closed,
                }
            }
        }
    }

    /// Forgets that the socket was reported readable, once a read has said nothing more is there,
    /// so that the next read after the next request is written waits for its answer instead of
    /// first finding nothing. Only a hint: [`Io::look`] asks the socket itself.
    pub(super) fn clear_readable(&self) {
        if let Io::Plain(io) = self {
            let _ = io.try_io(Interest::READABLE, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
        }
    }

    /// Writes all of `bytes` (a TLS record is flushed with them).
    pub(super) async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Io::Plain(io) => io.write_all(bytes).await,
            Io::Stream(io) => {
                io.write_all(bytes).await?;
                io.flush().await
            }
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Io::Stream(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Io::Stream(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_flush(cx),
            Io::Stream(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Io::Stream(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}
