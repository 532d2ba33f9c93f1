//! Measures candidate embedded stores for hookraft's finished webhook history
//! (events, deliveries, two secondary indexes and the state blob) under the
//! access pattern the design needs: one durable multi-table commit per
//! snapshot, point reads and 100-row pages, bounded retention deletes, a
//! point-in-time full scan while writes go on, and a bulk load from a stream.
//! Results and method: docs/store-choice.md.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};

// ---------------------------------------------------------------------------
// Tables and rows
// ---------------------------------------------------------------------------

/// The five logical tables; every engine stores the same rows in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    /// event id (u64 BE) -> payload
    Events,
    /// delivery id (u64 BE) -> timeline
    Deliveries,
    /// endpoint id (u64 BE) ++ delivery id (u64 BE) -> empty
    ByEndpoint,
    /// received ms (u64 BE) ++ event id (u64 BE) -> empty
    ByTime,
    /// "state" -> the in-memory state blob written with each batch
    Meta,
}

const TABLES: [Table; 5] = [Table::Events, Table::Deliveries, Table::ByEndpoint, Table::ByTime, Table::Meta];

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Deliveries => "deliveries",
            Table::ByEndpoint => "by_endpoint",
            Table::ByTime => "by_time",
            Table::Meta => "meta",
        }
    }

    /// One-byte prefix for engines that keep every table in one keyspace.
    fn tag(self) -> u8 {
        self as u8
    }
}

const STATE_KEY: &[u8] = b"state";
/// Above every key of every table (keys are at most 16 bytes).
const KEY_MAX: [u8; 17] = [0xff; 17];

type Row = (Table, Vec<u8>, Vec<u8>);
/// What a full scan calls for each row.
type Visit<'a> = dyn FnMut(Table, &[u8], &[u8]) + 'a;

/// One atomic, durable write.
#[derive(Default)]
struct Batch {
    puts: Vec<Row>,
    dels: Vec<(Table, Vec<u8>)>,
}

impl Batch {
    fn bytes(&self) -> u64 {
        self.puts.iter().map(|(_, k, v)| (k.len() + v.len()) as u64).sum()
    }
}

fn be(a: u64) -> Vec<u8> {
    a.to_be_bytes().to_vec()
}

fn be2(a: u64, b: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&a.to_be_bytes());
    k.extend_from_slice(&b.to_be_bytes());
    k
}

fn id_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[..8]);
    u64::from_be_bytes(b)
}

// ---------------------------------------------------------------------------
// Deterministic data
// ---------------------------------------------------------------------------

/// SplitMix64: small, fast, and the same stream on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

const WORDS: [&str; 16] = [
    "customer",
    "invoice",
    "payment",
    "succeeded",
    "failed",
    "amount",
    "currency",
    "subscription",
    "created",
    "updated",
    "status",
    "metadata",
    "attempt",
    "response",
    "latency_ms",
    "endpoint",
];
const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// JSON-looking text of exactly `len` bytes: repeated field names and random
/// tokens, so it compresses about as well as real webhook bodies (not zero,
/// not 10x). One draw gives up to ten token characters, so generating the
/// data stays far faster than storing it.
fn json_text(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 48);
    out.push(b'{');
    while out.len() < len {
        let mut bits = rng.next();
        out.push(b'"');
        out.extend_from_slice(WORDS[(bits & 15) as usize].as_bytes());
        out.extend_from_slice(b"\":\"");
        bits >>= 4;
        let token_len = 6 + (bits & 15) as usize;
        bits >>= 4;
        for i in 0..token_len {
            if i == 9 {
                bits = rng.next();
            }
            out.push(ALNUM[(bits & 63) as usize % ALNUM.len()]);
            bits >>= 6;
        }
        out.extend_from_slice(b"\",");
    }
    out.truncate(len);
    out
}

