//! A client connection's socket as hyper reads and writes it: the bytes read ahead (by the
//! protocol sniff, or by hyper before a park) first, and what the connection's driver and the
//! socket tell each other (`Link`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::Request;
use hyper::body::{Body, Incoming};
use hyper::rt::ReadBufCursor;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The first bytes of an HTTP/2 connection with prior knowledge (h2c).
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `ahead` (what hyper had read past its last request) then `unread` (what it had not read yet),
/// in an allocation of their own: `ahead` is a view into hyper's read buffer, which it would keep
/// whole (8 KiB or more), even when empty.
pub(crate) fn join(ahead: &[u8], unread: &[u8]) -> Bytes {
    if ahead.is_empty() && unread.is_empty() {
        return Bytes::new();
    }
    let mut joined = BytesMut::with_capacity(ahead.len() + unread.len());
    joined.extend_from_slice(ahead);
    joined.extend_from_slice(unread);
    joined.freeze()
}

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

/// What a connection's driver and its socket (inside hyper) tell each other.
#[derive(Default)]
pub(crate) struct Link {
    /// The driver is ending hyper's connection to park it: the socket must stay open.
    pub(crate) parking: AtomicBool,
    /// The last write or flush could not complete: bytes wait in hyper's buffer for the client.
    pub(crate) write_blocked: AtomicBool,
    /// hyper's connection took a request after which only hyper knows where the next one starts,
    /// or whether there is one (see [`parkable`]): it is not parked, but served by hyper to its end.
    pub(crate) unparkable: AtomicBool,
}

/// Whether a connection may be parked after `req`: not when hyper alone knows how the bytes
/// after it are to be read. hyper may give up on a request body left unread (a refusal answers
/// before reading it) by ending the connection, as it ends it when asked to park it: the rest of
/// that body, read as the next request, would be a request the client never sent. A request with
/// `Upgrade` leaves an upgrade pending that hyper settles when its connection ends, taking the
/// socket with it. A request that ends keep-alive (`Connection: close`, HTTP/1.0) is the last.
pub(crate) fn parkable(req: &Request<Incoming>) -> bool {
    use http::header::{CONNECTION, UPGRADE};
    req.version() == http::Version::HTTP_11
        && req.body().is_end_stream()
        && !req.headers().contains_key(UPGRADE)
        && !req
            .headers()
            .get_all(CONNECTION)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))))
}

/// The client's socket as hyper reads and writes it. Bytes already read (by the protocol sniff,
/// or by hyper ahead of a park) are read first.
pub(crate) struct ClientIo {
    pub(crate) unread: Bytes,
    pub(crate) stream: TokioIo<TcpStream>,
    pub(crate) link: Arc<Link>,
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

impl ClientIo {
    /// `polled`, noting whether it left bytes unsent.
    fn noted<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.link.write_blocked.store(polled.is_pending(), Ordering::Relaxed);
        polled
    }
}

impl hyper::rt::Write for ClientIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.noted(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.noted(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.noted(polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.link.parking.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}
