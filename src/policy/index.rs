//! How the rest of the program names a policy's bounds and operations: a bound by its
//! [`BoundIndex`], and a table kept per operation by [`PerOperation`].

use std::ops::Index;

use super::{Bound, Policy};

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

impl Index<BoundIndex> for [Bound] {
    type Output = Bound;

    fn index(&self, bound: BoundIndex) -> &Bound {
        &self[bound.index()]
    }
}

impl Index<BoundIndex> for Vec<Bound> {
    type Output = Bound;

    fn index(&self, bound: BoundIndex) -> &Bound {
        &self[bound.index()]
    }
}

/// One value per operation of a policy, and one more for requests that matched no operation,
/// looked up by what [`Policy::route`] answers. The unmatched row is kept apart, so no caller
/// spells "no operation" as a number.
#[derive(Clone, Debug, Default)]
pub struct PerOperation<T> {
    operations: Vec<T>,
    unmatched: T,
}

impl<T> PerOperation<T> {
    /// A value for each operation of `policy`, then for `None`, from `f`, called in that order.
    pub fn new(policy: &Policy, mut f: impl FnMut(Option<usize>) -> T) -> PerOperation<T> {
        let operations = (0..policy.operations.len()).map(|op| f(Some(op))).collect();
        PerOperation { operations, unmatched: f(None) }
    }

    /// The value of an operation (none past the policy's last), or of requests that matched none.
    pub fn get(&self, operation: Option<usize>) -> Option<&T> {
        match operation {
            Some(op) => self.operations.get(op),
            None => Some(&self.unmatched),
        }
    }

    /// Every value: the operations' in order, then the unmatched requests'.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.into_iter()
    }
}

impl<T> Index<Option<usize>> for PerOperation<T> {
    type Output = T;

    fn index(&self, operation: Option<usize>) -> &T {
        match operation {
            Some(op) => &self.operations[op],
            None => &self.unmatched,
        }
    }
}

impl<'a, T> IntoIterator for &'a PerOperation<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Chain<std::slice::Iter<'a, T>, std::iter::Once<&'a T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.operations.iter().chain(std::iter::once(&self.unmatched))
    }
}
