//! The payload keyring of a run: every node holds the same keys, made
//! from the seed, and seals what it accepts under the active one.
//!
//! Half the runs rotate part way through the fault phase, as an operator
//! rotates a live cluster: the new key was handed to every node from the
//! start (both rings hold `k1` and `k2`), and only the active key changes.
//! Nodes (re)started after the rotation seal under `k2`, the ones still
//! running under `k1`, so a run with crashes after it keeps payloads under
//! both keys, and every node must open either.

use std::sync::Arc;

use hookraft_core::payload::{Keyring, KeyringFile};
use hookraft_node::SeededEntropy;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Mixed into the run's seed for the keys' own generator, so the draws of
/// the cluster, workload and faults stay those of a run without keys.
const KEYS_SALT: u64 = 0x6b65_7972_696e_6773;
/// The key active from the start.
pub const FIRST_KEY: &str = "k1";
/// The key active after a rotation.
pub const ROTATED_KEY: &str = "k2";

/// The rings a run hands its nodes.
pub struct RunKeys {
    /// Active key `k1`; holds `k2` too.
    pub first: Arc<Keyring>,
    /// The same keys, `k2` active.
    pub rotated: Arc<Keyring>,
    /// How far into the fault phase the active key changes; `None`: never.
    pub rotate_after_ms: Option<u64>,
}

impl RunKeys {
    /// The keys of the run `seed`, whose fault phase lasts `fault_phase_ms`.
    pub fn new(seed: u64, fault_phase_ms: u64) -> anyhow::Result<Self> {
        let mut rng = StdRng::seed_from_u64(seed ^ KEYS_SALT);
        let entropy = SeededEntropy::new(rng.random());
        let mut file = KeyringFile::generate(Some(FIRST_KEY), &entropy).map_err(anyhow::Error::msg)?;
        file.add_generated(Some(ROTATED_KEY), false, &entropy).map_err(anyhow::Error::msg)?;
        let first = Keyring::new(&file).map_err(anyhow::Error::msg)?;
        file.active = ROTATED_KEY.to_string();
        let rotated = Keyring::new(&file).map_err(anyhow::Error::msg)?;
        let rotate_after_ms =
            rng.random_bool(0.5).then(|| rng.random_range(fault_phase_ms / 4..=fault_phase_ms * 3 / 4));
        Ok(Self { first: Arc::new(first), rotated: Arc::new(rotated), rotate_after_ms })
    }
}

#[cfg(test)]
mod tests {
    use hookraft_core::payload::Payload;

    use super::*;

    #[test]
    fn a_seed_makes_the_same_keys_and_either_ring_opens_what_the_other_sealed() {
        let (a, b) = (RunKeys::new(7, 40_000).unwrap(), RunKeys::new(7, 40_000).unwrap());
        let entropy = SeededEntropy::new(1);
        let sealed = a.first.seal("evt_1", "order.paid", b"{\"n\":1}", &entropy);
        assert_eq!(sealed.key_id(), Some(FIRST_KEY));
        assert_eq!(&*b.rotated.open("evt_1", "order.paid", &sealed).unwrap(), b"{\"n\":1}");
        let sealed = b.rotated.seal("evt_2", "order.paid", b"{\"n\":2}", &entropy);
        assert_eq!(sealed.key_id(), Some(ROTATED_KEY));
        assert_eq!(&*a.first.open("evt_2", "order.paid", &sealed).unwrap(), b"{\"n\":2}");
        assert_eq!(a.rotate_after_ms, b.rotate_after_ms);
    }

    #[test]
    fn another_seed_makes_other_keys() {
        let (a, b) = (RunKeys::new(7, 40_000).unwrap(), RunKeys::new(8, 40_000).unwrap());
        let sealed: Payload = a.first.seal("evt_1", "order.paid", b"{}", &SeededEntropy::new(1));
        assert!(b.first.open("evt_1", "order.paid", &sealed).is_err());
    }

    #[test]
    fn rotations_fall_inside_the_fault_phase_and_not_in_every_run() {
        let drawn: Vec<Option<u64>> = (0..40).map(|seed| RunKeys::new(seed, 40_000).unwrap().rotate_after_ms).collect();
        assert!(drawn.iter().any(Option::is_none));
        assert!(drawn.iter().flatten().count() > 0);
        assert!(drawn.iter().flatten().all(|at| (10_000..=30_000).contains(at)));
    }
}
