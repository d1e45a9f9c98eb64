//! The server's parsers of untrusted bytes, for the fuzz targets in `fuzz/` (feature `fuzzing`).
//! Not an API: the server is the binary's, and these names move with it.

/// What comes from the client: request heads and bodies as `serve` reads them.
pub mod client {
    pub use crate::server::net::http1::read::{Exchange, Head, read_head};
    pub use crate::server::net::request_body::RequestBody;
}

/// Framing and the chunked coding, one implementation for both directions.
pub mod wire {
    pub use crate::server::wire::{ChunkError, Chunked, Decoded, Framing};
}

/// What comes from the upstream: response heads as `serve` reads them, and the pool driven by a
/// scripted upstream (`desync::run` panics when a request is given bytes not written for it).
pub mod upstream {
    pub use crate::server::upstream::h1::head::parse_head;

    /// The pool against a scripted upstream.
    pub mod desync {
        pub use crate::server::upstream::h1::desync::run;
    }
}

/// What a request says about its caller: addresses, identity, method and path.
pub mod facts {
    pub use crate::server::facts::address::{AddressHeader, TrustedProxies};
    pub use crate::server::facts::fields::Headers;
    pub use crate::server::facts::identity::HeaderFacts;
    pub use crate::server::facts::reading::{described, served};
}

/// The gRPC decision service's reading of Envoy's messages.
pub mod grpc {
    pub use crate::server::decide::grpc::{Described, MAX_ENTRIES, MAX_HEADERS, REFUSAL_MAX, Unreadable};

    /// The caps counted in a message's wire form, before it is decoded.
    pub mod wire {
        pub use crate::server::decide::grpc::wire::{check_over_caps, rate_limit_over_caps};
    }

    /// ext_authz v3 `Check`.
    pub mod authz {
        pub use crate::server::decide::grpc::authz::{describe, refused};
    }

    /// The rate-limit service v3 `ShouldRateLimit`.
    pub mod rls {
        pub use crate::server::decide::grpc::rls::{describe, refused};
    }
}

/// What comes back from the upstream for a bound settled from the body: JSON documents and event
/// streams scanned for integers at pointers.
pub mod usage {
    pub use crate::engine::usage::json::{MAX_POINTERS, Pointers, Scan};
    pub use crate::engine::usage::sse::Events;
}
