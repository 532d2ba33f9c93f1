//! `/v1/cluster`: the cluster's state from any node, and its administration
//! (shard moves, drains, membership changes). Everything under
//! `/v1/cluster/` needs a token of the admin scope (`crate::auth`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hookraft_core::command::{Command, Response};
use hookraft_core::ids::{NodeId, SHARD_COUNT};
use hookraft_core::redact::SecretString;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::commit;
use crate::context::{AdminError, ApiContext};
use crate::extract::JsonBody;
use crate::openapi::problems::{Conflict, InvalidField, NotFound, Unavailable};
use crate::problem::{ApiResult, Problem};
use crate::views::Timestamp;
use crate::views::cluster as view;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new()
        .routes(routes!(status))
        .routes(routes!(move_shard))
        .routes(routes!(drain, undrain))
        .routes(routes!(add_node))
        .routes(routes!(remove_node))
}

/// The cluster as this node sees it: members, liveness, shard grants.
#[utoipa::path(get, path = "/v1/cluster", tag = "cluster", responses((status = 200, body = view::ClusterStatus)))]
async fn status(State(ctx): State<Arc<ApiContext>>) -> axum::Json<view::ClusterStatus> {
    let now_ms = ctx.clock.wall_ms();
    let members = ctx.admin.members();
    let state = ctx.state.read();
    let mut ids: Vec<NodeId> = members.iter().map(|m| m.id).chain(state.nodes.keys().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let nodes = ids
        .iter()
        .map(|id| {
            let member = members.iter().find(|m| m.id == *id);
            let record = state.nodes.get(id);
            view::NodeView {
                id: *id,
                addr: member.map(|m| m.addr.clone()),
                voter: member.is_some_and(|m| m.voter),
                member: member.is_some(),
                live: record.is_some_and(|n| n.live_until_ms > now_ms),
                draining: record.is_some_and(|n| n.draining),
                last_heartbeat_at: record.map(|n| Timestamp::from_ms(n.last_heartbeat_ms)),
                shards_owned: state.shards_owned_by(*id).len(),
                entries_behind: member.and_then(|m| m.entries_behind),
            }
        })
        .collect();
    let shards = (0..)
        .zip(state.shards.iter())
        .map(|(shard, g)| view::ShardView { shard, owner: g.owner, token: g.token, next_owner: g.next_owner })
        .collect();
    axum::Json(view::ClusterStatus {
        node_id: ctx.node_id,
        leader_id: ctx.cluster.leader_id(),
        term: ctx.cluster.term(),
        nodes,
        shards,
        outcomes_rejected_stale: state.outcomes_rejected_stale,
    })
}

/// Where a shard goes.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct MoveShard {
    /// A live voting member that is not draining.
    #[schema(value_type = u64)]
    node_id: NodeId,
}

fn parse_node(text: &str) -> ApiResult<NodeId> {
    text.parse().map_err(|_| Problem::not_found(format!("no node `{text}`")))
}

/// Move a shard: revoked at once under a new fencing token, granted to
/// the node once the current owner's lease must have lapsed.
#[utoipa::path(
    post,
    path = "/v1/cluster/shards/{shard}/move",
    tag = "cluster",
    params(("shard" = u16, Path, maximum = 63, description = "A shard number, 0 to 63.")),
    request_body = MoveShard,
    responses(
        (status = 202, body = view::ShardMoved),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn move_shard(
    State(ctx): State<Arc<ApiContext>>,
    Path(shard): Path<String>,
    JsonBody(body): JsonBody<MoveShard>,
) -> ApiResult<impl IntoResponse> {
    let shard: u16 = shard
        .parse()
        .ok()
        .filter(|s| *s < SHARD_COUNT)
        .ok_or_else(|| Problem::not_found(format!("no shard `{shard}`; shards are 0 to {}", SHARD_COUNT - 1)))?;
    let target = body.node_id;
    if !ctx.admin.members().iter().any(|m| m.id == target && m.voter) {
        return Err(Problem::not_found(format!("node {target} is not a voting member")));
    }
    {
        let now_ms = ctx.clock.wall_ms();
        let state = ctx.state.read();
        match state.nodes.get(&target) {
            Some(n) if n.draining => return Err(Problem::conflict(format!("node {target} is draining"))),
            Some(n) if n.live_until_ms > now_ms => {}
            _ => return Err(Problem::conflict(format!("node {target} is not live"))),
        }
    }
    let now_ms = ctx.clock.wall_ms();
    // Revoke now (a new token: the current owner's outcomes become stale and
    // it stops sending); the leader grants it to `target` once the current
    // owner's lease must have lapsed.
    match commit(&ctx, Command::RevokeShards { now_ms, shards: vec![(shard, Some(target))] }).await? {
        Response::ShardsAssigned { tokens } => {
            let token = tokens.first().map(|(_, t)| *t);
            Ok((StatusCode::ACCEPTED, axum::Json(view::ShardMoved { shard, owner: target, token, pending: true })))
        }
        other => Err(Problem::internal(format!("unexpected response {other:?}"))),
    }
}

async fn set_draining(
    ctx: &ApiContext,
    id: &str,
    draining: bool,
) -> ApiResult<(StatusCode, axum::Json<view::Draining>)> {
    let node_id = parse_node(id)?;
    let known = ctx.admin.members().iter().any(|m| m.id == node_id) || ctx.state.read().nodes.contains_key(&node_id);
    if !known {
        return Err(Problem::not_found(format!("no node {node_id}")));
    }
    let now_ms = ctx.clock.wall_ms();
    commit(ctx, Command::SetDraining { node_id, draining, now_ms }).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(view::Draining { id: node_id, draining })))
}

