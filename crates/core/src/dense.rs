//! Ordered maps and sets kept dense while their keys arrive in ascending
//! order.
//!
//! Event and delivery ids begin with their creation time, so the state's
//! maps, the per-endpoint index and an actor's queue are filled at their
//! right edge. std's B-tree splits a full node (11 entries) so that the left
//! one keeps 6, and under appends only the rightmost node ever grows again:
//! every node left behind stays 6/11 full, and a backlog's maps hold almost
//! twice the memory their entries need. Rebuilding a tree from its sorted
//! entries (`FromIterator` bulk-builds from sorted input) fills its nodes. A
//! [`Dense`] map or set rebuilds itself whenever it has grown by a
//! quarter since the last rebuild (or since it last lost half its entries),
//! so at most a fifth of its entries sit in half-empty nodes, at an
//! amortised cost of a few entry moves per insert.
//!
//! Packing changes only where entries sit in memory, never their order or
//! contents: it is invisible to `apply`, to serialization (both encode as the
//! plain collection) and to equality.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Below this many entries a collection is never rebuilt: the slack is small
/// and rebuilding often would cost more than it saves.
pub const DENSE_REBUILD_LEN_MIN: usize = 4_096;

/// When a collection of `len` entries, last rebuilt at `packed_len`, is due
/// for a rebuild: once it has grown by a quarter (and is not small).
pub fn rebuild_due(len: usize, packed_len: usize) -> bool {
    len >= DENSE_REBUILD_LEN_MIN && len >= packed_len + packed_len / 4
}

/// The length to measure growth from after a removal: a collection that
/// has lost half its entries since its last rebuild grows again from its
/// new length (a drained backlog refilling), not from its old peak.
fn shrunk_to(len: usize, packed_len: usize) -> usize {
    if len < packed_len / 2 { len } else { packed_len }
}

/// A std ordered collection that a [`Dense`] keeps dense.
pub trait Ordered: Default + IntoIterator + FromIterator<<Self as IntoIterator>::Item> {
    fn entries(&self) -> usize;
}

impl<K: Ord, V> Ordered for BTreeMap<K, V> {
    fn entries(&self) -> usize {
        self.len()
    }
}

impl<T: Ord> Ordered for BTreeSet<T> {
    fn entries(&self) -> usize {
        self.len()
    }
}

/// A `BTreeMap` or `BTreeSet` that rebuilds itself densely as it grows.
/// Reads go through `Deref`; `insert` is the one write that can trigger a
/// rebuild, and removals measure how far it shrank.
#[derive(Clone, Default)]
pub struct Dense<C> {
    inner: C,
    /// The length at the last rebuild; 0 when never rebuilt (as after decoding).
    packed_len: usize,
}

/// A dense `BTreeMap`.
pub type DenseMap<K, V> = Dense<BTreeMap<K, V>>;
/// A dense `BTreeSet`.
pub type DenseSet<T> = Dense<BTreeSet<T>>;

impl<C: Ordered> Dense<C> {
    pub fn new() -> Self {
        Self { inner: C::default(), packed_len: 0 }
    }

    /// Rebuilds the collection from its sorted entries, which fills its nodes.
    pub fn rebuild(&mut self) {
        self.inner = std::mem::take(&mut self.inner).into_iter().collect();
        self.packed_len = self.inner.entries();
    }

    pub fn clear(&mut self) {
        *self = Self::new();
    }

    fn after_insert(&mut self, added: bool) {
        if added && rebuild_due(self.inner.entries(), self.packed_len) {
            self.rebuild();
        }
    }

    fn after_remove(&mut self) {
        self.packed_len = shrunk_to(self.inner.entries(), self.packed_len);
    }
}

impl<K: Ord, V> Dense<BTreeMap<K, V>> {
    /// Inserts like `BTreeMap::insert`, then rebuilds if the map is due.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let old = self.inner.insert(key, value);
        self.after_insert(old.is_none());
        old
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let removed = self.inner.remove(key);
        self.after_remove();
        removed
    }
}

impl<T: Ord> Dense<BTreeSet<T>> {
    /// Inserts like `BTreeSet::insert`, then rebuilds if the set is due.
    pub fn insert(&mut self, value: T) -> bool {
        let added = self.inner.insert(value);
        self.after_insert(added);
        added
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        let removed = self.inner.remove(value);
        self.after_remove();
        removed
    }

    pub fn pop_first(&mut self) -> Option<T> {
        let first = self.inner.pop_first();
        self.after_remove();
        first
    }
}

impl<C> Deref for Dense<C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.inner
    }
}

