//! Auto-disable: an endpoint whose every attempt has failed for its
//! `disable_after_s` is disabled, with a reason, and its pending deliveries
//! end dead with that reason (replayable once it is enabled again).
//!
//! Decided at apply, from the outcomes in the log: every recorded attempt
//! that failed starts the endpoint's failing time if it had none, every
//! success ends it, and a failure recorded `disable_after_s` or more after
//! the failing time began disables the endpoint. Attempts that were not
//! sent (a payload that could not be opened, a stale event) say nothing
//! about the endpoint and count neither way.

use super::ClusterState;
use crate::command::{Outcome, Response};
use crate::ids::EndpointId;
use crate::retry::Decision;

/// What one outcome says about its endpoint's health.
fn verdict(outcome: &Outcome) -> Option<bool> {
    match outcome.decision {
        Decision::Delivered | Decision::Gone => Some(true),
        Decision::Retry { .. } | Decision::Dead { .. } => Some(false),
        Decision::Deferred { .. } | Decision::IgnoredStale { .. } => None,
    }
}

/// A duration in its two largest units: `5d 2h`, `3m 20s`.
fn for_humans(seconds: u64) -> String {
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut parts = Vec::new();
    let mut left = seconds;
    for (size, name) in units {
        if left >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{}{name}", left / size));
            left %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

impl ClusterState {
    /// Notes an applied outcome on its endpoint; disables it when it has
    /// failed every attempt for too long. Answers whether it did.
    pub(super) fn note_health(&mut self, endpoint_id: &EndpointId, outcome: &Outcome, now_ms: u64) -> bool {
        let Some(success) = verdict(outcome) else { return false };
        let Some(endpoint) = self.endpoints.get_mut(endpoint_id) else { return false };
        if success {
            endpoint.failing_since_ms = None;
            return false;
        }
        let since_ms = *endpoint.failing_since_ms.get_or_insert(now_ms);
        let limit_ms = endpoint.disable_after_s.saturating_mul(1_000);
        if endpoint.disabled || limit_ms == 0 || now_ms.saturating_sub(since_ms) < limit_ms {
            return false;
        }
        let reason = format!(
            "every attempt failed for {} (since {})",
            for_humans(now_ms.saturating_sub(since_ms) / 1_000),
            crate::clock::format_rfc3339_ms(since_ms)
        );
        endpoint.disabled = true;
        endpoint.disabled_reason = Some(reason.clone());
        endpoint.updated_at_ms = now_ms;
        self.fanout.invalidate();
        let pending = self.active.get(endpoint_id).map_or(0, |a| a.len());
        self.dead_letter_active(endpoint_id, &format!("endpoint disabled: {reason}"), now_ms);
        self.emit_disabled(endpoint_id, &reason, pending, now_ms);
        true
    }

    pub(super) fn set_disable_after(&mut self, id: &EndpointId, disable_after_s: u64, now_ms: u64) -> Response {
        let Some(endpoint) = self.endpoints.get_mut(id) else {
            return Response::NotFound { what: format!("endpoint {id}") };
        };
        endpoint.disable_after_s = disable_after_s;
        endpoint.updated_at_ms = now_ms;
        Response::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::for_humans;

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(for_humans(0), "0s");
        assert_eq!(for_humans(200), "3m 20s");
        assert_eq!(for_humans(5 * 86_400 + 7_300), "5d 2h");
        assert_eq!(for_humans(3_600), "1h");
    }
}
