//! Request body extraction with problems instead of axum's plain-text
//! rejections: not JSON → 400, wrong shape → 422, too big → 413.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;

use crate::problem::Problem;

/// Largest request body accepted (events and endpoint definitions alike).
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

/// A JSON body, parsed into `T`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let bytes = read_body(req, state, true).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// An optional JSON body: empty means `T::default()`.
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let bytes = read_body(req, state, false).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        parse(&bytes).map(OptionalJsonBody)
    }
}

/// The raw body, for handlers that keep the JSON text as sent.
pub async fn read_body<S: Send + Sync>(req: Request, state: &S, require_json: bool) -> Result<Bytes, Problem> {
    let content_type =
        req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_ascii_lowercase);
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            Problem::too_large(format!("the body exceeds the limit of {BODY_BYTES_MAX} bytes"))
        } else {
            Problem::malformed(format!("could not read the body: {rejection}"))
        }
    })?;
    let is_json = content_type.as_deref().is_some_and(|ct| ct.starts_with("application/json") || ct.contains("+json"));
    if !is_json && (require_json || !bytes.is_empty()) {
        return Err(Problem::unsupported_media("send the body as JSON with `content-type: application/json`"));
    }
    Ok(bytes)
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    parse_json(bytes)
}

/// Parses JSON text into `T`: text that is not JSON at all is a 400, JSON
/// of the wrong shape a 422. The syntax is checked on its own first, so a
/// truncated body is a 400 even when its first field is already wrong.
pub fn parse_json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Problem> {
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(Problem::malformed(format!("the body is not valid JSON: {error}")));
    }
    serde_json::from_slice(bytes).map_err(|error| Problem::invalid(error.to_string()))
}
