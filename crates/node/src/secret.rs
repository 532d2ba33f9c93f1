//! The node-to-node secret of a node started without `--cluster-secret`.
//!
//! Every `/internal/*` request must carry a cluster secret, in every
//! configuration. A node given none keeps a secret of its own: drawn from
//! its `Io` entropy (the OS's in production) on first start and kept in its
//! data dir, readable by its owner only, so a restart keeps it. No other
//! node knows it, so nobody can reach the node's Raft or forward a write to
//! it, and it takes no new members (`POST /v1/cluster/nodes` answers 409).

use std::io::Write;
use std::path::Path;

use hookraft_core::entropy::{Entropy, hex};
use hookraft_core::redact::SecretString;

use crate::io::Storage;

/// The file in the data dir that holds a node's own secret.
pub const SECRET_FILE: &str = "cluster-secret";
/// Random bytes in a generated secret (written as hex).
pub const SECRET_BYTES: usize = 32;

/// A fresh secret of [`SECRET_BYTES`] from `entropy`, as hex.
pub fn generate(entropy: &dyn Entropy) -> SecretString {
    let mut bytes = [0u8; SECRET_BYTES];
    entropy.fill(&mut bytes);
    SecretString::new(hex(&bytes))
}

/// The node's own secret: read from its data dir, or generated and kept
/// there on first start. A node on in-memory storage (the simulator) keeps
/// a fresh one in memory.
pub fn node_local(storage: &Storage, entropy: &dyn Entropy) -> Result<SecretString, String> {
    match storage {
        Storage::Sled(dir) => load_or_create(dir, entropy),
        Storage::Memory(_) => Ok(generate(entropy)),
    }
}

fn load_or_create(dir: &Path, entropy: &dyn Entropy) -> Result<SecretString, String> {
    let path = dir.join(SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let text = text.trim();
            if text.len() < SECRET_BYTES {
                return Err(format!(
                    "{} holds no usable secret (fewer than {SECRET_BYTES} characters); delete it to have a new one made",
                    path.display()
                ));
            }
            return Ok(SecretString::new(text));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    }
    let secret = generate(entropy);
    write_private(&path, secret.expose()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(secret)
}

/// Makes `dir` (and its parents) if missing, readable by its owner only,
/// and takes group and other access away from an existing one: the data
/// dir holds the log, snapshots and this node's secret.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700)) {
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "the data dir was open to other users; now its owner's only")
            }
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "the data dir is open to other users and cannot be closed")
            }
        }
    }
    Ok(())
}

/// Writes `text` to `path` readable by its owner only, durably: a temporary
/// file beside it synced, renamed over `path`, and the directory synced.
/// Also writes keyring files (`hookraft keys`).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| std::io::Error::other("the path names no file"))?;
    std::fs::create_dir_all(dir)?;
    let partial = dir.join(format!("{}.partial", name.to_string_lossy()));
    // A partial file left by an earlier crash keeps its mode when opened
    // again, whatever `mode` says: only a file this call creates is private.
    match std::fs::remove_file(&partial) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&partial)?;
    file.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        file.write_all(b"\n")?;
    }
    file.sync_all()?;
    std::fs::rename(&partial, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::io::SeededEntropy;

    #[test]
    fn a_node_keeps_the_secret_it_generated_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::Sled(dir.path().to_path_buf());
        let first = node_local(&storage, &SeededEntropy::new(1)).unwrap();
        assert_eq!(first.expose().len(), SECRET_BYTES * 2);
        let mode = std::fs::metadata(dir.path().join(SECRET_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only the node's user may read its secret");
        // Another source would make another secret: the file wins.
        let again = node_local(&storage, &SeededEntropy::new(2)).unwrap();
        assert_eq!(first, again);
    }

    #[test]
    fn a_private_file_stays_private_when_a_readable_partial_file_was_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keyring");
        let partial = dir.path().join("keyring.partial");
        std::fs::write(&partial, "left by a crash").unwrap();
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "active = k1").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "active = k1\n");
        assert!(!partial.exists());
    }

    #[test]
    fn the_data_dir_is_made_private_and_an_open_one_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("a/b/data");
        private_dir(&fresh).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o700);
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&open).unwrap();
        assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn different_draws_make_different_secrets() {
        let entropy = SeededEntropy::new(9);
        assert_ne!(generate(&entropy), generate(&entropy));
    }

    #[test]
    fn a_truncated_secret_file_is_refused_not_used() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SECRET_FILE), "short\n").unwrap();
        let error = node_local(&Storage::Sled(dir.path().to_path_buf()), &SeededEntropy::new(1)).unwrap_err();
        assert!(error.contains("no usable secret"), "{error}");
    }
}
