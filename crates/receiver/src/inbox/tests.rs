use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;
use crate::test_support::{NOW_S, secret, signed};
use crate::{MemoryStore, SledStore};

const WINDOW_S: u64 = 3_600;

fn inbox() -> Inbox<MemoryStore> {
    inbox_with(MemoryStore::new())
}

fn inbox_with<S: Store>(store: S) -> Inbox<S> {
    Inbox::new(vec![secret(1)], store, Config { window_s: WINDOW_S, claims_max: 16 })
}

/// Begins a delivery of `id` signed at `now_s`, ordered when `ordering` is
/// `Some((key, sequence))`, with no caller version.
fn begin<S: Store>(inbox: &Inbox<S>, id: &str, ordering: Option<(&str, u32)>, now_s: u64) -> Verdict {
    let mut request = signed(&secret(1), id, now_s, b"{}");
    if let Some((key, sequence)) = ordering {
        request = request.ordered(key, &sequence.to_string());
    }
    inbox.begin(&request.as_request(), now_s, |_| None).expect("the store answers")
}

fn accepted(verdict: Verdict) -> Ticket {
    match verdict {
        Verdict::Accepted(ticket) => ticket,
        other => panic!("expected Accepted, got {other:?}"),
    }
}

#[test]
fn a_committed_event_is_a_duplicate_on_every_later_attempt() {
    let inbox = inbox();
    let ticket = accepted(begin(&inbox, "evt_1", None, NOW_S));
    assert_eq!(ticket.id(), "evt_1");
    inbox.commit(ticket, NOW_S).expect("commits");
    for later_s in [NOW_S, NOW_S + 1, NOW_S + WINDOW_S - 1] {
        assert!(matches!(begin(&inbox, "evt_1", None, later_s), Verdict::Duplicate), "at {later_s}");
    }
}

#[test]
fn a_dropped_ticket_records_nothing_so_the_retry_is_accepted() {
    let inbox = inbox();
    let ticket = accepted(begin(&inbox, "evt_1", Some(("cus_1", 1)), NOW_S));
    drop(ticket); // processing failed, or the process died before committing
    assert!(inbox.store().is_empty());
    let retry = accepted(begin(&inbox, "evt_1", Some(("cus_1", 1)), NOW_S + 5));
    inbox.commit(retry, NOW_S + 5).expect("commits");
    assert!(matches!(begin(&inbox, "evt_1", Some(("cus_1", 1)), NOW_S + 6), Verdict::Duplicate));
}

#[test]
fn a_second_delivery_of_an_event_being_processed_is_busy_then_a_duplicate() {
    let inbox = inbox();
    let first = accepted(begin(&inbox, "evt_1", None, NOW_S));
    assert!(matches!(begin(&inbox, "evt_1", None, NOW_S), Verdict::Busy));
    inbox.commit(first, NOW_S).expect("commits");
    assert!(matches!(begin(&inbox, "evt_1", None, NOW_S), Verdict::Duplicate));
}

#[test]
fn another_event_of_a_key_being_processed_is_busy_and_other_keys_go_on() {
    let inbox = inbox();
    let first = accepted(begin(&inbox, "evt_1", Some(("cus_1", 1)), NOW_S));
    assert!(matches!(begin(&inbox, "evt_2", Some(("cus_1", 2)), NOW_S), Verdict::Busy));
    let other = accepted(begin(&inbox, "evt_3", Some(("cus_2", 1)), NOW_S));
    inbox.commit(first, NOW_S).expect("commits");
    inbox.commit(other, NOW_S).expect("commits");
    accepted(begin(&inbox, "evt_2", Some(("cus_1", 2)), NOW_S));
}

#[test]
fn deliveries_past_the_claims_bound_are_busy_until_one_finishes() {
    let inbox = Inbox::new(vec![secret(1)], MemoryStore::new(), Config { window_s: WINDOW_S, claims_max: 2 });
    let a = accepted(begin(&inbox, "evt_a", None, NOW_S));
    let _b = accepted(begin(&inbox, "evt_b", None, NOW_S));
    assert!(matches!(begin(&inbox, "evt_c", None, NOW_S), Verdict::Busy));
    a.release();
    accepted(begin(&inbox, "evt_c", None, NOW_S));
}

#[test]
fn a_lower_sequence_is_stale_and_an_equal_one_is_not() {
    let inbox = inbox();
    inbox.commit(accepted(begin(&inbox, "evt_5", Some(("cus_1", 5)), NOW_S)), NOW_S).expect("commits");
    match begin(&inbox, "evt_4", Some(("cus_1", 4)), NOW_S) {
        Verdict::Stale { key, version, newest } => assert_eq!((key.as_str(), version, newest), ("cus_1", 4, 5)),
        other => panic!("expected Stale, got {other:?}"),
    }
    accepted(begin(&inbox, "evt_5b", Some(("cus_1", 5)), NOW_S));
}

