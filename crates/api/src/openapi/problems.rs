//! The problem responses of the document: one reusable response per kind
//! of failure, each naming the problem types (`crate::problem`) it carries
//! with an example of each. Operations refer to them with
//! `(status = 404, response = NotFound)`; [`components`] registers them.

use utoipa::ToResponse;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};

use crate::problem::{PROBLEM_TYPES, TYPE_BASE};

/// The media type of every problem.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// A problem response: its description, the slugs it carries, and whether
/// it comes with `Retry-After`.
fn problem_response(description: &str, slugs: &[&str], retry_after: bool) -> Response {
    let examples = slugs.iter().map(|slug| {
        let (_, status, title, when) =
            PROBLEM_TYPES.iter().find(|(s, ..)| s == slug).copied().unwrap_or((slug, 500, "", ""));
        let value = serde_json::json!({
            "type": format!("{TYPE_BASE}{slug}"),
            "title": title,
            "status": status,
            "detail": when,
        });
        (*slug, ExampleBuilder::new().summary(format!("`{slug}`: {when}")).value(Some(value)).build())
    });
    let content =
        ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).examples_from_iter(examples).build();
    let kinds: Vec<String> = slugs.iter().map(|s| format!("`{s}`")).collect();
    let mut response = ResponseBuilder::new()
        .description(format!("{description} (problem type {}).", kinds.join(" or ")))
        .content(PROBLEM_CONTENT_TYPE, content);
    if retry_after {
        let seconds = ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).build();
        let header = HeaderBuilder::new().schema(seconds).description(Some("Seconds to wait before retrying."));
        response = response.header("Retry-After", header.build());
    }
    response.build()
}

macro_rules! problem_responses {
    ($($(#[$doc:meta])* $name:ident: $description:literal, [$($slug:literal),+], $retry_after:literal;)+) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl<'s> ToResponse<'s> for $name {
                fn response() -> (&'s str, RefOr<Response>) {
                    (stringify!($name), problem_response($description, &[$($slug),+], $retry_after).into())
                }
            }
        )+

        /// Every problem response, to register among the document's components.
        pub fn components() -> Vec<(&'static str, RefOr<Response>)> {
            vec![$(<$name as ToResponse<'static>>::response()),+]
        }
    };
}

problem_responses! {
    /// 400: the request could not be read.
    BadRequest: "The body is not JSON, or a query parameter or header is malformed", ["malformed-request"], false;
    /// 401 on `/v1` and node-to-node routes.
    Unauthorized: "The bearer token is missing or unknown (on node-to-node routes: the link signature is \
        missing, wrong, late or replayed)", ["unauthorized"], false;
    /// 403 on `/v1`: a known token whose scope does not cover the route.
    OutOfScope: "The token's scope (read, api, admin) does not cover this route, or a membership change was \
        asked of a node without an admin token; the detail says what to use", ["forbidden"], false;
    /// 401 at a source's ingress.
    BadSignature: "The provider's signature is missing, malformed, expired or does not match", ["bad-signature"], false;
    /// 403 at a source's ingress.
    Forbidden: "The source is disabled, or the caller is outside its allowlist", ["forbidden"], false;
    NotFound: "No such resource: a malformed id in the path names nothing", ["not-found"], false;
    Conflict: "The change conflicts with the current state", ["conflict"], false;
    PayloadTooLarge: "The body is over the limit", ["payload-too-large"], false;
    UnsupportedMediaType: "A body sent without `content-type: application/json`", ["unsupported-media-type"], false;
    InvalidField: "JSON of the wrong shape, or a field out of its range; the detail names the field", ["invalid-field"], false;
    RateLimited: "The source is over its rate limit on this node", ["rate-limited"], true;
    /// 503 of any commit.
    Unavailable: "No leader can commit the request right now; retry", ["unavailable"], true;
    /// 503 of ingest: a commit, or the node's ingest budgets.
    IngestUnavailable: "No leader can commit the request, or an ingest budget is full (back-pressure); retry \
        with the same idempotency keys", ["unavailable", "ingest-budget-full"], true;
}
