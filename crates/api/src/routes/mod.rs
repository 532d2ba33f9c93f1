//! One module per API resource, each exporting its own `router()`; merged
//! in [`crate::router`].

pub mod cluster;
pub mod deliveries;
pub mod endpoint_stats;
pub mod endpoints;
pub mod event_history;
pub mod events;
pub mod health;
pub mod inbound;
pub mod internal;
pub mod payloads;
pub mod sources;
pub mod stats;
pub mod ui;

use std::str::FromStr;

use hookraft_core::command::{Command, Response};
use hookraft_core::ids::IdParseError;

use crate::context::ApiContext;
use crate::problem::{ApiResult, Problem};

/// Commits a command and maps the domain's refusals to problems.
pub(crate) async fn commit(ctx: &ApiContext, command: Command) -> ApiResult<Response> {
    match ctx.proposer.propose(command).await? {
        Response::NotFound { what } => Err(Problem::not_found(format!("no {what}"))),
        Response::Conflict { detail } => Err(Problem::conflict(detail)),
        other => Ok(other),
    }
}

/// Parses an id from a path; a malformed id cannot name anything, so it is a 404.
pub(crate) fn parse_id<T: FromStr<Err = IdParseError>>(text: &str) -> ApiResult<T> {
    text.parse().map_err(|e: IdParseError| Problem::not_found(e.to_string()))
}
