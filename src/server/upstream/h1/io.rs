//! An upstream connection's socket: plain TCP, read through the runtime's readiness, or TLS.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;

/// What a TLS stream is to a connection: bytes both ways.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// An upstream connection's socket.
pub(crate) enum Io {
    Plain(TcpStream),
    Tls(Box<dyn Stream>),
}

impl Io {
    /// Reads what there is into `buf` (which has room); `Ok(0)` at the end.
    pub(super) fn poll_read_into(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        match self {
            Io::Plain(io) => loop {
                ready!(io.poll_read_ready(cx))?;
                match io.try_read_buf(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    done => return Poll::Ready(done),
                }
            },
            Io::Tls(io) => std::pin::pin!(tokio::io::AsyncReadExt::read_buf(io, buf)).poll(cx),
        }
    }

    /// Whether nothing arrived on an idle connection and it was not closed, as far as can be
    /// seen without waiting. For plain TCP this costs a system call only when the runtime
    /// reported the socket readable.
    pub(super) fn is_quiet(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self {
            Io::Plain(io) => match io.poll_read_ready(&mut cx) {
                Poll::Pending => true,
                Poll::Ready(Err(_)) => false,
                // Readable: closed (0), sent something unasked (a byte), or a stale report.
                Poll::Ready(Ok(())) => {
                    matches!(io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
                }
            },
            // A read that would wait: nothing came, not even a close_notify.
            Io::Tls(io) => {
                let mut byte = [0u8; 1];
                let mut read = ReadBuf::new(&mut byte);
                Pin::new(io).poll_read(&mut cx, &mut read).is_pending()
            }
        }
    }

    /// Forgets that the socket was reported readable for what was read already, so that the next
    /// look at an idle connection costs no read. An event that came since is newer and stays.
    pub(super) fn clear_readable(&self) {
        if let Io::Plain(io) = self {
            let _ = io.try_io(Interest::READABLE, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
        }
    }

    /// Writes all of `bytes` (a TLS record is flushed with them).
    pub(super) async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Io::Plain(io) => io.write_all(bytes).await,
            Io::Tls(io) => {
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
            Io::Tls(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Io::Tls(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_flush(cx),
            Io::Tls(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Io::Tls(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}
