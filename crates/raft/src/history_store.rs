//! [`RedbHistory`]: the finished history on disk (design note 61, step 2),
//! one redb file behind core's [`HistoryStore`] seam, chosen by measurement
//! in docs/store-choice.md.
//!
//! **Every method blocks** on the disk (reads may miss the cache, a flush
//! fsyncs, an export or import moves gigabytes): callers run them on
//! blocking threads (`spawn_blocking`), never on the runtime's workers.
//!
//! The file holds six tables, every key and value a byte string:
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `events` | event id (16 bytes) | the encoded record |
//! | `deliveries` | delivery id (16 bytes) | the encoded record |
//! | `by_time` | received ms (8 bytes, big-endian) ++ event id | empty |
//! | `dead` | endpoint id ++ delivery id | empty |
//! | `meta` | a name | `format` (u32), `events`, `deliveries`, `bytes` (u64 counts), `applied` (opaque) |
//! | `state` | chunk number (u64) | a piece of the encoded state, at most [`STATE_CHUNK_BYTES`] |
//!
//! Ids are their [`to_bytes`](EventId::to_bytes), big-endian, so keys sort
//! as the ids do and a page of ids is a range of keys. The state is kept in
//! chunks so no value is huge (redb reads and writes a value whole, in
//! memory).
//!
//! A [`RedbHistory::flush`] writes a [`Flush`], the state it belongs to and
//! the applied log position in one durable transaction: the store never
//! holds history the stored state has not applied, nor lacks history it
//! has. A [`HistoryView`] is one read transaction, a consistent cut of
//! every table that later flushes do not change: a snapshot sent to another
//! node [exports](HistoryView::export) one, and the receiver
//! [imports](RedbHistory::import) the stream into a fresh file that
//! [`RedbHistory::replace`] then puts in place of its own.
//!
//! The stream, all integers big-endian:
//!
//! ```text
//! header  "hookhist" | version u32 | events u64 | deliveries u64 | bytes u64
//! table   'T' | tag u8                  (every table once, in tag order)
//! row     'R' | key length u32 | key | value length u32 | value
//!                                       (the table's rows, in key order)
//! end     'E' | SHA-256 of every byte before it, 'E' included
//! ```

use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::state::IdRange;
use hookraft_core::state::history_store::{Flush, HistoryStore, StoreCounts, StoreError};
use redb::{Durability, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use sha2::{Digest, Sha256};

use crate::Error;
use crate::durable::{parent_dir, rename_durably, sync_dir};

/// The cache redb keeps of the file's pages unless the node is told
/// otherwise (`hookraft serve --history-cache`).
pub const HISTORY_CACHE_BYTES_DEFAULT: usize = 64 << 20;

/// The largest piece of the encoded state one row holds.
pub const STATE_CHUNK_BYTES: usize = 1 << 20;

/// The largest record the store takes. Webhook bodies are at most 1 MiB;
/// the bound is there so every stored row also fits a stream, whose reader
/// refuses longer rows before allocating for them.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// The layout of the file's tables, in `meta` under `format`.
const FORMAT_VERSION: u32 = 1;

/// The longest key of any table (a `meta` name included).
const MAX_KEY_BYTES: usize = 64;

/// Bytes an import writes between its (non-durable) commits: each commit
/// lets redb write its dirty pages out, so memory stays bounded whatever
/// the stream's size.
const IMPORT_COMMIT_BYTES: u64 = 64 << 20;

const META_FORMAT: &[u8] = b"format";
const META_EVENTS: &[u8] = b"events";
const META_DELIVERIES: &[u8] = b"deliveries";
const META_BYTES: &[u8] = b"bytes";
const META_APPLIED: &[u8] = b"applied";

type Rows = TableDefinition<'static, &'static [u8], &'static [u8]>;
type WriteRows<'txn> = redb::Table<'txn, &'static [u8], &'static [u8]>;
type ReadRows = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

/// The file's tables; `tag` numbers them in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Events,
    Deliveries,
    ByTime,
    Dead,
    Meta,
    State,
}

impl Table {
    /// Every table, in tag order (the order of a stream).
    const ALL: [Table; 6] = [Table::Events, Table::Deliveries, Table::ByTime, Table::Dead, Table::Meta, Table::State];

    fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Deliveries => "deliveries",
            Table::ByTime => "by_time",
            Table::Dead => "dead",
            Table::Meta => "meta",
            Table::State => "state",
        }
    }

    fn tag(self) -> u8 {
        self as u8 + 1
    }

    fn definition(self) -> Rows {
        TableDefinition::new(self.name())
    }

    /// The length every key of the table has, where it is fixed.
    fn key_len(self) -> Option<usize> {
        match self {
            Table::Events | Table::Deliveries => Some(16),
            Table::ByTime => Some(24),
            Table::Dead => Some(32),
            Table::State => Some(8),
            Table::Meta => None,
        }
    }

    /// The longest value a row of the table may have.
    fn value_limit(self) -> usize {
        match self {
            Table::Events | Table::Deliveries | Table::Meta => MAX_RECORD_BYTES,
            Table::ByTime | Table::Dead => 0,
            Table::State => STATE_CHUNK_BYTES,
        }
    }

    /// Whether the table's values are records (counted in `bytes`).
    fn holds_records(self) -> bool {
        matches!(self, Table::Events | Table::Deliveries)
    }
}

// --- keys -------------------------------------------------------------------

/// The `by_time` key of an event: its time first, so keys sort by time.
fn time_key(received_at_ms: u64, id: &EventId) -> [u8; 24] {
    let mut key = [0; 24];
    key[..8].copy_from_slice(&received_at_ms.to_be_bytes());
    key[8..].copy_from_slice(&id.to_bytes());
    key
}

fn parse_time_key(key: &[u8]) -> Result<(u64, EventId), Error> {
    let (at, id) = key.split_first_chunk::<8>().ok_or_else(|| bad_key(Table::ByTime, key))?;
    Ok((u64::from_be_bytes(*at), EventId::from_bytes(id16(Table::ByTime, id)?)))
}

/// The `dead` key of a delivery: its endpoint first, so an endpoint's dead
/// deliveries are one range.
fn dead_key(endpoint: &EndpointId, id: [u8; 16]) -> [u8; 32] {
    let mut key = [0; 32];
    key[..16].copy_from_slice(&endpoint.to_bytes());
    key[16..].copy_from_slice(&id);
    key
}

fn chunk_key(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

fn id16(table: Table, bytes: &[u8]) -> Result<[u8; 16], Error> {
    bytes.try_into().map_err(|_| bad_key(table, bytes))
}

fn bad_key(table: Table, key: &[u8]) -> Error {
    Error::Corrupt(format!("a key of {} bytes in the history's {} table", key.len(), table.name()))
}

/// An id range as bounds on 16-byte keys.
fn id_bounds<T>(range: &IdRange<T>, bytes: impl Fn(&T) -> [u8; 16]) -> (Bound<[u8; 16]>, Bound<[u8; 16]>) {
    (range.0.as_ref().map(&bytes), range.1.as_ref().map(&bytes))
}

/// Bounds on `dead` keys: `range` of delivery ids within `endpoint`'s rows.
fn dead_bounds(endpoint: &EndpointId, range: &IdRange<DeliveryId>) -> (Bound<[u8; 32]>, Bound<[u8; 32]>) {
    let (lower, upper) = id_bounds(range, DeliveryId::to_bytes);
    let lower = match lower {
        Bound::Unbounded => Bound::Included(dead_key(endpoint, [0; 16])),
        bound => bound.map(|id| dead_key(endpoint, id)),
    };
    let upper = match upper {
        Bound::Unbounded => Bound::Included(dead_key(endpoint, [0xff; 16])),
        bound => bound.map(|id| dead_key(endpoint, id)),
    };
    (lower, upper)
}

/// Whether no key lies within the bounds. A range whose start is past its
/// end holds nothing (a `BTreeMap` would panic on it).
fn is_empty_range(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

fn as_slices<const N: usize>(bounds: &(Bound<[u8; N]>, Bound<[u8; N]>)) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (bounds.0.as_ref().map(|key| key.as_slice()), bounds.1.as_ref().map(|key| key.as_slice()))
}

// --- meta -------------------------------------------------------------------

fn meta_u64(meta: &impl ReadableTable<&'static [u8], &'static [u8]>, name: &[u8]) -> Result<u64, Error> {
    let value = meta.get(name)?.ok_or_else(|| missing_meta(name))?;
    let bytes: [u8; 8] = value.value().try_into().map_err(|_| missing_meta(name))?;
    Ok(u64::from_be_bytes(bytes))
}

fn missing_meta(name: &[u8]) -> Error {
    Error::Corrupt(format!("the history store has no valid {}", String::from_utf8_lossy(name)))
}

fn read_counts(meta: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<StoreCounts, Error> {
    Ok(StoreCounts {
        events: meta_u64(meta, META_EVENTS)?,
        deliveries: meta_u64(meta, META_DELIVERIES)?,
        bytes: meta_u64(meta, META_BYTES)?,
    })
}

fn write_counts(meta: &mut WriteRows<'_>, counts: StoreCounts) -> Result<(), Error> {
    meta.insert(META_EVENTS, counts.events.to_be_bytes().as_slice())?;
    meta.insert(META_DELIVERIES, counts.deliveries.to_be_bytes().as_slice())?;
    meta.insert(META_BYTES, counts.bytes.to_be_bytes().as_slice())?;
    Ok(())
}

fn read_format(meta: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Option<u32>, Error> {
    let Some(value) = meta.get(META_FORMAT)? else { return Ok(None) };
    let bytes: [u8; 4] = value.value().try_into().map_err(|_| missing_meta(META_FORMAT))?;
    Ok(Some(u32::from_be_bytes(bytes)))
}

// --- the store ----------------------------------------------------------------

/// The history's store: one redb file. See the module's comment.
pub struct RedbHistory {
    db: redb::Database,
    path: PathBuf,
    /// [`MAX_RECORD_BYTES`], lower in tests that make a flush fail.
    record_limit: usize,
}

impl std::fmt::Debug for RedbHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbHistory").field("path", &self.path).finish_non_exhaustive()
    }
}

/// The six tables of one write transaction.
struct WriteTables<'txn> {
    events: WriteRows<'txn>,
    deliveries: WriteRows<'txn>,
    by_time: WriteRows<'txn>,
    dead: WriteRows<'txn>,
    meta: WriteRows<'txn>,
    state: WriteRows<'txn>,
}

