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

mod codec;
mod set;
#[cfg(test)]
mod tests;

pub use set::{DenseSet, SetIter};

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
impl<K, V> Default for DenseMap<K, V> {
    fn default() -> Self {
        Self { chunks: BTreeMap::new(), len: 0 }
    }
}

impl<K, V> DenseMap<K, V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> Iter<'_, K, V> {
        self.chunks.values().flat_map(chunk_iter as ChunkIter<'_, K, V>)
    }
}

impl<K: Ord + Clone, V: Clone> DenseMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The chunk that holds (or would hold) `key` and its index key: the
    /// greatest index key not above it, if any.
    fn chunk_entry_of<Q>(&self, key: &Q) -> Option<(&K, &Arc<Chunk<K, V>>)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunks.range::<Q, _>((Bound::Unbounded, Bound::Included(key))).next_back()
    }

    fn chunk_key_of<Q>(&self, key: &Q) -> Option<&K>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunk_entry_of(key).map(|(k, _)| k)
    }

    fn chunk_of<Q>(&self, key: &Q) -> Option<&Chunk<K, V>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.chunk_entry_of(key).map(|(_, c)| &**c)
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

/// `map[&key]`, as on a `BTreeMap`: panics if the key is not there.
impl<K: Ord + Clone + Borrow<Q>, Q: Ord + ?Sized, V: Clone> std::ops::Index<&Q> for DenseMap<K, V> {
    type Output = V;
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: PartialEq, V: PartialEq> PartialEq for DenseMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for DenseMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
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
