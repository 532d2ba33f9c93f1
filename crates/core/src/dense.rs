//! Ordered maps and sets kept dense while their keys arrive in ascending
//! order, and that never rebuild more than a small piece of themselves at
//! once.
//!
//! Event and delivery ids begin with their creation time, so the state's
//! maps, the per-endpoint index and an actor's queue are filled at their
//! right edge. std's B-tree splits a full node (11 entries) so that the left
//! one keeps 6, and under appends only the rightmost node ever grows again:
//! every node left behind stays 6/11 full, and a backlog's maps would hold
//! almost twice the memory their entries need. Building a tree from sorted
//! entries (`FromIterator` bulk-builds from sorted input) fills its nodes.
//!
//! A [`DenseMap`] is a sequence of std `BTreeMap` chunks over consecutive
//! key ranges, indexed by each chunk's lower bound. A chunk that reaches
//! [`CHUNK_SPLIT_LEN`] entries is rebuilt as two full halves, and one that
//! falls below [`CHUNK_MERGE_LEN`] is rebuilt together with its left
//! neighbour. So only the chunk being appended to has half-empty nodes, and
//! the largest rebuild moves [`CHUNK_SPLIT_LEN`] entries, whatever the
//! size of the map. (An earlier version rebuilt the whole map each time it
//! grew by a quarter: at a million entries one insert held the state's
//! write lock for about 110 ms, and at 30,000 events/s the rebuilds of
//! 50,000 to 200,000 entries were most of the node's ingest p99; see
//! docs/DESIGN-NOTES.md, note 35.)
//!
//! Chunks are shared (`Arc`) and copied on write, so a clone of a map
//! costs one pointer per chunk, and a change after a clone copies only the
//! chunk it lands in: a snapshot of the state is a clone taken in a moment
//! and encoded while applies go on (note 36).
//!
//! Chunking changes only where entries sit in memory, never their order or
//! contents: it is invisible to `apply`, to serialization (both encode as the
//! plain collection) and to equality.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A chunk that reaches this many entries is rebuilt as two full halves.
/// A rebuild of this size takes well under a millisecond.
pub const CHUNK_SPLIT_LEN: usize = 8_192;
/// A chunk that falls below this many entries is rebuilt together with its
/// left neighbour, when the two fit in one chunk.
pub const CHUNK_MERGE_LEN: usize = CHUNK_SPLIT_LEN / 8;

/// An ordered map kept in full B-tree chunks; see the module's doc.
///
/// Invariants: no chunk is empty; the chunk indexed under `k` holds only
/// keys from `k` (inclusive) up to the next chunk's index key (exclusive);
/// `len` is the sum of the chunks' lengths.
#[derive(Clone)]
pub struct DenseMap<K, V> {
    chunks: BTreeMap<K, Arc<Chunk<K, V>>>,
    len: usize,
}

/// An ordered set kept in full B-tree chunks: a [`DenseMap`] to `()`.
#[derive(Clone)]
pub struct DenseSet<T> {
    map: DenseMap<T, ()>,
}

type Chunk<K, V> = BTreeMap<K, V>;

/// Iterator over a [`DenseMap`]'s entries in key order.
pub type Iter<'a, K, V> =
    std::iter::FlatMap<btree_map::Values<'a, K, Arc<Chunk<K, V>>>, btree_map::Iter<'a, K, V>, ChunkIter<'a, K, V>>;
type ChunkIter<'a, K, V> = fn(&'a Arc<Chunk<K, V>>) -> btree_map::Iter<'a, K, V>;
/// Owning iterator over a [`DenseMap`]'s entries in key order.
pub type IntoIter<K, V> =
    std::iter::FlatMap<btree_map::IntoValues<K, Arc<Chunk<K, V>>>, btree_map::IntoIter<K, V>, ChunkIntoIter<K, V>>;
type ChunkIntoIter<K, V> = fn(Arc<Chunk<K, V>>) -> btree_map::IntoIter<K, V>;

fn chunk_iter<K, V>(chunk: &Arc<Chunk<K, V>>) -> btree_map::Iter<'_, K, V> {
    chunk.iter()
}

