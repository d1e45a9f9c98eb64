//! A client connection's first bytes read to tell HTTP/2 from HTTP/1.1 (`sniff`), and an HTTP/2
//! connection's socket as hyper reads and writes it, those bytes first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::rt::ReadBufCursor;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The first bytes of an HTTP/2 connection with prior knowledge (h2c).
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads a connection's first bytes, as far as they can tell HTTP/2 with prior knowledge from
/// HTTP/1.1: whether it is HTTP/2, and the bytes read. A connection closed before sending a
/// byte is an error.
pub(crate) async fn sniff(stream: &TcpStream) -> io::Result<(bool, Bytes)> {
    let mut first = [0u8; H2_PREFACE.len()];
    let mut len = 0;
    loop {
        let n = read_some(stream, &mut first[len..]).await?;
        if n == 0 {
            return if len == 0 {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before sending a byte"))
            } else {
                Ok((false, Bytes::copy_from_slice(&first[..len])))
            };
        }
        len += n;
        if first[..len] != H2_PREFACE[..len] {
            return Ok((false, Bytes::copy_from_slice(&first[..len])));
        }
        if len == H2_PREFACE.len() {
            return Ok((true, Bytes::copy_from_slice(&first)));
        }
    }
}

/// One read from a shared reference to the stream.
pub(crate) async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The client's socket as hyper reads and writes it. Bytes already read by the protocol sniff
/// are read first.
pub(crate) struct ClientIo {
    pub(crate) unread: Bytes,
    pub(crate) stream: TokioIo<TcpStream>,
}

impl hyper::rt::Read for ClientIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, mut buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.unread.is_empty() {
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread[..n]);
            this.unread.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for ClientIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
