//! The process's allocator, and the memory it gives back once a worker
//! goes idle.
//!
//! mimalloc replaces glibc's malloc: fewer CPU cycles per allocation under
//! many threads' small allocations (docs/benchmarks.md). It keeps memory
//! freed into a thread's pages with that thread until the thread allocates
//! from those pages again, collects or exits, and returns freed pages to
//! the OS only when some thread passes through its slow paths. After a
//! burst (2 million events preloaded at 15,000 a second) a node that then
//! took a steady 1,000 events/s still held 1.1 GiB five minutes later,
//! where a node that had never seen the burst held about 145 MiB: what
//! the burst freed stayed in pages the steady load never touched again
//! (design note 69). So each runtime worker, as it is about to park,
//! collects its own heap (`mi_collect`), at most once per
//! [`COLLECT_EVERY`]: an idle worker hands back what it freed; a busy one
//! never parks and pays nothing.
//!
//! mimalloc is built without its 4 MiB large pages (`.cargo/config.toml`
//! passes `MI_ENABLE_LARGE_PAGES=0` to its C build): an allocation of 64 to
//! 512 KiB is a span of its own, returned when it is freed, rather than a
//! slot in a page that one surviving block keeps resident whole (design
//! note 70).

use std::cell::Cell;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often one worker collects at most: often enough that a burst's
/// memory is back within seconds, rarely enough that a worker parking
/// thousands of times a second pays for one collection.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

#[expect(unsafe_code, reason = "mimalloc's C API; `mi_collect` takes no pointer and may be called from any thread")]
unsafe extern "C" {
    /// Takes in the blocks other threads freed into the calling thread's
    /// pages, frees its empty pages, and returns to the OS the freed
    /// memory whose purge delay passed (mimalloc.h). Forced, it also visits
    /// full pages and purges at once, which cost ingest latency (note 69).
    safe fn mi_collect(force: bool);
}

thread_local! {
    /// When this thread last collected.
    static LAST_COLLECT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// How many times this thread collected (for the tests).
    #[cfg(test)]
    static COLLECTIONS: Cell<u64> = const { Cell::new(0) };
}

/// Whether a thread that last collected at `last` collects again at `now`.
fn collect_due(last: Option<Instant>, now: Instant, every: Duration) -> bool {
    last.is_none_or(|last| now.saturating_duration_since(last) >= every)
}

/// Collects the calling thread's heap if [`COLLECT_EVERY`] passed since
/// its last collection. Runs as a runtime's worker parks.
fn collect_when_idle() {
    #[expect(clippy::disallowed_methods, reason = "the allocator's pacing is the process's, not a node's clock")]
    let now = Instant::now();
    LAST_COLLECT.with(|last| {
        if collect_due(last.get(), now, COLLECT_EVERY) {
            last.set(Some(now));
            mi_collect(false);
            #[cfg(test)]
            COLLECTIONS.with(|count| count.set(count.get() + 1));
        }
    });
}

/// A multi-threaded runtime builder whose workers collect as they go idle.
pub fn runtime_builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.on_thread_park(collect_when_idle);
    builder
}

/// How many times the calling thread collected.
#[cfg(test)]
fn collections() -> u64 {
    COLLECTIONS.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a reference instant for the pure decision, which reads no clock")]
    fn a_thread_collects_first_and_then_once_a_period_has_passed() {
        let start = Instant::now();
        let every = Duration::from_secs(1);
        assert!(collect_due(None, start, every), "a thread that never collected does");
        assert!(!collect_due(Some(start), start, every));
        assert!(!collect_due(Some(start), start + every / 2, every));
        assert!(collect_due(Some(start), start + every, every));
        assert!(!collect_due(Some(start + every), start, every), "a clock read out of order waits");
    }

    #[expect(unsafe_code, reason = "mimalloc's C API, read of a live allocation's size")]
    unsafe extern "C" {
        fn mi_usable_size(p: *const std::ffi::c_void) -> usize;
    }

    /// Built without mimalloc's 4 MiB large pages (`.cargo/config.toml`),
    /// an allocation over 64 KiB is memory of its own, sized to the 4 KiB
    /// page; in a large page it would be a slot of its size class (80 KiB
    /// here) that any neighbour still in use keeps resident.
    #[test]
    fn an_allocation_over_64_kib_is_memory_of_its_own() {
        let buffer: Vec<u8> = Vec::with_capacity(73 * 1024);
        #[expect(unsafe_code, reason = "the pointer is a live mimalloc allocation")]
        let usable = unsafe { mi_usable_size(buffer.as_ptr().cast()) };
        assert_eq!(usable, 76 * 1024, "mimalloc was built with its large pages; is .cargo/config.toml read?");
    }

    #[test]
    fn a_worker_collects_as_it_goes_idle_and_once_a_period_however_often_it_parks() {
        let runtime = runtime_builder().worker_threads(1).enable_all().build().expect("a runtime");
        // Spawned tasks run on the one worker; it parks while they sleep.
        let on_worker = || runtime.block_on(runtime.spawn(async { collections() })).expect("the task runs");
        let sleep_on_worker =
            |ms| runtime.block_on(runtime.spawn(async move { tokio::time::sleep(Duration::from_millis(ms)).await }));
        sleep_on_worker(20).expect("the task runs");
        let first = on_worker();
        assert!(first >= 1, "the worker collected as it parked");
        for _ in 0..20 {
            sleep_on_worker(1).expect("the task runs");
        }
        let later = on_worker();
        assert!(later - first <= 1, "{} collections within a period", later - first);
        assert_eq!(collections(), 0, "the calling thread, no worker, never collected");
    }
}