/// The chunk's entries, moved out if no clone of the map shares it, copied otherwise.
fn chunk_into_iter<K: Clone, V: Clone>(chunk: Arc<Chunk<K, V>>) -> btree_map::IntoIter<K, V> {
    Arc::unwrap_or_clone(chunk).into_iter()
}
/// Iterator over a [`DenseSet`]'s values in order.
pub type SetIter<'a, T> = std::iter::Map<Iter<'a, T, ()>, fn((&'a T, &'a ())) -> &'a T>;

impl<K, V> Default for DenseMap<K, V> {
    fn default() -> Self {
        Self { chunks: BTreeMap::new(), len: 0 }
    }
}

impl<T> Default for DenseSet<T> {
    fn default() -> Self {
        Self { map: DenseMap::default() }
    }
}

impl<K: Ord + Clone, V: Clone> DenseMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The index key of the chunk that holds (or would hold) `key`: the
    /// greatest index key not above it, if any.
    fn chunk_key_of<Q>(&self, key: &Q) -> Option<&K>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunks.range::<Q, _>((Bound::Unbounded, Bound::Included(key))).next_back().map(|(k, _)| k)
    }

    fn chunk_of<Q>(&self, key: &Q) -> Option<&Chunk<K, V>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunks.range::<Q, _>((Bound::Unbounded, Bound::Included(key))).next_back().map(|(_, c)| &**c)
    }

    /// The chunk that holds `key`, copied first if a clone shares it.
    fn chunk_of_mut<Q>(&mut self, key: &Q) -> Option<&mut Chunk<K, V>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunks
            .range_mut::<Q, _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(_, c)| Arc::make_mut(c))
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunk_of(key)?.get(key)
    }

    /// Changes a value in place (never a key, so the chunks stay as they
    /// are). The chunk is copied first if a clone shares it, even when the
    /// key is not there: look it up with `get` first where that is common.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunk_of_mut(key)?.get_mut(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Inserts like `BTreeMap::insert`; a chunk that reaches
    /// [`CHUNK_SPLIT_LEN`] is rebuilt as two full halves.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let chunk_key = match self.chunk_key_of(&key) {
            Some(chunk_key) => chunk_key.clone(),
            None => {
                // Below every chunk (or the map is empty): the first chunk
                // takes it and is indexed under it from now on.
                let mut first = self.chunks.pop_first().map(|(_, chunk)| chunk).unwrap_or_default();
                Arc::make_mut(&mut first).insert(key.clone(), value);
                let full = first.len() >= CHUNK_SPLIT_LEN;
                self.chunks.insert(key.clone(), first);
                self.len += 1;
                if full {
                    self.split(key);
                }
                return None;
            }
        };
        let chunk = Arc::make_mut(self.chunks.get_mut(&chunk_key).expect("the chunk just found"));
        let old = chunk.insert(key, value);
        if old.is_none() {
            self.len += 1;
            if chunk.len() >= CHUNK_SPLIT_LEN {
                self.split(chunk_key);
            }
        }
        old
    }

    /// Rebuilds the chunk indexed under `chunk_key` as two full halves.
    fn split(&mut self, chunk_key: K) {
        let chunk = self.chunks.remove(&chunk_key).expect("the chunk to split");
        let mut left: Vec<(K, V)> = chunk_into_iter(chunk).collect();
        let right = left.split_off(left.len() / 2);
        let right_key = right[0].0.clone();
        self.chunks.insert(chunk_key, Arc::new(left.into_iter().collect()));
        self.chunks.insert(right_key, Arc::new(right.into_iter().collect()));
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let chunk_key = self.chunk_key_of(key)?.clone();
        let chunk = self.chunks.get_mut::<K>(&chunk_key).expect("the chunk just found");
        // Not copied for a key that is not there.
        if !chunk.contains_key(key) {
            return None;
        }
        let removed = Arc::make_mut(chunk).remove(key)?;
        self.len -= 1;
        self.after_remove(chunk_key);
        Some(removed)
    }

    /// Removes and returns the first entry.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let mut first = self.chunks.first_entry()?;
        let popped = Arc::make_mut(first.get_mut()).pop_first().expect("no chunk is empty");
        let chunk_key = first.key().clone();
        self.len -= 1;
        self.after_remove(chunk_key);
        Some(popped)
    }

    /// Drops the chunk under `chunk_key` if it is now empty, or rebuilds it
    /// together with its left neighbour if it is small and they fit in one.
    fn after_remove(&mut self, chunk_key: K) {
        let len = self.chunks.get(&chunk_key).map_or(0, |chunk| chunk.len());
        if len == 0 {
            // Its key range joins the chunk before it, which holds no key
            // of it; if it was the first, every key left is above it.
            self.chunks.remove(&chunk_key);
            return;
        }
        if len >= CHUNK_MERGE_LEN {
            return;
        }
        let Some((left_key, left_len)) = self
            .chunks
            .range::<K, _>((Bound::Unbounded, Bound::Excluded(&chunk_key)))
            .next_back()
            .map(|(k, c)| (k.clone(), c.len()))
        else {
            return;
        };
        if left_len + len >= CHUNK_SPLIT_LEN {
            return;
        }
        let left = self.chunks.remove(&left_key).expect("the left neighbour");
        let right = self.chunks.remove(&chunk_key).expect("the small chunk");
        self.chunks.insert(left_key, Arc::new(chunk_into_iter(left).chain(chunk_into_iter(right)).collect()));
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.chunks.values().next()?.first_key_value()
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.chunks.values().next_back()?.last_key_value()
    }

    pub fn iter(&self) -> Iter<'_, K, V> {
        self.chunks.values().flat_map(chunk_iter as ChunkIter<'_, K, V>)
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + Clone {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + Clone {
        self.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> {
        self.chunks.values_mut().flat_map(|chunk| Arc::make_mut(chunk).values_mut())
    }

    /// The entries whose keys fall in `range`, in order. Panics where
    /// `BTreeMap::range` does (a start above the end).
    pub fn range<R: RangeBounds<K>>(&self, range: R) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        let start = range.start_bound().cloned();
        let end = range.end_bound().cloned();
        let first_chunk = match &start {
            Bound::Included(key) | Bound::Excluded(key) => self.chunk_key_of(key).cloned(),
            Bound::Unbounded => None,
        };
        // Chunks from the one holding the start up to the last whose index
        // key is not above the end; each filters its own entries.
        let to = match &end {
            Bound::Included(key) | Bound::Excluded(key) => Bound::Included(key),
            Bound::Unbounded => Bound::Unbounded,
        };
        let from = first_chunk.as_ref().map_or(Bound::Unbounded, Bound::Included);
        let chunks = self.chunks.range::<K, _>((from, to));
        chunks.flat_map(move |(_, chunk)| chunk.range((start.clone(), end.clone())))
    }
}

impl<T: Ord + Clone> DenseSet<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
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

    pub fn iter(&self) -> SetIter<'_, T> {
        self.map.iter().map(|(k, _)| k)
    }

    /// The values in `range`, in order.
    pub fn range<R: RangeBounds<T>>(&self, range: R) -> impl DoubleEndedIterator<Item = &T> {
        self.map.range(range).map(|(k, _)| k)
    }
}

