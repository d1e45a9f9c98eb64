//! Quota periods (`PT1H` to `P1Y`) and the windows they cut time into in a named time zone, from
//! calendar boundaries ([`Calendar`]).
//!
//! A leaf: it imports nothing else from the crate. Instants are `u64` nanoseconds since the Unix
//! epoch, as the engine counts them.

mod calendar;
mod error;
mod iso;
#[cfg(test)]
mod testing;
mod window;
mod zone;

pub use calendar::Calendar;
pub use error::PeriodError;
pub use iso::{Period, Unit};
pub use window::Window;
pub use zone::Zone;
