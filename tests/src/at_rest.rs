//! What a node keeps on disk: keyrings a test can write again after a
//! restart, and searches of a data directory for bytes that must not be there.

use std::path::{Path, PathBuf};

use hookraft_core::entropy::Entropy;
use hookraft_core::payload::{KeyMaterial, KeyringFile};

/// Fixed key material (a test needs keys it can write again after a restart).
pub struct Pattern(pub u8);

impl Entropy for Pattern {
    fn fill(&self, dest: &mut [u8]) {
        for (i, byte) in dest.iter_mut().enumerate() {
            *byte = self.0.wrapping_mul(31).wrapping_add(i as u8);
        }
    }
}

/// A keyring's text: `keys` are `(id, seed)`, one key per seed.
pub fn keyring_text(active: &str, keys: &[(&str, u8)]) -> String {
    let keys = keys.iter().map(|(id, seed)| (id.to_string(), KeyMaterial::generate(&Pattern(*seed)))).collect();
    KeyringFile { active: active.to_string(), keys }.render()
}

pub fn write_keyring(path: &Path, active: &str, keys: &[(&str, u8)]) {
    std::fs::write(path, keyring_text(active, keys)).expect("writes the keyring");
}

/// A keyring file written in a directory of its own (kept while the
/// returned directory lives), as [`write_keyring`] writes it.
pub fn keyring_in(active: &str, keys: &[(&str, u8)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("keyring");
    write_keyring(&path, active, keys);
    (dir, path)
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("reads the data dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(path);
            }
        }
    }
    found
}

/// Whether a file named `name` is anywhere under `dir`.
pub fn file_named(dir: &Path, name: &str) -> bool {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("reads the data dir").flatten() {
            if entry.file_name() == name {
                return true;
            }
            if entry.path().is_dir() {
                pending.push(entry.path());
            }
        }
    }
    false
}

/// HMAC-SHA256 of `parts` under `key`, written here apart from hookraft's
/// own signing code (as a provider computes it).
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
