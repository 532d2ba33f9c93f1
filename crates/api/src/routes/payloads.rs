//! `/v1/cluster/payloads`: this node's payload keys, and the rewrap that
//! seals retained payloads, endpoint signing secrets and provider secrets
//! again under its active key after a rotation (or seals, for the first
//! time, what is stored in clear).
//!
//! A call without `after` first rewraps every stored secret (there are at
//! most a few per endpoint and source), [`REWRAP_BATCH_MAX`] per log entry,
//! each replaced only if it is still what was read.
//!
//! The rewrap walks the events in id order in bounded steps: each step
//! looks at most [`REWRAP_SCAN_MAX`] events under the state's read lock,
//! opens and seals outside it, and commits at most
//! [`REWRAP_BATCH_MAX`] payloads per log entry, so every replica applies
//! the same bytes. A payload changed meanwhile (another rewrap) is left as
//! it is by apply. One call looks at most [`REWRAP_CALL_SCAN_MAX`] events
//! and answers where the next call starts.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use axum::extract::State;
use hookraft_core::command::{Command, REWRAP_BATCH_MAX, Response, RewrappedPayload, RewrappedSecret};
use hookraft_core::ids::EventId;
use hookraft_core::payload::{Keyring, OpenError};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::commit;
use crate::context::ApiContext;
use crate::extract::OptionalJsonBody;
use crate::openapi::problems::{Conflict, InvalidField, Unavailable};
use crate::problem::{ApiResult, Problem};
use crate::views::cluster::{MissingKey, PayloadKeys, RewrapFailure, Rewrapped, SecretsRewrapped};

/// Events one step looks at under the state's read lock, at most.
pub const REWRAP_SCAN_MAX: usize = 10_000;
/// Events one call looks at, at most; the answer's `next_after` goes on.
pub const REWRAP_CALL_SCAN_MAX: usize = 1_000_000;
/// Failures listed by id in an answer (all are counted).
const FAILURES_LISTED_MAX: usize = 20;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(keys)).routes(routes!(rewrap))
}

/// This node's keyring (ids only) and the keys payloads named that it lacks.
#[utoipa::path(
    get,
    path = "/v1/cluster/payloads/keys",
    tag = "cluster",
    responses((status = 200, body = PayloadKeys))
)]
async fn keys(State(ctx): State<Arc<ApiContext>>) -> axum::Json<PayloadKeys> {
    let keys = &ctx.payloads;
    let missing_keys =
        keys.missing_keys().into_iter().map(|(key_id, failed_opens)| MissingKey { key_id, failed_opens }).collect();
    axum::Json(PayloadKeys {
        encryption: keys.keyring().is_some(),
        active_key_id: keys.active_key_id().map(str::to_string),
        key_ids: keys.keyring().map(|ring| ring.ids().map(str::to_string).collect()).unwrap_or_default(),
        missing_keys,
    })
}

/// What to rewrap; the body is optional.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RewrapRequest {
    /// Count payloads by key without changing any.
    #[serde(default)]
    dry_run: bool,
    /// Start after this event (the `next_after` of an earlier answer).
    #[schema(value_type = Option<crate::views::EventIdText>)]
    after: Option<String>,
}

/// What one call did.
#[derive(Debug, Default)]
struct Progress {
    examined: u64,
    rewrapped: u64,
    /// Changed by someone else between the read and the commit.
    skipped: u64,
    failed: u64,
    failures: Vec<RewrapFailure>,
    /// Retained payloads by the key they are under after the call (`clear`
    /// for none), over the events examined.
    by_key: BTreeMap<String, u64>,
}

/// Seal every retained payload again under this node's active key (after a
/// rotation, or payloads stored in clear), at most 1,000,000 events looked
/// at per call.
#[utoipa::path(
    post,
    path = "/v1/cluster/payloads/rewrap",
    tag = "cluster",
    request_body(content = Option<RewrapRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "What the call did; call again with `next_after` while it is set.", body = Rewrapped),
        (status = 409, response = Conflict),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn rewrap(
    State(ctx): State<Arc<ApiContext>>,
    OptionalJsonBody(request): OptionalJsonBody<RewrapRequest>,
) -> ApiResult<axum::Json<Rewrapped>> {
    let after = match &request.after {
        Some(text) => Some(text.parse::<EventId>().map_err(|e| Problem::invalid(format!("after: {e}")))?),
        None => None,
    };
    let ring = match ctx.payloads.keyring() {
        Some(ring) => Some(ring),
        None if request.dry_run => None,
        None => {
            return Err(Problem::conflict(
                "this node has no keyring (payloads are stored in clear): start it with --keyring to rewrap",
            ));
        }
    };
    let secrets = match after {
        None => Some(rewrap_secrets(&ctx, ring, request.dry_run).await?),
        Some(_) => None,
    };
    let mut progress = Progress::default();
    let mut cursor = after;
    let mut looked = 0;
    let next_after = loop {
        let (batch, next, scanned) = step(&ctx, ring, cursor, request.dry_run, &mut progress);
        looked += scanned;
        if !batch.is_empty() {
            match commit(&ctx, Command::RewrapPayloads { now_ms: ctx.clock.wall_ms(), payloads: batch }).await? {
                Response::Rewrapped { rewrapped, skipped } => {
                    progress.rewrapped += u64::from(rewrapped);
                    progress.skipped += u64::from(skipped);
                }
                other => return Err(Problem::internal(format!("unexpected answer to a rewrap: {other:?}"))),
            }
        }
        match next {
            None => break None,
            Some(id) if looked >= REWRAP_CALL_SCAN_MAX => break Some(id),
            Some(id) => cursor = Some(id),
        }
    };
    let Progress { examined, rewrapped, skipped, failed, failures, by_key } = progress;
    Ok(axum::Json(Rewrapped {
        dry_run: request.dry_run,
        active_key_id: ctx.payloads.active_key_id().map(str::to_string),
        examined,
        rewrapped,
        skipped,
        failed,
        failures,
        by_key,
        next_after,
        secrets,
    }))
}