impl<'txn> WriteTables<'txn> {
    fn open(tx: &'txn redb::WriteTransaction) -> Result<Self, Error> {
        Ok(Self {
            events: tx.open_table(Table::Events.definition())?,
            deliveries: tx.open_table(Table::Deliveries.definition())?,
            by_time: tx.open_table(Table::ByTime.definition())?,
            dead: tx.open_table(Table::Dead.definition())?,
            meta: tx.open_table(Table::Meta.definition())?,
            state: tx.open_table(Table::State.definition())?,
        })
    }

    /// Removes and puts `flush`'s records and index rows, keeping `counts`
    /// exact: a removal counts only what was there, a put over a record
    /// counts the difference in length.
    fn apply(&mut self, flush: &Flush, counts: &mut StoreCounts, record_limit: usize) -> Result<(), Error> {
        for (received_at_ms, id) in &flush.removed_events {
            let removed = self.events.remove(id.to_bytes().as_slice())?.map(|old| old.value().len());
            if let Some(len) = removed {
                count_removal(&mut counts.events, &mut counts.bytes, len)?;
            }
            self.by_time.remove(time_key(*received_at_ms, id).as_slice())?;
        }
        for (id, dead_of) in &flush.removed_deliveries {
            let removed = self.deliveries.remove(id.to_bytes().as_slice())?.map(|old| old.value().len());
            if let Some(len) = removed {
                count_removal(&mut counts.deliveries, &mut counts.bytes, len)?;
            }
            if let Some(endpoint) = dead_of {
                self.dead.remove(dead_key(endpoint, id.to_bytes()).as_slice())?;
            }
        }
        for event in &flush.events {
            check_record(&event.record, record_limit)?;
            let replaced = self.events.insert(event.id.to_bytes().as_slice(), event.record.as_slice())?;
            let replaced = replaced.map(|old| old.value().len());
            count_put(&mut counts.events, &mut counts.bytes, event.record.len(), replaced)?;
            self.by_time.insert(time_key(event.received_at_ms, &event.id).as_slice(), [].as_slice())?;
        }
        for delivery in &flush.deliveries {
            check_record(&delivery.record, record_limit)?;
            let replaced = self.deliveries.insert(delivery.id.to_bytes().as_slice(), delivery.record.as_slice())?;
            let replaced = replaced.map(|old| old.value().len());
            count_put(&mut counts.deliveries, &mut counts.bytes, delivery.record.len(), replaced)?;
            if let Some(endpoint) = &delivery.dead_of {
                self.dead.insert(dead_key(endpoint, delivery.id.to_bytes()).as_slice(), [].as_slice())?;
            }
        }
        Ok(())
    }

