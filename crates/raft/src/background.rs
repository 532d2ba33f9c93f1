//! Work nothing waits for soon (a snapshot's encoding, the removal of a
//! purged log), on a thread of its own at a lower priority, and paced: it
//! rests as long as it worked, so that it takes at most half a core.
//!
//! A lower priority alone did not keep such work out of the way on this
//! two-core machine: with one spinning thread per core at nice 10, a busy
//! runtime's round trip had a p99 of 4.8 ms against 0.9 ms without them,
//! and under `SCHED_IDLE` 6.7 ms; spinning for 1 ms and resting for 1 ms,
//! 1.8 ms (`cargo bench -p hookraft-raft --bench background`; design note
//! 38). Hence [`Pace`].
//!
//! A thread of its own, not one of the runtime's blocking threads: those
//! are reused, and an unprivileged process cannot raise a thread's priority
//! back once it lowered it.
#![allow(
    clippy::disallowed_methods,
    reason = "pacing measures real time; only threads on a real disk pace, never a simulation"
)]

use std::time::{Duration, Instant};

use crate::Error;

/// The nice value of a background thread (0 is the default, 19 the lowest
/// priority).
pub const BACKGROUND_NICE: i32 = 10;

/// How long paced work runs before it rests (as long again).
pub const PACE_SLICE: Duration = Duration::from_micros(500);

/// Paces work on a background thread: [`Pace::breathe`], called often,
/// rests as long as the thread worked since its last rest, once that is
/// [`PACE_SLICE`] or more. [`Pace::off`] never rests: work in memory, as in
/// a simulation, which must not read the clock.
#[derive(Debug)]
pub struct Pace {
    working_since: Option<Instant>,
    rested: Duration,
}

impl Pace {
    /// A pace that rests, starting to count now.
    pub fn on() -> Self {
        Self { working_since: Some(Instant::now()), rested: Duration::ZERO }
    }

    /// A pace that never rests.
    pub fn off() -> Self {
        Self { working_since: None, rested: Duration::ZERO }
    }

    /// Rests if the thread worked [`PACE_SLICE`] or more since its last
    /// rest; returns how long it rested.
    pub fn breathe(&mut self) -> Duration {
        let Some(since) = self.working_since else { return Duration::ZERO };
        let worked = since.elapsed();
        if worked < PACE_SLICE {
            return Duration::ZERO;
        }
        std::thread::sleep(worked);
        self.working_since = Some(Instant::now());
        self.rested += worked;
        worked
    }

    /// How long it rested in all.
    pub fn rested(&self) -> Duration {
        self.rested
    }
}

/// The priority of a thread of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// [`BACKGROUND_NICE`]: work nothing waits for soon.
    Low,
    /// The caller's: background work that fell behind, which memory waits
    /// for (a snapshot moving a large history out of memory).
    Callers,
}

/// Starts `work` on a new thread called `name` at [`BACKGROUND_NICE`] and
/// returns its handle at once. A thread whose priority cannot be lowered
/// runs at its caller's.
pub fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> Result<std::thread::JoinHandle<()>, Error> {
    spawn_at(name, Priority::Low, work)
}

/// [`spawn`] at `priority`.
pub fn spawn_at(
    name: &str,
    priority: Priority,
    work: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, Error> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let thread = rustix::thread::gettid();
            if priority == Priority::Low
                && let Err(error) = rustix::process::setpriority_process(Some(thread), BACKGROUND_NICE)
            {
                tracing::debug!(%error, "could not lower a background thread's priority");
            }
            work();
        })
        .map_err(|e| Error::Corrupt(format!("cannot start the thread {name}: {e}")))
}

/// Runs `work` as [`spawn`] does and waits for its result.
pub async fn run<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    run_at(name, Priority::Low, work).await
}

/// [`run`] at `priority`.
pub async fn run_at<T: Send + 'static>(
    name: &str,
    priority: Priority,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    let (done, result) = tokio::sync::oneshot::channel();
    spawn_at(name, priority, move || {
        let _ = done.send(work());
    })?;
    result.await.unwrap_or_else(|_| Err(Error::Corrupt("a background thread failed".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priority() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("priority")
    }

    #[tokio::test]
    async fn work_runs_on_a_named_thread_of_lower_priority_and_leaves_the_caller_alone() {
        let outer = priority();
        let (inner, thread) =
            run("hookraft-test", move || Ok((priority(), std::thread::current().name().map(str::to_owned))))
                .await
                .expect("runs");
        assert_eq!(thread.as_deref(), Some("hookraft-test"));
        // Lowering a priority is refused only to one already lower still.
        assert!(inner == BACKGROUND_NICE || (inner == outer && outer > BACKGROUND_NICE), "{inner} from {outer}");
        assert_eq!(priority(), outer, "the calling thread keeps its priority");
        let failed: Result<(), Error> = run("hookraft-test", || Err(Error::Corrupt("boom".into()))).await;
        assert!(matches!(failed, Err(Error::Corrupt(detail)) if detail == "boom"), "an error comes back as it was");
    }

    #[tokio::test]
    async fn work_at_the_callers_priority_keeps_it() {
        let outer = priority();
        let inner = run_at("hookraft-test", Priority::Callers, move || Ok(priority())).await.expect("runs");
        assert_eq!(inner, outer);
    }

    #[test]
    fn a_pace_rests_as_long_as_the_work_once_a_slice_was_worked() {
        let mut pace = Pace::on();
        assert_eq!(pace.breathe(), Duration::ZERO, "no rest before a slice of work");
        let worked = Instant::now();
        while worked.elapsed() < PACE_SLICE + PACE_SLICE / 2 {
            std::hint::spin_loop();
        }
        let resting = Instant::now();
        let rested = pace.breathe();
        assert!(rested >= PACE_SLICE + PACE_SLICE / 2, "rested {rested:?}");
        assert!(resting.elapsed() >= rested, "the rest is a sleep of that length");
        assert_eq!(pace.breathe(), Duration::ZERO, "the count starts again after a rest");
        assert_eq!(pace.rested(), rested);
    }

    #[test]
    fn a_pace_that_is_off_never_rests() {
        let mut pace = Pace::off();
        std::thread::sleep(PACE_SLICE * 2);
        assert_eq!(pace.breathe(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_panicking_thread_is_an_error_not_a_hang() {
        let failed: Result<(), Error> = run("hookraft-test", || panic!("on purpose")).await;
        assert!(matches!(failed, Err(Error::Corrupt(_))));
    }
}
