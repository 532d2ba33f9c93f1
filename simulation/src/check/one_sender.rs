//! One sender per lease: for each shard, the sends decided under an older
//! fencing token end before the sends under the next token begin, up to the
//! clocks' skew bound. A send is placed at the moment its sender checked its
//! lease and started the attempt (its wall clock, skewed by at most the
//! bound), not when it reached the receiver: a process stalled between the
//! check and the write delivers late, and only the fence (and the receiver's
//! deduplication on `webhook-id`) can make that harmless.

use std::collections::BTreeMap;

use super::Violation;
use crate::receivers::SendRecord;

pub fn check(sends: &[SendRecord], skew_bound_ms: u64) -> Vec<Violation> {
    // shard → token → (first, last) arrival
    let mut windows: BTreeMap<u16, BTreeMap<u64, (u64, u64, u64)>> = BTreeMap::new();
    for s in sends {
        let at_ms = s.origin.started_at_ms.saturating_sub(crate::clock::EPOCH_MS);
        let w = windows.entry(s.origin.shard).or_default().entry(s.origin.token).or_insert((
            at_ms,
            at_ms,
            s.origin.node_id,
        ));
        w.0 = w.0.min(at_ms);
        w.1 = w.1.max(at_ms);
    }
    let mut found = Vec::new();
    for (shard, by_token) in windows {
        let tokens: Vec<(u64, (u64, u64, u64))> = by_token.into_iter().collect();
        for pair in tokens.windows(2) {
            let ((old, (_, old_last, old_node)), (new, (new_first, _, new_node))) = (pair[0], pair[1]);
            if old_node != new_node && old_last > new_first + skew_bound_ms {
                found.push(Violation::safety(
                    "one-sender",
                    format!(
                        "shard {shard}: node {old_node} sent under token {old} until {old_last} ms, \
                         node {new_node} under token {new} from {new_first} ms"
                    ),
                ));
            }
        }
    }
    found
}
