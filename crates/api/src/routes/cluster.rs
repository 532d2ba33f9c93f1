//! `/v1/cluster`: the cluster's state from any node, and its administration
//! (shard moves, drains, membership changes). Admin routes need the admin
//! token when one is configured.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use hookraft_core::command::{Command, Response};
use hookraft_core::ids::{NodeId, SHARD_COUNT};
use serde::Deserialize;
use serde_json::{Value, json};

use super::commit;
use crate::context::{AdminError, ApiContext};
use crate::extract::JsonBody;
use crate::problem::{ApiResult, Problem};

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new()
        .route("/v1/cluster", get(status))
        .route("/v1/cluster/shards/{shard}/move", post(move_shard))
        .route("/v1/cluster/nodes/{id}/drain", post(drain).delete(undrain))
        .route("/v1/cluster/nodes", post(add_node))
        .route("/v1/cluster/nodes/{id}", delete(remove_node))
}

async fn status(State(ctx): State<Arc<ApiContext>>) -> axum::Json<Value> {
    let now_ms = ctx.clock.wall_ms();
    let members = ctx.admin.members();
    let state = ctx.state.read();
    let mut ids: Vec<NodeId> = members.iter().map(|m| m.id).chain(state.nodes.keys().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let nodes: Vec<Value> = ids
        .iter()
        .map(|id| {
            let member = members.iter().find(|m| m.id == *id);
            let record = state.nodes.get(id);
            json!({
                "id": id,
                "addr": member.map(|m| m.addr.clone()),
                "voter": member.is_some_and(|m| m.voter),
                "member": member.is_some(),
                "live": record.is_some_and(|n| n.live_until_ms > now_ms),
                "draining": record.is_some_and(|n| n.draining),
                "last_heartbeat_at": record.map(|n| hookraft_core::clock::format_rfc3339_ms(n.last_heartbeat_ms)),
                "shards_owned": state.shards_owned_by(*id).len(),
            })
        })
        .collect();
    let shards: Vec<Value> = state
        .shards
        .iter()
        .enumerate()
        .map(|(shard, g)| json!({ "shard": shard, "owner": g.owner, "token": g.token, "next_owner": g.next_owner }))
        .collect();
    axum::Json(json!({
        "node_id": ctx.node_id,
        "leader_id": ctx.cluster.leader_id(),
        "term": ctx.cluster.term(),
        "nodes": nodes,
        "shards": shards,
        "outcomes_rejected_stale": state.outcomes_rejected_stale,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveShard {
    node_id: NodeId,
}

fn parse_node(text: &str) -> ApiResult<NodeId> {
    text.parse().map_err(|_| Problem::not_found(format!("no node `{text}`")))
}

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
            Ok((
                StatusCode::ACCEPTED,
                axum::Json(json!({ "shard": shard, "owner": target, "token": token, "pending": true })),
            ))
        }
        other => Err(Problem::internal(format!("unexpected response {other:?}"))),
    }
}

async fn set_draining(ctx: &ApiContext, id: &str, draining: bool) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let node_id = parse_node(id)?;
    let known = ctx.admin.members().iter().any(|m| m.id == node_id) || ctx.state.read().nodes.contains_key(&node_id);
    if !known {
        return Err(Problem::not_found(format!("no node {node_id}")));
    }
    let now_ms = ctx.clock.wall_ms();
    commit(ctx, Command::SetDraining { node_id, draining, now_ms }).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(json!({ "id": node_id, "draining": draining }))))
}

async fn drain(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    set_draining(&ctx, &id, true).await
}

async fn undrain(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    set_draining(&ctx, &id, false).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddNode {
    id: NodeId,
    addr: String,
}

fn admin_problem(error: AdminError) -> Problem {
    match error {
        AdminError::NotFound(d) => Problem::not_found(d),
        AdminError::Conflict(d) => Problem::conflict(d),
        AdminError::Unavailable(d) => Problem::unavailable(d),
    }
}

async fn add_node(
    State(ctx): State<Arc<ApiContext>>,
    JsonBody(body): JsonBody<AddNode>,
) -> ApiResult<impl IntoResponse> {
    if body.id == 0 {
        return Err(Problem::invalid("id must be a positive integer"));
    }
    if body.addr.is_empty() || body.addr.len() > 255 || !body.addr.contains(':') {
        return Err(Problem::invalid("addr must be host:port"));
    }
    ctx.admin.add_node(body.id, body.addr.clone()).await.map_err(admin_problem)?;
    Ok((StatusCode::ACCEPTED, axum::Json(json!({ "id": body.id, "addr": body.addr }))))
}

async fn remove_node(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    let node_id = parse_node(&id)?;
    ctx.admin.remove_node(node_id).await.map_err(admin_problem)?;
    // The node is out of the cluster; forget its record now if a leader can
    // commit it. A leader that removed itself knows no leader any more, so
    // this can fail: the new leader forgets the node once its liveness has
    // expired (`rebalance::departed`), and its shards move meanwhile.
    let now_ms = ctx.clock.wall_ms();
    if let Err(problem) = commit(&ctx, Command::ForgetNode { node_id, now_ms }).await {
        tracing::info!(node = node_id, ?problem, "removed; the leader will forget the node's record");
    }
    Ok((StatusCode::ACCEPTED, axum::Json(json!({ "id": node_id, "removed": true }))))
}
