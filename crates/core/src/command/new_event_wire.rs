//! The encoded form of a [`NewEvent`], a tagged layout (`crate::tagged`):
//! the first layout was `id, event_type, payload, idempotency_key,
//! endpoint_ids`; the second added `ordering_key`, the third `inbound`.

use serde::de::{self, SeqAccess};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::NewEvent;
use crate::ids::EventId;
use crate::tagged::{self, Elements, Tagged};

impl NewEvent {
    /// Reads the fields both layouts share, after the id.
    fn read_after_id<'de, A: SeqAccess<'de>>(id: EventId, e: &mut Elements<A>) -> Result<Self, A::Error> {
        Ok(NewEvent {
            id,
            event_type: e.next()?,
            payload: e.next()?,
            idempotency_key: e.next()?,
            endpoint_ids: e.next()?,
            ordering_key: None,
            inbound: None,
        })
    }
}

impl Tagged for NewEvent {
    const WHAT: &'static str = "a new event";
    const VERSION: u8 = 3;
    const ELEMENTS: usize = 9;

    fn read_first<'de, A: SeqAccess<'de>>(first: String, e: &mut Elements<A>) -> Result<Self, A::Error> {
        Self::read_after_id(EventId::parse(&first).map_err(de::Error::custom)?, e)
    }

    fn read_tagged<'de, A: SeqAccess<'de>>(version: u8, e: &mut Elements<A>) -> Result<Self, A::Error> {
        let shared = Self::read_after_id(e.next()?, e)?;
        let ordering_key = e.next()?;
        let inbound = if version >= 3 { e.next()? } else { None };
        Ok(NewEvent { ordering_key, inbound, ..shared })
    }
}

impl Serialize for NewEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = tagged::begin::<Self, S>(serializer)?;
        tuple.serialize_element(&self.id)?;
        tuple.serialize_element(&self.event_type)?;
        tuple.serialize_element(&self.payload)?;
        tuple.serialize_element(&self.idempotency_key)?;
        tuple.serialize_element(&self.endpoint_ids)?;
        tuple.serialize_element(&self.ordering_key)?;
        tuple.serialize_element(&self.inbound)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for NewEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        tagged::deserialize(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::ids::EndpointId;
    use crate::payload::Payload;

    fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
    }

    fn from_bincode(bytes: &[u8]) -> Result<NewEvent, String> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map(|(v, _)| v).map_err(|e| e.to_string())
    }

    fn new_event() -> NewEvent {
        let mut rng = StdRng::seed_from_u64(4);
        NewEvent {
            id: EventId::generate(9, &mut rng),
            event_type: "t".into(),
            payload: Payload::clear("{}"),
            idempotency_key: Some("k".into()),
            endpoint_ids: Some(vec![EndpointId::generate(9, &mut rng)]),
            ordering_key: None,
            inbound: None,
        }
    }

    #[test]
    fn a_new_event_of_the_first_layout_decodes_without_a_key() {
        let e = new_event();
        let old = bincode_of(&(e.id, &e.event_type, &e.payload, &e.idempotency_key, &e.endpoint_ids));
        assert_eq!(from_bincode(&old), Ok(e));
    }

    #[test]
    fn a_new_event_of_the_second_layout_decodes_with_no_inbound() {
        let e = NewEvent { ordering_key: Some("customer-1".into()), ..new_event() };
        let old = bincode_of(&(
            tagged::TAG,
            2u8,
            e.id,
            &e.event_type,
            &e.payload,
            &e.idempotency_key,
            &e.endpoint_ids,
            &e.ordering_key,
        ));
        assert_eq!(from_bincode(&old), Ok(e));
    }

    #[test]
    fn the_current_layout_round_trips_with_its_inbound() {
        let mut rng = StdRng::seed_from_u64(8);
        let inbound = crate::inbound::Inbound {
            source_id: crate::ids::SourceId::generate(3, &mut rng),
            provider_event_id: "delivery-1".into(),
            entity_key: None,
            version: Some(crate::inbound::Version::Text("2026-01-01T00:00:00Z".into())),
        };
        let e = NewEvent { inbound: Some(Box::new(inbound)), ..new_event() };
        assert_eq!(from_bincode(&bincode_of(&e)), Ok(e));
    }

    #[test]
    fn the_current_layout_round_trips_with_its_key() {
        let e = NewEvent { ordering_key: Some("customer-1".into()), ..new_event() };
        assert_eq!(from_bincode(&bincode_of(&e)), Ok(e));
    }
}
