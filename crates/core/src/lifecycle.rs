//! A delivery's whole lifecycle, as the API shows it: received (by which
//! node), encrypted (under which key), leased (by which node, under which
//! fencing token), then its recorded timeline — attempts, retries,
//! delivered or dead, replays — with any rewrap of its payload in place.
//!
//! Only the timeline is stored per delivery. The rest is derived: the
//! node that accepted the event and its payload's keys are the event's,
//! and a lease is read off the attempts (each names its node and token)
//! and off the shard's current grant, so no record grows for them.

use crate::ids::NodeId;
use crate::model::{Delivery, Event, ShardGrant, TimelineEntry};

/// One step of a delivery's lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage<'a> {
    /// The event was accepted (by `node_id`, when recorded).
    Received { at_ms: u64, node_id: Option<NodeId> },
    /// Its payload was sealed under `key_id` before it was proposed.
    Encrypted { at_ms: u64, key_id: &'a str },
    /// Its payload was sealed again under `key_id` (a rotation's rewrap, or
    /// the first encryption of a payload stored in clear).
    Rewrapped { at_ms: u64, key_id: &'a str },
    /// `node_id` took the delivery up under `fencing_token`: from the
    /// grant's time for the shard's current grant, else from the first
    /// attempt under that grant.
    Leased { at_ms: u64, node_id: NodeId, fencing_token: u64 },
    /// A recorded entry after `Received`.
    Recorded(&'a TimelineEntry),
}

impl Stage<'_> {
    pub fn at_ms(&self) -> u64 {
        match self {
            Stage::Received { at_ms, .. }
            | Stage::Encrypted { at_ms, .. }
            | Stage::Rewrapped { at_ms, .. }
            | Stage::Leased { at_ms, .. } => *at_ms,
            Stage::Recorded(entry) => entry.at_ms(),
        }
    }
}

/// The lifecycle of `delivery`, whose event is `event` (gone once
/// retention pruned it) and whose shard is granted as `grant`, in time order.
pub fn lifecycle<'a>(delivery: &'a Delivery, event: Option<&'a Event>, grant: &ShardGrant) -> Vec<Stage<'a>> {
    let received_at_ms = delivery.created_at_ms;
    let mut stages = vec![Stage::Received { at_ms: received_at_ms, node_id: event.and_then(|e| e.received_by) }];
    let mut late = Vec::new();
    if let Some(event) = event {
        let first_key = match &event.rewrapped {
            Some(rewrapped) => rewrapped.first_key_id.as_deref(),
            None => event.payload.key_id(),
        };
        if let Some(key_id) = first_key {
            stages.push(Stage::Encrypted { at_ms: received_at_ms, key_id });
        }
        if let (Some(rewrapped), Some(key_id)) = (&event.rewrapped, event.payload.key_id()) {
            late.push(Stage::Rewrapped { at_ms: rewrapped.at_ms.max(received_at_ms), key_id });
        }
    }
    let mut lease: Option<(NodeId, u64)> = None;
    for entry in delivery.history.iter() {
        if let TimelineEntry::Attempt { attempt, .. } = entry {
            let under = (attempt.node_id, attempt.fencing_token);
            if lease != Some(under) {
                let at_ms = match grant.owner {
                    Some(owner) if (owner, grant.token) == under => grant.granted_at_ms.max(received_at_ms),
                    _ => attempt.started_at_ms,
                };
                stages.push(Stage::Leased { at_ms, node_id: under.0, fencing_token: under.1 });
                lease = Some(under);
            }
        }
        stages.push(Stage::Recorded(entry));
    }
    // Waiting for an attempt under the current grant: who holds it now.
    if !delivery.state.is_terminal()
        && let Some(owner) = grant.owner
        && lease != Some((owner, grant.token))
    {
        let at_ms = grant.granted_at_ms.max(received_at_ms);
        late.push(Stage::Leased { at_ms, node_id: owner, fencing_token: grant.token });
    }
    // Derived stages go where their time puts them, after what they tie with.
    for stage in late {
        let at = stages.iter().rposition(|s| s.at_ms() <= stage.at_ms()).map_or(stages.len(), |i| i + 1);
        stages.insert(at, stage);
    }
    stages
}

#[cfg(test)]
mod tests;
