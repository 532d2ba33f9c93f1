//! The encoded form of an [`Event`], a tagged layout (`crate::tagged`).
//! The first layout was the six fields `id, event_type, payload,
//! received_at_ms, idempotency_key, deliveries`, starting with the event
//! id's text; the second added `received_by`, `rewrapped`, `ordering_key`;
//! the third `inbound`.

use serde::de::{self, SeqAccess};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Event;
use crate::ids::EventId;
use crate::tagged::{self, Elements, Tagged};

impl Tagged for Event {
    const WHAT: &'static str = "an event";
    const VERSION: u8 = 3;
    const ELEMENTS: usize = 12;

    fn read_first<'de, A: SeqAccess<'de>>(first: String, e: &mut Elements<A>) -> Result<Self, A::Error> {
        // The first layout: `first` is the event id.
        Ok(Event {
            id: EventId::parse(&first).map_err(de::Error::custom)?,
            event_type: e.next()?,
            payload: e.next()?,
            received_at_ms: e.next()?,
            idempotency_key: e.next()?,
            deliveries: e.next()?,
            received_by: None,
            rewrapped: None,
            ordering_key: None,
            inbound: None,
        })
    }

    fn read_tagged<'de, A: SeqAccess<'de>>(version: u8, e: &mut Elements<A>) -> Result<Self, A::Error> {
        Ok(Event {
            id: e.next()?,
            event_type: e.next()?,
            payload: e.next()?,
            received_at_ms: e.next()?,
            idempotency_key: e.next()?,
            deliveries: e.next()?,
            received_by: e.next()?,
            rewrapped: e.next()?,
            ordering_key: e.next()?,
            inbound: if version >= 3 { e.next()? } else { None },
        })
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = tagged::begin::<Self, S>(serializer)?;
        tuple.serialize_element(&self.id)?;
        tuple.serialize_element(&self.event_type)?;
        tuple.serialize_element(&self.payload)?;
        tuple.serialize_element(&self.received_at_ms)?;
        tuple.serialize_element(&self.idempotency_key)?;
        tuple.serialize_element(&self.deliveries)?;
        tuple.serialize_element(&self.received_by)?;
        tuple.serialize_element(&self.rewrapped)?;
        tuple.serialize_element(&self.ordering_key)?;
        tuple.serialize_element(&self.inbound)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        tagged::deserialize(deserializer)
    }
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
        assert_eq!(event.inbound, None);
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
            inbound: Some(Box::new(crate::inbound::Inbound {
                source_id: crate::ids::SourceId::generate(3, &mut StdRng::seed_from_u64(1)),
                provider_event_id: "evt_stripe_1".into(),
                entity_key: Some("cus_1".into()),
                version: Some(crate::inbound::Version::Number(17)),
            })),
        };
        assert_eq!(from_bincode(&bincode_of(&event)), Ok(event));
    }

    #[test]
    fn an_unknown_layout_is_refused_by_name() {
        let bytes = bincode_of(&(tagged::TAG, 9u8));
        let error = from_bincode(&bytes).expect_err("refused");
        assert!(error.contains("event layout 9"), "{error}");
    }
}
