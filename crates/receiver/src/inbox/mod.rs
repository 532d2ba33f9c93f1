//! The inbox: verify, deduplicate, guard against stale versions, in two
//! phases around the service's own processing.
//!
//! [`Inbox::begin`] decides one request: [`Verdict::Accepted`] hands out a
//! [`Ticket`] that claims the event id (and its key) in memory; the service
//! processes the event, then [`Inbox::commit`]s the ticket, which records the
//! id as seen and the key's newest version. Dropping a ticket instead (a
//! failed or crashed processing) records nothing, so the sender's retry
//! goes through. While a ticket lives, another delivery of the same id or key
//! is [`Verdict::Busy`]: two deliveries never process one event at once, and
//! a key's versions are applied one at a time.
//!
//! The decision itself ([`judge`]) is a pure function of what the store
//! holds and `now_s`; this module must not read a clock.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use hookraft_core::signing::Secret;

use crate::Error;
use crate::request::{self, Delivery, Rejection, Request};
use crate::store::{Applied, KeyVersion, Record, Store};

/// How long an id or a key's version is remembered by default: a week, as
/// long as hookraft keeps an event (`--retention`), so any retry or replay
/// hookraft can still send finds its id.
pub const WINDOW_S_DEFAULT: u64 = 7 * 24 * 3600;
/// Deliveries being processed at once by default; more are [`Verdict::Busy`].
pub const CLAIMS_MAX_DEFAULT: usize = 1024;
/// Expired entries a commit removes before recording its own: more than a
/// commit adds (two), so expired entries never pile up while commits go on.
pub const PRUNE_ENTRIES_PER_COMMIT: usize = 8;

/// Where a key comes from, as a prefix of the store's key.
const SEQUENCE_PREFIX: &str = "s:";
const CALLER_PREFIX: &str = "k:";

/// An inbox's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How long a seen id and a key's newest version count, from the time
    /// they were committed. Older entries are ignored, and pruned.
    pub window_s: u64,
    /// Tickets alive at once; a delivery past it is [`Verdict::Busy`].
    pub claims_max: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { window_s: WINDOW_S_DEFAULT, claims_max: CLAIMS_MAX_DEFAULT }
    }
}

/// What the inbox concluded about one request.
#[derive(Debug)]
pub enum Verdict {
    /// New and not stale: process it, then [`Inbox::commit`] the ticket.
    Accepted(Ticket),
    /// Already processed (committed within the window): answer 2xx, do nothing.
    Duplicate,
    /// Older than the newest version applied for its key: answer 2xx (a
    /// retry would be just as stale), do nothing.
    Stale { key: String, version: u64, newest: u64 },
    /// Another delivery of this id or key is being processed, or too many
    /// are: answer a status that makes the sender retry (409, 503).
    Busy,
    /// Not a valid request: answer 401.
    Rejected(Rejection),
}

/// The right to process one accepted delivery; see the module docs.
#[derive(Debug)]
pub struct Ticket {
    record: Record,
    claims: Arc<Mutex<Claims>>,
}

impl Ticket {
    /// The event id.
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// What committing records. A service that keeps the inbox's entries in
    /// its own database writes this in the transaction of its state change
    /// (see the outbox example), then [`Ticket::release`]s the ticket.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// Gives the claim up without recording anything through the inbox.
    /// Dropping the ticket does the same.
    pub fn release(self) {}
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.claims).release(&self.record);
    }
}

/// Ids and keys of the tickets alive.
#[derive(Debug, Default)]
struct Claims {
    ids: HashSet<String>,
    keys: HashSet<String>,
}

impl Claims {
    /// Claims the record's id and key, unless either is claimed or `max`
    /// tickets are alive.
    fn claim(&mut self, record: &Record, max: usize) -> bool {
        let key = record.key_version.as_ref().map(|kv| kv.key.as_str());
        let free = !self.ids.contains(&record.id) && key.is_none_or(|key| !self.keys.contains(key));
        if !free || self.ids.len() >= max {
            return false;
        }
        self.ids.insert(record.id.clone());
        if let Some(key) = key {
            self.keys.insert(key.to_owned());
        }
        true
    }

    fn release(&mut self, record: &Record) {
        self.ids.remove(&record.id);
        if let Some(kv) = &record.key_version {
            self.keys.remove(&kv.key);
        }
    }
}

fn lock(claims: &Mutex<Claims>) -> std::sync::MutexGuard<'_, Claims> {
    // Claims change in one step each; a panic elsewhere leaves them whole.
    claims.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The key as the sender or the caller named it, from the store's key:
/// without its prefix, and without a sequence's epoch.
fn shown_key(stored: &str) -> &str {
    match stored.strip_prefix(SEQUENCE_PREFIX) {
        Some(rest) => rest.split_once(':').map_or(rest, |(_, key)| key),
        None => stored.strip_prefix(CALLER_PREFIX).unwrap_or(stored),
    }
}

/// What the store's entries say about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    Fresh,
    Duplicate,
    Stale { newest: u64 },
}