/// `map[&key]`, as on a `BTreeMap`: panics if the key is not there.
impl<K: Ord + Clone + Borrow<Q>, Q: Ord + ?Sized, V: Clone> std::ops::Index<&Q> for DenseMap<K, V> {
    type Output = V;
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: PartialEq, V: PartialEq> PartialEq for DenseMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self.chunks.values().flat_map(|c| c.iter()).eq(other.chunks.values().flat_map(|c| c.iter()))
    }
}

impl<T: PartialEq> PartialEq for DenseSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for DenseMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.chunks.values().flat_map(|c| c.iter())).finish()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for DenseSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.map.chunks.values().flat_map(|c| c.keys())).finish()
    }
}

/// Encodes as the plain `BTreeMap` would: its length, then its entries in order.
impl<K: Serialize, V: Serialize> Serialize for DenseMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (key, value) in self.chunks.values().flat_map(|c| c.iter()) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Encodes as the plain `BTreeSet` would.
impl<T: Serialize> Serialize for DenseSet<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.map.len))?;
        for value in self.map.chunks.values().flat_map(|c| c.keys()) {
            seq.serialize_element(value)?;
        }
        seq.end()
    }
}

/// Decodes what a plain `BTreeMap` encodes, entry by entry into the chunks
/// (a later duplicate key overwrites, as in the plain map).
impl<'de, K: Deserialize<'de> + Ord + Clone, V: Deserialize<'de> + Clone> Deserialize<'de> for DenseMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<K, V>(std::marker::PhantomData<(K, V)>);
        impl<'de, K: Deserialize<'de> + Ord + Clone, V: Deserialize<'de> + Clone> Visitor<'de> for MapVisitor<K, V> {
            type Value = DenseMap<K, V>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = DenseMap::new();
                while let Some((key, value)) = access.next_entry()? {
                    map.insert(key, value);
                }
                Ok(map)
            }
        }
        deserializer.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

