//! What the receiver concluded about one request, the line it prints and the
//! status it answers; pure.
//!
//! [`check_request`] is the stateless check (signature and timestamp only);
//! [`from_inbox`] turns a `hookraft-receiver` inbox's verdict into this
//! module's, for the receiver that deduplicates and keeps keys in order.

use axum::http::{HeaderMap, StatusCode};
use hookraft_core::signing::Secret;
use hookraft_receiver::{Request, Verdict as InboxVerdict};

/// How much of a body a printed line shows, in characters.
pub const BODY_PREVIEW_CHARS_MAX: usize = 200;

/// What the receiver concluded about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Signature good (stateless receiver).
    Verified {
        request: Seen,
    },
    /// New and in order: forwarded (when asked) and recorded.
    Delivered {
        request: Seen,
    },
    /// Already delivered: answered 2xx, not forwarded again.
    Duplicate {
        request: Seen,
    },
    /// Older than the newest delivered for its key: answered 2xx (a retry
    /// would be as stale), not forwarded.
    Stale {
        request: Seen,
        key: String,
        version: u64,
        newest: u64,
    },
    /// Another delivery of this event or key is under way: hookraft retries.
    Busy {
        request: Seen,
    },
    /// Could not forward or record: answered `status` so hookraft retries,
    /// and not recorded.
    Failed {
        reason: String,
        status: StatusCode,
        request: Seen,
    },
    Rejected {
        reason: String,
        request: Seen,
    },
}

/// The parts of a request that a printed line shows, and the headers the
/// checks read, as text (bytes that are not UTF-8 replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub id: Option<String>,
    pub attempt: Option<String>,
    pub timestamp: Option<String>,
    pub signature: Option<String>,
    pub sequence: Option<String>,
    pub ordering_key: Option<String>,
    pub ordering_epoch: Option<String>,
    pub ordering_signature: Option<String>,
    pub bytes: usize,
    /// The first [`BODY_PREVIEW_CHARS_MAX`] characters, control characters
    /// turned into spaces so the line stays one line.
    pub body_preview: String,
}

impl Seen {
    pub fn read(headers: &HeaderMap, body: &[u8]) -> Self {
        let header = |name: &str| headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        Self {
            id: header("webhook-id"),
            attempt: header("webhook-attempt"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            sequence: header("webhook-sequence"),
            ordering_key: header("webhook-ordering-key"),
            ordering_epoch: header("webhook-ordering-epoch"),
            ordering_signature: header("webhook-ordering-signature"),
            bytes: body.len(),
            body_preview: preview(body),
        }
    }

    /// The request as the inbox reads it; `ordered` includes the ordering
    /// headers (the stateless receiver ignores them).
    pub fn request<'a>(&'a self, body: &'a [u8], ordered: bool) -> Request<'a> {
        Request {
            id: self.id.as_deref(),
            timestamp: self.timestamp.as_deref(),
            signature: self.signature.as_deref(),
            sequence: self.sequence.as_deref().filter(|_| ordered),
            ordering_key: self.ordering_key.as_deref().filter(|_| ordered),
            ordering_epoch: self.ordering_epoch.as_deref().filter(|_| ordered),
            ordering_signature: self.ordering_signature.as_deref().filter(|_| ordered),
            body,
        }
    }
}

impl Verdict {
    /// The single line printed for this request.
    pub fn line(&self) -> String {
        let request = self.request();
        let head = match self {
            Verdict::Verified { .. } => "verified".to_string(),
            Verdict::Delivered { .. } => "delivered".to_string(),
            Verdict::Duplicate { .. } => "duplicate".to_string(),
            Verdict::Stale { .. } => "stale".to_string(),
            Verdict::Busy { .. } => "busy".to_string(),
            Verdict::Failed { reason, status, .. } => format!("FAILED ({}) {reason}", status.as_u16()),
            Verdict::Rejected { reason, .. } => format!("REJECTED {reason}"),
        };
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let order = match self {
            Verdict::Stale { key, version, newest, .. } => format!(" key={key} version={version} newest={newest}"),
            _ => match (&request.ordering_key, &request.sequence) {
                (Some(key), Some(sequence)) => format!(" key={key} seq={sequence}"),
                _ => String::new(),
            },
        };
        format!(
            "{head} {} attempt={} ts={}{order} bytes={} body={}",
            dash(&request.id),
            dash(&request.attempt),
            dash(&request.timestamp),
            request.bytes,
            request.body_preview
        )
    }

    pub fn request(&self) -> &Seen {
        match self {
            Verdict::Verified { request }
            | Verdict::Delivered { request }
            | Verdict::Duplicate { request }
            | Verdict::Stale { request, .. }
            | Verdict::Busy { request }
            | Verdict::Failed { request, .. }
            | Verdict::Rejected { request, .. } => request,
        }
    }

