//! HTTP/1.1 to the upstream, plain or over TLS (`io`), spoken in the request's own task. The
//! request head is written here, with a body whole beside it or followed by the body as it comes
//! (by its length, or chunked); the response head is read with httparse (hyper's own parser) and
//! the body streamed by reading the socket where the client's connection polls it. A `101` to a
//! request that asked to switch, or a CONNECT's 2xx, makes the connection a tunnel (`Tunnel`).
//! The connection has no task; an idle one is checked when it is taken (as Pingora does). Owned
//! here rather than left to hyper's client connection, which runs as a task of its own and hands
//! each request, response and body frame across channels (docs/benchmarks.md, the decision of
//! issue 49).
//!
//! A connection is reused only when its response was framed beyond doubt (RFC 9112 §6.3, decided
//! by `server::wire`) and read to its exact end with nothing after it: a response misread on a
//! reused connection would hand one client's bytes to another.
//!
//! `head` reads a response head (its framing decided by `server::wire`, which decodes a chunked
//! body too), `write` writes a request head, `conn` is the connection, its exchanges and the body
//! read from it, `io` its socket.

mod conn;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod desync;
pub(crate) mod head;
mod io;
mod write;

pub(crate) use conn::{Body, Conn, Home, IdleList, Tunnel};
pub(crate) use head::{Asked, Error, Head};
pub(crate) use io::{Idle, Io};
#[cfg(test)]
pub(crate) use write::write_request;
pub(crate) use write::{end_request, end_streamed, is_framing, write_field, write_fields, write_request_line};

#[cfg(test)]
mod stray_tests;
#[cfg(test)]
mod tests;
