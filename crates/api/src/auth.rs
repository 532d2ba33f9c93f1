//! Bearer-token check for `/v1` routes, when the node has an API token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::context::ApiContext;
use crate::problem::Problem;

/// Lets the request through when no token is configured or the right one is
/// sent. Changes under `/v1/cluster/` take the admin token when one is set.
pub async fn require_token(State(ctx): State<Arc<ApiContext>>, request: Request, next: Next) -> Response {
    let admin_route = request.uri().path().starts_with("/v1/cluster/");
    let expected =
        if admin_route { ctx.admin_token.as_ref().or(ctx.api_token.as_ref()) } else { ctx.api_token.as_ref() };
    let Some(expected) = expected else { return next.run(request).await };
    let sent = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    match sent {
        Some(token) if constant_time_eq(token.as_bytes(), expected.expose().as_bytes()) => next.run(request).await,
        _ => Problem::unauthorized().into_response(),
    }
}

/// Compares secrets without leaking where they differ through timing
/// (`subtle`; a length difference is not hidden, and tokens are not secret
/// in length).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_needs_equal_length_and_bytes() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
