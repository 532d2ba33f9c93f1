//! openraft's own storage test suite against [`LogStore`] and
//! [`StateMachineStore`], on both backends: sled (each case in a fresh
//! temporary directory) and [`MemDisk`] (each case on a fresh disk).

use hookraft_raft::{Backend, LogStore, MemDisk, StateMachineStore, StorageError, TypeConfig, open};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{ErrorSubject, ErrorVerb};
use tempfile::TempDir;

/// The stores on `backend`, the read handle dropped; errors as openraft's.
fn open_stores(backend: &Backend) -> Result<(LogStore, StateMachineStore), Box<StorageError>> {
    let (log_store, state_machine, _handle) =
        open(backend, None).map_err(|e| Box::new(e.storage(ErrorSubject::Store, ErrorVerb::Read)))?;
    Ok((log_store, state_machine))
}

/// Builds a store in a new temporary directory; the directory is the guard
/// the suite keeps alive until the case ends.
struct SledStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir =
            tempfile::tempdir().map_err(|e| StorageError::from_io_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        let (log_store, state_machine) = open_stores(&Backend::sled(dir.path())).map_err(|e| *e)?;
        Ok((dir, log_store, state_machine))
    }
}

/// Builds a store on a new in-memory disk.
struct MemStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore> for MemStoreBuilder {
    async fn build(&self) -> Result<((), LogStore, StateMachineStore), StorageError> {
        let (log_store, state_machine) = open_stores(&Backend::Memory(MemDisk::new())).map_err(|e| *e)?;
        Ok(((), log_store, state_machine))
    }
}

#[test]
fn sled_stores_pass_the_openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SledStoreBuilder) {
        panic!("storage suite failed on sled: {e}");
    }
}

#[test]
fn memory_stores_pass_the_openraft_storage_suite() {
    if let Err(e) = Suite::test_all(MemStoreBuilder) {
        panic!("storage suite failed on the in-memory disk: {e}");
    }
}
