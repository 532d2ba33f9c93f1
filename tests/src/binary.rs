//! Finds the `hookraft` executable the tests run.
//!
//! Order: the `HOOKRAFT_BIN` environment variable; else `hookraft` in the
//! parent of the current executable's directory (integration tests live in
//! `target/<profile>/deps/`, the binary in `target/<profile>/`); else
//! `hookraft` beside the current executable (for binaries such as the bench).
//! `cargo test --workspace` builds the binary because the `hookraft` package
//! has an integration test; `cargo test -p hookraft-tests` alone does not,
//! so a binary found in `target/` that is older than a source file of the
//! crates it is built from is refused: the tests would run old code.

use std::env;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

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
    // Found and checked once per process: every node a test starts asks.
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    FOUND.get_or_init(find_checked_binary).clone()
}

/// The first default candidate that exists, refused if older than its sources.
fn find_checked_binary() -> PathBuf {
    let candidates = default_candidates();
    let binary = candidates.iter().find(|path| path.is_file()).cloned().unwrap_or_else(|| {
        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        panic!(
            "the `hookraft` binary was not found (tried {}); build it with `cargo build -p hookraft` \
             or run `cargo test --workspace`, or set {HOOKRAFT_BIN_ENV}",
            tried.join(", ")
        )
    });
    if let Some(newer) = source_newer_than(&binary, &crates_dir()) {
        panic!(
            "{} is older than {}: it would run code the sources no longer hold; rebuild it with \
             `cargo build -p hookraft` (add `--release` for a release binary) or run \
             `cargo test --workspace`, or set {HOOKRAFT_BIN_ENV} to run a given binary anyway",
            binary.display(),
            newer.display()
        );
    }
    binary
}

/// The workspace's `crates/` directory, where the binary's sources are.
fn crates_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).join("crates")
}

/// A source of the binary modified after `binary` was: a `.rs` file under
/// `crates/*/src/` or a `crates/*/Cargo.toml`. Files cargo does not build
/// into the binary (a crate's own tests and benches) do not count. `None`
/// when there is none, or when the sources are not there (a binary run
/// away from its checkout).
pub fn source_newer_than(binary: &Path, crates: &Path) -> Option<PathBuf> {
    let built = modified(binary)?;
    std::fs::read_dir(crates).ok()?.flatten().find_map(|krate| {
        let krate = krate.path();
        let mut sources = vec![krate.join("Cargo.toml")];
        collect_rs_files(&krate.join("src"), &mut sources);
        sources.into_iter().find(|source| modified(source).is_some_and(|at| at > built))
    })
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn collect_rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, create_dir_all, write};
    use std::time::Duration;

    fn touch(path: &Path, at: SystemTime) {
        create_dir_all(path.parent().expect("a parent")).expect("dirs");
        write(path, b"x").expect("write");
        File::options().write(true).open(path).expect("open").set_modified(at).expect("set mtime");
    }

    #[test]
    fn a_source_of_the_binary_newer_than_it_is_named_and_other_files_are_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (crates, binary) = (dir.path().join("crates"), dir.path().join("hookraft"));
        let built = SystemTime::now() - Duration::from_secs(3_600);
        touch(&binary, built);
        touch(&crates.join("core/src/state/apply.rs"), built - Duration::from_secs(60));
        touch(&crates.join("core/Cargo.toml"), built - Duration::from_secs(60));
        assert_eq!(source_newer_than(&binary, &crates), None);
        // A crate's own tests, benches and docs are not built into the binary.
        touch(&crates.join("core/tests/props.rs"), built + Duration::from_secs(60));
        touch(&crates.join("core/benches/hot.rs"), built + Duration::from_secs(60));
        touch(&crates.join("core/src/notes.md"), built + Duration::from_secs(60));
        assert_eq!(source_newer_than(&binary, &crates), None);
        let edited = crates.join("core/src/state/apply.rs");
        touch(&edited, built + Duration::from_secs(60));
        assert_eq!(source_newer_than(&binary, &crates), Some(edited));
        touch(&crates.join("core/src/state/apply.rs"), built);
        let manifest = crates.join("core/Cargo.toml");
        touch(&manifest, built + Duration::from_secs(1));
        assert_eq!(source_newer_than(&binary, &crates), Some(manifest));
    }

    #[test]
    fn without_the_sources_or_the_binary_nothing_is_called_newer() {
        let dir = tempfile::tempdir().expect("temp dir");
        let binary = dir.path().join("hookraft");
        assert_eq!(source_newer_than(&binary, &dir.path().join("crates")), None);
        touch(&binary, SystemTime::now());
        assert_eq!(source_newer_than(&binary, &dir.path().join("nowhere")), None);
    }
}
