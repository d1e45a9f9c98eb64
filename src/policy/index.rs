//! [`BoundIndex`], the one name every later layer (checks, verdicts, reports, metrics, the
//! store) gives a bound: its place in `Policy::bounds`, made from a `usize` in one place.

/// A bound's place in `Policy::bounds`: what checks, verdicts, reports, metrics and the store
/// name a bound by. 32 bits keep a `Check` at 16 bytes; a policy never holds more bounds than that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BoundIndex(u32);

impl BoundIndex {
    /// The bound at `index` in `Policy::bounds`. The one place an index becomes a `BoundIndex`.
    pub fn new(index: usize) -> BoundIndex {
        // Every bound is held in memory with its id and pointer: 2^32 of them would take
        // terabytes before compiling got this far.
        BoundIndex(u32::try_from(index).expect("a policy holds fewer than 2^32 bounds"))
    }

    /// The position in `Policy::bounds`, and in anything kept parallel to it.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}