const ENDPOINTS: u64 = 1000;
const EVENT_BYTES: (u64, u64) = (300, 3000);
const DELIVERY_BYTES: (u64, u64) = (300, 1500);
/// Mean raw bytes (keys + values) per event with its delivery and index rows.
const MEAN_BYTES_PER_EVENT: u64 =
    (EVENT_BYTES.0 + EVENT_BYTES.1) / 2 + (DELIVERY_BYTES.0 + DELIVERY_BYTES.1) / 2 + 8 + 8 + 16 + 16;

/// Every record is a pure function of (seed, id), so any phase can rebuild
/// the keys of any record (retention) or stream all rows (bulk load).
/// Each event has one delivery with the same id (the brief's 20k + 20k).
#[derive(Clone, Copy)]
struct Gen {
    seed: u64,
}

impl Gen {
    /// Independent streams per record and purpose.
    fn rng(&self, id: u64, stream: u64) -> Rng {
        Rng(self.seed ^ id.wrapping_mul(0xd6e8_feb8_6659_fd93) ^ stream << 56)
    }

    /// (endpoint id, received ms), drawn without generating payloads.
    fn index_fields(&self, id: u64) -> (u64, u64) {
        let mut r = self.rng(id, 0);
        let endpoint = r.below(ENDPOINTS);
        // Mostly ascending: ~2 ms apart, up to 1 s of arrival jitter.
        let received = 1_700_000_000_000 + id * 2 + r.below(1000);
        (endpoint, received)
    }

    fn event(&self, id: u64) -> Vec<u8> {
        let mut r = self.rng(id, 1);
        let len = r.between(EVENT_BYTES.0, EVENT_BYTES.1) as usize;
        json_text(&mut r, len)
    }

    fn delivery(&self, id: u64) -> Vec<u8> {
        let mut r = self.rng(id, 2);
        let len = r.between(DELIVERY_BYTES.0, DELIVERY_BYTES.1) as usize;
        json_text(&mut r, len)
    }

    fn rows(&self, id: u64) -> [Row; 4] {
        let (endpoint, received) = self.index_fields(id);
        [
            (Table::Events, be(id), self.event(id)),
            (Table::Deliveries, be(id), self.delivery(id)),
            (Table::ByEndpoint, be2(endpoint, id), Vec::new()),
            (Table::ByTime, be2(received, id), Vec::new()),
        ]
    }

    fn keys(&self, id: u64) -> [(Table, Vec<u8>); 4] {
        let (endpoint, received) = self.index_fields(id);
        [
            (Table::Events, be(id)),
            (Table::Deliveries, be(id)),
            (Table::ByEndpoint, be2(endpoint, id)),
            (Table::ByTime, be2(received, id)),
        ]
    }

    /// The state blob: its first 8 bytes name the last id committed with it,
    /// which lets a full scan check that it saw one point in time.
    fn blob(&self, last_id: u64, len: usize) -> Vec<u8> {
        let mut r = self.rng(0, 3);
        let mut b = json_text(&mut r, len.max(8));
        b[..8].copy_from_slice(&last_id.to_be_bytes());
        b
    }

    /// The batch a snapshot point writes: records `first..first + n` and the blob.
    fn append_batch(&self, first: u64, n: u64, blob_len: usize) -> Batch {
        let mut puts = Vec::with_capacity(n as usize * 4 + 1);
        for id in first..first + n {
            puts.extend(self.rows(id));
        }
        puts.push((Table::Meta, STATE_KEY.to_vec(), self.blob(first + n - 1, blob_len)));
        Batch { puts, dels: Vec::new() }
    }
}

// ---------------------------------------------------------------------------
// Engines
// ---------------------------------------------------------------------------

