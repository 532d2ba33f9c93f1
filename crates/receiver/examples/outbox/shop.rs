//! The example service: orders in SQLite, and the inbox's entries beside them.
//!
//! One transaction per processed event records three things together: the
//! event id and its order's revision (the inbox's [`Record`]), the order's new
//! state, and the side effect to send (a row of the `outbox` table). Either
//! all three are on disk or none is, so a crash anywhere leaves either "not
//! processed" (hookraft's retry processes it) or "processed, side effect
//! pending" (the outbox runner sends it).
//!
//! `Shop` is also the inbox's [`Store`], so duplicate and stale checks read
//! the same database the transaction writes.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use hookraft_receiver::{
    Applied, Config, Delivery, Error, Inbox, KeyVersion, Record, Request, Secret, Store, Ticket, Verdict,
};
use rusqlite::{Connection, OptionalExtension, Transaction, params};

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS inbox_seen (id TEXT PRIMARY KEY, at_s INTEGER NOT NULL);
    CREATE INDEX IF NOT EXISTS inbox_seen_at ON inbox_seen (at_s);
    CREATE TABLE IF NOT EXISTS inbox_versions (key TEXT PRIMARY KEY, version INTEGER NOT NULL, at_s INTEGER NOT NULL);
    CREATE INDEX IF NOT EXISTS inbox_versions_at ON inbox_versions (at_s);
    CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, status TEXT NOT NULL, revision INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        idempotency_key TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        dispatched_at_s INTEGER
    );
";

/// The service's database.
pub struct Shop {
    conn: Mutex<Connection>,
}

/// What one event asks for: `{"order_id": "ord_1", "revision": 3, "status": "paid"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderChange {
    pub order_id: String,
    pub revision: u64,
    pub status: String,
}

impl OrderChange {
    pub fn parse(body: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        Some(Self {
            order_id: value.get("order_id")?.as_str()?.to_owned(),
            revision: value.get("revision")?.as_u64()?,
            status: value.get("status")?.as_str()?.to_owned(),
        })
    }
}

fn backend(error: rusqlite::Error) -> Error {
    Error::Backend(Box::new(error))
}

impl Shop {
    pub fn open(path: &Path) -> Result<Self, Error> {
        let conn = Connection::open(path).map_err(backend)?;
        // WAL with full sync: a committed transaction survives a crash and a
        // power loss.
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(backend)?;
        conn.execute_batch(SCHEMA).map_err(backend)?;
        Ok(Self { conn: Mutex::new(conn) })
    }

    pub fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T, Error> {
        // A panic inside a transaction rolls it back; the connection stays usable.
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut conn).map_err(backend)
    }

    /// Processes one accepted event: the inbox's record, the order and the
    /// side effect, in one transaction; then gives the ticket up.
    pub fn apply(&self, ticket: Ticket, change: &OrderChange, now_s: u64) -> Result<(), Error> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            record(&tx, ticket.record(), now_s)?;
            tx.execute(
                "INSERT INTO orders (id, status, revision) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET status = excluded.status, revision = excluded.revision",
                params![change.order_id, change.status, change.revision],
            )?;
            let body = serde_json::json!({
                "order_id": change.order_id, "status": change.status, "revision": change.revision,
            });
            // One effect per event: the key makes a repeated dispatch harmless.
            let idempotency_key = format!("{}:notify", ticket.id());
            tx.execute(
                "INSERT INTO outbox (idempotency_key, body) VALUES (?1, ?2)",
                params![idempotency_key, body.to_string()],
            )?;
            tx.commit()
        })?;
        ticket.release();
        Ok(())
    }

    /// The order's status and revision.
    pub fn order(&self, id: &str) -> Result<Option<(String, u64)>, Error> {
        self.with_conn(|conn| {
            conn.query_row("SELECT status, revision FROM orders WHERE id = ?1", [id], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
        })
    }
}

/// Writes an inbox record inside the caller's transaction.
fn record(tx: &Transaction<'_>, record: &Record, now_s: u64) -> rusqlite::Result<()> {
    tx.execute("INSERT OR REPLACE INTO inbox_seen (id, at_s) VALUES (?1, ?2)", params![record.id, now_s])?;
    if let Some(KeyVersion { key, version }) = &record.key_version {
        tx.execute(
            "INSERT OR REPLACE INTO inbox_versions (key, version, at_s) VALUES (?1, ?2, ?3)",
            params![key, version, now_s],
        )?;
    }
    Ok(())
}

impl Store for Shop {
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error> {
        self.with_conn(|conn| {
            conn.query_row("SELECT at_s FROM inbox_seen WHERE id = ?1", [id], |row| row.get(0)).optional()
        })
    }

    fn applied(&self, key: &str) -> Result<Option<Applied>, Error> {
        self.with_conn(|conn| {
            conn.query_row("SELECT version, at_s FROM inbox_versions WHERE key = ?1", [key], |row| {
                Ok(Applied { version: row.get(0)?, at_s: row.get(1)? })
            })
            .optional()
        })
    }

    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            self::record(&tx, record, now_s)?;
            tx.commit()
        })
    }

    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error> {
        let limit = i64::try_from(entries_max).unwrap_or(i64::MAX);
        self.with_conn(|conn| {
            let seen = conn.execute(
                "DELETE FROM inbox_seen WHERE id IN (SELECT id FROM inbox_seen WHERE at_s < ?1 ORDER BY at_s LIMIT ?2)",
                params![before_s, limit],
            )?;
            let left = limit.saturating_sub(i64::try_from(seen).unwrap_or(i64::MAX));
            let versions = conn.execute(
                "DELETE FROM inbox_versions WHERE key IN
                 (SELECT key FROM inbox_versions WHERE at_s < ?1 ORDER BY at_s LIMIT ?2)",
                params![before_s, left],
            )?;
            Ok(seen + versions)
        })
    }
}

/// What the service answered one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Duplicate,
    Stale,
    Busy,
    Rejected(String),
    /// Verified, but not an order change this service understands.
    Unreadable,
}

/// The receiving service: its inbox over its own database.
pub struct Service {
    pub shop: Arc<Shop>,
    inbox: Inbox<Arc<Shop>>,
}

impl Service {
    pub fn open(path: &Path, secrets: Vec<Secret>) -> Result<Self, Error> {
        let shop = Arc::new(Shop::open(path)?);
        let inbox = Inbox::new(secrets, Arc::clone(&shop), Config::default());
        Ok(Self { shop, inbox })
    }

    /// Handles one request at `now_s`. Deliveries from an ordered endpoint
    /// are kept in order by their sequence; others by the order's revision.
    pub fn handle(&self, request: &Request<'_>, now_s: u64) -> Result<Outcome, Error> {
        let revision = |d: &Delivery<'_>| OrderChange::parse(d.body).map(|c| KeyVersion::new(c.order_id, c.revision));
        Ok(match self.inbox.begin(request, now_s, revision)? {
            Verdict::Accepted(ticket) => match OrderChange::parse(request.body) {
                Some(change) => {
                    self.shop.apply(ticket, &change, now_s)?;
                    Outcome::Applied
                }
                None => Outcome::Unreadable,
            },
            Verdict::Duplicate => Outcome::Duplicate,
            Verdict::Stale { .. } => Outcome::Stale,
            Verdict::Busy => Outcome::Busy,
            Verdict::Rejected(reason) => Outcome::Rejected(reason.to_string()),
        })
    }
}
