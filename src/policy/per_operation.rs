//! [`PerOperation`]: a value per operation of a policy and one for requests that matched none,
//! looked up by what `Policy::route` answers, which is how "no operation" is spelled everywhere.

use std::ops::Index;

use super::compiled::Policy;

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