/// What the history store needs from an embedded engine. Every `commit` is
/// atomic over all tables and durable (fsync'd) when it returns.
trait Engine: Send + Sync {
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
enum Kind {
    Sled,
    Redb,
    Fjall,
}

/// Memory settings: the cache for all engines, and fjall's cap on its
/// memtables (unbounded by default; only the journal size forces flushes).
#[derive(Clone, Copy)]
struct Memory {
    cache_bytes: u64,
    write_buffer_bytes: Option<u64>,
}

fn open(kind: Kind, dir: &Path, mem: Memory) -> Result<Arc<dyn Engine>> {
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
struct SledEngine {
    db: sled::Db,
}

impl SledEngine {
    fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
        let db = sled::Config::new().path(dir).cache_capacity(cache_bytes).open()?;
        Ok(Self { db })
    }
}

fn tagged(t: Table, key: &[u8]) -> Vec<u8> {
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

type RedbTable = redb::TableDefinition<'static, &'static [u8], &'static [u8]>;

fn redb_table(t: Table) -> RedbTable {
    redb::TableDefinition::new(t.name())
}

struct RedbEngine {
    db: redb::Database,
}

impl RedbEngine {
    fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
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
struct FjallEngine {
    db: fjall::Database,
    spaces: Vec<fjall::Keyspace>,
}

impl FjallEngine {
    fn open(dir: &Path, mem: Memory) -> Result<Self> {
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

// ---------------------------------------------------------------------------
// Measuring helpers
// ---------------------------------------------------------------------------

fn status_kib(field: &str) -> u64 {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Samples VmRSS every 10 ms; `take` returns the peak since the last take.
struct RssPeak {
    peak: Arc<AtomicU64>,
}

impl RssPeak {
    fn start() -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let p = peak.clone();
        thread::spawn(move || {
            loop {
                p.fetch_max(status_kib("VmRSS:"), Ordering::Relaxed);
                thread::sleep(Duration::from_millis(10));
            }
        });
        Self { peak }
    }

    fn take(&self) -> u64 {
        let now = status_kib("VmRSS:");
        self.peak.swap(now, Ordering::Relaxed).max(now)
    }
}

/// Bytes the files under `dir` occupy on disk (allocated blocks).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += disk_bytes(&e.path()),
                Ok(m) => total += m.blocks() * 512,
                Err(_) => {}
            }
        }
    }
    total
}

/// Drops the store's own files from the page cache, so reads after it go to
/// the disk unless the engine's 64 MiB cache has them.
fn evict(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                evict(&p);
            } else if let Ok(f) = fs::File::open(&p) {
                let _ = f.sync_all();
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
            }
        }
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// p50/p99/p999/max in microseconds of nanosecond samples.
fn lat(mut ns: Vec<u64>) -> String {
    ns.sort_unstable();
    format!(
        "n={} p50={:.1}us p99={:.1}us p999={:.1}us max={:.1}us",
        ns.len(),
        pct(&ns, 0.5),
        pct(&ns, 0.99),
        pct(&ns, 0.999),
        pct(&ns, 1.0)
    )
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// Real time: the project bans `Instant::now` so that the node reads time
/// through its clock; a benchmark measures the real thing.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, u64)> {
    let t = now();
    let v = f()?;
    Ok((v, t.elapsed().as_nanos() as u64))
}

// ---------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------

#[derive(Parser, Debug)]
#[command(about = "Embedded store benchmark for hookraft's finished history")]
struct Args {
    #[arg(long, value_enum)]
    engine: Kind,
    /// Database directory (wiped first); the bulk load uses DIR-bulk.
    #[arg(long, default_value = "tests/store-bench/data")]
    dir: PathBuf,
    /// Raw bytes (keys + values, without the blob) to append, in MB.
    #[arg(long, default_value_t = 2048)]
    raw_mb: u64,
    /// Events (each with one delivery and two index rows) per commit.
    #[arg(long, default_value_t = 20_000)]
    batch_events: u64,
    /// State blob written with every commit, in MB.
    #[arg(long, default_value_t = 4)]
    blob_mb: usize,
    /// The engine's cache, in MiB.
    #[arg(long, default_value_t = 64)]
    cache_mib: u64,
    /// fjall only: cap on all memtables together, in MiB (default: none).
    #[arg(long)]
    fjall_write_buffer_mib: Option<u64>,
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
    #[arg(long, default_value_t = 2_000)]
    scans: usize,
    /// Retention steps of 512 events each.
    #[arg(long, default_value_t = 200)]
    retention_steps: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run only the bulk load (of the records a full run would append), so
    /// its peak RSS is its own.
    #[arg(long, conflicts_with = "skip_bulk")]
    bulk_only: bool,
    /// Run every phase but the bulk load.
    #[arg(long)]
    skip_bulk: bool,
    /// Keep the database directories afterwards.
    #[arg(long)]
    keep: bool,
}

