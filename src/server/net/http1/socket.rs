//! The client's socket as the reader uses it: reads into the connection's buffer, writes that
//! take what the socket takes now or wait for it, and the watch for a client that leaves.

use std::io;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::net::TcpStream;

use super::read::READ_SIZE;

/// Reads into `buf`, waiting for bytes: how many (0 at the end of the client's side).
pub(super) async fn fill(stream: &mut TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    std::future::poll_fn(|cx| poll_fill(stream, buf, cx)).await
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
pub(super) async fn fill_now(stream: &mut TcpStream, buf: &mut BytesMut) -> io::Result<bool> {
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
pub(super) async fn client_left(stream: &mut TcpStream, buf: &mut BytesMut) {
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
pub(super) fn write_now(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<usize> {
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
