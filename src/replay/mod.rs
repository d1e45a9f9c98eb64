//! Recorded traffic through a spec's bounds (`opbound replay`) and bounds proposed from it
//! (`opbound suggest`).

pub mod logs;
mod record;

pub use record::{Record, Source};