/// Drain a node: every shard leaves it; it keeps serving ingest and reads.
#[utoipa::path(
    post,
    path = "/v1/cluster/nodes/{id}/drain",
    tag = "cluster",
    params(("id" = u64, Path, description = "A node id.")),
    responses((status = 202, body = view::Draining), (status = 404, response = NotFound), (status = 503, response = Unavailable))
)]
async fn drain(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    set_draining(&ctx, &id, true).await
}

/// Stop draining a node.
#[utoipa::path(
    delete,
    path = "/v1/cluster/nodes/{id}/drain",
    tag = "cluster",
    params(("id" = u64, Path, description = "A node id.")),
    responses((status = 202, body = view::Draining), (status = 404, response = NotFound), (status = 503, response = Unavailable))
)]
async fn undrain(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    set_draining(&ctx, &id, false).await
}

/// A node to add, started first with the cluster's `--cluster-secret`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AddNode {
    #[schema(value_type = u64, minimum = 1)]
    id: NodeId,
    /// `host:port`.
    #[schema(min_length = 3, max_length = 255, pattern = ":", example = "10.0.0.4:8080")]
    addr: String,
}

/// The caller's bearer token, passed on when a follower hands a membership
/// change to the leader (which checks it again).
fn bearer(headers: &HeaderMap) -> Option<SecretString> {
    crate::auth::bearer_token(headers).map(SecretString::new)
}

fn admin_problem(error: AdminError) -> Problem {
    match error {
        AdminError::NotFound(d) => Problem::not_found(d),
        AdminError::Conflict(d) => Problem::conflict(d),
        AdminError::Unavailable(d) => Problem::unavailable(d),
    }
}

/// Add a node: it joins as a learner at once (the answer) and becomes a
/// voter once it has caught up, which `GET /v1/cluster` shows (`voter`,
/// `entries_behind`). Posting the same node again is harmless, and resumes
/// a promotion a change of leader interrupted.
#[utoipa::path(
    post,
    path = "/v1/cluster/nodes",
    tag = "cluster",
    request_body = AddNode,
    responses(
        (status = 202, body = view::NodeAdded),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn add_node(
    State(ctx): State<Arc<ApiContext>>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AddNode>,
) -> ApiResult<impl IntoResponse> {
    if body.id == 0 {
        return Err(Problem::invalid("id must be a positive integer"));
    }
    hookraft_core::node_addr::check_node_addr(&body.addr).map_err(Problem::invalid)?;
    ctx.admin.add_node(body.id, body.addr.clone(), bearer(&headers)).await.map_err(admin_problem)?;
    Ok((StatusCode::ACCEPTED, axum::Json(view::NodeAdded { id: body.id, addr: body.addr })))
}

/// Remove a node: a voter (its shards move), or a learner not yet
/// promoted (which cancels its add).
#[utoipa::path(
    delete,
    path = "/v1/cluster/nodes/{id}",
    tag = "cluster",
    params(("id" = u64, Path, description = "A node id.")),
    responses(
        (status = 202, body = view::NodeRemoved),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 503, response = Unavailable),
    )
)]
async fn remove_node(
    State(ctx): State<Arc<ApiContext>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let node_id = parse_node(&id)?;
    ctx.admin.remove_node(node_id, bearer(&headers)).await.map_err(admin_problem)?;
    // The node is out of the cluster; forget its record now if a leader can
    // commit it. A leader that removed itself knows no leader any more, so
    // this can fail: the new leader forgets the node once its liveness has
    // expired (`rebalance::departed`), and its shards move meanwhile.
    let now_ms = ctx.clock.wall_ms();
    if let Err(problem) = commit(&ctx, Command::ForgetNode { node_id, now_ms }).await {
        tracing::info!(node = node_id, ?problem, "removed; the leader will forget the node's record");
    }
    Ok((StatusCode::ACCEPTED, axum::Json(view::NodeRemoved { id: node_id, removed: true })))
}
