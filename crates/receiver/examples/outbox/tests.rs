use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hookraft_core::signing;
use hookraft_receiver::{Request, Secret};

use crate::runner::{self, Dispatch, Effect, RunReport};
use crate::shop::{Outcome, Service};

const NOW_S: u64 = 1_700_000_000;

fn secret() -> Secret {
    Secret::from_key(vec![7; 32]).expect("valid key length")
}

/// A downstream that applies each idempotency key once, as a real one
/// must, and remembers every call.
#[derive(Default)]
struct Downstream {
    calls: Vec<String>,
    applied: BTreeSet<String>,
    down: bool,
}

impl Dispatch for Downstream {
    fn dispatch(&mut self, effect: &Effect) -> Result<(), String> {
        if self.down {
            return Err("connection refused".into());
        }
        self.calls.push(effect.idempotency_key.clone());
        self.applied.insert(effect.idempotency_key.clone());
        Ok(())
    }
}

struct Delivery {
    id: String,
    timestamp: String,
    signature: String,
    /// Key, sequence, epoch and their signature.
    ordering: Option<(String, String, String, String)>,
    body: String,
}

/// The epoch of the runs the tests sign.
const EPOCH_MS: u64 = 1_690_000_000_000;

fn change(id: &str, revision: u64, status: &str) -> Delivery {
    let body = format!(r#"{{"order_id":"ord_1","revision":{revision},"status":"{status}"}}"#);
    Delivery {
        id: id.into(),
        timestamp: NOW_S.to_string(),
        signature: signing::sign(&secret(), id, NOW_S, body.as_bytes()),
        ordering: None,
        body,
    }
}

impl Delivery {
    fn sequenced(mut self, key: &str, sequence: u32) -> Self {
        let place = signing::OrderingHeaders { epoch_ms: EPOCH_MS, sequence, key };
        let signature = signing::ordering_signature_header(&[&secret()], &self.id, NOW_S, &place);
        self.ordering = Some((key.into(), sequence.to_string(), EPOCH_MS.to_string(), signature));
        self
    }

    fn request(&self) -> Request<'_> {
        Request {
            id: Some(&self.id),
            timestamp: Some(&self.timestamp),
            signature: Some(&self.signature),
            sequence: self.ordering.as_ref().map(|(_, s, _, _)| s.as_str()),
            ordering_key: self.ordering.as_ref().map(|(k, _, _, _)| k.as_str()),
            ordering_epoch: self.ordering.as_ref().map(|(_, _, e, _)| e.as_str()),
            ordering_signature: self.ordering.as_ref().map(|(_, _, _, g)| g.as_str()),
            body: self.body.as_bytes(),
        }
    }
}

fn database(dir: &Path) -> PathBuf {
    dir.join("shop.sqlite")
}

fn open(dir: &Path) -> Service {
    Service::open(&database(dir), vec![secret()]).expect("opens")
}

/// Ends the service the way a killed process would: its connection is never
/// closed (nothing flushed or checkpointed on the way out).
fn crash(service: Service) {
    std::mem::forget(service);
}

fn handle(service: &Service, delivery: &Delivery) -> Outcome {
    service.handle(&delivery.request(), NOW_S).expect("the database answers")
}

#[test]
fn a_crash_between_commit_and_dispatch_dispatches_the_side_effect_once_after_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = open(dir.path());
    assert_eq!(handle(&service, &change("evt_1", 1, "paid")), Outcome::Applied);
    crash(service);

    let service = open(dir.path());
    let mut downstream = Downstream::default();
    assert_eq!(runner::run_once(&service.shop, &mut downstream, NOW_S).expect("runs").dispatched, 1);
    assert_eq!(runner::run_once(&service.shop, &mut downstream, NOW_S).expect("runs"), RunReport::default());
    assert_eq!(downstream.calls, ["evt_1:notify"]);
    // hookraft's retry of the same event after the restart changes nothing.
    assert_eq!(handle(&service, &change("evt_1", 1, "paid")), Outcome::Duplicate);
    assert!(runner::pending(&service.shop, 10).expect("reads").is_empty());
}