#[test]
fn a_stale_delivery_is_not_recorded_and_stays_stale_on_retry() {
    let inbox = inbox();
    inbox.commit(accepted(begin(&inbox, "evt_2", Some(("k", 2)), NOW_S)), NOW_S).expect("commits");
    for _ in 0..2 {
        assert!(matches!(begin(&inbox, "evt_1", Some(("k", 1)), NOW_S), Verdict::Stale { .. }));
    }
    assert_eq!(inbox.store().seen_at("evt_1").expect("reads"), None);
}

#[test]
fn the_callers_key_and_version_guard_deliveries_without_a_sequence() {
    let inbox = inbox();
    let by_revision = |revision: u64| move |_: &Delivery<'_>| Some(KeyVersion::new("ord_1", revision));
    let request = signed(&secret(1), "evt_new", NOW_S, b"{}");
    let Verdict::Accepted(ticket) = inbox.begin(&request.as_request(), NOW_S, by_revision(7)).expect("reads") else {
        panic!("expected Accepted");
    };
    assert_eq!(ticket.record().key_version, Some(KeyVersion::new("k:ord_1", 7)));
    inbox.commit(ticket, NOW_S).expect("commits");
    let older = signed(&secret(1), "evt_old", NOW_S, b"{}");
    let verdict = inbox.begin(&older.as_request(), NOW_S, by_revision(6)).expect("reads");
    assert!(matches!(verdict, Verdict::Stale { ref key, version: 6, newest: 7 } if key == "ord_1"), "{verdict:?}");
}

#[test]
fn the_sequence_headers_win_over_the_callers_version_and_the_two_never_mix() {
    let inbox = inbox();
    let caller = |_: &Delivery<'_>| Some(KeyVersion::new("cus_1", 1_000));
    let ordered = signed(&secret(1), "evt_1", NOW_S, b"{}").ordered("cus_1", "3");
    let Verdict::Accepted(ticket) = inbox.begin(&ordered.as_request(), NOW_S, caller).expect("reads") else {
        panic!("expected Accepted");
    };
    let stored = format!("s:{}:cus_1", crate::test_support::EPOCH_MS);
    assert_eq!(ticket.record().key_version, Some(KeyVersion::new(stored, 3)));
    inbox.commit(ticket, NOW_S).expect("commits");
    // The caller's "cus_1" is another key than the sequence's.
    let unordered = signed(&secret(1), "evt_2", NOW_S, b"{}");
    let low = |_: &Delivery<'_>| Some(KeyVersion::new("cus_1", 1));
    assert!(matches!(inbox.begin(&unordered.as_request(), NOW_S, low).expect("reads"), Verdict::Accepted(_)));
}

#[test]
fn an_overlong_callers_key_is_rejected() {
    let inbox = inbox();
    let request = signed(&secret(1), "evt_1", NOW_S, b"{}");
    let long = |_: &Delivery<'_>| Some(KeyVersion::new("k".repeat(crate::KEY_BYTES_MAX + 1), 1));
    let verdict = inbox.begin(&request.as_request(), NOW_S, long).expect("reads");
    assert!(matches!(verdict, Verdict::Rejected(Rejection::BadKey)), "{verdict:?}");
}

#[test]
fn a_forged_request_is_rejected_and_claims_nothing() {
    let inbox = inbox();
    let forged = signed(&secret(9), "evt_1", NOW_S, b"{}");
    let verdict = inbox.begin(&forged.as_request(), NOW_S, |_| None).expect("reads");
    assert!(matches!(verdict, Verdict::Rejected(Rejection::Signature(_))), "{verdict:?}");
    accepted(begin(&inbox, "evt_1", None, NOW_S));
}

#[test]
fn after_the_window_an_id_and_a_keys_version_no_longer_count() {
    let inbox = inbox();
    inbox.commit(accepted(begin(&inbox, "evt_9", Some(("k", 9)), NOW_S)), NOW_S).expect("commits");
    let later_s = NOW_S + WINDOW_S;
    // Not yet pruned, but expired: a replay is processed again, and a key
    // numbered from 1 again (hookraft forgot it) is not stale.
    assert_eq!(inbox.store().len(), 2);
    accepted(begin(&inbox, "evt_9", Some(("k", 9)), later_s));
    accepted(begin(&inbox, "evt_10", Some(("k", 1)), later_s));
}

