//! opbound: a rate limiter that reads an API's OpenAPI document and runs beside that API.
//!
//! The path of a spec: [`spec`] reads the file into a tolerant model, [`policy`] validates the
//! `x-rate-limit` bounds and compiles them with a [`router`] into a [`policy::Policy`].

#![warn(missing_docs, unreachable_pub)]

pub mod choice;
mod cli;
pub mod engine;
pub mod finding;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod latency;
mod numbers;
pub mod period;
pub mod policy;
pub mod publish;
pub mod replay;
pub mod request;
pub mod router;
mod server;
pub mod spec;
pub mod store;
mod suggest;
mod throttle;
mod trust;

pub use cli::run;
pub use finding::{Finding, Severity};
pub use policy::{LoadError, Loaded, Options, Policy, load};