/// Decodes what a plain `BTreeSet` encodes.
impl<'de, T: Deserialize<'de> + Ord + Clone> Deserialize<'de> for DenseSet<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SetVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Ord + Clone> Visitor<'de> for SetVisitor<T> {
            type Value = DenseSet<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut set = DenseSet::new();
                while let Some(value) = access.next_element()? {
                    set.insert(value);
                }
                Ok(set)
            }
        }
        deserializer.deserialize_seq(SetVisitor(std::marker::PhantomData))
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for DenseMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = Self::new();
        for (key, value) in iter {
            map.insert(key, value);
        }
        map
    }
}

impl<T: Ord + Clone> FromIterator<T> for DenseSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self { map: iter.into_iter().map(|value| (value, ())).collect() }
    }
}

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a DenseMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Clone, V: Clone> IntoIterator for DenseMap<K, V> {
    type Item = (K, V);
    type IntoIter = IntoIter<K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.chunks.into_values().flat_map(chunk_into_iter as ChunkIntoIter<K, V>)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Checks every invariant of the chunks and returns their lengths.
    fn chunk_lens<K: Ord + Clone + std::fmt::Debug, V: Clone>(map: &DenseMap<K, V>) -> Vec<usize> {
        let keys: Vec<&K> = map.chunks.keys().collect();
        for (at, (chunk_key, chunk)) in map.chunks.iter().enumerate() {
            assert!(!chunk.is_empty(), "chunk {at} is empty");
            assert!(chunk.keys().next().expect("not empty") >= chunk_key, "chunk {at} holds a key below its own");
            if let Some(next) = keys.get(at + 1) {
                assert!(chunk.keys().next_back().expect("not empty") < *next, "chunk {at} holds a key of the next");
            }
        }
        let lens: Vec<usize> = map.chunks.values().map(|chunk| chunk.len()).collect();
        assert_eq!(lens.iter().sum::<usize>(), map.len(), "len is the sum of the chunks");
        lens
    }

    #[test]
    fn ascending_inserts_leave_full_halves_behind_and_no_chunk_at_the_split_size() {
        let map: DenseMap<u64, u64> = (0..100_000).map(|n| (n, n)).collect();
        let lens = chunk_lens(&map);
        assert!(lens.len() > 10, "{lens:?}");
        let (last, before) = lens.split_last().expect("chunks");
        assert!(before.iter().all(|&len| len == CHUNK_SPLIT_LEN / 2), "{lens:?}");
        assert!(*last < CHUNK_SPLIT_LEN);
        assert!(map.iter().map(|(k, _)| *k).eq(0..100_000));
        assert_eq!(map.get(&77_777), Some(&77_777));
        assert_eq!(map.get(&100_000), None);
    }

    #[test]
    fn a_map_behaves_like_a_btreemap_under_inserts_removals_and_pops() {
        use rand::{RngExt, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(7);
        let mut dense = DenseMap::new();
        let mut plain = BTreeMap::new();
        for step in 0u64..120_000 {
            // Mostly ascending keys (ids begin with their time), some
            // anywhere, some below everything; removals everywhere.
            let key = match rng.random_range(0..10) {
                0..=5 => 1_000_000 + step * 2,
                6 => rng.random_range(0..1_300_000),
                7 => rng.random_range(0..1_000),
                _ => {
                    let key = rng.random_range(1_000_000..1_000_000 + step * 2 + 1);
                    assert_eq!(dense.remove(&key), plain.remove(&key), "remove {key}");
                    continue;
                }
            };
            assert_eq!(dense.insert(key, step), plain.insert(key, step), "insert {key}");
            if step % 5 == 0 {
                assert_eq!(dense.pop_first(), plain.pop_first());
            }
            if step % 20_000 == 0 {
                chunk_lens(&dense);
            }
        }
        chunk_lens(&dense);
        assert_eq!(dense.len(), plain.len());
        assert!(dense.iter().eq(plain.iter()));
        assert!(dense.iter().rev().eq(plain.iter().rev()));
        assert_eq!(dense.first_key_value(), plain.first_key_value());
        assert_eq!(dense.last_key_value(), plain.last_key_value());
        for _ in 0..500 {
            let key = rng.random_range(0..1_300_000);
            assert_eq!(dense.get(&key), plain.get(&key));
            assert_eq!(dense.contains_key(&key), plain.contains_key(&key));
        }
        // Ranges of every kind of bound, starting anywhere (below the first
        // chunk too) and across chunk boundaries.
        for _ in 0..300 {
            let a = rng.random_range(0..1_300_000);
            let b = a + rng.random_range(0..40_000);
            assert!(dense.range(a..b).eq(plain.range(a..b)), "{a}..{b}");
            assert!(dense.range(a..=b).eq(plain.range(a..=b)));
            assert!(
                dense
                    .range((Bound::Excluded(a), Bound::Unbounded))
                    .eq(plain.range((Bound::Excluded(a), Bound::Unbounded)))
            );
            assert!(dense.range(..b).rev().eq(plain.range(..b).rev()));
        }
        for value in dense.values_mut() {
            *value += 1;
        }
        assert!(dense.values().copied().eq(plain.values().map(|v| v + 1)));
        let owned: Vec<(u64, u64)> = dense.clone().into_iter().collect();
        assert_eq!(owned.len(), plain.len());
    }

    #[test]
    fn draining_merges_small_chunks_and_drops_empty_ones() {
        let mut map: DenseMap<u64, ()> = (0..80_000).map(|n| (n, ())).collect();
        let chunks_full = chunk_lens(&map).len();
        // Remove all but one in sixteen: every chunk falls below the merge size.
        for n in (0..80_000).filter(|n| n % 16 != 0) {
            map.remove(&n);
        }
        let lens = chunk_lens(&map);
        assert_eq!(map.len(), 5_000);
        assert!(lens.len() < chunks_full / 2, "{chunks_full} chunks became {lens:?}");
        while map.pop_first().is_some() {}
        assert!(map.is_empty() && map.chunks.is_empty());
        map.insert(3, ());
        assert_eq!(chunk_lens(&map), vec![1]);
    }

    #[test]
    fn a_clone_shares_its_chunks_and_a_change_copies_only_the_chunk_it_lands_in() {
        let mut map: DenseMap<u64, u64> = (0..50_000).map(|n| (n, n)).collect();
        let snapshot = map.clone();
        let shared = |map: &DenseMap<u64, u64>, snapshot: &DenseMap<u64, u64>| {
            map.chunks.values().zip(snapshot.chunks.values()).filter(|(a, b)| Arc::ptr_eq(a, b)).count()
        };
        let chunks = map.chunks.len();
        assert_eq!(shared(&map, &snapshot), chunks, "a clone copies no chunk");

        map.insert(50_000, 0); // the last chunk
        *map.get_mut(&10).expect("there") += 1; // the first
        assert_eq!(map.remove(&20_000), Some(20_000)); // one in the middle
        assert_eq!(map.remove(&123_456), None); // none: nothing copied
        assert_eq!(shared(&map, &snapshot), chunks - 3, "only the three chunks changed were copied");

        map.pop_first();
        for value in map.values_mut() {
            *value += 1;
        }
        assert_eq!(shared(&map, &snapshot), 0);
        assert!(snapshot.iter().map(|(k, v)| (*k, *v)).eq((0..50_000).map(|n| (n, n))), "the clone saw none of it");
        assert_eq!(map.get(&0), None, "popped");
        assert_eq!((map.get(&10), map.get(&11)), (Some(&12), Some(&12)));
        chunk_lens(&map);
        chunk_lens(&snapshot);
    }

    #[test]
    fn descending_inserts_split_the_first_chunk_too() {
        let map: DenseMap<u64, u64> = (0..50_000).rev().map(|n| (n, n)).collect();
        let lens = chunk_lens(&map);
        assert!(lens.iter().all(|&len| len < CHUNK_SPLIT_LEN), "{lens:?}");
        assert!(map.iter().map(|(k, _)| *k).eq(0..50_000));
    }

    #[test]
    fn a_key_below_every_chunk_moves_the_first_chunks_bound_down() {
        let mut map: DenseMap<u64, u64> = (100..20_000).map(|n| (n, n)).collect();
        assert_eq!(map.insert(5, 5), None);
        assert_eq!(map.chunks.keys().next(), Some(&5));
        chunk_lens(&map);
        assert_eq!(map.get(&5), Some(&5));
        assert!(map.range(..100).eq([(&5, &5)]));
    }

    #[test]
    fn a_set_behaves_like_a_btreeset_and_encodes_as_one() {
        let mut dense = DenseSet::new();
        let mut plain = BTreeSet::new();
        for n in 0u32..30_000 {
            let value = n * 7 % 30_011;
            assert_eq!(dense.insert(value), plain.insert(value));
            assert!(!dense.insert(value), "a second insert of the same value adds nothing");
        }
        assert!(dense.remove(&5));
        plain.remove(&5);
        assert_eq!(dense.pop_first(), plain.pop_first());
        assert_eq!(dense.first(), plain.first());
        assert_eq!(dense.last(), plain.last());
        assert!(dense.contains(&14) && !dense.contains(&5));
        assert!(dense.iter().eq(plain.iter()));
        assert!(dense.range(100..9_000).eq(plain.range(100..9_000)));
        let encoded = serde_json::to_string(&dense).expect("encodes");
        assert_eq!(encoded, serde_json::to_string(&plain).expect("encodes"));
        let decoded: DenseSet<u32> = serde_json::from_str(&encoded).expect("decodes");
        assert_eq!(decoded, dense);
        let bytes = bincode::serde::encode_to_vec(&dense, bincode::config::standard()).expect("encodes");
        assert_eq!(bytes, bincode::serde::encode_to_vec(&plain, bincode::config::standard()).expect("encodes"));
        assert_eq!(dense.clone().into_iter().collect::<Vec<_>>(), plain.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_map_encodes_as_a_plain_map_and_decodes_to_an_equal_one() {
        let dense: DenseMap<u32, String> = (0..20_000).map(|n| (n, n.to_string())).collect();
        let plain: BTreeMap<u32, String> = (0..20_000).map(|n| (n, n.to_string())).collect();
        let encoded = serde_json::to_string(&dense).expect("encodes");
        assert_eq!(encoded, serde_json::to_string(&plain).expect("encodes"));
        let decoded: DenseMap<u32, String> = serde_json::from_str(&encoded).expect("decodes");
        assert_eq!(decoded, dense);
        chunk_lens(&decoded);
        let bytes = bincode::serde::encode_to_vec(&dense, bincode::config::standard()).expect("encodes");
        assert_eq!(bytes, bincode::serde::encode_to_vec(&plain, bincode::config::standard()).expect("encodes"));
        let (back, _): (DenseMap<u32, String>, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).expect("decodes");
        assert_eq!(back, dense);
        assert_eq!(format!("{dense:?}"), format!("{plain:?}"));
    }
}