#[test]
fn judge_counts_an_entry_for_exactly_the_window() {
    let at_s = NOW_S;
    let seen = |now_s| judge(Some(at_s), None, None, now_s, WINDOW_S);
    assert_eq!(seen(at_s + WINDOW_S - 1), Judgement::Duplicate);
    assert_eq!(seen(at_s + WINDOW_S), Judgement::Fresh);
    let newest = Some(Applied { version: 5, at_s });
    assert_eq!(judge(None, newest, Some(4), at_s + WINDOW_S - 1, WINDOW_S), Judgement::Stale { newest: 5 });
    assert_eq!(judge(None, newest, Some(4), at_s + WINDOW_S, WINDOW_S), Judgement::Fresh);
    assert_eq!(judge(None, newest, Some(5), at_s, WINDOW_S), Judgement::Fresh);
    assert_eq!(judge(None, newest, None, at_s, WINDOW_S), Judgement::Fresh);
    // A clock that went back counts the entry as just recorded.
    assert_eq!(seen(at_s - 10), Judgement::Duplicate);
}

#[test]
fn each_commit_prunes_at_most_its_bound_of_expired_entries() {
    let inbox = inbox();
    let committed = 3 * PRUNE_ENTRIES_PER_COMMIT;
    for i in 0..committed {
        inbox.commit(accepted(begin(&inbox, &format!("evt_{i}"), None, NOW_S)), NOW_S).expect("commits");
    }
    let later_s = NOW_S + WINDOW_S;
    inbox.commit(accepted(begin(&inbox, "evt_new", None, later_s)), later_s).expect("commits");
    assert_eq!(inbox.store().len(), committed - PRUNE_ENTRIES_PER_COMMIT + 1);
    assert_eq!(inbox.prune(later_s, 5).expect("prunes"), 5);
    assert_eq!(inbox.prune(later_s, usize::MAX).expect("prunes"), committed - PRUNE_ENTRIES_PER_COMMIT - 5);
    assert_eq!(inbox.store().len(), 1, "only the live entry is left");
    assert_eq!(inbox.prune(later_s, usize::MAX).expect("prunes"), 0);
}

#[test]
fn a_committed_id_and_key_survive_reopening_the_sled_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let inbox = inbox_with(SledStore::open(dir.path()).expect("opens"));
    inbox.commit(accepted(begin(&inbox, "evt_2", Some(("cus_1", 2)), NOW_S)), NOW_S).expect("commits");
    let uncommitted = accepted(begin(&inbox, "evt_3", Some(("cus_2", 1)), NOW_S));
    drop(inbox); // the process ends with evt_3 still being processed
    drop(uncommitted);
    let inbox = inbox_with(SledStore::open(dir.path()).expect("reopens"));
    assert!(matches!(begin(&inbox, "evt_2", Some(("cus_1", 2)), NOW_S + 60), Verdict::Duplicate));
    assert!(matches!(begin(&inbox, "evt_1", Some(("cus_1", 1)), NOW_S + 60), Verdict::Stale { newest: 2, .. }));
    accepted(begin(&inbox, "evt_3", Some(("cus_2", 1)), NOW_S + 60));
}

/// A store whose writes fail while `failing` is set.
#[derive(Default)]
struct FlakyStore {
    inner: MemoryStore,
    failing: std::sync::atomic::AtomicBool,
}

impl Store for FlakyStore {
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error> {
        self.inner.seen_at(id)
    }
    fn applied(&self, key: &str) -> Result<Option<Applied>, Error> {
        self.inner.applied(key)
    }
    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Backend("disk full".into()));
        }
        self.inner.commit(record, now_s)
    }
    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error> {
        self.inner.prune(before_s, entries_max)
    }
}

#[test]
fn a_commit_that_fails_records_nothing_and_releases_the_claim() {
    let inbox = inbox_with(FlakyStore::default());
    inbox.store().failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let ticket = accepted(begin(&inbox, "evt_1", Some(("k", 1)), NOW_S));
    assert!(matches!(inbox.commit(ticket, NOW_S), Err(Error::Backend(_))));
    inbox.store().failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let retry = accepted(begin(&inbox, "evt_1", Some(("k", 1)), NOW_S));
    inbox.commit(retry, NOW_S).expect("commits");
}

/// One event of the property below: its key and its sequence in that key.
#[derive(Debug, Clone)]
struct Event {
    id: String,
    key: &'static str,
    sequence: u32,
}

