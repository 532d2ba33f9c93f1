//! `GET /v1/cluster`: leader, term, nodes and the shard map, from any node.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

use crate::context::ApiContext;

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new().route("/v1/cluster", get(status))
}

async fn status(State(ctx): State<Arc<ApiContext>>) -> axum::Json<Value> {
    let now_ms = ctx.clock.wall_ms();
    let state = ctx.state.read();
    let nodes: Vec<Value> = state
        .nodes
        .values()
        .map(|n| {
            json!({
                "id": n.id,
                "live": n.live_until_ms > now_ms,
                "draining": n.draining,
                "last_heartbeat_at": hookraft_core::clock::format_rfc3339_ms(n.last_heartbeat_ms),
                "shards_owned": state.shards_owned_by(n.id).len(),
            })
        })
        .collect();
    let shards: Vec<Value> = state
        .shards
        .iter()
        .enumerate()
        .map(|(shard, g)| json!({ "shard": shard, "owner": g.owner, "token": g.token }))
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
