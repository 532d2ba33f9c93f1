//! [`DenseSet`]: a [`DenseMap`] to `()`, with the set's API.

use std::borrow::Borrow;
use std::ops::RangeBounds;

use super::{DenseMap, IntoIter, Iter};

/// An ordered set kept in full B-tree chunks: a [`DenseMap`] to `()`.
#[derive(Clone)]
pub struct DenseSet<T> {
    map: DenseMap<T, ()>,
}

/// Iterator over a [`DenseSet`]'s values in order.
pub type SetIter<'a, T> = std::iter::Map<Iter<'a, T, ()>, fn((&'a T, &'a ())) -> &'a T>;

impl<T> Default for DenseSet<T> {
    fn default() -> Self {
        Self { map: DenseMap::default() }
    }
}

impl<T> DenseSet<T> {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iter(&self) -> SetIter<'_, T> {
        self.map.iter().map(|(k, _)| k)
    }
}

impl<T: Ord + Clone> DenseSet<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Inserts like `BTreeSet::insert`: true if the value was not there.
    pub fn insert(&mut self, value: T) -> bool {
        self.map.insert(value, ()).is_none()
    }

    pub fn remove<Q>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.remove(value).is_some()
    }

    pub fn contains<Q>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.contains_key(value)
    }

    pub fn first(&self) -> Option<&T> {
        self.map.first_key_value().map(|(k, _)| k)
    }

    pub fn last(&self) -> Option<&T> {
        self.map.last_key_value().map(|(k, _)| k)
    }

    pub fn pop_first(&mut self) -> Option<T> {
        self.map.pop_first().map(|(k, ())| k)
    }

    /// The values in `range`, in order.
    pub fn range<R: RangeBounds<T>>(&self, range: R) -> impl DoubleEndedIterator<Item = &T> {
        self.map.range(range).map(|(k, _)| k)
    }
}

impl<T: PartialEq> PartialEq for DenseSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for DenseSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<T: Ord + Clone> FromIterator<T> for DenseSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self { map: iter.into_iter().map(|value| (value, ())).collect() }
    }
}

impl<T: Clone> IntoIterator for DenseSet<T> {
    type Item = T;
    type IntoIter = std::iter::Map<IntoIter<T, ()>, fn((T, ())) -> T>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.into_iter().map(|(value, ())| value)
    }
}

impl<'a, T: Ord + Clone> IntoIterator for &'a DenseSet<T> {
    type Item = &'a T;
    type IntoIter = SetIter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
