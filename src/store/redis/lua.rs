//! The Lua scripts the store runs, as their files hold them. `charge.lua` is what deciding,
//! settling and undoing share, so each is sent with it in front.

/// Checks every bound of a decision's hash slot and commits only if all admit.
pub(super) const DECIDE: &str = concat!(include_str!("charge.lua"), include_str!("decide.lua"));
/// Takes back what some slots committed for a request another slot refused.
pub(super) const UNDO: &str = concat!(include_str!("charge.lua"), include_str!("undo.lua"));
/// An operator's change to a quota caller's consumption (`/quota`).
pub(super) const ADJUST: &str = include_str!("adjust.lua");
/// Settles a charge that waited for its response (`count-when`, `settle`).
pub(super) const SETTLE: &str = concat!(include_str!("charge.lua"), include_str!("settle.lua"));
/// Renews the concurrency leases of a request in flight.
pub(super) const RENEW: &str = include_str!("renew.lua");

/// What the scripts share, alone, for the tests that call its functions directly.
#[cfg(test)]
pub(super) const CHARGE: &str = include_str!("charge.lua");
