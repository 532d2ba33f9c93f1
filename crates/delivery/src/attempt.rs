//! One attempt, outside the actor: preparing the signed request and turning
//! what came back into a timeline record. Pure functions of their inputs.

use std::sync::Arc;
use std::time::Duration;

use hookraft_core::ids::{DeliveryId, EventId, NodeId};
use hookraft_core::model::{AttemptRecord, Endpoint, RESPONSE_EXCERPT_BYTES_MAX};
use hookraft_core::retry::{AttemptResult, parse_retry_after};
use hookraft_core::signing::{OrderingHeaders, Secret, ordering_signature_header, signature_header};

use crate::transport::{SendError, SendOrigin, Target, WebhookRequest, WebhookResponse};

/// Everything an attempt needs to know about its delivery.
#[derive(Debug, Clone)]
pub struct AttemptPlan {
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    /// The payload as sent: the producer's JSON (opened if it was sealed).
    pub payload: Arc<[u8]>,
    /// 1-based number of this attempt over the delivery's life.
    pub attempt_number: u32,
    /// An ordered delivery's place in its key's order, sent as the
    /// `webhook-ordering-key`, `webhook-ordering-epoch` and
    /// `webhook-sequence` headers, signed in `webhook-ordering-signature`.
    pub ordering: Option<OrderingPlace>,
}

/// Where an ordered delivery stands: its key, the run's epoch and its
/// sequence in the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingPlace {
    pub key: Box<str>,
    pub epoch_ms: u64,
    pub sequence: u32,
}

/// Builds the signed request for `plan` to `target` (the endpoint's URL,
/// parsed) at wall time `now_ms`, signed with `secrets`, the endpoint's
/// secrets valid at that time (current first,
/// `hookraft_core::model::SigningSecrets::at`).
pub fn build_request(
    endpoint: &Endpoint,
    secrets: &[&Secret],
    target: Target,
    plan: &AttemptPlan,
    now_ms: u64,
    origin: SendOrigin,
) -> WebhookRequest {
    let timestamp_s = now_ms / 1_000;
    let signature = signature_header(secrets, &plan.event_id.as_str(), timestamp_s, &plan.payload);
    WebhookRequest {
        url: target,
        headers: {
            let mut headers = vec![
                ("content-type", "application/json".into()),
                ("webhook-id", plan.event_id.to_string()),
                ("webhook-timestamp", timestamp_s.to_string()),
                ("webhook-signature", signature),
                ("webhook-attempt", plan.attempt_number.to_string()),
                ("hookraft-delivery-id", plan.delivery_id.to_string()),
            ];
            if let Some(place) = &plan.ordering {
                let signed = OrderingHeaders { epoch_ms: place.epoch_ms, sequence: place.sequence, key: &place.key };
                let id = plan.event_id.as_str();
                headers.push(("webhook-sequence", place.sequence.to_string()));
                headers.push(("webhook-ordering-key", place.key.to_string()));
                headers.push(("webhook-ordering-epoch", place.epoch_ms.to_string()));
                headers.push((
                    "webhook-ordering-signature",
                    ordering_signature_header(secrets, &id, timestamp_s, &signed),
                ));
            }
            headers
        },
        body: plan.payload.clone(),
        timeout: Duration::from_millis(u64::from(endpoint.timeout_ms)),
        origin,
    }
}

/// What the retry policy needs from a transport result.
pub fn attempt_result(result: &Result<WebhookResponse, SendError>, now_ms: u64) -> AttemptResult {
    match result {
        Ok(response) => AttemptResult::Status {
            code: response.status,
            retry_after_ms: response.retry_after.as_deref().and_then(|v| parse_retry_after(v, now_ms)),
        },
        Err(_) => AttemptResult::Failed,
    }
}

/// The timeline record of an attempt.
pub fn attempt_record(
    node_id: NodeId,
    fencing_token: u64,
    started_at_ms: u64,
    latency_ms: u64,
    result: &Result<WebhookResponse, SendError>,
) -> AttemptRecord {
    let (status_code, error, response_excerpt) = match result {
        Ok(response) => {
            (Some(response.status), None, Some(truncate_utf8(&response.body_excerpt, RESPONSE_EXCERPT_BYTES_MAX)))
        }
        Err(error) => (None, Some(describe(error)), None),
    };
    AttemptRecord { node_id, fencing_token, started_at_ms, latency_ms, status_code, error, response_excerpt }
}

/// `timeout`, or `connect: <detail>`: the kind first so operators can filter on it.
fn describe(error: &SendError) -> String {
    match error {
        SendError::Timeout => "timeout".into(),
        other => truncate_utf8(&format!("{}: {}", other.kind(), detail(other)), 256),
    }
}

fn detail(error: &SendError) -> &str {
    match error {
        SendError::Timeout => "",
        SendError::Connect(d)
        | SendError::RefusedTarget(d)
        | SendError::InvalidUrl(d)
        | SendError::Other(d)
        | SendError::PayloadUnavailable(d) => d,
    }
}

