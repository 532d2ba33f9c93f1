//! The benchmark's phases, each against one engine.

use crate::*;
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

pub(crate) fn main_phases(run: &Run) -> Result<()> {
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
pub(crate) fn append(run: &Run, db: &dyn Engine) -> Result<u64> {
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
pub(crate) fn spawn_writer(
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
pub(crate) fn point_reads(run: &Run, db: &Arc<dyn Engine>, with_writer: bool) -> Result<()> {
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
pub(crate) fn scans(run: &Run, db: &dyn Engine) -> Result<()> {
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
pub(crate) fn snapshot_scan(run: &Run, db: &Arc<dyn Engine>) -> Result<()> {
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
pub(crate) fn retention(run: &Run, db: &dyn Engine) -> Result<()> {
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
pub(crate) fn bulk_load(run: &Run) -> Result<()> {
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
