//! `/v1/sources`: inbound sources, registered, listed, read, changed,
//! deleted, their secret rotated. A source's secret is written, never read
//! back. The ingress itself is `routes/inbound.rs`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookraft_core::command::{Command, SourcePatch};
use hookraft_core::ids::SourceId;
use hookraft_core::inbound::{
    ALLOW_CIDRS_MAX, Cidr, Encoding, LOCATOR_BYTES_MAX, Locator, ProviderSecret, Scheme, Source,
};
use hookraft_core::payload::SecretOwner;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{commit, parse_id};
use crate::context::ApiContext;
use crate::extract::JsonBody;
use crate::openapi::problems::{Conflict, InvalidField, NotFound, Unavailable};
use crate::problem::{ApiResult, Problem};
use crate::validate::{self, double_option};
use crate::views::sources::{self as view, SourceView};

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(read, update, remove))
        .routes(routes!(rotate_secret))
}

/// Where a value is: `{"header": "x-request-id"}` or `{"pointer": "/id"}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum LocatorInput {
    Header(String),
    Pointer(String),
}

impl LocatorInput {
    fn into_locator(self, field: &str) -> ApiResult<Locator> {
        match self {
            LocatorInput::Header(name) => Ok(Locator::Header(header_name(field, &name)?)),
            LocatorInput::Pointer(pointer) => Ok(Locator::Pointer(json_pointer(field, &pointer)?)),
        }
    }
}

/// A header name as HTTP allows it, lowercased.
fn header_name(field: &str, name: &str) -> ApiResult<String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > LOCATOR_BYTES_MAX || !name.bytes().all(token) {
        return Err(Problem::invalid(format!("{field}: `{name}` is not a header name")));
    }
    Ok(name.to_ascii_lowercase())
}

/// A JSON pointer (RFC 6901): empty, or `/` and its reference tokens.
fn json_pointer(field: &str, pointer: &str) -> ApiResult<String> {
    if pointer.len() > LOCATOR_BYTES_MAX || !(pointer.is_empty() || pointer.starts_with('/')) {
        return Err(Problem::invalid(format!(
            "{field}: a JSON pointer starts with `/` (like `/data/object/id`) and has at most {LOCATOR_BYTES_MAX} bytes"
        )));
    }
    Ok(pointer.to_string())
}

fn cidrs(list: &[String]) -> ApiResult<Vec<Cidr>> {
    if list.len() > ALLOW_CIDRS_MAX {
        return Err(Problem::invalid(format!("allow_cidrs may hold at most {ALLOW_CIDRS_MAX} blocks")));
    }
    list.iter().map(|c| c.parse::<Cidr>().map_err(|e| Problem::invalid(format!("allow_cidrs: {e}")))).collect()
}

/// A source to create.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateSource {
    /// How the provider signs.
    #[schema(value_type = view::SchemeView)]
    scheme: String,
    /// The provider's signing secret (`whsec_<base64>` for `standard-webhooks`), never shown again.
    secret: String,
    #[schema(max_length = 1024)]
    description: Option<String>,
    /// `hmac-sha256` only (and required there): the header the signature is in.
    signature_header: Option<String>,
    /// `hmac-sha256` only: `hex` (default) or `base64`.
    #[schema(value_type = Option<view::EncodingView>)]
    signature_encoding: Option<String>,
    /// `hmac-sha256` only: text before the signature, like `sha256=`.
    signature_prefix: Option<String>,
    /// Where the provider's event id is; required for `hmac-sha256`.
    event_id: Option<LocatorInput>,
    /// Where the event type is; absent: the scheme's default, else `inbound`.
    event_type: Option<LocatorInput>,
    /// JSON pointer to the entity an event is about (its ordering key).
    entity_key: Option<String>,
    /// JSON pointer to the event's version: a number, or text that sorts in order.
    version: Option<String>,
    /// Requests a second each node accepts.
    #[schema(minimum = 1, maximum = 100000)]
    rate_limit_per_s: Option<u32>,
    /// Callers allowed (IPv4 or IPv6 CIDR blocks); empty: anyone.
    #[schema(max_items = 64)]
    allow_cidrs: Option<Vec<String>>,
}

