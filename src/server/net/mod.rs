//! Connections: accepting them under the caps (`admission`, `descriptors`), serving each as
//! HTTP/1.1 or HTTP/2 (`connection`, `http1`, `idle_http2`), and the request body they read.

pub(crate) mod activity;
pub(crate) mod admission;
pub(crate) mod client_io;
pub(crate) mod connection;
pub(crate) mod descriptors;
pub mod http1;
pub(crate) mod idle_http2;
pub(crate) mod listen;
pub(crate) mod request_body;
pub(crate) mod upgrade;