/// Three keys' events, numbered per key in the order they were made.
fn events(keys: Vec<usize>) -> Vec<Event> {
    let mut next: HashMap<&str, u32> = HashMap::new();
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| {
            let key = ["cus_a", "cus_b", "cus_c"][k];
            let sequence = next.entry(key).and_modify(|s| *s += 1).or_insert(1);
            Event { id: format!("evt_{i}"), key, sequence: *sequence }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any mix of duplicated, reordered and replayed deliveries (some of
    /// them failing in the service), followed by one successful delivery of
    /// each event (hookraft retrying until it gets a 2xx): every event is
    /// processed at most once, a key's versions are applied in increasing
    /// order, and each key's newest event is applied.
    #[test]
    fn duplicated_reordered_and_replayed_deliveries_apply_once_and_never_older_over_newer(
        keys in proptest::collection::vec(0usize..3, 1..12),
        schedule in proptest::collection::vec((0usize..12, any::<bool>()), 0..40),
        tail in Just((0..12).collect::<Vec<usize>>()).prop_shuffle(),
    ) {
        let events = events(keys);
        let inbox = inbox();
        let mut applied: Vec<&Event> = Vec::new();
        let mut now_s = NOW_S;
        let deliveries = schedule
            .into_iter()
            .map(|(i, fails)| (i % events.len(), fails))
            .chain(tail.into_iter().filter(|i| *i < events.len()).map(|i| (i, false)));
        for (i, fails) in deliveries {
            now_s += 1;
            let event = &events[i];
            if let Verdict::Accepted(ticket) = begin(&inbox, &event.id, Some((event.key, event.sequence)), now_s) {
                if fails {
                    drop(ticket);
                } else {
                    applied.push(event);
                    inbox.commit(ticket, now_s).expect("commits");
                }
            }
        }
        let mut ids: Vec<&str> = applied.iter().map(|e| e.id.as_str()).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        prop_assert_eq!(ids.len(), before, "an event was processed twice");
        let mut newest: BTreeMap<&str, u32> = BTreeMap::new();
        for event in &applied {
            if let Some(previous) = newest.insert(event.key, event.sequence) {
                prop_assert!(previous < event.sequence, "{} went from {} to {}", event.key, previous, event.sequence);
            }
        }
        for event in &events {
            let last = events.iter().filter(|e| e.key == event.key).map(|e| e.sequence).max();
            prop_assert_eq!(newest.get(event.key).copied(), last, "{}'s newest event was not applied", event.key);
        }
    }

    #[test]
    fn expired_before_agrees_with_judge(at_s in any::<u64>(), now_s in any::<u64>(), window_s in 1..u64::MAX) {
        let live = judge(Some(at_s), None, None, now_s, window_s) == Judgement::Duplicate;
        prop_assert_eq!(live, at_s >= expired_before_s(now_s, window_s));
    }
}

#[test]
fn a_new_run_of_a_key_starts_again_at_one_and_is_not_stale() {
    let inbox = inbox();
    let old_run = signed(&secret(1), "evt_5", NOW_S, b"{}").ordered_in(1_000, "cus_1", "5");
    let Verdict::Accepted(ticket) = inbox.begin(&old_run.as_request(), NOW_S, |_| None).expect("reads") else {
        panic!("expected Accepted");
    };
    inbox.commit(ticket, NOW_S).expect("commits");
    // The sender forgot the key and started it again, later.
    let new_run = signed(&secret(1), "evt_6", NOW_S, b"{}").ordered_in(90_000, "cus_1", "1");
    assert!(matches!(inbox.begin(&new_run.as_request(), NOW_S, |_| None).expect("reads"), Verdict::Accepted(_)));
    // Within the old run, an older sequence is still stale.
    let late = signed(&secret(1), "evt_4", NOW_S, b"{}").ordered_in(1_000, "cus_1", "4");
    let verdict = inbox.begin(&late.as_request(), NOW_S, |_| None).expect("reads");
    assert!(matches!(verdict, Verdict::Stale { ref key, version: 4, newest: 5 } if key == "cus_1"), "{verdict:?}");
}

#[test]
fn a_forged_sequence_is_rejected_and_changes_nothing() {
    let inbox = inbox();
    let genuine = signed(&secret(1), "evt_5", NOW_S, b"{}").ordered("cus_1", "5");
    let Verdict::Accepted(ticket) = inbox.begin(&genuine.as_request(), NOW_S, |_| None).expect("reads") else {
        panic!("expected Accepted");
    };
    inbox.commit(ticket, NOW_S).expect("commits");
    // A replayed, correctly signed request with its sequence raised: the
    // payload signature holds, the ordering signature does not.
    let replayed = signed(&secret(1), "evt_9", NOW_S, b"{}").ordered("cus_1", "6");
    let forged = crate::Request { sequence: Some("4000000000"), ..replayed.as_request() };
    let verdict = inbox.begin(&forged, NOW_S, |_| None).expect("reads");
    assert!(matches!(verdict, Verdict::Rejected(Rejection::OrderingSignature(_))), "{verdict:?}");
    let stored = format!("s:{}:cus_1", crate::test_support::EPOCH_MS);
    assert_eq!(inbox.store().applied(&stored).expect("reads").map(|a| a.version), Some(5), "the key is untouched");
    // The next genuine event of the key still goes through.
    assert!(matches!(inbox.begin(&replayed.as_request(), NOW_S, |_| None).expect("reads"), Verdict::Accepted(_)));
}
