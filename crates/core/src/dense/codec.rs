//! The dense collections encode and decode exactly as the std collections
//! they stand for, so the log and snapshot formats do not know them.

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{DenseMap, DenseSet};

/// Encodes as the plain `BTreeMap` would: its length, then its entries in order.
impl<K: Serialize, V: Serialize> Serialize for DenseMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Encodes as the plain `BTreeSet` would.
impl<T: Serialize> Serialize for DenseSet<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for value in self.iter() {
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
