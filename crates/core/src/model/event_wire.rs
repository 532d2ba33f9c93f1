//! The encoded form of an [`Event`].
//!
//! Bincode is positional, so fields cannot be appended to a record that
//! logs and snapshots already hold. The first layout was the six fields
//! `id, event_type, payload, received_at_ms, idempotency_key, deliveries`,
//! starting with the event id's text. The current one starts with an empty
//! string (no event id is empty), then the layout version, then the fields.
//! Decoding reads the first string and picks the layout from it.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Event;
use crate::ids::EventId;

/// Starts the tagged layout: never an event id.
const TAG: &str = "";
/// The layout this build writes: the six first fields, `received_by`,
/// `rewrapped`, `ordering_key`.
const VERSION: u8 = 2;
/// Elements of the current layout, tag and version included.
const ELEMENTS: usize = 11;

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = serializer.serialize_tuple(ELEMENTS)?;
        tuple.serialize_element(TAG)?;
        tuple.serialize_element(&VERSION)?;
        tuple.serialize_element(&self.id)?;
        tuple.serialize_element(&self.event_type)?;
        tuple.serialize_element(&self.payload)?;
        tuple.serialize_element(&self.received_at_ms)?;
        tuple.serialize_element(&self.idempotency_key)?;
        tuple.serialize_element(&self.deliveries)?;
        tuple.serialize_element(&self.received_by)?;
        tuple.serialize_element(&self.rewrapped)?;
        tuple.serialize_element(&self.ordering_key)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_tuple(ELEMENTS, EventVisitor)
    }
}

struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Event, A::Error> {
        let first: String = element(&mut seq, 0)?;
        if first != TAG {
            // The first layout: `first` is the event id.
            let id = EventId::parse(&first).map_err(de::Error::custom)?;
            return Ok(Event {
                id,
                event_type: element(&mut seq, 1)?,
                payload: element(&mut seq, 2)?,
                received_at_ms: element(&mut seq, 3)?,
                idempotency_key: element(&mut seq, 4)?,
                deliveries: element(&mut seq, 5)?,
                received_by: None,
                rewrapped: None,
                ordering_key: None,
            });
        }
        let version: u8 = element(&mut seq, 1)?;
        if version != VERSION {
            return Err(de::Error::custom(format!("event layout {version} is not one this build reads ({VERSION})")));
        }
        Ok(Event {
            id: element(&mut seq, 2)?,
            event_type: element(&mut seq, 3)?,
            payload: element(&mut seq, 4)?,
            received_at_ms: element(&mut seq, 5)?,
            idempotency_key: element(&mut seq, 6)?,
            deliveries: element(&mut seq, 7)?,
            received_by: element(&mut seq, 8)?,
            rewrapped: element(&mut seq, 9)?,
            ordering_key: element(&mut seq, 10)?,
        })
    }
}

fn element<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(seq: &mut A, index: usize) -> Result<T, A::Error> {
    seq.next_element()?.ok_or_else(|| de::Error::invalid_length(index, &EventVisitor))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::ids::{DeliveryId, EndpointId};
    use crate::model::Rewrapped;
    use crate::payload::Payload;

    /// The first layout, as earlier versions derived it.
    #[derive(Serialize)]
    struct EventV1 {
        id: EventId,
        event_type: Box<str>,
        payload: Arc<str>,
        received_at_ms: u64,
        idempotency_key: Option<Box<str>>,
        deliveries: Box<[DeliveryId]>,
    }

    fn ids() -> (EventId, DeliveryId) {
        let mut rng = StdRng::seed_from_u64(5);
        let event = EventId::generate(1_700_000_000_000, &mut rng);
        let endpoint = EndpointId::generate(1_700_000_000_000, &mut rng);
        (event, DeliveryId::derive(&event, &endpoint))
    }

    fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
    }

    fn from_bincode(bytes: &[u8]) -> Result<Event, String> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map(|(v, _)| v).map_err(|e| e.to_string())
    }

    #[test]
    fn an_event_of_the_first_layout_decodes_with_no_node_and_no_rewrap() {
        let (id, delivery) = ids();
        let old = EventV1 {
            id,
            event_type: "order.paid".into(),
            payload: Arc::from("{\"a\":1}"),
            received_at_ms: 42,
            idempotency_key: Some("key-1".into()),
            deliveries: Box::new([delivery]),
        };
        let event = from_bincode(&bincode_of(&old)).expect("decodes");
        assert_eq!(event.id, id);
        assert_eq!(&*event.event_type, "order.paid");
        assert_eq!(event.payload, Payload::clear("{\"a\":1}"));
        assert_eq!(event.received_at_ms, 42);
        assert_eq!(event.idempotency_key.as_deref(), Some("key-1"));
        assert_eq!(&*event.deliveries, &[delivery]);
        assert_eq!((event.received_by, event.rewrapped, event.ordering_key), (None, None, None));
    }

    #[test]
    fn the_current_layout_round_trips() {
        let (id, delivery) = ids();
        let event = Event {
            id,
            event_type: "order.paid".into(),
            payload: Payload::clear("[1,2]"),
            received_at_ms: 7,
            idempotency_key: None,
            deliveries: Box::new([delivery]),
            received_by: Some(3),
            rewrapped: Some(Box::new(Rewrapped { at_ms: 9, first_key_id: Some("k1".into()) })),
            ordering_key: Some("customer-7".into()),
        };
        assert_eq!(from_bincode(&bincode_of(&event)), Ok(event));
    }

    #[test]
    fn an_unknown_layout_is_refused_by_name() {
        let bytes = bincode_of(&(TAG, 9u8));
        let error = from_bincode(&bytes).expect_err("refused");
        assert!(error.contains("event layout 9"), "{error}");
    }
}
