//! HTTP/1.1 messages on the wire, read the same way in both directions: how a message's body is
//! delimited (RFC 9112 §6.3, [`framing`]), its `Content-Length` read by one function, and the
//! chunked coding decoded by one decoder ([`chunked`]). The client's connections (`net/http1`)
//! and the upstream's (`upstream/h1`) read every message with these: a rule changed here changes
//! for both, and no two readers can disagree on where a message ends.

pub(crate) mod chunked;
pub(crate) mod framing;

pub use chunked::{ChunkError, Chunked, Decoded};
pub use framing::Framing;
pub(crate) use framing::{FramingError, MAX_HEAD, MAX_HEADERS, content_length, control, has_token, items};
