//! HTTP/1.1 that opbound reads and answers itself, for the usual request: a head that arrived
//! whole, with no body or a short body of a declared length that arrived with it. The head is
//! parsed in place with httparse (as hyper does), the response head is written into one buffer
//! with the start of its body and sent in one write, and a connection holds no buffer between
//! requests. Owned here rather than left to hyper's server connection because, per request,
//! hyper's dispatcher, buffered I/O and header timer cost more than the proxy's own work
//! (docs/benchmarks.md has the measurements).
//!
//! Anything else is hyper's, with every byte read so far handed over unconsumed: a head not yet
//! whole (so hyper's header timer bounds a slow one), an upgrade, `Expect`, `Transfer-Encoding`,
//! a body longer than [`MAX_WHOLE_BODY`] or not yet arrived, and every head that is malformed
//! (hyper answers those with its 400, 414 or 431). The response rules (framing, keep-alive by
//! version, `Date`) are hyper's own, ported (`write_head`).
//!
//! `read` takes a request head out of a connection's buffer, `write` writes a response head and
//! frames its body, `serve` drives a connection's exchanges.

mod read;
mod serve;
mod write;

pub use crate::server::net::request_body::RequestBody;
pub use read::{Exchange, Head, read_head};
pub(crate) use serve::{After, serve, write_all};

#[cfg(test)]
mod tests;
