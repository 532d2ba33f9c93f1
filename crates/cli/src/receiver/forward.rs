//! `--forward-to`: passes a verified, new, in-order event on to a local
//! service, with its body and webhook headers, and says whether it took it.
//!
//! The service answers 2xx to take an event; anything else, a timeout or a
//! refused connection is a failure that the receiver turns into a 502 or 503
//! for hookraft, which then retries. Redirects are not followed. This module
//! only sends; it does not decide what is forwarded.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};

/// How long the local service has to answer one forwarded event.
pub const FORWARD_TIMEOUT_MS: u64 = 10_000;

/// The request headers passed on: the webhook's own, so the service can
/// verify the signature itself and read the ordering.
pub const FORWARDED_HEADERS: [&str; 10] = [
    "content-type",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "webhook-attempt",
    "webhook-sequence",
    "webhook-ordering-key",
    "webhook-ordering-epoch",
    "webhook-ordering-signature",
    "hookraft-delivery-id",
];

/// Why an event was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardError {
    /// The service answered something other than 2xx.
    Refused(u16),
    /// No answer: connection refused, timed out, reset.
    Unreachable(String),
}

impl ForwardError {
    /// What hookraft is answered: 502 for a service that said no, 503 for
    /// one that could not be reached. Both make hookraft retry.
    pub fn status(&self) -> StatusCode {
        match self {
            ForwardError::Refused(_) => StatusCode::BAD_GATEWAY,
            ForwardError::Unreachable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn reason(&self) -> String {
        match self {
            ForwardError::Refused(status) => format!("forward: the service answered {status}"),
            ForwardError::Unreachable(error) => format!("forward: {error}"),
        }
    }
}

/// The headers of `headers` that are forwarded, in [`FORWARDED_HEADERS`] order.
pub fn forwarded_headers(headers: &HeaderMap) -> Vec<(&'static str, axum::http::HeaderValue)> {
    FORWARDED_HEADERS.iter().filter_map(|name| headers.get(*name).map(|value| (*name, value.clone()))).collect()
}

/// Sends events to one URL.
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: reqwest::Client,
    url: reqwest::Url,
}

impl Forwarder {
    pub fn new(url: reqwest::Url) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(FORWARD_TIMEOUT_MS))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { client, url })
    }

    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// POSTs `body` with the forwarded headers; `Ok` once the service answered 2xx.
    pub async fn send(&self, headers: &HeaderMap, body: Bytes) -> Result<(), ForwardError> {
        let mut request = self.client.post(self.url.clone()).body(body);
        for (name, value) in forwarded_headers(headers) {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| ForwardError::Unreachable(describe(&e)))?;
        let status = response.status();
        if status.is_success() { Ok(()) } else { Err(ForwardError::Refused(status.as_u16())) }
    }
}

/// A one-line cause: reqwest's own text names the URL but not the reason.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer within {FORWARD_TIMEOUT_MS} ms");
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_the_webhook_headers_are_forwarded_in_a_fixed_order() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer secret"),
            ("webhook-sequence", "4"),
            ("webhook-id", "evt_1"),
            ("cookie", "a=b"),
            ("content-type", "application/json"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        let names: Vec<&str> = forwarded_headers(&headers).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["content-type", "webhook-id", "webhook-sequence"]);
    }

    #[test]
    fn a_refusal_answers_502_and_no_answer_503() {
        assert_eq!(ForwardError::Refused(500).status(), StatusCode::BAD_GATEWAY);
        assert_eq!(ForwardError::Unreachable("connection refused".into()).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ForwardError::Refused(409).reason(), "forward: the service answered 409");
    }
}
