//! Durable renames on a real disk: what the history store needs to put a
//! whole file in place so that a crash leaves the old file or the new one.

use std::path::Path;

use crate::Error;

/// Renames `from` over `to` (atomically: a reader of `to` sees the old file
/// or the new one, never a mix) and syncs the directories involved, so the
/// rename itself survives a crash. The file's own contents must already be
/// synced.
pub(crate) fn rename_durably(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::rename(from, to).map_err(|source| Error::File { what: "rename", path: to.to_path_buf(), source })?;
    let (to_dir, from_dir) = (parent_dir(to), parent_dir(from));
    sync_dir(to_dir)?;
    if from_dir != to_dir {
        sync_dir(from_dir)?;
    }
    Ok(())
}

/// Syncs the directory `dir`, so the names created, renamed or removed in
/// it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|source| Error::File {
        what: "sync",
        path: dir.to_path_buf(),
        source,
    })
}

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_rename_replaces_the_file_and_a_bare_name_lives_in_the_current_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("new.partial"), dir.path().join("file"));
        std::fs::write(&to, b"old").expect("writes");
        std::fs::write(&from, b"new").expect("writes");
        rename_durably(&from, &to).expect("renames");
        assert_eq!(std::fs::read(&to).expect("reads"), b"new");
        assert!(!from.exists());
        assert_eq!(parent_dir(Path::new("bare")), Path::new("."));
        assert_eq!(parent_dir(&to), dir.path());
        assert!(rename_durably(&from, &to).is_err(), "nothing left to rename");
    }
}
