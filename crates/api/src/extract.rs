//! Request body extraction with problems instead of axum's plain-text
//! rejections: not JSON → 400, wrong shape → 422, too big → 413.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

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
    let is_json = content_type.as_deref().is_some_and(is_json_media_type);
    if !is_json && (require_json || !bytes.is_empty()) {
        return Err(Problem::unsupported_media("send the body as JSON with `content-type: application/json`"));
    }
    Ok(bytes)
}

/// Whether a `content-type` is JSON: the media type itself (before any
/// `;` parameter) is `application/json` or `application/<name>+json`,
/// compared whole. A browser sends `text/plain` cross-site without a
/// preflight, whatever its parameters say.
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let Some(subtype) = essence.strip_prefix("application/") else { return false };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.".contains(&b));
    subtype == "json" || subtype.strip_suffix("+json").is_some_and(token)
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    parse_json(bytes)
}

/// Parses JSON text into `T`: text that is not JSON at all is a 400, JSON
/// of the wrong shape a 422. The syntax is checked on its own first, so a
/// truncated body is a 400 even when its first field is already wrong.
/// Every body of the API is an object: an array is the wrong shape, even
/// where serde would read a struct from its fields in order.
pub fn parse_json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Problem> {
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(Problem::malformed(format!("the body is not valid JSON: {error}")));
    }
    if !is_object(bytes) {
        return Err(Problem::invalid("the body must be a JSON object"));
    }
    serde_json::from_slice(bytes).map_err(|error| Problem::invalid(error.to_string()))
}

/// Whether JSON text is an object (its first character past whitespace is `{`).
fn is_object(text: &[u8]) -> bool {
    text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// A field holding an object, for `#[serde(deserialize_with = ...)]`:
/// serde's derived structs also take an array of their fields in order,
/// which no client means and the document does not allow.
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    from_object(<&'de RawValue>::deserialize(d)?)
}

/// [`object`] for an optional field (`null` or absent: `None`).
pub fn optional_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<&'de RawValue>::deserialize(d)?.map(from_object).transpose()
}

/// [`object`] for each item of an array.
pub fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Vec::<&'de RawValue>::deserialize(d)?.into_iter().map(from_object).collect()
}

fn from_object<'de, T: Deserialize<'de>, E: serde::de::Error>(raw: &'de RawValue) -> Result<T, E> {
    if !is_object(raw.get().as_bytes()) {
        return Err(E::custom(format!("expected an object, got {}", raw.get().chars().take(32).collect::<String>())));
    }
    serde_json::from_str(raw.get()).map_err(E::custom)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn only_json_media_types_are_json() {
        for json in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/problem+json",
            " application/vnd.api+json ;x=1",
        ] {
            assert!(is_json_media_type(json), "{json}");
        }
        for other in [
            "text/plain; a=+json",
            "text/plain;application/json",
            "text/json",
            "application/jsonx",
            "application/+json",
            "application/x+json/more",
            "multipart/form-data; boundary=application/json",
            "application/x-www-form-urlencoded",
            "",
        ] {
            assert!(!is_json_media_type(other), "{other}");
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default, deserialize_with = "optional_object")]
        inner: Option<Inner>,
        #[serde(default, deserialize_with = "objects")]
        items: Vec<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: Option<u32>,
    }

    #[test]
    fn an_array_is_no_object_at_the_top_or_inside() {
        for body in [&b"[null, []]"[..], b" [1]", b"{\"inner\": [5]}", b"{\"items\": [{\"n\": 1}, [2]]}"] {
            let problem = parse_json::<Outer>(body).expect_err("refused");
            assert_eq!(problem.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", String::from_utf8_lossy(body));
        }
        let outer: Outer = parse_json(b" {\"inner\": {\"n\": 5}, \"items\": [{}, {\"n\": 2}]}").expect("objects");
        assert_eq!(outer.inner.and_then(|i| i.n), Some(5));
        assert_eq!(outer.items.len(), 2);
        let outer: Outer = parse_json(b"{\"inner\": null}").expect("null is no inner");
        assert!(outer.inner.is_none());
        assert_eq!(parse_json::<Outer>(b"[1,").expect_err("not JSON").status, StatusCode::BAD_REQUEST);
    }
}
