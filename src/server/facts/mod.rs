//! What a request says about its caller, transport-free: its address (and the proxies trusted to
//! tell another), its identity, its header fields and their names, its method and path as read.
//! `serve`, `decide` and the gRPC services judge by these alone, so they judge alike.

pub(crate) mod address;
pub(crate) mod fields;
pub(crate) mod identity;
pub(crate) mod names;
pub(crate) mod reading;
