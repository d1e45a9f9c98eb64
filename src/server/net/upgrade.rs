//! A client connection handed over to a tunnel once its request switched protocols: by
//! opbound's own HTTP/1.1 server, which writes the `101` and gives up the socket with what the
//! client sent after its request, or by hyper, for an HTTP/2 extended CONNECT.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A socket with bytes read from it ahead, which are read first: a client's after its `101` (what
/// it sent after its request), an upstream's after its `101` (what it sent after its head).
#[derive(Debug)]
pub(crate) struct Prefixed<S> {
    read: Bytes,
    stream: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(read: Bytes, stream: S) -> Prefixed<S> {
        Prefixed { read, stream }
    }
}

/// A client's socket after its `101`.
pub(crate) type Upgraded = Prefixed<TcpStream>;

/// Where the connection sends its socket when its request's response switched protocols; the
/// request carries the other end ([`Pending`]).
pub(crate) type Handover = oneshot::Sender<Upgraded>;

/// The other end of a [`Handover`], in the request's extensions (which must be `Clone`: the
/// receiver is taken out once).
#[derive(Clone)]
pub(crate) struct Pending(Arc<Mutex<Option<oneshot::Receiver<Upgraded>>>>);

/// A handover and the end the request carries.
pub(crate) fn pending() -> (Handover, Pending) {
    let (tx, rx) = oneshot::channel();
    (tx, Pending(Arc::new(Mutex::new(Some(rx)))))
}

/// Hands `stream` over, `read` (the bytes after the request) to be read first.
pub(crate) fn hand_over(handover: Handover, stream: TcpStream, read: Bytes) {
    let _ = handover.send(Prefixed::new(read, stream));
}

/// A client connection that will be a tunnel once its response switched protocols.
pub(crate) enum OnUpgrade {
    Own(oneshot::Receiver<Upgraded>),
    Hyper(hyper::upgrade::OnUpgrade),
}

/// The client's side of a tunnel.
pub(crate) type Tunnel = Box<dyn Io>;

/// What a tunnel's end is: bytes both ways.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// The connection of `req` once it switched protocols: taken out of the request.
pub(crate) fn on<B>(req: &mut http::Request<B>) -> OnUpgrade {
    if let Some(Pending(rx)) = req.extensions_mut().remove::<Pending>()
        && let Some(rx) = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    {
        return OnUpgrade::Own(rx);
    }
    OnUpgrade::Hyper(hyper::upgrade::on(req))
}

/// Why a client's connection did not become a tunnel.
#[derive(Debug)]
pub(crate) enum UpgradeFailed {
    /// The connection ended before its switching response was written.
    Ended,
    /// hyper's HTTP/2 stream did not switch.
    Hyper(hyper::Error),
}

impl std::fmt::Display for UpgradeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpgradeFailed::Ended => f.write_str("the client's connection ended before it switched protocols"),
            UpgradeFailed::Hyper(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for UpgradeFailed {}

impl OnUpgrade {
    /// The client's connection, once the switching response was written.
    pub(crate) async fn upgraded(self) -> Result<Tunnel, UpgradeFailed> {
        match self {
            OnUpgrade::Own(rx) => match rx.await {
                Ok(upgraded) => Ok(Box::new(upgraded)),
                Err(_) => Err(UpgradeFailed::Ended),
            },
            OnUpgrade::Hyper(on) => match on.await {
                Ok(upgraded) => Ok(Box::new(TokioIo::new(upgraded))),
                Err(e) => Err(UpgradeFailed::Hyper(e)),
            },
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read[..n]);
            this.read.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