fn scheme_of(body: &CreateSource) -> ApiResult<Scheme> {
    let plain_only =
        body.signature_header.is_some() || body.signature_encoding.is_some() || body.signature_prefix.is_some();
    let scheme = match body.scheme.as_str() {
        "standard-webhooks" => Scheme::StandardWebhooks,
        "stripe" => Scheme::Stripe,
        "github" => Scheme::Github,
        "hmac-sha256" => {
            let header = body.signature_header.as_deref().ok_or_else(|| {
                Problem::invalid("signature_header: an hmac-sha256 source names the header its signature is in")
            })?;
            let encoding = match body.signature_encoding.as_deref() {
                None | Some("hex") => Encoding::Hex,
                Some("base64") => Encoding::Base64,
                Some(other) => {
                    return Err(Problem::invalid(format!(
                        "signature_encoding must be \"hex\" or \"base64\", not {other:?}"
                    )));
                }
            };
            let prefix = body.signature_prefix.clone().filter(|p| !p.is_empty());
            if prefix.as_ref().is_some_and(|p| p.len() > LOCATOR_BYTES_MAX) {
                return Err(Problem::invalid(format!("signature_prefix may have at most {LOCATOR_BYTES_MAX} bytes")));
            }
            return Ok(Scheme::HmacSha256 { header: header_name("signature_header", header)?, encoding, prefix });
        }
        other => {
            return Err(Problem::invalid(format!(
                "scheme must be \"standard-webhooks\", \"stripe\", \"github\" or \"hmac-sha256\", not {other:?}"
            )));
        }
    };
    if plain_only {
        return Err(Problem::invalid("signature_header, signature_encoding and signature_prefix are for hmac-sha256"));
    }
    Ok(scheme)
}

/// Create an inbound source.
#[utoipa::path(
    post,
    path = "/v1/sources",
    tag = "sources",
    request_body = CreateSource,
    responses(
        (status = 201, description = "The source, without its secret.", body = SourceView),
        (status = 409, response = Conflict),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn create(
    State(ctx): State<Arc<ApiContext>>,
    JsonBody(body): JsonBody<CreateSource>,
) -> ApiResult<impl IntoResponse> {
    let scheme = scheme_of(&body)?;
    let secret = ProviderSecret::parse(&scheme, &body.secret).map_err(|e| Problem::invalid(format!("secret: {e}")))?;
    if let Some(d) = &body.description {
        validate::description(d)?;
    }
    let event_id = match body.event_id {
        Some(locator) => locator.into_locator("event_id")?,
        None => scheme
            .default_event_id()
            .ok_or_else(|| Problem::invalid("event_id: an hmac-sha256 source says where the provider's event id is"))?,
    };
    let now_ms = ctx.clock.wall_ms();
    let id = ctx.with_rng(|rng| SourceId::generate(now_ms, rng));
    let secret = ctx.payloads.store_secret(SecretOwner::Source(&id.as_str()), secret.key());
    let source = Source {
        id,
        description: body.description,
        scheme,
        secret,
        previous_secrets: Vec::new(),
        event_id,
        event_type: body.event_type.map(|l| l.into_locator("event_type")).transpose()?,
        entity_key: body.entity_key.map(|p| json_pointer("entity_key", &p)).transpose()?,
        version: body.version.map(|p| json_pointer("version", &p)).transpose()?,
        rate_limit_per_s: body.rate_limit_per_s.map(validate::rate_limit).transpose()?,
        allow_cidrs: cidrs(body.allow_cidrs.as_deref().unwrap_or_default())?,
        disabled: false,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    };
    commit(&ctx, Command::CreateSource { source: Box::new(source) }).await?;
    Ok((StatusCode::CREATED, axum::Json(source_view(&ctx, &id)?)))
}

fn source_view(ctx: &ApiContext, id: &SourceId) -> ApiResult<SourceView> {
    let state = ctx.state.read();
    let source = state.inbound.sources.get(id).ok_or_else(|| Problem::not_found(format!("no source {id}")))?;
    Ok(view::view(source))
}

/// List every source.
#[utoipa::path(get, path = "/v1/sources", tag = "sources", responses((status = 200, body = view::SourceList)))]
async fn list(State(ctx): State<Arc<ApiContext>>) -> axum::Json<view::SourceList> {
    let state = ctx.state.read();
    axum::Json(view::SourceList { data: state.inbound.sources.values().map(view::view).collect() })
}

/// Read a source.
#[utoipa::path(
    get,
    path = "/v1/sources/{id}",
    tag = "sources",
    params(SourcePath),
    responses((status = 200, body = SourceView), (status = 404, response = NotFound))
)]
async fn read(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<axum::Json<SourceView>> {
    let id: SourceId = parse_id(&id)?;
    source_view(&ctx, &id).map(axum::Json)
}

/// Changes to a source: every field of a creation but `scheme`, `secret`
/// and the `signature_*` ones, plus `disabled`; `null` clears an optional one.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PatchSource {
    #[serde(default, deserialize_with = "double_option")]
    description: Option<Option<String>>,
    event_id: Option<LocatorInput>,
    #[serde(default, deserialize_with = "double_option")]
    event_type: Option<Option<LocatorInput>>,
    #[serde(default, deserialize_with = "double_option")]
    entity_key: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    version: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(minimum = 1, maximum = 100000)]
    rate_limit_per_s: Option<Option<u32>>,
    #[schema(max_items = 64)]
    allow_cidrs: Option<Vec<String>>,
    disabled: Option<bool>,
}

