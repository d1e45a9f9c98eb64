//! Quota periods (`PT1H` to `P1Y`): what a quota counts over.
//!
//! A leaf: it imports nothing else from the crate. Instants are `u64` nanoseconds since the Unix
//! epoch, as the engine counts them.

mod error;
mod iso;

pub use error::PeriodError;
pub use iso::{Period, Unit};