/// Decides a verified delivery from its id's entry (`seen_at_s`), its key's
/// entry (`newest`) and its version: an entry counts for `window_s` after it
/// was recorded; a seen id is a duplicate; a version strictly lower than
/// the key's newest is stale (an equal one is not).
pub fn judge(
    seen_at_s: Option<u64>,
    newest: Option<Applied>,
    version: Option<u64>,
    now_s: u64,
    window_s: u64,
) -> Judgement {
    let live = |at_s: u64| now_s.saturating_sub(at_s) < window_s;
    if seen_at_s.is_some_and(live) {
        return Judgement::Duplicate;
    }
    match (newest, version) {
        (Some(newest), Some(version)) if live(newest.at_s) && version < newest.version => {
            Judgement::Stale { newest: newest.version }
        }
        _ => Judgement::Fresh,
    }
}

/// Entries recorded before this time have expired at `now_s`.
pub fn expired_before_s(now_s: u64, window_s: u64) -> u64 {
    // `now - at >= window` <=> `at < now - window + 1`.
    now_s.checked_sub(window_s).map_or(0, |t| t.saturating_add(1))
}

/// Receives one endpoint's deliveries: see the module docs.
pub struct Inbox<S> {
    secrets: Vec<Secret>,
    store: S,
    config: Config,
    claims: Arc<Mutex<Claims>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Inbox<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Secret`'s own Debug is redacted.
        f.debug_struct("Inbox").field("secrets", &self.secrets).field("store", &self.store).finish_non_exhaustive()
    }
}

impl<S: Store> Inbox<S> {
    /// An inbox that accepts requests signed by any of `secrets`.
    pub fn new(secrets: Vec<Secret>, store: S, config: Config) -> Self {
        Self { secrets, store, config, claims: Arc::default() }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Decides one request at `now_s` (unix seconds): verification, then the
    /// id, then the key's order. The key and version are the
    /// `webhook-ordering-key` and `webhook-sequence` headers when the request
    /// has them; otherwise `version_of` may name them from the verified
    /// delivery (an entity id and its revision from the payload), or answer
    /// `None` for no stale guard.
    pub fn begin(
        &self,
        request: &Request<'_>,
        now_s: u64,
        version_of: impl FnOnce(&Delivery<'_>) -> Option<KeyVersion>,
    ) -> Result<Verdict, Error> {
        let delivery = match request::verify(&self.secrets, request, now_s) {
            Ok(delivery) => delivery,
            Err(rejection) => return Ok(Verdict::Rejected(rejection)),
        };
        let key_version = match delivery.sequenced {
            // Each run of a key is a key of its own here: a new run starts
            // again at 1 under a later epoch, and is not stale for it.
            Some(s) => Some(KeyVersion::new(format!("{SEQUENCE_PREFIX}{}:{}", s.epoch_ms, s.key), s.sequence.into())),
            None => match version_of(&delivery) {
                Some(kv) => match request::check_key(&kv.key) {
                    Ok(()) => Some(KeyVersion::new(format!("{CALLER_PREFIX}{}", kv.key), kv.version)),
                    Err(rejection) => return Ok(Verdict::Rejected(rejection)),
                },
                None => None,
            },
        };
        let record = Record { id: delivery.id.to_owned(), key_version };
        if !lock(&self.claims).claim(&record, self.config.claims_max) {
            return Ok(Verdict::Busy);
        }
        // Claimed from here on: no other delivery of this id or key reads or
        // writes these entries until the ticket is gone.
        let ticket = Ticket { record, claims: Arc::clone(&self.claims) };
        let seen_at_s = self.store.seen_at(&ticket.record.id)?;
        let (newest, version) = match &ticket.record.key_version {
            Some(kv) => (self.store.applied(&kv.key)?, Some(kv.version)),
            None => (None, None),
        };
        Ok(match judge(seen_at_s, newest, version, now_s, self.config.window_s) {
            Judgement::Fresh => Verdict::Accepted(ticket),
            Judgement::Duplicate => Verdict::Duplicate,
            Judgement::Stale { newest } => {
                let kv = ticket.record.key_version.as_ref().expect("only a keyed delivery is stale");
                let key = shown_key(&kv.key).to_owned();
                Verdict::Stale { key, version: kv.version, newest }
            }
        })
    }

    /// Records a processed delivery at `now_s`, durably if the store is, and
    /// releases its claim; first removes up to [`PRUNE_ENTRIES_PER_COMMIT`]
    /// expired entries. On an error nothing is recorded (the claim is
    /// released all the same), so the sender's retry processes it again.
    pub fn commit(&self, ticket: Ticket, now_s: u64) -> Result<(), Error> {
        self.prune(now_s, PRUNE_ENTRIES_PER_COMMIT)?;
        self.store.commit(&ticket.record, now_s)
    }

    /// Removes at most `entries_max` expired entries; says how many. Commits
    /// prune as they go; call this on a timer to shrink the store of a
    /// receiver that has gone quiet.
    pub fn prune(&self, now_s: u64, entries_max: usize) -> Result<usize, Error> {
        self.store.prune(expired_before_s(now_s, self.config.window_s), entries_max)
    }
}

#[cfg(test)]
mod tests;
