//! Connections: accepting them under the caps (`admission`, `descriptors`) and spreading them
//! over the workers (`balance`), serving each as HTTP/1.1 (our own, `http1`) or HTTP/2 (hyper's,
//! `client_io`, `idle_http2`) from its first bytes (`connection`), the request body they read,
//! and the tunnel an upgrade makes (`upgrade`).

pub(crate) mod activity;
pub(crate) mod admission;
pub(crate) mod balance;
pub(crate) mod client_io;
pub(crate) mod connection;
pub(crate) mod descriptors;
pub(crate) mod http1;
pub(crate) mod idle_http2;
pub(crate) mod listen;
pub(crate) mod request_body;
pub(crate) mod upgrade;
