//! Golden files: the bytes of the current wire, log and snapshot layouts,
//! in `tests/golden/`. A test encodes fixed values and compares them with
//! the file, then decodes the file and encodes it again byte for byte.
//! Until a first release, a change of layout writes the files again in the
//! same commit (`HOOKRAFT_BLESS=1 cargo test -p hookraft-raft golden`)
//! instead of adding a decoder for the old layout.

use std::path::PathBuf;

mod log;

/// The golden file `name`, after checking that `encoded` is its exact
/// content (with `HOOKRAFT_BLESS` set, written from `encoded` first).
pub(crate) fn pinned(name: &str, encoded: &[u8]) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("HOOKRAFT_BLESS").is_some() {
        std::fs::write(&path, encoded).expect("writes the golden file");
    }
    let golden =
        std::fs::read(&path).unwrap_or_else(|e| panic!("golden file {name}: {e} (HOOKRAFT_BLESS=1 writes it)"));
    assert!(
        encoded == golden,
        "the layout pinned by {name} changed ({} bytes against the file's {}): until a first release, write the \
         file again in the same commit (HOOKRAFT_BLESS=1 cargo test -p hookraft-raft golden)",
        encoded.len(),
        golden.len()
    );
    golden
}
