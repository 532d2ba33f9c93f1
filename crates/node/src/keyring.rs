//! Loading a node's payload keyring: from a file (`--keyring`), or from its
//! text in an environment variable (`--keyring-text`, for containers).
//! The format and the keys' use are `hookraft_core::payload`'s.

use std::path::Path;

use hookraft_core::payload::{Keyring, KeyringFile};

/// Reads the keyring file at `path`. A file others may read is used, with
/// a warning: the keys in it decrypt every payload.
pub fn load(path: &Path) -> Result<Keyring, String> {
    Keyring::new(&read_file(path)?)
}

/// The keyring file at `path`, parsed (for `hookraft keys`).
pub fn read_file(path: &Path) -> Result<KeyringFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the keyring {}: {e}", path.display()))?;
    warn_if_shared(path);
    KeyringFile::parse(&text).map_err(|e| format!("keyring {}: {e}", path.display()))
}

/// Writes a keyring file readable by its owner only, durably.
pub fn write_file(path: &Path, file: &KeyringFile) -> Result<(), String> {
    crate::secret::write_private(path, &file.render()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "the keyring can be read by other users; `chmod 600` it"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::io::SeededEntropy;

    #[test]
    fn a_written_keyring_is_private_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keyring");
        let entropy = SeededEntropy::new(4);
        let mut file = KeyringFile::generate(None, &entropy).unwrap();
        file.add_generated(None, true, &entropy).unwrap();
        write_file(&path, &file).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let ring = load(&path).unwrap();
        assert_eq!(ring.active_id(), "k2");
        assert_eq!(ring.ids().collect::<Vec<_>>(), ["k1", "k2"]);
    }

    #[test]
    fn a_missing_or_bad_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope");
        assert!(load(&path).unwrap_err().contains("cannot read the keyring"));
        std::fs::write(&path, "active = k1\n").unwrap();
        let error = load(&path).unwrap_err();
        assert!(error.contains("holds no key") && error.contains("nope"), "{error}");
    }
}
