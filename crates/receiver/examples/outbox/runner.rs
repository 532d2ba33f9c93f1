//! The outbox runner: sends the side effects that committed transactions
//! left in the `outbox` table, and marks each one sent.
//!
//! It runs after commit, never inside the transaction: a side effect must
//! not leave before the state change that caused it is on disk. Delivery to
//! the downstream is at least once: a crash between sending and marking
//! sends the row again after a restart, under the same idempotency key, which
//! the downstream uses to apply it once.

use crate::shop::Shop;
use hookraft_receiver::Error;
use rusqlite::params;

/// Rows one run looks at; call [`run_once`] again for more.
pub const DISPATCH_BATCH_MAX: usize = 64;

/// One pending side effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The row, in commit order.
    pub seq: i64,
    pub idempotency_key: String,
    pub body: String,
}

/// Where side effects go (an email service, a carrier's API, a queue).
pub trait Dispatch {
    /// Sends one effect; it must carry `effect.idempotency_key` so a second
    /// send of the same effect is recognised downstream.
    fn dispatch(&mut self, effect: &Effect) -> Result<(), String>;
}

/// What one run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunReport {
    pub dispatched: usize,
    pub failed: usize,
}

/// Up to `max` effects not yet marked sent, oldest first.
pub fn pending(shop: &Shop, max: usize) -> Result<Vec<Effect>, Error> {
    let limit = i64::try_from(max).unwrap_or(i64::MAX);
    shop.with_conn(|conn| {
        let mut query = conn.prepare(
            "SELECT seq, idempotency_key, body FROM outbox WHERE dispatched_at_s IS NULL ORDER BY seq LIMIT ?1",
        )?;
        let rows = query.query_map([limit], |row| {
            Ok(Effect { seq: row.get(0)?, idempotency_key: row.get(1)?, body: row.get(2)? })
        })?;
        rows.collect()
    })
}

/// Marks an effect sent at `now_s`.
pub fn mark_dispatched(shop: &Shop, seq: i64, now_s: u64) -> Result<(), Error> {
    shop.with_conn(|conn| {
        conn.execute("UPDATE outbox SET dispatched_at_s = ?1 WHERE seq = ?2", params![now_s, seq]).map(drop)
    })
}

fn count_attempt(shop: &Shop, seq: i64) -> Result<(), Error> {
    shop.with_conn(|conn| conn.execute("UPDATE outbox SET attempts = attempts + 1 WHERE seq = ?1", [seq]).map(drop))
}

/// Sends up to [`DISPATCH_BATCH_MAX`] pending effects. One that fails stays
/// pending (its attempts counted) for the next run; the others go on.
pub fn run_once(shop: &Shop, downstream: &mut impl Dispatch, now_s: u64) -> Result<RunReport, Error> {
    let mut report = RunReport::default();
    for effect in pending(shop, DISPATCH_BATCH_MAX)? {
        match downstream.dispatch(&effect) {
            Ok(()) => {
                mark_dispatched(shop, effect.seq, now_s)?;
                report.dispatched += 1;
            }
            Err(_) => {
                count_attempt(shop, effect.seq)?;
                report.failed += 1;
            }
        }
    }
    Ok(report)
}
