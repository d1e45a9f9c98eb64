//! The compiled policy: every operation, every bound, and the router the hot path runs on.

pub(crate) mod bound;
mod compile;
mod compiled;
pub(crate) mod counting;
pub(crate) mod coverage;
pub(crate) mod diff;
pub(crate) mod identity;
mod index;
mod load;
mod options;
pub(crate) mod parse;
mod per_operation;
pub mod report;
pub(crate) mod source;
pub(crate) mod window;

pub use bound::{Algorithm, AppliesTo, BoundDef, Missing, Mode, OnStoreError, Per, Periods};
pub use compile::compile;
pub use compiled::{Bound, Credential, Operation, Policy, Scope};
pub use counting::{Counting, Settle, StatusSet, Term};
pub use identity::{IdentitySources, Unfed};
pub use index::BoundIndex;
pub use load::{LoadError, Loaded, inputs, load, load_source};
pub use options::{DEFAULT_MAX_COUNTERS, DEFAULT_MAX_OPERATIONS, Options};
pub use per_operation::PerOperation;
pub use source::{CostFrom, JsonPointer, PointerError, RequestCost};
pub use window::{Window, WindowError};

/// The JSON Schema (draft-07) of `x-rate-limit` and `x-rate-limit-policies` that `opbound schema`
/// prints, for editors and linters; kept as a file so it is reviewed as written.
pub const SCHEMA: &str = include_str!("x-rate-limit.schema.json");
