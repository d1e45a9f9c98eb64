//! The engine: decides requests against a compiled policy. Pure and synchronous: time comes from
//! a [`Clock`], state lives in capped [`KeyTable`]s, and nothing here does I/O.

pub(crate) mod clock;
mod counter;
mod decide;
pub(crate) mod decision;
pub(crate) mod hash;
pub mod headers;
mod limiter;
#[cfg(test)]
mod limiter_tests;
#[cfg(test)]
pub(crate) mod model_tests;
mod plan;
pub mod problem;
pub(crate) mod quota;
pub(crate) mod rate;
#[cfg(test)]
pub(crate) mod rate_props;
pub(crate) mod reservation;
mod step;
pub(crate) mod table;
pub mod usage;

pub use clock::{Clock, ManualClock, Nanos, SystemClock};
pub use counter::{Counter, Verdict};
pub use decision::{BoundVerdict, Check, Decision, Outcome, Permits, Plan, Report};
pub use hash::KeyHasher;
pub use limiter::{CounterView, KeyError, Limiter};
pub use rate::Rate;
pub use reservation::{Finished, Reservations};
pub use step::Stage;
pub use table::{Change, KeyTable, Slot};