    #[cfg(test)]
    pub fn is_verified(&self) -> bool {
        matches!(self, Verdict::Verified { .. })
    }

    /// Worth a line under `--quiet`: something went wrong.
    pub fn is_problem(&self) -> bool {
        matches!(self, Verdict::Failed { .. } | Verdict::Rejected { .. })
    }

    /// The answer; `done` is the status for handled requests (`--status`).
    pub fn status(&self, done: StatusCode) -> StatusCode {
        match self {
            Verdict::Verified { .. }
            | Verdict::Delivered { .. }
            | Verdict::Duplicate { .. }
            | Verdict::Stale { .. } => done,
            Verdict::Busy { .. } => StatusCode::CONFLICT,
            Verdict::Failed { status, .. } => *status,
            Verdict::Rejected { .. } => StatusCode::UNAUTHORIZED,
        }
    }
}

/// Verifies one request's Standard Webhooks signature. Pure: the time comes
/// in as `now_s` (unix seconds).
pub fn check_request(secrets: &[Secret], headers: &HeaderMap, body: &[u8], now_s: u64) -> Verdict {
    let request = Seen::read(headers, body);
    match hookraft_receiver::request::verify(secrets, &request.request(body, false), now_s) {
        Ok(_) => Verdict::Verified { request },
        Err(rejection) => Verdict::Rejected { reason: rejection.to_string(), request },
    }
}

/// This module's verdict for an inbox's, except an accepted one (which the
/// receiver still has to forward and record): `None` then.
pub fn from_inbox(verdict: &InboxVerdict, request: Seen) -> Option<Verdict> {
    Some(match verdict {
        InboxVerdict::Accepted(_) => return None,
        InboxVerdict::Duplicate => Verdict::Duplicate { request },
        InboxVerdict::Stale { key, version, newest } => {
            Verdict::Stale { request, key: key.clone(), version: *version, newest: *newest }
        }
        InboxVerdict::Busy => Verdict::Busy { request },
        InboxVerdict::Rejected(rejection) => Verdict::Rejected { reason: rejection.to_string(), request },
    })
}

fn preview(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .take(BODY_PREVIEW_CHARS_MAX)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use hookraft_core::signing;

    const NOW_S: u64 = 1_700_000_000;

    fn secret(byte: u8) -> Secret {
        Secret::from_key(vec![byte; 32]).expect("valid key length")
    }

    pub(crate) fn signed_headers(secret: &Secret, id: &str, ts: u64, body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let signature = signing::sign(secret, id, ts, body);
        for (name, value) in
            [("webhook-id", id.to_string()), ("webhook-timestamp", ts.to_string()), ("webhook-signature", signature)]
        {
            headers.insert(name, HeaderValue::from_str(&value).expect("ascii header"));
        }
        headers
    }

    #[test]
    fn correctly_signed_request_is_verified_and_printed_with_its_attempt() {
        let key = secret(1);
        let body = br#"{"type":"order.paid"}"#;
        let mut headers = signed_headers(&key, "evt_1", NOW_S, body);
        headers.insert("webhook-attempt", HeaderValue::from_static("3"));
        let verdict = check_request(&[key], &headers, body, NOW_S + 10);
        assert!(verdict.is_verified(), "{verdict:?}");
        assert_eq!(
            verdict.line(),
            format!("verified evt_1 attempt=3 ts={NOW_S} bytes=21 body={{\"type\":\"order.paid\"}}")
        );
    }

    #[test]
    fn request_signed_with_the_old_secret_is_verified_during_rotation() {
        let (old, new) = (secret(1), secret(2));
        let headers = signed_headers(&old, "evt_1", NOW_S, b"{}");
        assert!(check_request(&[new, old], &headers, b"{}", NOW_S).is_verified());
    }

    #[test]
    fn tampered_body_is_rejected_with_the_reason() {
        let key = secret(1);
        let headers = signed_headers(&key, "evt_1", NOW_S, b"{\"a\":1}");
        let verdict = check_request(&[key], &headers, b"{\"a\":2}", NOW_S);
        assert!(!verdict.is_verified());
        assert!(
            verdict.line().starts_with("REJECTED no v1 signature in the header matches evt_1 attempt=- "),
            "{}",
            verdict.line()
        );
    }

    #[test]
    fn stale_timestamp_is_rejected() {
        let key = secret(1);
        let headers = signed_headers(&key, "evt_1", NOW_S, b"{}");
        let verdict = check_request(&[key], &headers, b"{}", NOW_S + 3600);
        assert!(matches!(verdict, Verdict::Rejected { ref reason, .. } if reason.contains("5 minutes")), "{verdict:?}");
    }

    #[test]
    fn missing_headers_are_named_in_the_rejection() {
        let verdict = check_request(&[secret(1)], &HeaderMap::new(), b"", NOW_S);
        let Verdict::Rejected { reason, .. } = verdict else { panic!("expected a rejection") };
        assert_eq!(reason, "missing header webhook-id, webhook-timestamp, webhook-signature");
    }

    #[test]
    fn the_stateless_check_ignores_malformed_ordering_headers() {
        let key = secret(1);
        let mut headers = signed_headers(&key, "evt_1", NOW_S, b"{}");
        headers.insert("webhook-sequence", HeaderValue::from_static("not a number"));
        assert!(check_request(&[key], &headers, b"{}", NOW_S).is_verified());
    }

    #[test]
    fn long_multiline_body_is_previewed_on_one_line_in_200_characters() {
        let body = format!("line one\nline two{}", "x".repeat(500));
        let verdict = check_request(&[secret(1)], &HeaderMap::new(), body.as_bytes(), NOW_S);
        let Verdict::Rejected { request, .. } = verdict else { panic!("expected a rejection") };
        assert_eq!(request.body_preview.chars().count(), BODY_PREVIEW_CHARS_MAX);
        assert!(request.body_preview.starts_with("line one line two"));
        assert_eq!(request.bytes, body.len());
    }

    fn seen_ordered() -> Seen {
        let mut headers = signed_headers(&secret(1), "evt_2", NOW_S, b"{}");
        headers.insert("webhook-attempt", HeaderValue::from_static("1"));
        let place = hookraft_core::signing::OrderingHeaders { epoch_ms: 1_000, sequence: 2, key: "cus_1" };
        let signed = hookraft_core::signing::ordering_signature_header(&[&secret(1)], "evt_2", NOW_S, &place);
        headers.insert("webhook-sequence", HeaderValue::from_static("2"));
        headers.insert("webhook-ordering-key", HeaderValue::from_static("cus_1"));
        headers.insert("webhook-ordering-epoch", HeaderValue::from_static("1000"));
        headers.insert("webhook-ordering-signature", HeaderValue::from_str(&signed).expect("a header value"));
        Seen::read(&headers, b"{}")
    }

    #[test]
    fn each_outcome_prints_its_word_and_answers_its_status() {
        let request = seen_ordered();
        let done = StatusCode::NO_CONTENT;
        let cases = [
            (
                Verdict::Delivered { request: request.clone() },
                "delivered evt_2 attempt=1 ts=1700000000 key=cus_1 seq=2 ",
                done,
            ),
            (Verdict::Duplicate { request: request.clone() }, "duplicate evt_2 ", done),
            (
                Verdict::Stale { request: request.clone(), key: "cus_1".into(), version: 2, newest: 3 },
                "stale evt_2 attempt=1 ts=1700000000 key=cus_1 version=2 newest=3 ",
                done,
            ),
            (Verdict::Busy { request: request.clone() }, "busy evt_2 ", StatusCode::CONFLICT),
            (
                Verdict::Failed {
                    reason: "forward: 500".into(),
                    status: StatusCode::BAD_GATEWAY,
                    request: request.clone(),
                },
                "FAILED (502) forward: 500 evt_2 ",
                StatusCode::BAD_GATEWAY,
            ),
            (Verdict::Rejected { reason: "bad".into(), request }, "REJECTED bad evt_2 ", StatusCode::UNAUTHORIZED),
        ];
        for (verdict, start, status) in cases {
            assert!(verdict.line().starts_with(start), "{:?} does not start with {start:?}", verdict.line());
            assert_eq!(verdict.status(done), status, "{verdict:?}");
            assert_eq!(verdict.is_problem(), status.as_u16() >= 500 || status == StatusCode::UNAUTHORIZED);
        }
    }

    #[test]
    fn an_inbox_verdict_maps_to_the_receivers_except_an_accepted_one() {
        let request = seen_ordered();
        let stale = InboxVerdict::Stale { key: "cus_1".into(), version: 2, newest: 5 };
        assert_eq!(
            from_inbox(&stale, request.clone()),
            Some(Verdict::Stale { request: request.clone(), key: "cus_1".into(), version: 2, newest: 5 })
        );
        assert_eq!(
            from_inbox(&InboxVerdict::Duplicate, request.clone()),
            Some(Verdict::Duplicate { request: request.clone() })
        );
        assert_eq!(from_inbox(&InboxVerdict::Busy, request.clone()), Some(Verdict::Busy { request }));
    }
}
