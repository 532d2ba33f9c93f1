//! `hookraft-receiver`: what a service at the end of the line needs to take
//! hookraft's webhooks exactly once and in order.
//!
//! hookraft delivers at least once: a delivery can arrive twice (a retry after
//! a lost answer, a replay), and deliveries of different events can cross.
//! An [`Inbox`] turns that into "each event processed once, never an older
//! version over a newer one":
//!
//! 1. **Verify** ([`request::verify`]): the Standard Webhooks signature over
//!    `webhook-id`, `webhook-timestamp` and the body, against one or more
//!    secrets (rotation), with the timestamp within five minutes of now.
//! 2. **Deduplicate** on `webhook-id`, the event id that every attempt and
//!    replay of an event carries: an id committed within the window is a
//!    [`Verdict::Duplicate`].
//! 3. **Guard against stale versions** per key: the key is
//!    `webhook-ordering-key` and the version `webhook-sequence` (ordered
//!    endpoints); for other endpoints the caller may name a key and version
//!    from the payload. A version lower than the newest committed for its key
//!    is [`Verdict::Stale`].
//!
//! An id is recorded only when the service says it processed the event
//! ([`Inbox::commit`] after [`Inbox::begin`]); a failure or a crash in
//! between records nothing, so hookraft's retry goes through, and while one
//! delivery is being processed another of the same id or key is
//! [`Verdict::Busy`].
//!
//! What the inbox remembers lives behind [`Store`]: [`MemoryStore`] for tests,
//! [`SledStore`] (the durable default, one directory) for services. Entries
//! count for [`Config::window_s`] (a week by default, hookraft's retention),
//! and each commit prunes a bounded number of expired ones, so a store holds
//! about what was committed in the last window. A service whose state lives
//! in its own database can keep these entries there instead, in the same
//! transaction as its state change and its outgoing side effects: see the
//! `outbox` example.
//!
//! This crate decides and records; it must not read a clock (the time is a
//! parameter), serve HTTP or spawn tasks.
//!
//! ```
//! use hookraft_receiver::{Config, Inbox, MemoryStore, Request, Secret, Verdict};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
//! let inbox = Inbox::new(vec![secret.clone()], MemoryStore::new(), Config::default());
//!
//! // A request as hookraft sends it (signed here to keep the example whole).
//! let now_s = 1_700_000_000;
//! let body = br#"{"type":"order.paid","order_id":"ord_1"}"#;
//! let signature = hookraft_core::signing::sign(&secret, "evt_1", now_s, body);
//! let timestamp = now_s.to_string();
//! let request = Request {
//!     id: Some("evt_1"),
//!     timestamp: Some(&timestamp),
//!     signature: Some(&signature),
//!     body,
//!     ..Request::default()
//! };
//!
//! match inbox.begin(&request, now_s, |_delivery| None)? {
//!     Verdict::Accepted(ticket) => {
//!         // Process the event; only once that succeeded:
//!         inbox.commit(ticket, now_s)?;
//!         // answer 2xx
//!     }
//!     Verdict::Duplicate | Verdict::Stale { .. } => { /* answer 2xx, do nothing */ }
//!     Verdict::Busy => { /* answer 409: hookraft retries */ }
//!     Verdict::Rejected(_reason) => { /* answer 401 */ }
//! }
//! assert!(matches!(inbox.begin(&request, now_s + 60, |_| None)?, Verdict::Duplicate));
//! # Ok(())
//! # }
//! ```

mod error;
pub mod inbox;
pub mod request;
mod sled_store;
pub mod store;

pub use error::Error;
pub use hookraft_core::signing::{Secret, TIMESTAMP_TOLERANCE_S, VerifyError};
pub use inbox::{CLAIMS_MAX_DEFAULT, Config, Inbox, PRUNE_ENTRIES_PER_COMMIT, Ticket, Verdict, WINDOW_S_DEFAULT};
pub use request::{Delivery, ID_BYTES_MAX, KEY_BYTES_MAX, Rejection, Request, Sequenced};
pub use sled_store::SledStore;
pub use store::{Applied, KeyVersion, MemoryStore, Record, Store};

#[cfg(test)]
pub(crate) mod test_support {
    use hookraft_core::signing::{self, Secret};

    use crate::Request;

    pub const NOW_S: u64 = 1_700_000_000;
    /// The epoch of the runs [`Signed::ordered`] signs.
    pub const EPOCH_MS: u64 = 1_690_000_000_000;

    pub fn secret(byte: u8) -> Secret {
        Secret::from_key(vec![byte; 32]).expect("valid key length")
    }

    /// The owned headers of a request, as a sender signed them.
    pub struct Signed {
        secret: Secret,
        id: String,
        timestamp: String,
        signature: String,
        /// Key, sequence, epoch and their signature.
        ordering: Option<(String, String, String, String)>,
        body: Vec<u8>,
    }

    pub fn signed(secret: &Secret, id: &str, timestamp_s: u64, body: &[u8]) -> Signed {
        Signed {
            secret: secret.clone(),
            id: id.into(),
            timestamp: timestamp_s.to_string(),
            signature: signing::sign(secret, id, timestamp_s, body),
            ordering: None,
            body: body.to_vec(),
        }
    }

    impl Signed {
        /// Ordering headers of a run of epoch [`EPOCH_MS`], signed when the
        /// sequence is a number.
        pub fn ordered(self, key: &str, sequence: &str) -> Self {
            self.ordered_in(EPOCH_MS, key, sequence)
        }

        pub fn ordered_in(mut self, epoch_ms: u64, key: &str, sequence: &str) -> Self {
            let timestamp_s: u64 = self.timestamp.parse().expect("a number");
            let signature = sequence.parse().map_or_else(
                |_| String::new(),
                |sequence| {
                    let place = signing::OrderingHeaders { epoch_ms, sequence, key };
                    signing::ordering_signature_header(&[&self.secret], &self.id, timestamp_s, &place)
                },
            );
            self.ordering = Some((key.into(), sequence.into(), epoch_ms.to_string(), signature));
            self
        }

        pub fn as_request(&self) -> Request<'_> {
            Request {
                id: Some(&self.id),
                timestamp: Some(&self.timestamp),
                signature: Some(&self.signature),
                sequence: self.ordering.as_ref().map(|(_, sequence, _, _)| sequence.as_str()),
                ordering_key: self.ordering.as_ref().map(|(key, _, _, _)| key.as_str()),
                ordering_epoch: self.ordering.as_ref().map(|(_, _, epoch, _)| epoch.as_str()),
                ordering_signature: self.ordering.as_ref().map(|(_, _, _, signature)| signature.as_str()),
                body: &self.body,
            }
        }
    }
}
