//! The engines compared, behind one trait: sled, redb and fjall.

use crate::*;
use anyhow::Result;
use clap::ValueEnum;
use std::fs;
use std::path::Path;
use std::sync::Arc;

// ---------------------------------------------------------------------------
// Engines
// ---------------------------------------------------------------------------

/// What the history store needs from an embedded engine. Every `commit` is
/// atomic over all tables and durable (fsync'd) when it returns.
pub(crate) trait Engine: Send + Sync {
    fn commit(&self, batch: Batch) -> Result<()>;
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Up to `limit` rows with `lo <= key < hi`, ascending.
    fn scan(&self, t: Table, lo: &[u8], hi: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Visits every row of every table (in `TABLES` order); returns whether
    /// the engine gave one point-in-time view.
    fn full_scan(&self, visit: &mut Visit) -> Result<bool>;

    /// Loads one table of a fresh database from rows in key order. The
    /// default: durable commits of about 64 MB each.
    fn bulk_load(&self, t: Table, rows: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<()> {
        let mut batch = Batch::default();
        let mut bytes = 0usize;
        for (k, v) in rows {
            bytes += k.len() + v.len();
            batch.puts.push((t, k, v));
            if bytes >= 64 << 20 {
                self.commit(std::mem::take(&mut batch))?;
                bytes = 0;
            }
        }
        if !batch.puts.is_empty() {
            self.commit(batch)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    Sled,
    Redb,
    Fjall,
}

/// Memory settings: the cache for all engines, and fjall's cap on its
/// memtables (unbounded by default; only the journal size forces flushes).
#[derive(Clone, Copy)]
pub(crate) struct Memory {
    pub(crate) cache_bytes: u64,
    pub(crate) write_buffer_bytes: Option<u64>,
}

pub(crate) fn open(kind: Kind, dir: &Path, mem: Memory) -> Result<Arc<dyn Engine>> {
    fs::create_dir_all(dir)?;
    Ok(match kind {
        Kind::Sled => Arc::new(SledEngine::open(dir, mem.cache_bytes)?),
        Kind::Redb => Arc::new(RedbEngine::open(dir, mem.cache_bytes)?),
        Kind::Fjall => Arc::new(FjallEngine::open(dir, mem)?),
    })
}

// --- sled 0.34 -------------------------------------------------------------

/// One tree, tables told apart by a one-byte key prefix: sled's `apply_batch`
/// is atomic within one tree only, and its multi-tree transactions hold the
/// whole write set in memory and are meant for small writes.
pub(crate) struct SledEngine {
    pub(crate) db: sled::Db,
}

impl SledEngine {
    pub(crate) fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
        let db = sled::Config::new().path(dir).cache_capacity(cache_bytes).open()?;
        Ok(Self { db })
    }
}

pub(crate) fn tagged(t: Table, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(t.tag());
    k.extend_from_slice(key);
    k
}

impl Engine for SledEngine {
    fn commit(&self, batch: Batch) -> Result<()> {
        let mut b = sled::Batch::default();
        for (t, k, v) in batch.puts {
            b.insert(tagged(t, &k), v);
        }
        for (t, k) in batch.dels {
            b.remove(tagged(t, &k));
        }
        self.db.apply_batch(b)?;
        // fsync of sled's log: the commit is durable only after this.
        self.db.flush()?;
        Ok(())
    }

    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(tagged(t, key))?.map(|v| v.to_vec()))
    }

    fn scan(&self, t: Table, lo: &[u8], hi: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(limit);
        for kv in self.db.range(tagged(t, lo)..tagged(t, hi)).take(limit) {
            let (k, v) = kv?;
            out.push((k[1..].to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// sled has no snapshots: iterators see writes made after they start.
    /// The scan bounds each table by its last key at the start, which keeps
    /// appended rows out but not deletes, nor a newer state blob.
    fn full_scan(&self, visit: &mut Visit) -> Result<bool> {
        let mut bounds = Vec::new();
        for t in TABLES {
            let last = self.db.range(tagged(t, &[])..tagged(t, &KEY_MAX)).next_back().transpose()?;
            bounds.push(last.map(|(k, _)| k.to_vec()));
        }
        for (t, last) in TABLES.into_iter().zip(bounds) {
            let Some(last) = last else { continue };
            for kv in self.db.range(tagged(t, &[])..=last) {
                let (k, v) = kv?;
                visit(t, &k[1..], &v);
            }
        }
        Ok(false)
    }
}

// --- redb ------------------------------------------------------------------

pub(crate) type RedbTable = redb::TableDefinition<'static, &'static [u8], &'static [u8]>;

pub(crate) fn redb_table(t: Table) -> RedbTable {
    redb::TableDefinition::new(t.name())
}

pub(crate) struct RedbEngine {
    pub(crate) db: redb::Database,
}

impl RedbEngine {
    pub(crate) fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
        let db = redb::Database::builder().set_cache_size(cache_bytes as usize).create(dir.join("history.redb"))?;
        // Create the tables up front so readers never meet a missing one.
        let tx = db.begin_write()?;
        for t in TABLES {
            tx.open_table(redb_table(t))?;
        }
        tx.commit()?;
        Ok(Self { db })
    }
}

impl Engine for RedbEngine {
    fn commit(&self, batch: Batch) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        // The default, stated: fsync before commit returns.
        tx.set_durability(redb::Durability::Immediate)?;
        {
            let mut tables = Vec::new();
            for t in TABLES {
                tables.push(tx.open_table(redb_table(t))?);
            }
            for (t, k, v) in &batch.puts {
                tables[*t as usize].insert(k.as_slice(), v.as_slice())?;
            }
            for (t, k) in &batch.dels {
                tables[*t as usize].remove(k.as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        use redb::{ReadableDatabase, ReadableTable};
        let tx = self.db.begin_read()?;
        let table = tx.open_table(redb_table(t))?;
        Ok(table.get(key)?.map(|v| v.value().to_vec()))
    }

    fn scan(&self, t: Table, lo: &[u8], hi: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        use redb::{ReadableDatabase, ReadableTable};
        let tx = self.db.begin_read()?;
        let table = tx.open_table(redb_table(t))?;
        let mut out = Vec::with_capacity(limit);
        for kv in table.range(lo..hi)?.take(limit) {
            let (k, v) = kv?;
            out.push((k.value().to_vec(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// One read transaction: an MVCC snapshot of every table at once.
    fn full_scan(&self, visit: &mut Visit) -> Result<bool> {
        use redb::{ReadableDatabase, ReadableTable};
        let tx = self.db.begin_read()?;
        for t in TABLES {
            let table = tx.open_table(redb_table(t))?;
            for kv in table.range(..)? {
                let (k, v) = kv?;
                visit(t, k.value(), v.value());
            }
        }
        Ok(true)
    }
}

// --- fjall -----------------------------------------------------------------

/// One keyspace per table in one database: a write batch spans keyspaces
/// atomically, and `Database::snapshot` spans them too.
pub(crate) struct FjallEngine {
    pub(crate) db: fjall::Database,
    pub(crate) spaces: Vec<fjall::Keyspace>,
}

impl FjallEngine {
    pub(crate) fn open(dir: &Path, mem: Memory) -> Result<Self> {
        // The only cap on memtables across keyspaces; fjall 3.1 marks it
        // hidden and deprecated, so it is off unless asked for.
        #[allow(deprecated)]
        let db = fjall::Database::builder(dir)
            .cache_size(mem.cache_bytes)
            .max_write_buffer_size(mem.write_buffer_bytes)
            .open()?;
        let mut spaces = Vec::new();
        for t in TABLES {
            spaces.push(db.keyspace(t.name(), fjall::KeyspaceCreateOptions::default)?);
        }
        Ok(Self { db, spaces })
    }
}

impl Engine for FjallEngine {
    fn commit(&self, batch: Batch) -> Result<()> {
        // SyncAll: the journal is fsync'd before commit returns.
        let mut b = self.db.batch().durability(Some(fjall::PersistMode::SyncAll));
        for (t, k, v) in batch.puts {
            b.insert(&self.spaces[t as usize], k, v);
        }
        for (t, k) in batch.dels {
            b.remove(&self.spaces[t as usize], k);
        }
        b.commit()?;
        Ok(())
    }

    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.spaces[t as usize].get(key)?.map(|v| v.to_vec()))
    }

    fn scan(&self, t: Table, lo: &[u8], hi: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(limit);
        for g in self.spaces[t as usize].range(lo..hi).take(limit) {
            let (k, v) = g.into_inner()?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn full_scan(&self, visit: &mut Visit) -> Result<bool> {
        use fjall::Readable;
        let snap = self.db.snapshot();
        for t in TABLES {
            for g in snap.iter(&self.spaces[t as usize]) {
                let (k, v) = g.into_inner()?;
                visit(t, &k, &v);
            }
        }
        Ok(true)
    }

    /// fjall's ingestion writes sorted rows straight into table files,
    /// past the journal and memtables.
    fn bulk_load(&self, t: Table, rows: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<()> {
        let mut ing = self.spaces[t as usize].start_ingestion()?;
        for (k, v) in rows {
            ing.write(k, v)?;
        }
        ing.finish()?;
        self.db.persist(fjall::PersistMode::SyncAll)?;
        Ok(())
    }
}
