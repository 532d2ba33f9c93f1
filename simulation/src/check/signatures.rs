//! Every request a receiver got carries a valid signature for a secret
//! valid at that time (receivers verify with their endpoint's secrets).

use super::Violation;
use crate::receivers::SendRecord;

pub fn check(sends: &[SendRecord]) -> Vec<Violation> {
    sends
        .iter()
        .filter(|s| !s.signature_valid)
        .map(|s| {
            Violation::safety(
                "signatures",
                format!("{} to {} from node {} does not verify", s.delivery_id, s.receiver, s.origin.node_id),
            )
        })
        .collect()
}
