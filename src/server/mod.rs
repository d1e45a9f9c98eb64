//! The network side: the reverse proxy (`serve`), the decision service (`decide`), the admin
//! listener and the demo. Adapters around the engine: they turn HTTP into facts and decisions
//! into responses.
//!
//! Its layers, lowest first; a module imports only from its own layer or lower ones (held by
//! `tests/layering.rs`):
//!
//! 1. `buffers`, `facts`: reused buffers; what a request says about its caller (address,
//!    identity, header fields and names, method and path), transport-free.
//! 2. `observe`: the request and refusal logs and the metrics; `net`: accepting connections,
//!    admission, the HTTP/1.1 and HTTP/2 connections and the request body they read.
//! 3. `upstream`: the upstream's settings, its connection pool, the HTTP/1.1 it speaks, the
//!    bodies sent to it and read from it.
//! 4. `body`: the response body every handler sends; `judge`: the policy served, a request
//!    judged, and the responses that say so.
//! 5. `proxy` (`serve`), `decide` (the decision service, HTTP and gRPC).
//! 6. `admin` (the admin listener, metrics page, console, counters, quotas), `demo`.
//! 7. `reload`, `spec_file`, `durable_state`: the served policy's life.

// Only what `crate::fuzzing` re-exports for the fuzz targets is `pub` here, everything else
// `pub(crate)`; `cargo clippy --features fuzzing` (in CI) holds that, as the re-exports make
// those items reachable only with the feature.
#![cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]

pub(crate) mod admin;
pub(crate) mod body;
pub(crate) mod buffers;
pub(crate) mod decide;
pub(crate) mod demo;
pub(crate) mod durable_state;
pub(crate) mod facts;
pub(crate) mod judge;
pub(crate) mod net;
pub(crate) mod observe;
pub(crate) mod proxy;
pub(crate) mod reload;
pub(crate) mod spec_file;
pub(crate) mod upstream;
pub(crate) mod wire;

pub(crate) use judge::*;
