//! Finds the `hookraft` executable the tests run.
//!
//! Order: the `HOOKRAFT_BIN` environment variable; else `hookraft` in the
//! parent of the current executable's directory (integration tests live in
//! `target/<profile>/deps/`, the binary in `target/<profile>/`); else
//! `hookraft` beside the current executable (for binaries such as the bench).
//! `cargo test --workspace` builds the binary because the `hookraft` package
//! has an integration test; `cargo test -p hookraft-tests` alone does not.

use std::env;
use std::path::PathBuf;

/// Environment variable that overrides where the binary is looked for.
pub const HOOKRAFT_BIN_ENV: &str = "HOOKRAFT_BIN";

/// The path of the `hookraft` binary; panics with instructions when absent.
pub fn locate_hookraft_binary() -> PathBuf {
    if let Some(path) = env::var_os(HOOKRAFT_BIN_ENV) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{HOOKRAFT_BIN_ENV}={} does not name a file; point it at a built `hookraft` binary",
            path.display()
        );
        return path;
    }
    let candidates = default_candidates();
    candidates.iter().find(|path| path.is_file()).cloned().unwrap_or_else(|| {
        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        panic!(
            "the `hookraft` binary was not found (tried {}); build it with `cargo build -p hookraft` \
             or run `cargo test --workspace`, or set {HOOKRAFT_BIN_ENV}",
            tried.join(", ")
        )
    })
}

/// `<exe dir>/../hookraft` then `<exe dir>/hookraft`.
fn default_candidates() -> Vec<PathBuf> {
    let exe = env::current_exe().expect("the path of the current executable is readable");
    let name = format!("hookraft{}", env::consts::EXE_SUFFIX);
    let Some(dir) = exe.parent() else { return Vec::new() };
    let mut candidates = Vec::with_capacity(2);
    if let Some(parent) = dir.parent() {
        candidates.push(parent.join(&name));
    }
    candidates.push(dir.join(&name));
    candidates
}
