//! The exit codes every command shares: 0 success, 1 an invalid spec (or request), 2 a file that
//! cannot be read, a usage error, or output lost; `suggest` alone adds 3.

pub(crate) const OK: u8 = 0;
pub(crate) const INVALID: u8 = 1;
pub(crate) const UNREADABLE: u8 = 2;
/// `suggest` could not make proposals that compile within the counter budget.
pub(crate) const NOT_PROPOSED: u8 = 3;
