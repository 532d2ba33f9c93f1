//! The process's open-files limit. A node holds a socket per webhook attempt
//! in flight and per idle pooled connection, per ingest client and per peer;
//! many systems start processes with a soft limit of 1,024 files although
//! their hard limit is far higher, and a node under fan-out passes 1,024
//! (docs/benchmarks.md). At start the node raises its soft limit as far as
//! the hard limit allows, as any unprivileged process may.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Open files asked for at most: enough for every connection a node makes,
/// without asking the kernel for per-process tables it never needs.
pub const OPEN_FILES_WANTED: u64 = 1 << 20;

/// What became of the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFiles {
    /// Already at least what was wanted, or as high as the hard limit allows.
    Kept(u64),
    /// Raised from the first to the second.
    Raised { from: u64, to: u64 },
    /// Could not be read or changed; the node goes on with what it has.
    Unchanged,
}

/// The soft limit to ask for given the current soft and hard limits (`None`
/// is unlimited): up to [`OPEN_FILES_WANTED`], never above the hard limit,
/// never below the current one. `None` when there is nothing to change.
pub fn soft_limit_to_ask(current: Option<u64>, maximum: Option<u64>) -> Option<u64> {
    let current = current?; // unlimited already
    let ceiling = maximum.map_or(OPEN_FILES_WANTED, |hard| hard.min(OPEN_FILES_WANTED));
    (ceiling > current).then_some(ceiling)
}

/// Raises the soft open-files limit (see the module's documentation).
pub fn raise_open_files() -> OpenFiles {
    let limit = getrlimit(Resource::Nofile);
    let Some(wanted) = soft_limit_to_ask(limit.current, limit.maximum) else {
        return limit.current.map_or(OpenFiles::Kept(u64::MAX), OpenFiles::Kept);
    };
    let from = limit.current.unwrap_or(u64::MAX);
    match setrlimit(Resource::Nofile, Rlimit { current: Some(wanted), maximum: limit.maximum }) {
        Ok(()) => OpenFiles::Raised { from, to: wanted },
        Err(_) => OpenFiles::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_to_the_hard_limit_or_the_wanted_count_whichever_is_lower() {
        assert_eq!(soft_limit_to_ask(Some(1_024), Some(4_096)), Some(4_096));
        assert_eq!(soft_limit_to_ask(Some(1_024), Some(u64::MAX / 2)), Some(OPEN_FILES_WANTED));
        assert_eq!(soft_limit_to_ask(Some(1_024), None), Some(OPEN_FILES_WANTED));
    }

    #[test]
    fn a_limit_already_high_enough_or_unlimited_is_left_alone() {
        assert_eq!(soft_limit_to_ask(Some(4_096), Some(4_096)), None);
        assert_eq!(soft_limit_to_ask(Some(OPEN_FILES_WANTED * 2), None), None);
        assert_eq!(soft_limit_to_ask(None, None), None);
    }

    #[test]
    fn raising_leaves_the_process_with_at_least_the_limit_it_had() {
        let before = getrlimit(Resource::Nofile).current;
        let outcome = raise_open_files();
        let after = getrlimit(Resource::Nofile).current;
        assert!(after.unwrap_or(u64::MAX) >= before.unwrap_or(u64::MAX), "{outcome:?}");
        if let OpenFiles::Raised { from, to } = outcome {
            assert!(to > from);
            assert_eq!(after, Some(to));
        }
    }
}