    /// Removes the chunks of the previous state from number `from` on.
    fn remove_state_from(&mut self, mut number: u64) -> Result<(), Error> {
        while self.state.remove(chunk_key(number).as_slice())?.is_some() {
            number += 1;
        }
        Ok(())
    }
}

fn check_record(record: &[u8], limit: usize) -> Result<(), Error> {
    if record.len() > limit {
        return Err(Error::RecordTooLarge { len: record.len(), limit });
    }
    Ok(())
}

/// Counts a put of `len` bytes that replaced a record of `replaced` bytes,
/// if any.
fn count_put(records: &mut u64, bytes: &mut u64, len: usize, replaced: Option<usize>) -> Result<(), Error> {
    if let Some(old) = replaced {
        count_removal(records, bytes, old)?;
    }
    *records += 1;
    *bytes += len as u64;
    Ok(())
}

/// Counts the removal of a record of `len` bytes. Counts below what the
/// tables hold mean a damaged file, not a reason to panic.
fn count_removal(records: &mut u64, bytes: &mut u64, len: usize) -> Result<(), Error> {
    match (records.checked_sub(1), bytes.checked_sub(len as u64)) {
        (Some(fewer), Some(less)) => {
            (*records, *bytes) = (fewer, less);
            Ok(())
        }
        _ => Err(Error::Corrupt("the history store's counts are below what its tables hold".into())),
    }
}

fn begin_write(db: &redb::Database, durability: Durability) -> Result<redb::WriteTransaction, Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(durability)?;
    Ok(tx)
}

impl RedbHistory {
    /// Opens the store at `path`, creating the file and its tables on the
    /// first open. `cache_bytes` bounds redb's page cache
    /// ([`HISTORY_CACHE_BYTES_DEFAULT`] unless measured otherwise).
    pub fn open(path: &Path, cache_bytes: usize) -> Result<Self, Error> {
        let db = redb::Database::builder().set_cache_size(cache_bytes).create(path)?;
        let tx = begin_write(&db, Durability::Immediate)?;
        let fresh = {
            let mut tables = WriteTables::open(&tx)?;
            match read_format(&tables.meta)? {
                Some(found) if found != FORMAT_VERSION => {
                    return Err(Error::UnsupportedFormat {
                        store: format!("history store {}", path.display()),
                        found,
                        expected: FORMAT_VERSION,
                    });
                }
                Some(_) => false,
                None if tables.meta.is_empty()? => {
                    tables.meta.insert(META_FORMAT, FORMAT_VERSION.to_be_bytes().as_slice())?;
                    write_counts(&mut tables.meta, StoreCounts::default())?;
                    true
                }
                None => return Err(missing_meta(META_FORMAT)),
            }
        };
        if fresh {
            tx.commit()?;
        } else {
            tx.abort()?;
        }
        Ok(Self { db, path: path.to_path_buf(), record_limit: MAX_RECORD_BYTES })
    }

    /// The file the store is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies `flush` (removals, then puts), replaces the stored state by
    /// `state` (its pieces, concatenated, are the state, stored in chunks
    /// of at most [`STATE_CHUNK_BYTES`]) and
    /// the applied log position by `applied`, in one transaction that is
    /// durable when this returns. On an error nothing of it is written.
    /// Returns what the store holds after.
    ///
    /// A put over a stored record keeps the old record's index rows unless
    /// the flush also removes it, as the history does for a record it took
    /// back. Flushes take turns with each other (redb has one write
    /// transaction at a time); reads and views go on beside them.
    pub fn flush<S: AsRef<[u8]>>(
        &self,
        flush: &Flush,
        state: impl IntoIterator<Item = S>,
        applied: &[u8],
    ) -> Result<StoreCounts, Error> {
        let mut pieces = Some(state);
        let mut encode = |out: &mut dyn Write| -> Result<(), Error> {
            for piece in pieces.take().into_iter().flatten() {
                out.write_all(piece.as_ref()).map_err(|source| Error::Stream { what: "write", source })?;
            }
            Ok(())
        };
        self.flush_with(flush, applied, &mut encode).map(|(counts, _)| counts)
    }

