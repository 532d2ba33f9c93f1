//! [`SeededRuntime`]: openraft's async runtime for hookraft — tokio for
//! tasks, time and channels, and a per-thread generator that a simulation
//! can seed (STACK trap 2).
//!
//! openraft 0.9 draws its election timeouts from
//! [`AsyncRuntime::thread_rng`]. The stock `TokioRuntime` answers with rand's
//! OS-seeded thread generator, so two runs of one simulated seed elect
//! different leaders. Here every thread has its own rand 0.8 [`StdRng`]:
//! [`seed_thread_rng`] (re)seeds the calling thread's, and a thread that was
//! never seeded seeds itself from OS entropy on its first draw — which is
//! production behaviour. A simulation runs its whole cluster on one thread
//! and calls [`seed_thread_rng`] on it before building the cluster; on a
//! multi-threaded tokio runtime openraft draws on whichever worker runs it.
//!
//! This module must not be used for anything but openraft's own draws: the
//! rest of the node takes its randomness from its `Io` (ARCHITECTURE §8.1).

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};
use rand08::rngs::StdRng;
use rand08::{RngCore, SeedableRng};

thread_local! {
    /// This thread's generator; `None` until seeded or first drawn from.
    static THREAD_RNG: Rc<RefCell<Option<StdRng>>> = Rc::new(RefCell::new(None));
}

/// Reseeds the calling thread's generator: every later draw by openraft on
/// this thread (election timeouts) follows from `seed` alone. Handles
/// obtained before the call follow the new seed too.
pub fn seed_thread_rng(seed: u64) {
    THREAD_RNG.with(|rng| *rng.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// A handle on the calling thread's generator, as returned by
/// [`SeededRuntime::thread_rng`]. Not `Send`: it belongs to its thread.
#[derive(Clone)]
pub struct SeededThreadRng {
    rng: Rc<RefCell<Option<StdRng>>>,
}

impl fmt::Debug for SeededThreadRng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The generator's state would let anyone predict its draws.
        f.debug_struct("SeededThreadRng").finish_non_exhaustive()
    }
}

impl SeededThreadRng {
    fn with<T>(&self, draw: impl FnOnce(&mut StdRng) -> T) -> T {
        let mut slot = self.rng.borrow_mut();
        draw(slot.get_or_insert_with(StdRng::from_entropy))
    }
}

impl RngCore for SeededThreadRng {
    fn next_u32(&mut self) -> u32 {
        self.with(RngCore::next_u32)
    }

    fn next_u64(&mut self) -> u64 {
        self.with(RngCore::next_u64)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.with(|rng| rng.fill_bytes(dest));
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand08::Error> {
        self.with(|rng| rng.try_fill_bytes(dest))
    }
}

/// openraft's runtime: exactly `openraft::TokioRuntime`, except that
/// [`AsyncRuntime::thread_rng`] returns this thread's seedable generator.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct SeededRuntime;

impl AsyncRuntime for SeededRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = SeededThreadRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SeededThreadRng { rng: THREAD_RNG.with(Rc::clone) }
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(tx), rx)
    }
}

#[cfg(test)]
mod tests {
    use rand08::Rng;

    use super::*;

    fn draws() -> Vec<u64> {
        let mut rng = SeededRuntime::thread_rng();
        (0..8).map(|_| rng.gen_range(0..1_000_000)).collect()
    }

    #[test]
    fn handles_taken_before_a_reseed_follow_the_new_seed() {
        let mut early = SeededRuntime::thread_rng();
        seed_thread_rng(7);
        let first = early.next_u64();
        seed_thread_rng(7);
        assert_eq!(SeededRuntime::thread_rng().next_u64(), first);
    }

    #[test]
    fn unseeded_thread_draws_from_entropy_without_panicking() {
        let from_other_thread = std::thread::spawn(draws).join().expect("the thread draws");
        assert_eq!(from_other_thread.len(), 8);
        // Eight draws from a million values: all equal only if not random.
        assert!(from_other_thread.iter().any(|&d| d != from_other_thread[0]));
    }
}
