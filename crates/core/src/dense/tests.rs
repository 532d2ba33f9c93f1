//! Tests of the dense map and set: each against its std twin, and the
//! chunks' invariants after every kind of change.

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
            dense.range((Bound::Excluded(a), Bound::Unbounded)).eq(plain.range((Bound::Excluded(a), Bound::Unbounded)))
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