    /// [`flush`](Self::flush), with the state written by `encode` straight
    /// into the transaction, a chunk at a time, instead of handed over
    /// whole. Returns what the store holds after and the state's bytes.
    pub fn flush_with(
        &self,
        flush: &Flush,
        applied: &[u8],
        encode: &mut dyn FnMut(&mut dyn Write) -> Result<(), Error>,
    ) -> Result<(StoreCounts, u64), Error> {
        check_record(applied, self.record_limit)?;
        let tx = begin_write(&self.db, Durability::Immediate)?;
        let (counts, state_bytes) = {
            let mut tables = WriteTables::open(&tx)?;
            let mut counts = read_counts(&tables.meta)?;
            tables.apply(flush, &mut counts, self.record_limit)?;
            write_counts(&mut tables.meta, counts)?;
            let mut chunks = ChunkWriter::new(&mut tables.state);
            encode(&mut chunks)?;
            let state_bytes = chunks.written();
            let next = chunks.finish()?;
            tables.remove_state_from(next)?;
            tables.meta.insert(META_APPLIED, applied)?;
            (counts, state_bytes)
        };
        tx.commit()?;
        Ok((counts, state_bytes))
    }

    /// A consistent read of the latest commit, unchanged by later flushes.
    /// While it is open, pages the flushes free are not reused, so the file
    /// grows by what they free: drop it once done.
    pub fn view(&self) -> Result<HistoryView, Error> {
        Ok(HistoryView { tx: self.db.begin_read()? })
    }

    /// Builds a fresh store at `path`, which must not exist, from a stream
    /// that [`HistoryView::export`] wrote. Rows are committed every 64 MiB
    /// without syncing; the last commit, made only once the checksum and
    /// the counts matched, is durable, and so is the file's name. On an
    /// error the partial file is removed.
    ///
    /// A crash during an import leaves a file at `path` that is not a
    /// complete store: remove it before importing again.
    pub fn import(reader: &mut (impl Read + ?Sized), path: &Path, cache_bytes: usize) -> Result<Self, Error> {
        let created = std::fs::OpenOptions::new().write(true).create_new(true).open(path);
        drop(created.map_err(|source| Error::File { what: "create", path: path.to_path_buf(), source })?);
        let imported = redb::Database::builder()
            .set_cache_size(cache_bytes)
            .create(path)
            .map_err(Error::from)
            .and_then(|db| load(&db, reader).map(|()| db))
            .and_then(|db| sync_dir(parent_dir(path)).map(|()| db));
        match imported {
            Ok(db) => Ok(Self { db, path: path.to_path_buf(), record_limit: MAX_RECORD_BYTES }),
            Err(e) => {
                // The database is closed by now; a failure to remove what it
                // left is less to report than why the import stopped.
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Puts the file at `new_path` (an imported store) in place of
    /// `live_path`, atomically, and syncs the directory so the swap
    /// survives a crash. Both must be on one filesystem (best, in one
    /// directory). A handle open on the old file goes on reading it until
    /// dropped; the handle [`import`](Self::import) returned reads the new
    /// one wherever it is named.
    pub fn replace(live_path: &Path, new_path: &Path) -> Result<(), Error> {
        rename_durably(new_path, live_path)
    }

    #[cfg(test)]
    fn with_record_limit(mut self, limit: usize) -> Self {
        self.record_limit = limit;
        self
    }
}

/// Every read of the latest commit, each in a read transaction of its own.
impl HistoryStore for RedbHistory {
    fn event(&self, id: &EventId) -> Result<Option<Vec<u8>>, StoreError> {
        self.view().map_err(store_error)?.event(id)
    }

    fn delivery(&self, id: &DeliveryId) -> Result<Option<Vec<u8>>, StoreError> {
        self.view().map_err(store_error)?.delivery(id)
    }

    fn events(
        &self,
        range: IdRange<EventId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(EventId, Vec<u8>)>, StoreError> {
        self.view().map_err(store_error)?.events(range, newest_first, limit)
    }

    fn deliveries(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(DeliveryId, Vec<u8>)>, StoreError> {
        self.view().map_err(store_error)?.deliveries(range, newest_first, limit)
    }

    fn dead(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<DeliveryId>, StoreError> {
        self.view().map_err(store_error)?.dead(endpoint, range, newest_first, limit)
    }

    fn received(&self, after: Option<(u64, EventId)>, limit: usize) -> Result<Vec<(u64, EventId)>, StoreError> {
        self.view().map_err(store_error)?.received(after, limit)
    }

    fn counts(&self) -> Result<StoreCounts, StoreError> {
        self.view().map_err(store_error)?.counts()
    }
}

fn store_error(error: Error) -> StoreError {
    StoreError(error.to_string())
}

mod chunks;
mod stream;
mod view;
use chunks::ChunkWriter;
use stream::*;
pub use view::HistoryView;
#[cfg(test)]
mod tests;