/// Shared state of a run.
struct Run {
    args: Args,
    data: Gen,
    rss: RssPeak,
    blob_len: usize,
    /// Records `1..=records` are the initial data set.
    records: u64,
    /// The next record id to append after it (writers of phases 5–7).
    next_id: Arc<AtomicU64>,
}

impl Run {
    fn memory(&self) -> Memory {
        Memory {
            cache_bytes: self.args.cache_mib << 20,
            write_buffer_bytes: self.args.fjall_write_buffer_mib.map(|m| m << 20),
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let batches = (args.raw_mb * 1_000_000).div_ceil(MEAN_BYTES_PER_EVENT * args.batch_events);
    let run = Run {
        data: Gen { seed: args.seed },
        rss: RssPeak::start(),
        blob_len: args.blob_mb << 20,
        records: batches * args.batch_events,
        next_id: Arc::new(AtomicU64::new(batches * args.batch_events + 1)),
        args,
    };
    println!(
        "engine={:?} records={} batches={} batch_events={} blob={}MiB cache={}MiB fjall_write_buffer={:?}MiB seed={}",
        run.args.engine,
        run.records,
        batches,
        run.args.batch_events,
        run.args.blob_mb,
        run.args.cache_mib,
        run.args.fjall_write_buffer_mib,
        run.args.seed
    );
    println!("baseline rss={}KiB", run.rss.take());
    if !run.args.bulk_only {
        main_phases(&run)?;
    }
    if !run.args.skip_bulk {
        bulk_load(&run)?;
    }
    println!("process VmHWM={}KiB", status_kib("VmHWM:"));
    Ok(())
}

fn main_phases(run: &Run) -> Result<()> {
    let dir = &run.args.dir;
    let _ = fs::remove_dir_all(dir);
    let db = open(run.args.engine, dir, run.memory())?;
    let raw = append(run, &*db)?;
    let on_disk = disk_bytes(dir);
    println!(
        "size after_append raw={:.1}MB disk={:.1}MB amplification={:.2}",
        mb(raw),
        mb(on_disk),
        on_disk as f64 / raw as f64
    );
    point_reads(run, &db, false)?;
    scans(run, &*db)?;
    point_reads(run, &db, true)?;
    snapshot_scan(run, &db)?;
    retention(run, &*db)?;
    println!("rss peak_main_phases={}KiB", run.rss.take());
    drop(db);
    if !run.args.keep {
        fs::remove_dir_all(dir)?;
    }
    Ok(())
}

/// (1) Flush-sized durable commits of new records.
fn append(run: &Run, db: &dyn Engine) -> Result<u64> {
    let n = run.args.batch_events;
    let (mut raw, mut commit_ns, mut gen_ns, mut times) = (0u64, 0u64, 0u64, Vec::new());
    let wall = now();
    let mut id = 1;
    while id <= run.records {
        let (batch, ns) = timed(|| Ok(run.data.append_batch(id, n, run.blob_len)))?;
        gen_ns += ns;
        raw += batch.bytes() - run.blob_len as u64;
        let ((), ns) = timed(|| db.commit(batch))?;
        commit_ns += ns;
        times.push(ns);
        id += n;
    }
    let secs = commit_ns as f64 / 1e9;
    let blob_total = times.len() as u64 * run.blob_len as u64;
    println!(
        "append commits={} records={} (events+deliveries) raw={:.1}MB commit_time={:.1}s wall={:.1}s \
         records/s={:.0} MB/s={:.1} (with blobs {:.1}) per_commit: {}",
        times.len(),
        run.records * 2,
        mb(raw),
        secs,
        wall.elapsed().as_secs_f64(),
        (run.records * 2) as f64 / secs,
        mb(raw) / secs,
        mb(raw + blob_total) / secs,
        lat(times)
    );
    println!(
        "append data_generation={:.1}s ({:.0} MB/s, not in commit_time)",
        gen_ns as f64 / 1e9,
        mb(raw) / (gen_ns as f64 / 1e9)
    );
    println!("rss peak_append={}KiB", run.rss.take());
    Ok(raw)
}

/// Appends batches after the current data set until `stop`, or until it has
/// made `max_commits`; sets `stop` when it ends. Returns its commit times.
fn spawn_writer(
    run: &Run,
    db: &Arc<dyn Engine>,
    stop: &Arc<AtomicBool>,
    max_commits: usize,
) -> thread::JoinHandle<Result<Vec<u64>>> {
    let (db, next, stop) = (db.clone(), run.next_id.clone(), stop.clone());
    let (data, n, blob_len) = (run.data, run.args.batch_events, run.blob_len);
    thread::spawn(move || {
        let mut times = Vec::new();
        while !stop.load(Ordering::Relaxed) && times.len() < max_commits {
            let first = next.load(Ordering::Relaxed);
            let batch = data.append_batch(first, n, blob_len);
            let ((), ns) = timed(|| db.commit(batch))?;
            next.store(first + n, Ordering::Relaxed);
            times.push(ns);
        }
        stop.store(true, Ordering::Relaxed);
        Ok(times)
    })
}

/// (3) Random reads of the oldest half of the data set, after evicting the
/// store's files from the page cache; optionally while a writer appends
/// `WRITER_COMMITS` batches (the reads go on until it has).
fn point_reads(run: &Run, db: &Arc<dyn Engine>, with_writer: bool) -> Result<()> {
    const WRITER_COMMITS: usize = 5;
    evict(&run.args.dir);
    let stop = Arc::new(AtomicBool::new(!with_writer));
    let writer = with_writer.then(|| spawn_writer(run, db, &stop, WRITER_COMMITS));
    let mut rng = Rng(run.args.seed ^ 0x7ead);
    let mut ns = Vec::with_capacity(run.args.reads);
    let mut missing = 0;
    let mut i = 0;
    while i < run.args.reads || !stop.load(Ordering::Relaxed) {
        i += 1;
        let id = rng.between(1, run.records / 2);
        let t = if i % 2 == 0 { Table::Events } else { Table::Deliveries };
        let (v, took) = timed(|| db.get(t, &be(id)))?;
        missing += usize::from(v.is_none());
        ns.push(took);
    }
    stop.store(true, Ordering::Relaxed);
    let label = if with_writer { "under_write" } else { "idle" };
    println!("point_reads {label} missing={missing} {}", lat(ns));
    if let Some(w) = writer {
        let times = w.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
        println!("point_reads {label} writer_commits: {}", lat(times));
    }
    println!("rss peak_point_reads_{label}={}KiB", run.rss.take());
    Ok(())
}

/// (4) 100-row pages from a random cursor: by id, and by each secondary
/// index followed by the reads of the rows it names (what the API serves).
fn scans(run: &Run, db: &dyn Engine) -> Result<()> {
    evict(&run.args.dir);
    let mut rng = Rng(run.args.seed ^ 0x5ca2);
    let (mut by_id, mut by_ep, mut by_time) = (Vec::new(), Vec::new(), Vec::new());
    let mut short = 0;
    for _ in 0..run.args.scans {
        let cursor = rng.between(1, run.records);
        let (rows, ns) = timed(|| db.scan(Table::Events, &be(cursor), &KEY_MAX, 100))?;
        short += usize::from(rows.len() < 100);
        by_id.push(ns);

        let ep = rng.below(ENDPOINTS);
        let ((), ns) = timed(|| {
            let idx = db.scan(Table::ByEndpoint, &be2(ep, cursor), &be(ep + 1), 100)?;
            for (k, _) in idx {
                db.get(Table::Deliveries, &k[8..])?.context("dangling index row")?;
            }
            Ok(())
        })?;
        by_ep.push(ns);

        let (_, received) = run.data.index_fields(cursor);
        let ((), ns) = timed(|| {
            let idx = db.scan(Table::ByTime, &be2(received, 0), &KEY_MAX, 100)?;
            for (k, _) in idx {
                db.get(Table::Events, &k[8..])?.context("dangling index row")?;
            }
            Ok(())
        })?;
        by_time.push(ns);
    }
    println!("scan by_id rows=100 short_pages={short} {}", lat(by_id));
    println!("scan by_endpoint+fetch {}", lat(by_ep));
    println!("scan by_time+fetch {}", lat(by_time));
    Ok(())
}

/// (6) A full scan in one view while a writer commits; checks that the view
/// is one point in time: the blob names the newest event seen, and every
/// event has its delivery.
fn snapshot_scan(run: &Run, db: &Arc<dyn Engine>) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(run, db, &stop, usize::MAX);
    // Let the writer get going so the scan overlaps commits from its start.
    thread::sleep(Duration::from_millis(200));
    let (mut bytes, mut rows, mut events, mut deliveries) = (0u64, 0u64, 0u64, 0u64);
    let (mut max_event, mut blob_id) = (0u64, 0u64);
    let (pit, ns) = timed(|| {
        db.full_scan(&mut |t, k, v| {
            bytes += (k.len() + v.len()) as u64;
            rows += 1;
            match t {
                Table::Events => {
                    events += 1;
                    max_event = max_event.max(id_of(k));
                }
                Table::Deliveries => deliveries += 1,
                Table::Meta => blob_id = id_of(v),
                _ => {}
            }
        })
    })?;
    stop.store(true, Ordering::Relaxed);
    let times = writer.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
    let secs = ns as f64 / 1e9;
    println!(
        "full_scan point_in_time_api={pit} rows={rows} bytes={:.1}MB secs={secs:.1} MB/s={:.1} \
         consistent={} (events={events} deliveries={deliveries} newest_event={max_event} blob_names={blob_id}) \
         writer_commits_during={}",
        mb(bytes),
        mb(bytes) / secs,
        events == deliveries && max_event == blob_id,
        times.len()
    );
    println!("full_scan writer_commits: {}", lat(times));
    println!("rss peak_full_scan={}KiB", run.rss.take());
    Ok(())
}

/// (5) Deletes the oldest 512 events (and their deliveries and index rows)
/// per durable commit, then appends again to see whether freed space is used.
fn retention(run: &Run, db: &dyn Engine) -> Result<()> {
    let before = disk_bytes(&run.args.dir);
    let mut times = Vec::new();
    let wall = now();
    for _ in 0..run.args.retention_steps {
        let ((), ns) = timed(|| {
            let Some((k, _)) = db.scan(Table::Events, &[], &KEY_MAX, 1)?.pop() else { bail!("nothing left to delete") };
            let first = id_of(&k);
            let mut batch = Batch::default();
            for id in first..first + 512 {
                batch.dels.extend(run.data.keys(id));
            }
            db.commit(batch)
        })?;
        times.push(ns);
    }
    let secs = wall.elapsed().as_secs_f64();
    let after = disk_bytes(&run.args.dir);
    thread::sleep(Duration::from_secs(10));
    let settled = disk_bytes(&run.args.dir);
    println!(
        "retention steps={} events_deleted={} secs={secs:.1} steps/s={:.1} per_step: {}",
        times.len(),
        times.len() * 512,
        times.len() as f64 / secs,
        lat(times)
    );
    // Refill with as many bytes as were deleted: a store that reuses freed
    // pages should grow by much less than that.
    let deleted = run.args.retention_steps * 512;
    let refill_batches = deleted.div_ceil(run.args.batch_events);
    let next = &run.next_id;
    for _ in 0..refill_batches {
        let first = next.load(Ordering::Relaxed);
        db.commit(run.data.append_batch(first, run.args.batch_events, run.blob_len))?;
        next.store(first + run.args.batch_events, Ordering::Relaxed);
    }
    let refilled = disk_bytes(&run.args.dir);
    println!(
        "retention disk before={:.1}MB after_deletes={:.1}MB after_10s={:.1}MB after_refill_of_{}_events={:.1}MB (refill raw ~{:.1}MB)",
        mb(before),
        mb(after),
        mb(settled),
        refill_batches * run.args.batch_events,
        mb(refilled),
        mb(refill_batches * run.args.batch_events * MEAN_BYTES_PER_EVENT)
    );
    Ok(())
}

/// (7) A fresh database from a stream of every row of the initial data set,
/// table by table in key order (as a snapshot install receives it).
fn bulk_load(run: &Run) -> Result<()> {
    let mut dir = run.args.dir.clone().into_os_string();
    dir.push("-bulk");
    let dir = PathBuf::from(dir);
    let _ = fs::remove_dir_all(&dir);
    run.rss.take();
    let base = status_kib("VmRSS:");
    let db = open(run.args.engine, &dir, run.memory())?;
    let data = run.data;
    let n = run.records;
    let mut bytes = 0u64;
    let wall = now();
    let mut count = |kv: &(Vec<u8>, Vec<u8>)| bytes += (kv.0.len() + kv.1.len()) as u64;
    db.bulk_load(Table::Events, &mut (1..=n).map(|id| (be(id), data.event(id))).inspect(&mut count))?;
    db.bulk_load(Table::Deliveries, &mut (1..=n).map(|id| (be(id), data.delivery(id))).inspect(&mut count))?;
    // A snapshot arrives with each index already in key order; here the
    // index keys are sorted in memory first, 16 bytes each, which the RSS
    // figure includes (printed as `sort_buffer`).
    let sort_buffer = n * 16;
    for t in [Table::ByEndpoint, Table::ByTime] {
        let mut keys: Vec<[u8; 16]> = (1..=n)
            .map(|id| {
                let (endpoint, received) = data.index_fields(id);
                let (a, b) = if t == Table::ByEndpoint { (endpoint, id) } else { (received, id) };
                let mut k = [0u8; 16];
                k[..8].copy_from_slice(&a.to_be_bytes());
                k[8..].copy_from_slice(&b.to_be_bytes());
                k
            })
            .collect();
        keys.sort_unstable();
        bytes += n * 16;
        db.bulk_load(t, &mut keys.into_iter().map(|k| (k.to_vec(), Vec::new())))?;
    }
    let blob = data.blob(n, run.blob_len);
    bytes += blob.len() as u64;
    db.bulk_load(Table::Meta, &mut std::iter::once((STATE_KEY.to_vec(), blob)))?;
    let secs = wall.elapsed().as_secs_f64();
    let peak = run.rss.take();
    drop(db);
    println!(
        "bulk_load bytes={:.1}MB secs={secs:.1} MB/s={:.1} disk={:.1}MB rss_before={base}KiB rss_peak={peak}KiB extra={}KiB sort_buffer={}KiB",
        mb(bytes),
        mb(bytes) / secs,
        mb(disk_bytes(&dir)),
        peak.saturating_sub(base),
        sort_buffer / 1024
    );
    if !run.args.keep {
        fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
