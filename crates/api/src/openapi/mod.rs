//! The API's OpenAPI 3.1 document, and the pages that serve it.
//!
//! The document is derived, not written: each handler carries its
//! `#[utoipa::path]` (route, parameters, body, every status it answers),
//! the views and request types derive their schemas, and utoipa-axum's
//! `routes!` registers a handler with the router and the document in one
//! call, so a route cannot be served undocumented. [`document`] joins the
//! parts (the `/v1` routes, the public ones, the node-to-node ones) and
//! [`finish`] adds what follows from where a route is rather than what it
//! does: its credential, the 401 that comes with it, and the problems of
//! reading a JSON body.
//!
//! `GET /openapi.json` serves the document and `GET /docs` a reference
//! page rendered from it here ([`page`]); both are built once, need no
//! token (they describe the API and hold no data) and fetch nothing.

pub mod page;
pub mod problems;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi as _;
use utoipa::openapi::schema::{Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, Ref, RefOr, SecurityRequirement};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The name of the `/v1` bearer token's security scheme.
pub const API_TOKEN: &str = "apiToken";
/// The admin token's: routes under `/v1/cluster/`.
pub const ADMIN_TOKEN: &str = "adminToken";
/// The node links' signature: node-to-node routes.
pub const CLUSTER_SECRET: &str = "nodeLink";

/// What the document says about itself; the routes add the rest.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "hookraft HTTP API",
        description = "Webhook delivery: endpoints, events, deliveries and their timelines, inbound sources, \
            and the cluster's administration. JSON in and out; every failure is `application/problem+json` \
            (RFC 9457) with one of the problem types listed under the `Problem` schema. Any node of a \
            cluster answers; changes are committed through the Raft leader. Prose reference: docs/API.md.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    tags(
        (name = "endpoints", description = "Where events are delivered: registration, settings, secrets, \
            bulk replay, blocked ordering keys, recent attempt stats."),
        (name = "events", description = "Ingest (one or a batch, committed before the answer), read, list and replay."),
        (name = "deliveries", description = "One event to one endpoint: list (the dead-letter queue is \
            `state=dead`), read with the timeline, replay."),
        (name = "sources", description = "Inbound sources: providers whose webhooks hookraft receives."),
        (name = "inbound", description = "The ingress of provider webhooks: no API token, the provider's \
            signature is the credential."),
        (name = "cluster", description = "The cluster's state and its administration (admin token under \
            `/v1/cluster/`), payload keys."),
        (name = "stats", description = "What an operator looks at first, and what the dashboard draws: the \
            cluster's flows per minute over the last hour, every endpoint's health."),
        (name = "operations", description = "Health, readiness, metrics, and this document."),
        (name = "dashboard", description = "The operator dashboard: static files embedded in the binary, no \
            token (they hold no data); the page calls `/v1` with the operator's token from the browser."),
        (name = "internal", description = "Node-to-node RPC: bincode bodies between the nodes of a cluster, \
            never for clients. Listed so the document names every route a node serves."),
    ),
    // Referred to by parameters, which do not register what they name.
    components(schemas(
        crate::problem::ProblemBody,
        crate::views::EndpointIdText,
        crate::views::EventIdText,
        crate::views::DeliveryIdText,
        crate::views::SourceIdText,
        crate::routes::ui::AssetName,
    ))
)]
struct Base;

/// The whole document: every route a node serves.
pub fn document() -> OpenApi {
    let mut doc = Base::openapi();
    doc.merge(crate::v1_routes().into_openapi());
    doc.merge(crate::public_routes().into_openapi());
    doc.merge(crate::routes::internal::routes().into_openapi());
    finish(&mut doc);
    doc
}

/// The document as served, built once.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| serde_json::to_string(&document()).unwrap_or_default())
}

