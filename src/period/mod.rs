//! Quota periods (`PT1H` to `P1Y`) and the windows they cut time into in a named time zone: from
//! calendar boundaries ([`Calendar`]) or from each caller's first use ([`FirstUse`]).
//!
//! Next to the bottom: it imports only the `suggest` leaf (a mistyped zone's near misses).
//! Instants are `u64` nanoseconds since the Unix epoch, as the engine counts them.

mod calendar;
mod error;
mod first_use;
mod instant;
mod iso;
#[cfg(test)]
mod testing;
mod window;
mod zone;

pub use calendar::Calendar;
pub use error::PeriodError;
pub use first_use::FirstUse;
pub use iso::{Period, Unit};
pub use window::Window;
pub use zone::Zone;