fn truncate_utf8(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookraft_core::ids::EndpointId;
    use hookraft_core::model::RetiredSecret;
    use hookraft_core::signing::verify;
    use rand::SeedableRng;

    fn endpoint(now_ms: u64) -> Endpoint {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let id = EndpointId::generate(now_ms, &mut rng);
        Endpoint {
            previous_secrets: vec![RetiredSecret { secret: (&secrets()[1]).into(), expires_at_ms: now_ms + 1 }],
            timeout_ms: 1_500,
            ..Endpoint::new(id, "https://example.com/h".into(), (&secrets()[0]).into(), now_ms)
        }
    }

    /// The endpoint's current and retired secret.
    fn secrets() -> [Secret; 2] {
        [Secret::from_key(vec![1; 32]).unwrap(), Secret::from_key(vec![2; 32]).unwrap()]
    }

    /// The request `endpoint` sends at `now_ms`, its secrets stored in clear.
    fn request_at(endpoint: &Endpoint, plan: &AttemptPlan, now_ms: u64) -> WebhookRequest {
        let opened = endpoint.open_secrets(None, now_ms).expect("clear secrets open");
        build_request(endpoint, &opened.at(now_ms), Target::new(&endpoint.url), plan, now_ms, SendOrigin::default())
    }

    #[test]
    fn request_carries_standard_webhook_headers_signed_by_every_valid_secret() {
        let now_ms = 1_700_000_000_000;
        let endpoint = endpoint(now_ms);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let event_id = EventId::generate(now_ms, &mut rng);
        let plan = AttemptPlan {
            delivery_id: DeliveryId::derive(&event_id, &endpoint.id),
            event_id,
            payload: Arc::from("{\"a\":1}".as_bytes()),
            attempt_number: 3,
            ordering: None,
        };
        let request = request_at(&endpoint, &plan, now_ms);
        assert_eq!(request.url.as_str(), endpoint.url);
        let header = |name: &str| request.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(header("webhook-id"), event_id.to_string());
        assert_eq!(header("webhook-attempt"), "3");
        assert_eq!(request.timeout, Duration::from_millis(1_500));
        let signature = header("webhook-signature");
        assert_eq!(signature.split(' ').count(), 2);
        for secret in &secrets() {
            verify(
                &[secret],
                &header("webhook-id"),
                &header("webhook-timestamp"),
                &signature,
                b"{\"a\":1}",
                now_ms / 1_000,
            )
            .unwrap();
        }
        // After the grace period only the current secret signs.
        let later = request_at(&endpoint, &plan, now_ms + 1);
        let later_sig = later.headers.iter().find(|(k, _)| *k == "webhook-signature").unwrap();
        assert_eq!(later_sig.1.split(' ').count(), 1);
    }

    #[test]
    fn an_ordered_request_signs_its_place_with_every_valid_secret() {
        let now_ms = 1_700_000_000_000;
        let endpoint = endpoint(now_ms);
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let event_id = EventId::generate(now_ms, &mut rng);
        let place = OrderingPlace { key: "cus_1".into(), epoch_ms: 1_699_000_000_000, sequence: 7 };
        let plan = AttemptPlan {
            delivery_id: DeliveryId::derive(&event_id, &endpoint.id),
            event_id,
            payload: Arc::from("{}".as_bytes()),
            attempt_number: 1,
            ordering: Some(place),
        };
        let request = request_at(&endpoint, &plan, now_ms);
        let header = |name: &str| request.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(
            (header("webhook-sequence"), header("webhook-ordering-key"), header("webhook-ordering-epoch")),
            ("7".to_string(), "cus_1".to_string(), "1699000000000".to_string())
        );
        let signed = OrderingHeaders { epoch_ms: 1_699_000_000_000, sequence: 7, key: "cus_1" };
        let signature = header("webhook-ordering-signature");
        assert_eq!(signature.split(' ').count(), 2, "one entry per secret during the rotation");
        for secret in &secrets() {
            let checked = hookraft_core::signing::verify_ordering(
                &[secret],
                &event_id.as_str(),
                now_ms / 1_000,
                &signed,
                &signature,
            );
            assert_eq!(checked, Ok(()));
        }
    }

    #[test]
    fn records_status_or_error_kind_and_cuts_the_excerpt() {
        let ok = Ok(WebhookResponse { status: 503, retry_after: Some("7".into()), body_excerpt: "é".repeat(600) });
        let record = attempt_record(1, 9, 10, 20, &ok);
        assert_eq!(record.status_code, Some(503));
        assert!(record.response_excerpt.unwrap().len() <= RESPONSE_EXCERPT_BYTES_MAX);
        assert_eq!(attempt_result(&ok, 0), AttemptResult::Status { code: 503, retry_after_ms: Some(7_000) });
        let timeout: Result<WebhookResponse, SendError> = Err(SendError::Timeout);
        let record = attempt_record(1, 9, 10, 20, &timeout);
        assert_eq!((record.status_code, record.error.as_deref()), (None, Some("timeout")));
        assert_eq!(attempt_result(&timeout, 0), AttemptResult::Failed);
    }
}