/// Adds what follows from where a route is: a unique operation id, the credential of `/v1`
/// (the admin token under `/v1/cluster/`) and of the node-to-node routes
/// with the 401 that comes with it; for a JSON body, the problems of
/// reading it (not JSON, over the limit, not sent as JSON); for a path
/// parameter, the 400 of one that is not UTF-8. Registers the
/// security schemes and the problem responses.
fn finish(doc: &mut OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    let bearer = |description: &str| {
        SecurityScheme::Http(
            HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(description.to_string())).build(),
        )
    };
    components.add_security_scheme(
        API_TOKEN,
        bearer(
            "A token of the read scope (`GET`) or the api scope (`--api-token`, `--read-token`, \
             `--tokens-file`), as `Authorization: Bearer <token>`. Without any token configured, `/v1` is \
             open to loopback hosts only.",
        ),
    );
    components.add_security_scheme(
        ADMIN_TOKEN,
        bearer(
            "Routes under `/v1/cluster/` (administration, membership and payload keys) take a token of the \
             admin scope (`--admin-token`, or an `admin` line of `--tokens-file`), never the API token.",
        ),
    );
    components.add_security_scheme(
        CLUSTER_SECRET,
        SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
            hookraft_raft::link::LINK_HEADER,
            "An HMAC-SHA256 signature under a key derived from the cluster secret (`--cluster-secret`), \
             with the sender, receiver, time and a sequence number; node-to-node routes only.",
        ))),
    );
    components.responses.extend(problems::components().into_iter().map(|(name, r)| (name.to_string(), r)));

    for (path, item) in doc.paths.paths.iter_mut() {
        let credential = credential_of(path);
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
            &mut item.head,
            &mut item.options,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            // Handler names repeat across modules (`list`, `read`): the tag
            // makes the id unique, e.g. `endpoints.list`.
            if let (Some(tag), Some(id)) = (operation.tags.as_ref().and_then(|t| t.first()), &operation.operation_id) {
                operation.operation_id = Some(format!("{tag}.{id}"));
            }
            if let Some(body) = operation.request_body.as_mut() {
                body.content.values_mut().for_each(|content| object_not_null(&mut content.schema));
            }
            let responses = &mut operation.responses.responses;
            let mut add = |status: &str, name: &str| {
                responses.entry(status.to_string()).or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
            };
            if let Some(scheme) = credential {
                add("401", "Unauthorized");
                if scheme != CLUSTER_SECRET {
                    add("403", "OutOfScope");
                }
                operation.security = Some(vec![SecurityRequirement::new(scheme, Vec::<String>::new())]);
            }
            let json_body = operation
                .request_body
                .as_ref()
                .is_some_and(|body| body.content.keys().any(|t| t == "application/json"));
            // A path segment that is not UTF-8 once decoded.
            let path_parameter = operation
                .parameters
                .iter()
                .flatten()
                .any(|p| p.parameter_in == utoipa::openapi::path::ParameterIn::Path);
            if path_parameter {
                add("400", "BadRequest");
            }
            if json_body {
                add("400", "BadRequest");
                add("413", "PayloadTooLarge");
                add("415", "UnsupportedMediaType");
            }
        }
    }
}

/// An optional body is absent or an object, never `null`: utoipa writes
/// `Option<T>` as "null or T", the body as "T", not required.
fn object_not_null(schema: &mut Option<RefOr<Schema>>) {
    if let Some(RefOr::T(Schema::OneOf(one_of))) = schema {
        let is_null =
            |s: &RefOr<Schema>| matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == Type::Null.into());
        if one_of.items.len() == 2 && one_of.items.iter().any(is_null) {
            *schema = one_of.items.iter().find(|s| !is_null(s)).cloned();
        }
    }
}

/// The security scheme a path needs, if any.
pub fn credential_of(path: &str) -> Option<&'static str> {
    if path.starts_with("/v1/cluster/") {
        Some(ADMIN_TOKEN)
    } else if path.starts_with("/v1/") {
        Some(API_TOKEN)
    } else if path.starts_with("/internal/") {
        Some(CLUSTER_SECRET)
    } else {
        None
    }
}

/// `/openapi.json` and `/docs`.
pub fn router<S: Clone + Send + Sync + 'static>() -> OpenApiRouter<S> {
    OpenApiRouter::new().routes(routes!(openapi_json)).routes(routes!(docs))
}

/// Headers every page here carries: nothing is loaded from elsewhere, and
/// no browser guesses the type.
fn page_response(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(page::CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The OpenAPI 3.1 document of this API. No token: it describes the API and holds no data.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document.", body = Object, content_type = "application/json"))
)]
async fn openapi_json() -> Response {
    page_response("application/json", document_json())
}

/// A reference page of this API, rendered from the document; it loads nothing from elsewhere.
#[utoipa::path(
    get,
    path = "/docs",
    tag = "operations",
    responses((status = 200, description = "An HTML page.", body = String, content_type = "text/html"))
)]
async fn docs() -> Response {
    static PAGE: OnceLock<String> = OnceLock::new();
    let page = PAGE.get_or_init(|| {
        let doc: serde_json::Value = serde_json::from_str(document_json()).unwrap_or_default();
        page::render(&doc)
    });
    page_response("text/html; charset=utf-8", page)
}
