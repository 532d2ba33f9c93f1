//! The encoded form of an [`Endpoint`], a tagged layout (`crate::tagged`):
//! the first layout was the endpoint's fields from `id` to
//! `updated_at_ms`; the second added `ordering`, the third `sources`, the
//! fourth `disable_after_s` and `failing_since_ms`.

use serde::de::{self, SeqAccess};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Endpoint, Ordering, RetiredSecret};
use crate::breaker::CircuitBreaker;
use crate::ids::EndpointId;
use crate::payload::StoredSecret;
use crate::retry::RetryPolicy;
use crate::tagged::{self, Elements, Tagged};

/// Every field of the first layout after the id, in its order.
#[derive(Serialize, Deserialize)]
struct Rest {
    url: String,
    description: Option<String>,
    secret: StoredSecret,
    previous_secrets: Vec<RetiredSecret>,
    event_types: Option<Vec<String>>,
    max_in_flight: u32,
    rate_limit_per_s: Option<u32>,
    timeout_ms: u32,
    retry: RetryPolicy,
    disabled: bool,
    disabled_reason: Option<String>,
    breaker: CircuitBreaker,
    created_at_ms: u64,
    updated_at_ms: u64,
}

impl Rest {
    fn of(e: &Endpoint) -> Self {
        Self {
            url: e.url.clone(),
            description: e.description.clone(),
            secret: e.secret.clone(),
            previous_secrets: e.previous_secrets.clone(),
            event_types: e.event_types.clone(),
            max_in_flight: e.max_in_flight,
            rate_limit_per_s: e.rate_limit_per_s,
            timeout_ms: e.timeout_ms,
            retry: e.retry,
            disabled: e.disabled,
            disabled_reason: e.disabled_reason.clone(),
            breaker: e.breaker.clone(),
            created_at_ms: e.created_at_ms,
            updated_at_ms: e.updated_at_ms,
        }
    }

    fn into_endpoint(self, id: EndpointId, ordering: Ordering) -> Endpoint {
        Endpoint {
            id,
            url: self.url,
            description: self.description,
            secret: self.secret,
            previous_secrets: self.previous_secrets,
            event_types: self.event_types,
            max_in_flight: self.max_in_flight,
            rate_limit_per_s: self.rate_limit_per_s,
            timeout_ms: self.timeout_ms,
            retry: self.retry,
            disabled: self.disabled,
            disabled_reason: self.disabled_reason,
            breaker: self.breaker,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            ordering,
            sources: Vec::new(),
            disable_after_s: super::DISABLE_AFTER_S_DEFAULT,
            failing_since_ms: None,
        }
    }
}

impl Tagged for Endpoint {
    const WHAT: &'static str = "an endpoint";
    /// The first layout's fields, then `ordering`, `sources`,
    /// `disable_after_s`, `failing_since_ms`.
    const VERSION: u8 = 4;
    /// Tag, version, id, the rest, ordering, sources, disable after, failing since.
    const ELEMENTS: usize = 8;

    fn read_first<'de, A: SeqAccess<'de>>(first: String, e: &mut Elements<A>) -> Result<Self, A::Error> {
        let id = EndpointId::parse(&first).map_err(de::Error::custom)?;
        Ok(e.next::<Rest>()?.into_endpoint(id, Ordering::None))
    }

    fn read_tagged<'de, A: SeqAccess<'de>>(version: u8, e: &mut Elements<A>) -> Result<Self, A::Error> {
        let id: EndpointId = e.next()?;
        let rest: Rest = e.next()?;
        let mut endpoint = rest.into_endpoint(id, e.next()?);
        if version >= 3 {
            endpoint.sources = e.next()?;
        }
        if version >= 4 {
            endpoint.disable_after_s = e.next()?;
            endpoint.failing_since_ms = e.next()?;
        }
        Ok(endpoint)
    }
}

/// Endpoints are few and encoded rarely (registration, snapshots), so the
/// copy into [`Rest`] costs nothing that matters.
impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = tagged::begin::<Self, S>(serializer)?;
        tuple.serialize_element(&self.id)?;
        tuple.serialize_element(&Rest::of(self))?;
        tuple.serialize_element(&self.ordering)?;
        tuple.serialize_element(&self.sources)?;
        tuple.serialize_element(&self.disable_after_s)?;
        tuple.serialize_element(&self.failing_since_ms)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        tagged::deserialize(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::ordering::OnDead;

    fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
    }

    fn from_bincode(bytes: &[u8]) -> Result<Endpoint, String> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map(|(v, _)| v).map_err(|e| e.to_string())
    }

    fn endpoint() -> Endpoint {
        let mut rng = StdRng::seed_from_u64(2);
        let secret = crate::payload::StoredSecret::clear(&[3; 32]);
        Endpoint::new(EndpointId::generate(5, &mut rng), "https://example.com/h".into(), secret, 5)
    }

    #[test]
    fn an_endpoint_of_the_first_layout_decodes_unordered() {
        let e = endpoint();
        // The first layout: the id's text, then the rest of the fields.
        let old = bincode_of(&(e.id, Rest::of(&e)));
        assert_eq!(from_bincode(&old), Ok(e));
    }

    #[test]
    fn an_endpoint_of_the_second_layout_decodes_with_no_sources() {
        let e = Endpoint { ordering: Ordering::PerKey { on_dead: OnDead::Block }, ..endpoint() };
        let old = bincode_of(&(tagged::TAG, 2u8, e.id, Rest::of(&e), e.ordering));
        assert_eq!(from_bincode(&old), Ok(e));
    }

    #[test]
    fn an_endpoint_of_the_third_layout_decodes_with_the_default_auto_disable() {
        let mut rng = StdRng::seed_from_u64(9);
        let e = Endpoint { sources: vec![crate::ids::SourceId::generate(1, &mut rng)], ..endpoint() };
        let old = bincode_of(&(tagged::TAG, 3u8, e.id, Rest::of(&e), e.ordering, &e.sources));
        assert_eq!(from_bincode(&old), Ok(e));
    }

    #[test]
    fn the_current_layout_round_trips_with_its_failing_time() {
        let e = Endpoint { disable_after_s: 60, failing_since_ms: Some(7), ..endpoint() };
        assert_eq!(from_bincode(&bincode_of(&e)), Ok(e));
    }

    #[test]
    fn the_current_layout_round_trips_with_its_sources() {
        let mut rng = StdRng::seed_from_u64(9);
        let e = Endpoint { sources: vec![crate::ids::SourceId::generate(1, &mut rng)], ..endpoint() };
        assert_eq!(from_bincode(&bincode_of(&e)), Ok(e));
    }

    #[test]
    fn the_current_layout_round_trips_with_its_ordering() {
        let e = Endpoint { ordering: Ordering::PerKey { on_dead: OnDead::Skip }, ..endpoint() };
        assert_eq!(from_bincode(&bincode_of(&e)), Ok(e));
    }
}
