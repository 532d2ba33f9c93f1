//! Errors as `application/problem+json` (RFC 9457). Every HTTP status the
//! API returns for a failure is chosen here, in one place.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hookraft_delivery::batcher::ProposeError;
use serde::Serialize;
use utoipa::ToSchema;

/// The slug of [`Problem::over_budget`].
pub const OVER_BUDGET: &str = "ingest-budget-full";

/// Where problem types live: a problem's `type` is this and its slug.
pub const TYPE_BASE: &str = "https://hookraft.dev/problems/";

/// Every problem type the API answers with: slug, status, title, and when.
/// The constructors below are the only way to make one; a test holds them
/// to this table, and the OpenAPI document lists it.
pub const PROBLEM_TYPES: [(&str, u16, &str, &str); 14] = [
    ("malformed-request", 400, "Malformed request", "the body is not JSON, a query parameter or header is malformed"),
    ("unauthorized", 401, "Unauthorized", "a `/v1` route without the right bearer token"),
    ("bad-signature", 401, "Signature refused", "an inbound request whose provider signature does not hold"),
    ("forbidden", 403, "Forbidden", "an inbound source that is disabled, or a caller outside its allowlist"),
    ("not-found", 404, "Not found", "no such resource (a malformed id in the path names nothing), or no such route"),
    ("method-not-allowed", 405, "Method not allowed", "a method the route does not take; `Allow` lists those it does"),
    ("conflict", 409, "Conflict", "the change conflicts with the current state"),
    ("payload-too-large", 413, "Payload too large", "a body over the limit (1 MiB; node-to-node bodies 64 MiB)"),
    ("unsupported-media-type", 415, "Unsupported media type", "a body sent without `content-type: application/json`"),
    ("invalid-field", 422, "Invalid field", "JSON of the wrong shape, or a field out of its range"),
    ("rate-limited", 429, "Too many requests", "an inbound source over its rate limit; comes with `Retry-After`"),
    ("internal", 500, "Internal error", "a bug: the node answered something it should not have"),
    ("unavailable", 503, "Service unavailable", "no leader can commit right now; comes with `Retry-After`"),
    (OVER_BUDGET, 503, "Ingest budget full", "an ingest budget is full (back-pressure); comes with `Retry-After`"),
];

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

/// A problem as sent (RFC 9457), `application/problem+json`.
#[derive(Serialize, ToSchema)]
#[schema(as = Problem, example = json!({
    "type": "https://hookraft.dev/problems/invalid-field",
    "title": "Invalid field",
    "status": 422,
    "detail": "retry.attempts_max must be between 1 and 100"
}))]
pub struct ProblemBody<'a> {
    /// `https://hookraft.dev/problems/` and the problem's slug: `malformed-request`,
    /// `unauthorized`, `bad-signature`, `forbidden`, `not-found`, `method-not-allowed`, `conflict`,
    /// `payload-too-large`, `unsupported-media-type`, `invalid-field`, `rate-limited`,
    /// `internal`, `unavailable` or `ingest-budget-full`.
    #[schema(format = "uri")]
    pub r#type: String,
    /// The same for every problem of a type.
    pub title: &'a str,
    /// The HTTP status, as sent.
    pub status: u16,
    /// What went wrong this time, for a person.
    pub detail: &'a str,
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

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "the route does not take this method; see `Allow`",
        )
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
        let body = ProblemBody {
            r#type: format!("{TYPE_BASE}{}", self.slug),
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

/// The longest plain-text refusal [`ensure_problem`] reads.
const PLAIN_REFUSAL_BYTES_MAX: usize = 4 * 1024;

/// Makes a client error that did not come from a [`Problem`] one: axum's
/// own refusals (a path segment that is not UTF-8, a method the route does
/// not take) are plain text or empty, and every error of the API is
/// `application/problem+json`. The `Allow` of a 405 is kept.
pub async fn ensure_problem(response: Response) -> Response {
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"application/problem+json"));
    if !status.is_client_error() || is_problem {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, PLAIN_REFUSAL_BYTES_MAX).await.unwrap_or_default();
    let detail = String::from_utf8_lossy(&text).trim().to_string();
    let problem = match status {
        StatusCode::METHOD_NOT_ALLOWED => Problem::method_not_allowed(),
        StatusCode::NOT_FOUND => Problem::not_found(detail),
        StatusCode::PAYLOAD_TOO_LARGE => Problem::too_large(detail),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Problem::unsupported_media(detail),
        StatusCode::UNPROCESSABLE_ENTITY => Problem::invalid(detail),
        _ => Problem { status, ..Problem::malformed(detail) },
    };
    let mut answer = problem.into_response();
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        answer.headers_mut().insert(header::ALLOW, allow.clone());
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Budget, Refusal};

    #[test]
    fn every_constructor_makes_a_problem_of_the_table() {
        let refusal = Refusal { budget: Budget::Pending, used: 1, incoming: 1, limit: 1, resume_below: 0 };
        let made = [
            Problem::malformed(""),
            Problem::unauthorized(),
            Problem::bad_signature(""),
            Problem::forbidden(""),
            Problem::not_found(""),
            Problem::method_not_allowed(),
            Problem::conflict(""),
            Problem::too_large(""),
            Problem::unsupported_media(""),
            Problem::invalid(""),
            Problem::rate_limited("", 1),
            Problem::internal(""),
            Problem::unavailable(""),
            Problem::over_budget(&refusal),
        ];
        assert_eq!(made.len(), PROBLEM_TYPES.len(), "one constructor per row");
        for (problem, (slug, status, title, _)) in made.iter().zip(PROBLEM_TYPES) {
            assert_eq!((problem.slug, problem.status.as_u16(), problem.title), (slug, status, title));
        }
    }
}

#[cfg(test)]
mod ensure_tests {
    use axum::body::Body;

    use super::*;

    async fn body_json(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024).await.expect("body");
        serde_json::from_slice(&bytes).expect("a problem is JSON")
    }

    #[tokio::test]
    async fn plain_refusals_become_problems_and_the_rest_stays() {
        let plain = (StatusCode::BAD_REQUEST, "Invalid URL: Invalid UTF-8 in `id`").into_response();
        let answer = ensure_problem(plain).await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
        assert_eq!(answer.headers()[header::CONTENT_TYPE], "application/problem+json");
        let body = body_json(answer).await;
        assert_eq!(body["type"], format!("{TYPE_BASE}malformed-request"));
        assert_eq!(body["detail"], "Invalid URL: Invalid UTF-8 in `id`");

        let mut empty = Response::new(Body::empty());
        *empty.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        empty.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        let answer = ensure_problem(empty).await;
        assert_eq!(answer.headers()[header::ALLOW], "GET,HEAD");
        assert_eq!(body_json(answer).await["status"], 405);

        // A problem, a success and a plain 503 (`/readyz`) pass as they are.
        let problem = Problem::conflict("taken").into_response();
        assert_eq!(body_json(ensure_problem(problem).await).await["detail"], "taken");
        let ok = ensure_problem((StatusCode::OK, "ok\n").into_response()).await;
        assert_eq!(ok.status(), StatusCode::OK);
        let not_ready = ensure_problem((StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()).await;
        assert_eq!(not_ready.headers()[header::CONTENT_TYPE], "text/plain; charset=utf-8");
    }
}
