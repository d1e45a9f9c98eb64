//! HTTP/1.1 as opbound reads and answers it, every request of a connection, from its first byte
//! to the tunnel an upgrade makes: one reader decides where each request ends, and there is no
//! second one on the connection. A head is parsed in place with httparse (as hyper does), its
//! body's framing decided by `server::wire` (which the upstream side uses too); a short body that
//! came with its head is taken with it, any other is read from the connection as the handler
//! asks for it (`pump`), with `100 Continue` said when it is first wanted. A body the handler did
//! not read to its end is read and dropped after the response, up to a limit, or the connection
//! closes: its rest is never read as requests. A head that cannot be read is answered (400, 414,
//! 431, 501, 505) and the connection closed; one that stops coming is answered 408 after the
//! header timeout. The response head is written into one buffer with the start of its body and
//! sent in one write, by hyper's rules (framing, keep-alive by version, `Date`; `write_head`),
//! and a connection holds no buffer between requests.
//!
//! `read` takes a request head out of a connection's buffer, `pump` reads a body as it comes,
//! `write` writes a response head and frames its body, `serve` drives a connection's exchanges over the
//! `socket`.

mod pump;
pub(crate) mod read;
mod serve;
mod socket;
mod write;

pub(crate) use serve::{After, serve};
pub(crate) use socket::write_all;

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
