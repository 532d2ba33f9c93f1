//! The encoded form of a [`NewEvent`]: the tagged layout of
//! `model/event_wire.rs`. The first layout was `id, event_type, payload,
//! idempotency_key, endpoint_ids`, starting with the id's text; the
//! current one starts with an empty string, the layout version, then those
//! fields and `ordering_key`.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::NewEvent;
use crate::ids::EventId;

const TAG: &str = "";
const VERSION: u8 = 2;
const ELEMENTS: usize = 8;

impl Serialize for NewEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = serializer.serialize_tuple(ELEMENTS)?;
        tuple.serialize_element(TAG)?;
        tuple.serialize_element(&VERSION)?;
        tuple.serialize_element(&self.id)?;
        tuple.serialize_element(&self.event_type)?;
        tuple.serialize_element(&self.payload)?;
        tuple.serialize_element(&self.idempotency_key)?;
        tuple.serialize_element(&self.endpoint_ids)?;
        tuple.serialize_element(&self.ordering_key)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for NewEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_tuple(ELEMENTS, NewEventVisitor)
    }
}

struct NewEventVisitor;

impl<'de> Visitor<'de> for NewEventVisitor {
    type Value = NewEvent;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a new event")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NewEvent, A::Error> {
        let first: String = element(&mut seq, 0)?;
        let (id, at) = if first == TAG {
            let version: u8 = element(&mut seq, 1)?;
            if version != VERSION {
                return Err(de::Error::custom(format!(
                    "event layout {version} is not one this build reads ({VERSION})"
                )));
            }
            (element::<EventId, A>(&mut seq, 2)?, 3)
        } else {
            (EventId::parse(&first).map_err(de::Error::custom)?, 1)
        };
        Ok(NewEvent {
            id,
            event_type: element(&mut seq, at)?,
            payload: element(&mut seq, at + 1)?,
            idempotency_key: element(&mut seq, at + 2)?,
            endpoint_ids: element(&mut seq, at + 3)?,
            ordering_key: if at == 3 { element(&mut seq, at + 4)? } else { None },
        })
    }
}

fn element<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(seq: &mut A, index: usize) -> Result<T, A::Error> {
    seq.next_element()?.ok_or_else(|| de::Error::invalid_length(index, &NewEventVisitor))
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
        }
    }

    #[test]
    fn a_new_event_of_the_first_layout_decodes_without_a_key() {
        let e = new_event();
        let old = bincode_of(&(e.id, &e.event_type, &e.payload, &e.idempotency_key, &e.endpoint_ids));
        assert_eq!(from_bincode(&old), Ok(e));
    }

    #[test]
    fn the_current_layout_round_trips_with_its_key() {
        let e = NewEvent { ordering_key: Some("customer-1".into()), ..new_event() };
        assert_eq!(from_bincode(&bincode_of(&e)), Ok(e));
    }
}