/// In-place changes of a map's values; inserting through it would skip the
/// rebuild check.
impl<K, V> DerefMut for Dense<BTreeMap<K, V>> {
    fn deref_mut(&mut self) -> &mut BTreeMap<K, V> {
        &mut self.inner
    }
}

impl<C: PartialEq> PartialEq for Dense<C> {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl<C: std::fmt::Debug> std::fmt::Debug for Dense<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<C: Serialize> Serialize for Dense<C> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.inner.serialize(serializer)
    }
}

impl<'de, C: Deserialize<'de>> Deserialize<'de> for Dense<C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self { inner: C::deserialize(deserializer)?, packed_len: 0 })
    }
}

impl<C: Ordered> FromIterator<<C as IntoIterator>::Item> for Dense<C> {
    fn from_iter<I: IntoIterator<Item = <C as IntoIterator>::Item>>(iter: I) -> Self {
        let inner: C = iter.into_iter().collect();
        let packed_len = inner.entries();
        Self { inner, packed_len }
    }
}

impl<'a, C> IntoIterator for &'a Dense<C>
where
    &'a C: IntoIterator,
{
    type Item = <&'a C as IntoIterator>::Item;
    type IntoIter = <&'a C as IntoIterator>::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        self.inner.into_iter()
    }
}

impl<C: IntoIterator> IntoIterator for Dense<C> {
    type Item = C::Item;
    type IntoIter = C::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        self.inner.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_is_due_after_a_quarter_of_growth_and_never_when_small() {
        assert!(!rebuild_due(DENSE_REBUILD_LEN_MIN - 1, 0));
        assert!(rebuild_due(DENSE_REBUILD_LEN_MIN, 0));
        assert!(!rebuild_due(12_499, 10_000));
        assert!(rebuild_due(12_500, 10_000));
    }

    #[test]
    fn a_drained_set_measures_its_growth_from_its_new_length() {
        let mut dense: DenseSet<u32> = (0..10_000).collect();
        assert_eq!(dense.packed_len, 10_000);
        for n in 0..9_000 {
            assert!(dense.remove(&n));
        }
        assert!(dense.packed_len < 2 * dense.len(), "growth now counts from near its new length");
        for n in 20_000..23_500 {
            dense.insert(n);
        }
        // Rebuilt on reaching the minimum size, not only past 12,500 (its old peak and a quarter).
        assert_eq!(dense.packed_len, DENSE_REBUILD_LEN_MIN);
    }

    #[test]
    fn a_map_keeps_its_contents_and_order_across_rebuilds() {
        let mut dense = DenseMap::new();
        let mut plain = BTreeMap::new();
        // Ascending keys with some overwrites and removals, past several rebuilds.
        for n in 0u64..40_000 {
            let key = n * 3 % 50_000;
            assert_eq!(dense.insert(key, n), plain.insert(key, n));
            if n % 7 == 0 {
                assert_eq!(dense.remove(&(key / 2)), plain.remove(&(key / 2)));
            }
        }
        assert!(dense.packed_len > DENSE_REBUILD_LEN_MIN, "it rebuilt at least once");
        assert!(dense.iter().eq(plain.iter()));
        assert_eq!(dense.len(), plain.len());
    }

    #[test]
    fn a_set_keeps_its_contents_across_rebuilds_and_encodes_as_a_plain_set() {
        let mut dense = DenseSet::new();
        for n in 0u32..20_000 {
            assert!(dense.insert(n));
            assert!(!dense.insert(n), "a second insert of the same value adds nothing");
        }
        assert!(dense.remove(&5));
        assert_eq!(dense.pop_first(), Some(0));
        let plain: BTreeSet<u32> = (1..20_000).filter(|n| *n != 5).collect();
        assert!(dense.iter().eq(plain.iter()));
        let encoded = serde_json::to_string(&dense).expect("encodes");
        assert_eq!(encoded, serde_json::to_string(&plain).expect("encodes"));
        let decoded: DenseSet<u32> = serde_json::from_str(&encoded).expect("decodes");
        assert_eq!(decoded, dense);
    }

    #[test]
    fn a_map_encodes_as_a_plain_map() {
        let dense: DenseMap<u32, String> = (0..10).map(|n| (n, n.to_string())).collect();
        let plain: BTreeMap<u32, String> = (0..10).map(|n| (n, n.to_string())).collect();
        let encoded = serde_json::to_string(&dense).expect("encodes");
        assert_eq!(encoded, serde_json::to_string(&plain).expect("encodes"));
        let decoded: DenseMap<u32, String> = serde_json::from_str(&encoded).expect("decodes");
        assert_eq!(decoded, dense);
    }
}
