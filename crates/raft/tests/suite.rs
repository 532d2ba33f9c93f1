//! openraft's own storage test suite against [`SledLogStore`] and
//! [`StateMachineStore`], each case in a fresh temporary directory.

use hookraft_raft::{SledLogStore, StateMachineStore, StorageError, TypeConfig, open_sled};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{ErrorSubject, ErrorVerb};
use tempfile::TempDir;

/// Builds a store in a new temporary directory; the directory is the guard
/// the suite keeps alive until the case ends.
struct SledStoreBuilder;

impl StoreBuilder<TypeConfig, SledLogStore, StateMachineStore, TempDir> for SledStoreBuilder {
    async fn build(&self) -> Result<(TempDir, SledLogStore, StateMachineStore), StorageError> {
        let dir =
            tempfile::tempdir().map_err(|e| StorageError::from_io_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        let (log_store, state_machine, _handle) =
            open_sled(dir.path(), None).map_err(|e| e.storage(ErrorSubject::Store, ErrorVerb::Read))?;
        Ok((dir, log_store, state_machine))
    }
}

#[test]
fn sled_stores_pass_the_openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SledStoreBuilder) {
        panic!("storage suite failed: {e}");
    }
}
