//! How a history encodes: whole (a map of events and a map of deliveries,
//! each record a byte string, whatever the layers) or, once its records
//! are kept in a store, apart (only what it counts: the store holds the
//! records, written in the same transaction as the encoding). Decoding
//! whole checks every record and puts all of it in the open layer;
//! decoding apart leaves the history waiting for its store
//! ([`History::attach`]).

use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::*;

/// The records of every layer, as a map of events and a map of deliveries.
pub(super) struct Whole<'a>(pub(super) &'a History);

impl Serialize for Whole<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Rows<'a, K>(Vec<(K, Found<'a>)>);
        impl<K: Serialize> Serialize for Rows<'_, K> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (id, found) in &self.0 {
                    map.serialize_entry(id, &BytesRef(found.bytes()))?;
                }
                map.end()
            }
        }
        let all = (Bound::Unbounded, Bound::Unbounded);
        let mut state = serializer.serialize_struct("History", 2)?;
        state.serialize_field("events", &Rows(self.0.event_rows(all, false).collect()))?;
        let every = (Bound::Unbounded, Bound::Unbounded);
        state.serialize_field("deliveries", &Rows(self.0.delivery_rows(every, false).collect()))?;
        state.end()
    }
}

/// Encodes [`Encoding::Apart`] once the records are kept in a store,
/// [`Encoding::Whole`] before.
impl Serialize for History {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.apart {
            serializer.serialize_newtype_variant("Encoding", 1, "Apart", &self.counts)
        } else {
            serializer.serialize_newtype_variant("Encoding", 0, "Whole", &Whole(self))
        }
    }
}

/// What a history encodes as. A shipped variant is frozen.
#[derive(Deserialize)]
enum Encoding {
    Whole(Stored),
    Apart(Counts),
}

impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Encoding::deserialize(deserializer)? {
            Encoding::Whole(stored) => History::try_from(stored).map_err(serde::de::Error::custom),
            Encoding::Apart(counts) => Ok(History { counts, apart: true, ..History::default() }),
        }
    }
}

struct BytesRef<'a>(&'a [u8]);

impl Serialize for BytesRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// The encoded fields of [`History`], decoded and checked before the
/// layers are built from them.
#[derive(Deserialize)]
struct Stored {
    events: DenseMap<EventId, Blob>,
    deliveries: DenseMap<DeliveryId, Blob>,
}

impl TryFrom<Stored> for History {
    type Error = String;

    /// Decodes every record once: a snapshot whose history does not decode,
    /// or holds a delivery without its event, is refused here.
    fn try_from(stored: Stored) -> Result<Self, String> {
        let mut history = History::default();
        for (id, blob) in stored.events {
            let event: Event = blob.decode().map_err(|e| format!("history event {id}: {e}"))?;
            if event.id != id {
                return Err(format!("history event {id} holds the record of {}", event.id));
            }
            history.open.by_time.insert((event.received_at_ms, id), true);
            history.counts.events += 1;
            history.counts.bytes += blob.len();
            history.held += blob.len();
            let received_at_ms = event.received_at_ms;
            history.open.events.insert(id, EventChange::Put { received_at_ms, blob, replaces: false });
        }
        for (id, blob) in stored.deliveries {
            let delivery: Delivery = blob.decode().map_err(|e| format!("history delivery {id}: {e}"))?;
            if delivery.id != id || !history.open.events.contains_key(&delivery.event_id) {
                return Err(format!("history delivery {id} is not one of a stored event's"));
            }
            let row = dead_of(&delivery);
            if let Some(endpoint) = row {
                history.open.set_dead(endpoint, id, true);
                *history.counts.dead.entry(endpoint).or_default() += 1;
            }
            history.counts.deliveries += 1;
            history.counts.bytes += blob.len();
            history.held += blob.len();
            history.open.deliveries.insert(id, DeliveryChange::Put { dead_of: row, blob, replaces: None });
        }
        Ok(history)
    }
}

pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (record, read) =
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map_err(|e| e.to_string())?;
    if read != bytes.len() {
        return Err(format!("{} bytes after the record", bytes.len() - read));
    }
    Ok(record)
}

/// One record's bincode encoding. Encodes as a byte string (a length, then
/// the bytes), not as a sequence of numbers.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Blob(pub(super) Box<[u8]>);

impl Blob {
    pub(super) fn encode<T: Serialize>(record: &T) -> Self {
        // Encoding into a vector fails only for a type serde cannot
        // encode, which none of the records is.
        let bytes =
            bincode::serde::encode_to_vec(record, bincode::config::standard()).expect("a state record always encodes");
        Blob(bytes.into_boxed_slice())
    }

    pub(super) fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        decode(&self.0)
    }

    pub(super) fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BlobVisitor;
        impl<'de> Visitor<'de> for BlobVisitor {
            type Value = Blob;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes.into()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(bytes.into_boxed_slice()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Blob, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(byte) = seq.next_element::<u8>()? {
                    bytes.push(byte);
                }
                Ok(Blob(bytes.into_boxed_slice()))
            }
        }
        deserializer.deserialize_bytes(BlobVisitor)
    }
}
