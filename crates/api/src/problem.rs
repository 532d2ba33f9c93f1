//! Errors as `application/problem+json` (RFC 9457). Every HTTP status the
//! API returns for a failure is chosen here, in one place.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hookraft_core::propose::ProposeError;
use serde::Serialize;

/// The slug of [`Problem::over_budget`].
pub const OVER_BUDGET: &str = "ingest-budget-full";

/// A problem the caller can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: StatusCode,
    /// Stable slug; the `type` URI ends with it.
    pub slug: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Seconds, for 503s.
    pub retry_after_s: Option<u32>,
}

#[derive(Serialize)]
struct Body<'a> {
    r#type: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
}

impl Problem {
    fn new(status: StatusCode, slug: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self { status, slug, title, detail: detail.into(), retry_after_s: None }
    }

    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed-request", "Malformed request", detail)
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", "Invalid field", detail)
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            "send the node's API token as `Authorization: Bearer <token>`",
        )
    }

    /// An inbound request whose provider signature does not hold.
    pub fn bad_signature(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "bad-signature", "Signature refused", detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
    }

    /// A source's rate limit: retry after `retry_after_s`.
    pub fn rate_limited(detail: impl Into<String>, retry_after_s: u32) -> Self {
        let mut p = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate-limited", "Too many requests", detail);
        p.retry_after_s = Some(retry_after_s.max(1));
        p
    }

    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large", "Payload too large", detail)
    }

    pub fn unsupported_media(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type", "Unsupported media type", detail)
    }

    pub fn unavailable(detail: impl Into<String>) -> Self {
        let mut p = Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "Service unavailable", detail);
        p.retry_after_s = Some(1);
        p
    }

    /// Ingest refused by a full budget: back-pressure, retry later.
    pub fn over_budget(refusal: &crate::admission::Refusal) -> Self {
        let mut p = Self::new(StatusCode::SERVICE_UNAVAILABLE, OVER_BUDGET, "Ingest budget full", refusal.detail());
        p.retry_after_s = Some(crate::admission::RETRY_AFTER_S);
        p
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "Internal error", detail)
    }
}

impl From<ProposeError> for Problem {
    fn from(error: ProposeError) -> Self {
        match error {
            ProposeError::NoLeader => {
                Problem::unavailable("no leader is available to commit the request; retry shortly")
            }
            ProposeError::ShuttingDown => Problem::unavailable("the node is shutting down; retry on another node"),
            ProposeError::Other(detail) => {
                tracing::error!(%detail, "commit failed");
                Problem::unavailable(format!(
                    "the request did not complete here ({detail}); retry it, with the same Idempotency-Key for events"
                ))
            }
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = Body {
            r#type: format!("https://hookraft.dev/problems/{}", self.slug),
            title: self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (self.status, json).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(seconds) = self.retry_after_s {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Handlers return this.
pub type ApiResult<T> = Result<T, Problem>;
