//! [`SeededRuntime`] makes openraft's election timeouts a function of one
//! seed: the same seed on one thread draws the same timeouts, another seed
//! draws others, and [`TypeConfig`] runs on it.

use hookraft_raft::{SeededRuntime, TypeConfig, raft_config, seed_thread_rng};
use openraft::RaftTypeConfig;

/// The election timeouts openraft would draw next on this thread, drawn
/// exactly as openraft draws them.
fn election_timeouts_ms(count: usize) -> Vec<u64> {
    let config = raft_config();
    (0..count).map(|_| config.new_rand_election_timeout::<SeededRuntime>()).collect()
}

#[test]
fn same_seed_draws_the_same_election_timeouts_and_another_seed_others() {
    seed_thread_rng(42);
    let first = election_timeouts_ms(32);
    seed_thread_rng(42);
    let second = election_timeouts_ms(32);
    assert_eq!(first, second);

    seed_thread_rng(43);
    assert_ne!(election_timeouts_ms(32), first);

    let config = raft_config();
    assert!(first.iter().all(|t| (config.election_timeout_min..config.election_timeout_max).contains(t)), "{first:?}");
    assert!(first.iter().any(|&t| t != first[0]), "a seeded sequence still varies: {first:?}");
}

#[test]
fn type_config_runs_on_the_seeded_runtime() {
    fn runtime_of<C: RaftTypeConfig<AsyncRuntime = SeededRuntime>>() {}
    runtime_of::<TypeConfig>();
}