/// Change a source.
#[utoipa::path(
    patch,
    path = "/v1/sources/{id}",
    tag = "sources",
    params(SourcePath),
    request_body = PatchSource,
    responses(
        (status = 200, body = SourceView),
        (status = 404, response = NotFound),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn update(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PatchSource>,
) -> ApiResult<axum::Json<SourceView>> {
    let id: SourceId = parse_id(&id)?;
    if let Some(Some(d)) = &body.description {
        validate::description(d)?;
    }
    let pointer = |field: &'static str, value: Option<Option<String>>| {
        value.map(|v| v.map(|p| json_pointer(field, &p)).transpose()).transpose()
    };
    let patch = SourcePatch {
        description: body.description,
        event_id: body.event_id.map(|l| l.into_locator("event_id")).transpose()?,
        event_type: body.event_type.map(|v| v.map(|l| l.into_locator("event_type")).transpose()).transpose()?,
        entity_key: pointer("entity_key", body.entity_key)?,
        version: pointer("version", body.version)?,
        rate_limit_per_s: body.rate_limit_per_s.map(|r| r.map(validate::rate_limit).transpose()).transpose()?,
        allow_cidrs: body.allow_cidrs.as_deref().map(cidrs).transpose()?,
        disabled: body.disabled,
    };
    commit(&ctx, Command::UpdateSource { id, patch, now_ms: ctx.clock.wall_ms() }).await?;
    source_view(&ctx, &id).map(axum::Json)
}

/// Delete a source; endpoints stop listing it, its events stay.
#[utoipa::path(
    delete,
    path = "/v1/sources/{id}",
    tag = "sources",
    params(SourcePath),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, response = NotFound),
        (status = 503, response = Unavailable),
    )
)]
async fn remove(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id: SourceId = parse_id(&id)?;
    commit(&ctx, Command::DeleteSource { id, now_ms: ctx.clock.wall_ms() }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The provider's new secret.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RotateSourceSecret)]
struct RotateSecret {
    secret: String,
    /// How long the old secret keeps verifying; at most 604800 (7 days).
    #[schema(maximum = 604800)]
    grace_period_s: Option<u64>,
}

/// Rotate a source's secret: the new one is current, the old one still
/// verifies for the grace period.
#[utoipa::path(
    post,
    path = "/v1/sources/{id}/rotate-secret",
    tag = "sources",
    params(SourcePath),
    request_body = RotateSecret,
    responses(
        (status = 200, body = SourceView),
        (status = 404, response = NotFound),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn rotate_secret(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RotateSecret>,
) -> ApiResult<axum::Json<SourceView>> {
    let id: SourceId = parse_id(&id)?;
    let scheme = {
        let state = ctx.state.read();
        state
            .inbound
            .sources
            .get(&id)
            .map(|s| s.scheme.clone())
            .ok_or_else(|| Problem::not_found(format!("no source {id}")))?
    };
    let secret = ProviderSecret::parse(&scheme, &body.secret).map_err(|e| Problem::invalid(format!("secret: {e}")))?;
    let grace_ms = validate::grace_ms(body.grace_period_s, ctx.secret_grace_ms)?;
    let now_ms = ctx.clock.wall_ms();
    let grace_until_ms = now_ms + grace_ms;
    let secret = ctx.payloads.store_secret(SecretOwner::Source(&id.as_str()), secret.key());
    commit(&ctx, Command::RotateSourceSecret { id, secret, grace_until_ms, now_ms }).await?;
    source_view(&ctx, &id).map(axum::Json)
}

/// The `{id}` of the routes above.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documents the path parameter; handlers take it as text.
struct SourcePath {
    #[param(value_type = crate::views::SourceIdText)]
    id: String,
}
