//! The compiled policy: every operation, every bound, and the router the hot path runs on.

pub mod bound;
mod compile;
mod compiled;
pub mod counting;
pub mod coverage;
pub mod diff;
pub mod identity;
mod index;
mod load;
mod options;
pub mod parse;
mod per_operation;
pub mod report;
pub mod source;
pub mod window;

pub use bound::{Algorithm, AppliesTo, BoundDef, Missing, Mode, OnStoreError, Per};
pub use compile::compile;
pub use compiled::{Bound, Credential, Operation, Policy, Scope};
pub use counting::{Counting, Settle, StatusSet};
pub use identity::{IdentitySources, Unfed};
pub use index::BoundIndex;
pub use load::{LoadError, Loaded, load, load_source};
pub use options::{DEFAULT_MAX_COUNTERS, Options};
pub use per_operation::PerOperation;
pub use source::{CostFrom, JsonPointer, PointerError, RequestCost};
pub use window::Window;

/// The JSON Schema (draft-07) of `x-rate-limit` and `x-rate-limit-policies` that `opbound schema`
/// prints, for editors and linters; kept as a file so it is reviewed as written.
pub const SCHEMA: &str = include_str!("x-rate-limit.schema.json");
