//! [`DirFile`]: the [`FileSlot`] of a [`crate::SledDisk`], a whole file
//! beside sled's own, replaced atomically (write a temporary file, sync
//! it, rename it over the old one, sync the directory), in one piece or
//! streamed.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::disk::{CommitFuture, FileSlot, NewFile, ReplaceFuture};

/// A file of a [`SledDisk`]: `<dir>/<name>`, beside sled's own files.
pub(crate) struct DirFile {
    dir: PathBuf,
    name: String,
}

impl DirFile {
    pub(crate) fn new(dir: PathBuf, name: String) -> Self {
        Self { dir, name }
    }

    /// Writes `contents` to a temporary file, syncs it, renames it over the
    /// file and syncs the directory, so the rename itself is durable.
    fn replace_blocking(dir: &Path, name: &str, contents: &[u8]) -> Result<(), Error> {
        use std::io::Write;
        let temporary = Self::temporary_path(dir, name);
        let mut file = std::fs::File::create(&temporary).map_err(|source| Error::File {
            what: "create",
            path: temporary.clone(),
            source,
        })?;
        file.write_all(contents).map_err(|source| Error::File { what: "write", path: temporary, source })?;
        Self::install_blocking(dir, name, file)
    }

    /// `<name>.partial`, where a replacement is written before its rename.
    fn temporary_path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.partial"))
    }

    /// Syncs the written temporary `file`, renames it over the file and
    /// syncs the directory, so the rename itself is durable.
    fn install_blocking(dir: &Path, name: &str, file: std::fs::File) -> Result<(), Error> {
        let path = dir.join(name);
        let temporary = Self::temporary_path(dir, name);
        let io = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::File { what, path, source }
        };
        file.sync_all().map_err(io("sync", &temporary))?;
        drop(file);
        rename_durably(&temporary, &path)
    }
}

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

/// Bytes a streamed replacement buffers between writes to its file.
const NEW_FILE_BUFFER_BYTES: usize = 1 << 20;

/// Bytes a streamed replacement writes between syncs of its file.
const NEW_FILE_SYNC_EVERY_BYTES: u64 = 1 << 20;

/// A streamed replacement of a [`DirFile`]: its temporary file, buffered.
///
/// It is synced every [`NEW_FILE_SYNC_EVERY_BYTES`] as it is written, and
/// once more on commit. One sync of a whole snapshot (a hundred megabytes
/// and more) made the log's own syncs wait behind its write-back: every
/// ingest request stalled for about 200 ms at each snapshot, once the
/// encoding no longer held applies (DESIGN-NOTES, note 36). Syncs of 8 MiB
/// still made each of the log's own syncs wait up to 15–26 ms while a
/// snapshot was written (1–3 ms otherwise); of 1 MiB, 6–17 ms (note 39).
/// (While the encoding held applies, syncing in pieces made it longer and
/// was left out: applies held 1.8 → 2.2 s per build on three nodes.)
struct NewDirFile {
    dir: PathBuf,
    name: String,
    file: std::io::BufWriter<std::fs::File>,
    /// Bytes handed to the writer since the last sync.
    unsynced: u64,
}

impl NewDirFile {
    fn count(&mut self, written: usize) -> std::io::Result<()> {
        self.unsynced += written as u64;
        if self.unsynced >= NEW_FILE_SYNC_EVERY_BYTES {
            std::io::Write::flush(&mut self.file)?;
            self.file.get_ref().sync_data()?;
            self.unsynced = 0;
        }
        Ok(())
    }
}

