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
//! [`DenseMap`] or [`DenseSet`] rebuilds itself whenever it has grown by a
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

/// A `BTreeMap` that rebuilds itself densely as it grows. Reads go through
/// `Deref`; [`DenseMap::insert`] is the one write that can trigger a rebuild.
#[derive(Clone)]
pub struct DenseMap<K, V> {
    map: BTreeMap<K, V>,
    /// The length at the last rebuild; 0 when never rebuilt (as after decoding).
    packed_len: usize,
}

impl<K: Ord, V> DenseMap<K, V> {
    pub fn new() -> Self {
        Self { map: BTreeMap::new(), packed_len: 0 }
    }

    /// Inserts like `BTreeMap::insert`, then rebuilds if the map is due.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let old = self.map.insert(key, value);
        if old.is_none() && rebuild_due(self.map.len(), self.packed_len) {
            self.map = std::mem::take(&mut self.map).into_iter().collect();
            self.packed_len = self.map.len();
        }
        old
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let removed = self.map.remove(key);
        self.packed_len = shrunk_to(self.map.len(), self.packed_len);
        removed
    }
}

impl<K: Ord, V> Default for DenseMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V> Deref for DenseMap<K, V> {
    type Target = BTreeMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

/// In-place changes of values; inserting through it would skip the rebuild check.
impl<K, V> DerefMut for DenseMap<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl<K: PartialEq, V: PartialEq> PartialEq for DenseMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for DenseMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.map.fmt(f)
    }
}

impl<K: Serialize, V: Serialize> Serialize for DenseMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(serializer)
    }
}

impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> Deserialize<'de> for DenseMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self { map: BTreeMap::deserialize(deserializer)?, packed_len: 0 })
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for DenseMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<K, V> = iter.into_iter().collect();
        let packed_len = map.len();
        Self { map, packed_len }
    }
}

impl<'a, K, V> IntoIterator for &'a DenseMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::collections::btree_map::Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl<K, V> IntoIterator for DenseMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::collections::btree_map::IntoIter<K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.into_iter()
    }
}

/// A `BTreeSet` that rebuilds itself densely as it grows (see [`DenseMap`]).
#[derive(Clone)]
pub struct DenseSet<T> {
    set: BTreeSet<T>,
    packed_len: usize,
}

impl<T: Ord> DenseSet<T> {
    pub fn new() -> Self {
        Self { set: BTreeSet::new(), packed_len: 0 }
    }

    /// Inserts like `BTreeSet::insert`, then rebuilds if the set is due.
    pub fn insert(&mut self, value: T) -> bool {
        let added = self.set.insert(value);
        if added && rebuild_due(self.set.len(), self.packed_len) {
            self.set = std::mem::take(&mut self.set).into_iter().collect();
            self.packed_len = self.set.len();
        }
        added
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        let removed = self.set.remove(value);
        self.packed_len = shrunk_to(self.set.len(), self.packed_len);
        removed
    }

    pub fn pop_first(&mut self) -> Option<T> {
        let first = self.set.pop_first();
        self.packed_len = shrunk_to(self.set.len(), self.packed_len);
        first
    }

    pub fn clear(&mut self) {
        self.set.clear();
        self.packed_len = 0;
    }
}

impl<T: Ord> Default for DenseSet<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Deref for DenseSet<T> {
    type Target = BTreeSet<T>;
    fn deref(&self) -> &Self::Target {
        &self.set
    }
}

impl<T: PartialEq> PartialEq for DenseSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.set == other.set
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for DenseSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.set.fmt(f)
    }
}

impl<T: Serialize> Serialize for DenseSet<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.set.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de> + Ord> Deserialize<'de> for DenseSet<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self { set: BTreeSet::deserialize(deserializer)?, packed_len: 0 })
    }
}

impl<T: Ord> FromIterator<T> for DenseSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let set: BTreeSet<T> = iter.into_iter().collect();
        let packed_len = set.len();
        Self { set, packed_len }
    }
}

impl<'a, T> IntoIterator for &'a DenseSet<T> {
    type Item = &'a T;
    type IntoIter = std::collections::btree_set::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.set.iter()
    }
}

impl<T> IntoIterator for DenseSet<T> {
    type Item = T;
    type IntoIter = std::collections::btree_set::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.set.into_iter()
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