#[test]
fn a_crash_between_dispatch_and_marking_sends_again_under_the_same_key_and_applies_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = open(dir.path());
    assert_eq!(handle(&service, &change("evt_1", 1, "paid")), Outcome::Applied);
    let mut downstream = Downstream::default();
    for effect in runner::pending(&service.shop, 10).expect("reads") {
        downstream.dispatch(&effect).expect("sent");
    }
    crash(service); // before marking

    let service = open(dir.path());
    assert_eq!(runner::run_once(&service.shop, &mut downstream, NOW_S).expect("runs").dispatched, 1);
    assert_eq!(downstream.calls, ["evt_1:notify", "evt_1:notify"]);
    assert_eq!(downstream.applied.len(), 1);
    assert!(runner::pending(&service.shop, 10).expect("reads").is_empty());
}

#[test]
fn duplicated_reordered_and_replayed_deliveries_are_applied_once_and_never_older_over_newer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = open(dir.path());
    let (created, paid, shipped) =
        (change("evt_1", 1, "created"), change("evt_2", 2, "paid"), change("evt_3", 3, "shipped"));
    assert_eq!(handle(&service, &created), Outcome::Applied);
    assert_eq!(handle(&service, &created), Outcome::Duplicate);
    assert_eq!(handle(&service, &shipped), Outcome::Applied);
    assert_eq!(handle(&service, &paid), Outcome::Stale, "revision 2 arrived after 3");
    crash(service);

    let service = open(dir.path());
    // Replays after the restart: an applied one, and the stale one again.
    assert_eq!(handle(&service, &created), Outcome::Duplicate);
    assert_eq!(handle(&service, &paid), Outcome::Stale);
    assert_eq!(handle(&service, &shipped), Outcome::Duplicate);
    assert_eq!(service.shop.order("ord_1").expect("reads"), Some(("shipped".into(), 3)));
    let mut downstream = Downstream::default();
    runner::run_once(&service.shop, &mut downstream, NOW_S).expect("runs");
    assert_eq!(downstream.calls, ["evt_1:notify", "evt_3:notify"], "one effect per applied event");
}

#[test]
fn deliveries_from_an_ordered_endpoint_are_kept_in_order_by_their_sequence() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = open(dir.path());
    // The sequence decides, not the payload's revision.
    let first = change("evt_a", 9, "created").sequenced("ord_1", 1);
    let second = change("evt_b", 1, "paid").sequenced("ord_1", 2);
    assert_eq!(handle(&service, &second), Outcome::Applied);
    assert_eq!(handle(&service, &first), Outcome::Stale);
    assert_eq!(service.shop.order("ord_1").expect("reads"), Some(("paid".into(), 1)));
}

#[test]
fn a_failed_dispatch_stays_pending_and_goes_out_on_the_next_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = open(dir.path());
    assert_eq!(handle(&service, &change("evt_1", 1, "paid")), Outcome::Applied);
    let mut downstream = Downstream { down: true, ..Downstream::default() };
    assert_eq!(runner::run_once(&service.shop, &mut downstream, NOW_S).expect("runs").failed, 1);
    downstream.down = false;
    assert_eq!(runner::run_once(&service.shop, &mut downstream, NOW_S).expect("runs").dispatched, 1);
    assert_eq!(downstream.calls, ["evt_1:notify"]);
}

#[test]
fn a_forged_or_unreadable_event_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = open(dir.path());
    let mut forged = change("evt_1", 1, "paid");
    forged.body = forged.body.replace("paid", "refunded");
    assert!(matches!(handle(&service, &forged), Outcome::Rejected(_)));
    let mut unreadable = change("evt_2", 1, "paid");
    unreadable.body = "not json".into();
    unreadable.signature = signing::sign(&secret(), "evt_2", NOW_S, b"not json");
    assert_eq!(handle(&service, &unreadable), Outcome::Unreadable);
    assert_eq!(service.shop.order("ord_1").expect("reads"), None);
    assert!(runner::pending(&service.shop, 10).expect("reads").is_empty());
    // Not recorded: a fixed sender's retry of evt_2 is processed.
    assert_eq!(handle(&service, &change("evt_2", 1, "paid")), Outcome::Applied);
}