impl std::io::Write for NewDirFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.file.write(bytes)?;
        self.count(written)?;
        Ok(written)
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.count(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl NewFile for NewDirFile {
    fn commit(self: Box<Self>) -> CommitFuture {
        let NewDirFile { dir, name, file, .. } = *self;
        Box::pin(async move {
            // Two syncs of up to hundreds of megabytes: off the runtime's workers.
            tokio::task::spawn_blocking(move || {
                let temporary = DirFile::temporary_path(&dir, &name);
                let file = file.into_inner().map_err(|e| Error::File {
                    what: "write",
                    path: temporary,
                    source: e.into_error(),
                })?;
                DirFile::install_blocking(&dir, &name, file)
            })
            .await
            .map_err(|e| Error::Corrupt(format!("the file writer panicked: {e}")))?
        })
    }
}

impl FileSlot for DirFile {
    fn blocks(&self) -> bool {
        true
    }

    fn read(&self) -> Result<Option<Vec<u8>>, Error> {
        let path = self.dir.join(&self.name);
        match std::fs::read(&path) {
            Ok(contents) => Ok(Some(contents)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::File { what: "read", path, source }),
        }
    }

    fn replace(&self, contents: Vec<u8>) -> ReplaceFuture<'_> {
        let (dir, name) = (self.dir.clone(), self.name.clone());
        Box::pin(async move {
            // Hundreds of megabytes and two syncs: off the runtime's workers.
            tokio::task::spawn_blocking(move || Self::replace_blocking(&dir, &name, &contents).map(|()| contents))
                .await
                .map_err(|e| Error::Corrupt(format!("the file writer panicked: {e}")))?
        })
    }

    fn begin_replace(&self) -> Result<Box<dyn NewFile>, Error> {
        let temporary = Self::temporary_path(&self.dir, &self.name);
        let file = std::fs::File::create(&temporary).map_err(|source| Error::File {
            what: "create",
            path: temporary,
            source,
        })?;
        Ok(Box::new(NewDirFile {
            dir: self.dir.clone(),
            name: self.name.clone(),
            file: std::io::BufWriter::with_capacity(NEW_FILE_BUFFER_BYTES, file),
            unsynced: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{Disk, SledDisk};

    #[tokio::test]
    async fn a_file_is_replaced_whole_and_survives_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let disk = SledDisk::open(dir.path()).expect("opens");
            let file = disk.open_file("blob").expect("file");
            assert_eq!(file.read().expect("reads"), None);
            let back = file.replace(b"first".to_vec()).await.expect("writes");
            assert_eq!(back, b"first", "the buffer comes back");
            file.replace(b"second, longer".to_vec()).await.expect("writes");
            assert_eq!(file.read().expect("reads").as_deref(), Some(&b"second, longer"[..]));
        }
        let disk = SledDisk::open(dir.path()).expect("reopens");
        assert_eq!(
            disk.open_file("blob").expect("file").read().expect("reads").as_deref(),
            Some(&b"second, longer"[..])
        );
        assert!(!dir.path().join("blob.partial").exists(), "no temporary file is left behind");
    }

    #[tokio::test]
    async fn a_replacement_larger_than_the_sync_interval_is_written_whole() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = SledDisk::open(dir.path()).expect("opens");
        let file = disk.open_file("blob").expect("file");
        let mut new = file.begin_replace().expect("begins");
        // Pieces that straddle the sync interval, more than two intervals' worth.
        let piece: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
        let pieces = (2 * NEW_FILE_SYNC_EVERY_BYTES).div_ceil(1 << 20) + 3;
        for _ in 0..pieces {
            new.write_all(&piece).expect("writes");
        }
        assert_eq!(file.read().expect("reads"), None, "synced pieces are not the file until commit");
        new.commit().await.expect("commits");
        let contents = file.read().expect("reads").expect("a file");
        assert_eq!(contents.len() as u64, pieces << 20);
        assert!(contents.chunks(1 << 20).all(|c| c == piece.as_slice()));
    }

    #[tokio::test]
    async fn a_streamed_replacement_changes_the_file_only_when_committed() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let disk = SledDisk::open(dir.path()).expect("opens");
            let file = disk.open_file("blob").expect("file");
            file.replace(b"old".to_vec()).await.expect("writes");

            let mut abandoned = file.begin_replace().expect("begins");
            abandoned.write_all(b"never committed").expect("writes");
            drop(abandoned);
            assert_eq!(file.read().expect("reads").as_deref(), Some(&b"old"[..]), "an uncommitted one changes nothing");

            let mut new = file.begin_replace().expect("begins");
            // More than the writer's buffer, in pieces.
            let piece = vec![7u8; 300_000];
            for _ in 0..5 {
                new.write_all(&piece).expect("writes");
            }
            assert_eq!(file.read().expect("reads").as_deref(), Some(&b"old"[..]), "readers see the old until commit");
            new.commit().await.expect("commits");
            assert_eq!(file.read().expect("reads").map(|c| c.len()), Some(1_500_000));
        }
        let disk = SledDisk::open(dir.path()).expect("reopens");
        let contents = disk.open_file("blob").expect("file").read().expect("reads").expect("a file");
        assert!(contents.len() == 1_500_000 && contents.iter().all(|&b| b == 7));
        assert!(!dir.path().join("blob.partial").exists(), "no temporary file is left behind");
    }
}
