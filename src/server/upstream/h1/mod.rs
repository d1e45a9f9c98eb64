//! HTTP/1.1 to a plain-HTTP upstream, spoken in the request's own task. For the common request
//! (no body, or a body already read whole for a key) the request head is written here, the
//! response head read with httparse (hyper's own parser), and the body streamed by reading the
//! socket where the client's connection polls it. The connection has no task; an idle one is
//! checked when it is taken (as Pingora does). Owned here rather than left to hyper's client
//! connection, which runs as a task of its own and hands each request, response and body frame
//! across channels: per request that costs more than the client side with the limiter
//! (docs/benchmarks.md has the measurements).
//!
//! Streamed request bodies, protocol switches and TLS upstreams stay with hyper (`upstream/pool.rs`).
//!
//! A connection is reused only when its response was framed beyond doubt (RFC 9112 §6.3) and
//! read to its exact end with nothing after it: a response misread on a reused connection would
//! hand one client's bytes to another.
//!
//! `head` reads a response head (its framing decided by `server::wire`, which decodes a chunked
//! body too), `write` writes a request head, `conn` is the connection and the body read from it.

mod conn;
mod head;
mod io;
mod write;

pub use crate::server::wire::{Chunked, Decoded};
pub(crate) use conn::{Body, Conn, Home, IdleList};
pub use head::{Error, Framing, Head, MAX_CHUNK_LINE, MAX_HEAD, MAX_HEADERS, parse_head};
pub(crate) use io::Io;
pub use write::write_request;
pub(crate) use write::{end_request, is_framing, write_field, write_request_line};

#[cfg(test)]
mod tests;
