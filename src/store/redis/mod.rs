//! Counters in Redis, so a bound means the same on every instance. One script call per request
//! (per hash slot on a cluster) checks every bound and commits only if all admit.

mod conn;
mod connect;
mod decide;
#[cfg(test)]
mod exact_tests;
mod lease;
mod lua;
mod micros;
mod node;
mod quota;
mod refresh;
mod reserve;
mod script;
mod store;
mod target;
mod topology;

pub use store::RedisStore;
pub use target::{RedisSettings, Target, TargetError, slot};