/// Seals every stored secret not under `ring`'s active key again under
/// it (with `dry_run`, or without a ring, only counts them by key).
async fn rewrap_secrets(ctx: &ApiContext, ring: Option<&Keyring>, dry_run: bool) -> ApiResult<SecretsRewrapped> {
    let active = ring.map(Keyring::active_id);
    let slots = ctx.state.read().secret_slots();
    let mut done = SecretsRewrapped::default();
    let mut batch = Vec::new();
    for (slot, stored) in slots {
        done.examined += 1;
        let key = stored.key_id();
        let ring = match ring {
            Some(ring) if !dry_run && key != active => ring,
            _ => {
                *done.by_key.entry(key.unwrap_or("clear").to_string()).or_default() += 1;
                continue;
            }
        };
        let resealed = slot.with_owner(|owner| {
            let opened = ctx.payloads.counted(stored.open(Some(ring), owner), false)?;
            Ok::<_, OpenError>(ring.seal_secret(owner, opened.as_bytes(), ctx.entropy.as_ref()))
        });
        match resealed {
            Ok(secret) => {
                *done.by_key.entry(ring.active_id().to_string()).or_default() += 1;
                batch.push(RewrappedSecret { slot, from: stored, secret });
            }
            Err(error) => {
                done.failed += 1;
                *done.by_key.entry(error.key_id().to_string()).or_default() += 1;
            }
        }
        if batch.len() == REWRAP_BATCH_MAX {
            commit_secrets(ctx, std::mem::take(&mut batch), &mut done).await?;
        }
    }
    if !batch.is_empty() {
        commit_secrets(ctx, batch, &mut done).await?;
    }
    Ok(done)
}

async fn commit_secrets(ctx: &ApiContext, secrets: Vec<RewrappedSecret>, done: &mut SecretsRewrapped) -> ApiResult<()> {
    match commit(ctx, Command::RewrapSecrets { now_ms: ctx.clock.wall_ms(), secrets }).await? {
        Response::Rewrapped { rewrapped, skipped } => {
            done.rewrapped += u64::from(rewrapped);
            done.skipped += u64::from(skipped);
            Ok(())
        }
        other => Err(Problem::internal(format!("unexpected answer to a rewrap: {other:?}"))),
    }
}

/// One bounded step after `cursor`: the payloads to commit (at most
/// [`REWRAP_BATCH_MAX`]), the event the next step starts after (`None`:
/// the end), and how many events it looked at.
fn step(
    ctx: &ApiContext,
    ring: Option<&Keyring>,
    cursor: Option<EventId>,
    dry_run: bool,
    progress: &mut Progress,
) -> (Vec<RewrappedPayload>, Option<EventId>, usize) {
    let active = ring.map(Keyring::active_id);
    // Read under the lock: the events to rewrap (shared payloads, cheap to clone).
    let (candidates, next, scanned) = {
        let state = ctx.state.read();
        let start = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let mut candidates = Vec::new();
        let mut scanned = 0;
        let mut last = None;
        // In memory and in the history: a finished event's payload is sealed again too.
        for event in state.events_in((start, Bound::Unbounded), false) {
            if scanned == REWRAP_SCAN_MAX || candidates.len() == REWRAP_BATCH_MAX {
                break;
            }
            scanned += 1;
            last = Some(event.id);
            let key = event.payload.key_id();
            if dry_run || key == active {
                *progress.by_key.entry(key.unwrap_or("clear").to_string()).or_default() += 1;
                continue;
            }
            candidates.push((event.id, event.event_type.clone(), event.payload.clone()));
        }
        let more =
            last.is_some_and(|last| state.events_in((Bound::Excluded(last), Bound::Unbounded), false).next().is_some());
        (candidates, if more { last } else { None }, scanned)
    };
    progress.examined += scanned as u64;
    let Some(ring) = ring else { return (Vec::new(), next, scanned) };
    let mut batch = Vec::with_capacity(candidates.len());
    for (id, event_type, stored) in candidates {
        match ctx.payloads.open_payload(&id, &event_type, &stored) {
            Ok(plain) => {
                let payload = ring.seal(&id.as_str(), &event_type, &plain, ctx.entropy.as_ref());
                *progress.by_key.entry(ring.active_id().to_string()).or_default() += 1;
                batch.push(RewrappedPayload {
                    event_id: id,
                    from_key_id: stored.key_id().map(str::to_string),
                    payload,
                });
            }
            Err(error) => {
                progress.failed += 1;
                *progress.by_key.entry(error.key_id().to_string()).or_default() += 1;
                if progress.failures.len() < FAILURES_LISTED_MAX {
                    progress.failures.push(RewrapFailure { event_id: id, error: error.to_string() });
                }
            }
        }
    }
    (batch, next, scanned)
}
