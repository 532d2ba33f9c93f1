//! The snapshot's layout, pinned (`crate::golden`): a fixed state encodes
//! to the bytes of `tests/golden/snapshot.bin`, and those bytes decode to
//! the same state and encode again byte for byte.

use std::sync::Mutex;

use hookraft_core::Command;
use hookraft_core::command::NewEvent;
use hookraft_core::entropy::{Entropy, EntropyRng};
use hookraft_core::ids::{EndpointId, EventId, SourceId};
use hookraft_core::inbound::{Scheme, Source};
use hookraft_core::model::Endpoint;
use hookraft_core::payload::{Keyring, KeyringFile, SecretOwner, StoredSecret};
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::{decode_payload, encode_payload};
use crate::{ClusterState, LogId, SnapshotMeta, StoredMembership};

const NOW_MS: u64 = 1_767_225_600_000;

/// The same bytes every run.
struct Seeded(Mutex<StdRng>);

impl Entropy for Seeded {
    fn fill(&self, dest: &mut [u8]) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).fill_bytes(dest);
    }
}

/// A state with something of each kind a snapshot holds: an endpoint with
/// a sealed secret, a source with one, a node's heartbeat, a shard grant,
/// events sealed and clear with their deliveries, and an ordered key.
fn golden_state() -> ClusterState {
    let entropy = Seeded(Mutex::new(StdRng::seed_from_u64(50)));
    let ring = Keyring::new(&KeyringFile::generate(Some("k1"), &entropy).expect("a keyring")).expect("loads");
    let mut rng = EntropyRng(&entropy);
    let id = EndpointId::generate(NOW_MS, &mut rng);
    let secret = ring.seal_secret(SecretOwner::Endpoint(&id.as_str()), &[7; 32], &entropy);
    let ordering = hookraft_core::model::Ordering::PerKey { on_dead: hookraft_core::ordering::OnDead::Block };
    let endpoint = Endpoint { ordering, ..Endpoint::new(id, "https://example.com/hook".into(), secret, NOW_MS) };
    let source_id = SourceId::generate(NOW_MS, &mut rng);
    let source = Source {
        id: source_id,
        description: Some("github".into()),
        scheme: Scheme::Github,
        secret: ring.seal_secret(SecretOwner::Source(&source_id.as_str()), b"a provider secret", &entropy),
        previous_secrets: Vec::new(),
        event_id: Scheme::Github.default_event_id().expect("github names its event id"),
        event_type: None,
        entity_key: Some("/id".into()),
        version: Some("/version".into()),
        rate_limit_per_s: Some(50),
        allow_cidrs: Vec::new(),
        disabled: false,
        created_at_ms: NOW_MS,
        updated_at_ms: NOW_MS,
    };
    let mut state = ClusterState::default();
    state.apply(&Command::RegisterEndpoint { endpoint: Box::new(endpoint) });
    state.apply(&Command::CreateSource { source: Box::new(source) });
    state.apply(&Command::Heartbeat { node_id: 1, now_ms: NOW_MS, lease_ms: 3_000 });
    state.apply(&Command::AssignShards { now_ms: NOW_MS, grants: vec![(id.shard(), 1)] });
    let events = (0..3)
        .map(|n| {
            let event_id = EventId::generate(NOW_MS + n, &mut rng);
            let payload = format!("{{\"n\":{n}}}");
            NewEvent {
                id: event_id,
                event_type: "order.created".into(),
                payload: match n {
                    0 => payload.as_str().into(),
                    _ => ring.seal(&event_id.as_str(), "order.created", payload.as_bytes(), &entropy),
                },
                idempotency_key: Some(format!("key-{n}")),
                endpoint_ids: None,
                ordering_key: Some("cus_1".into()),
                inbound: None,
            }
        })
        .collect();
    state.apply(&Command::IngestEventsFrom { node_id: 1, now_ms: NOW_MS + 5, events });
    state
}

fn golden_meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), 9)),
        last_membership: StoredMembership::default(),
        snapshot_id: "2-9-1".into(),
    }
}

#[test]
fn the_snapshot_layout_is_pinned_by_its_golden_file() {
    let state = golden_state();
    let meta = golden_meta();
    let encoded = encode_payload(&meta.last_log_id, &meta.last_membership, &state).expect("encodes");
    let golden = crate::golden::pinned("snapshot.bin", &encoded);
    let (last_applied, membership, decoded) = decode_payload(&meta, &golden).expect("the golden file decodes");
    assert_eq!(decoded, state);
    decoded.check_invariants().expect("a consistent state");
    let again = encode_payload(&last_applied, &membership, &decoded).expect("encodes");
    assert!(again == golden, "decoding and encoding again changed the bytes");
}

#[test]
fn the_golden_state_holds_what_it_means_to_pin() {
    let state = golden_state();
    assert_eq!(state.endpoints.len(), 1);
    let endpoint = state.endpoints.values().next().expect("an endpoint");
    assert_eq!(endpoint.secret.key_id(), Some("k1"), "a sealed secret");
    assert!(matches!(endpoint.secret, StoredSecret::Sealed { .. }));
    assert_eq!(state.inbound.sources.len(), 1);
    assert_eq!(state.event_count(), 3);
    assert_eq!(state.shards[usize::from(endpoint.id.shard())].owner, Some(1));
}
