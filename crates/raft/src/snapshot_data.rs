//! [`SnapshotData`]: a snapshot's bytes on their way between two nodes, in
//! a file on the node's disk, not in its memory.
//!
//! openraft 0.9 sends a snapshot a chunk at a time, seeking and reading
//! the data [`crate::StateMachineStore::get_current_snapshot`] returns,
//! and writes the chunks it receives into the data
//! [`crate::StateMachineStore::begin_receiving_snapshot`] returns. A
//! snapshot holds the whole retained history, gigabytes of it: both are
//! spool files ([`Spool`]), which a [`crate::StateStore`] on a disk creates
//! in its directory and unlinks at once (the open handle is the only name,
//! so a crash leaves nothing behind), and which a store in memory (the
//! simulator's) keeps as a buffer.

use std::future::Future;
use std::io::{Cursor, Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::Error;

/// The snapshot data of [`crate::TypeConfig`]: a spool file or, in
/// simulation, a buffer.
#[derive(Debug)]
pub enum SnapshotData {
    /// An unlinked file in the state store's directory.
    File(tokio::fs::File),
    /// A buffer, for a store in memory.
    Memory(Cursor<Vec<u8>>),
    /// A spool not written yet: its export runs, on a blocking thread, at
    /// the first read or seek, then it is a [`SnapshotData::File`].
    Pending(Pending),
}

/// What writes a spool, on a blocking thread.
pub type Export = Box<dyn FnOnce() -> Result<Spool, Error> + Send + Sync>;

/// A [`SnapshotData::Pending`]: the export not started, or running.
pub struct Pending {
    export: Option<Export>,
    running: Option<tokio::task::JoinHandle<Result<Spool, Error>>>,
    /// A seek asked for before the spool was there.
    seek: Option<SeekFrom>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("running", &self.running.is_some()).field("seek", &self.seek).finish()
    }
}

/// [`SnapshotData`] for blocking code: what an export writes into and an
/// import reads from.
#[derive(Debug)]
pub enum Spool {
    File(std::fs::File),
    Memory(Cursor<Vec<u8>>),
}

impl Spool {
    /// An empty buffer.
    pub fn memory() -> Self {
        Self::Memory(Cursor::new(Vec::new()))
    }

    /// For openraft to send or receive through.
    pub fn into_data(self) -> SnapshotData {
        match self {
            Self::File(file) => SnapshotData::File(tokio::fs::File::from_std(file)),
            Self::Memory(cursor) => SnapshotData::Memory(cursor),
        }
    }

    /// Its length, positioned at its start again.
    pub fn rewind_len(&mut self) -> Result<u64, Error> {
        let len = self.seek(SeekFrom::End(0)).map_err(|source| Error::Stream { what: "seek", source })?;
        self.seek(SeekFrom::Start(0)).map_err(|source| Error::Stream { what: "seek", source })?;
        Ok(len)
    }
}

impl SnapshotData {
    /// Data that `export` writes at the first read or seek: openraft asks
    /// for the current snapshot at every start for its metadata alone,
    /// which must not export a whole history.
    pub fn exported_on_read(export: impl FnOnce() -> Result<Spool, Error> + Send + Sync + 'static) -> Self {
        Self::Pending(Pending { export: Some(Box::new(export)), running: None, seek: None })
    }

    /// Runs a pending export until its spool is there; then `self` is the
    /// spool's data, and this answers the seek asked for meanwhile.
    fn poll_exported(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<Option<SeekFrom>>> {
        let Self::Pending(pending) = self else { return Poll::Ready(Ok(None)) };
        if let Some(export) = pending.export.take() {
            pending.running = Some(tokio::task::spawn_blocking(export));
        }
        let Some(running) = pending.running.as_mut() else {
            return Poll::Ready(Err(std::io::Error::other("the snapshot's export failed before")));
        };
        let outcome = std::task::ready!(Pin::new(running).poll(cx));
        // Finished: a failed export stays failed.
        pending.running = None;
        let spool = match outcome {
            Ok(Ok(spool)) => spool,
            Ok(Err(error)) => return Poll::Ready(Err(std::io::Error::other(error.to_string()))),
            Err(error) => return Poll::Ready(Err(std::io::Error::other(format!("the snapshot's export: {error}")))),
        };
        let seek = pending.seek.take();
        *self = spool.into_data();
        Poll::Ready(Ok(seek))
    }

    /// Ready to read or write: exported, and positioned where a seek asked
    /// before the export put it.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(seek) = std::task::ready!(self.poll_exported(cx))? {
            Pin::new(&mut *self).start_seek(seek)?;
        }
        Poll::Ready(Ok(()))
    }

    /// Back to blocking code once every write reached the file (a
    /// pending export is run first).
    pub async fn into_spool(mut self) -> Result<Spool, Error> {
        let stream_error = |source| Error::Stream { what: "write", source };
        std::future::poll_fn(|cx| self.poll_ready(cx)).await.map_err(stream_error)?;
        match self {
            Self::File(mut file) => {
                tokio::io::AsyncWriteExt::flush(&mut file).await.map_err(stream_error)?;
                Ok(Spool::File(file.into_std().await))
            }
            Self::Memory(cursor) => Ok(Spool::Memory(cursor)),
            Self::Pending(_) => Err(Error::Corrupt("a snapshot's export never finished".into())),
        }
    }
}

impl Read for Spool {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::File(file) => file.read(buf),
            Self::Memory(cursor) => cursor.read(buf),
        }
    }
}

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::File(file) => file.write(buf),
            Self::Memory(cursor) => cursor.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::File(file) => file.flush(),
            Self::Memory(cursor) => cursor.flush(),
        }
    }
}

impl Seek for Spool {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        match self {
            Self::File(file) => file.seek(pos),
            Self::Memory(cursor) => cursor.seek(pos),
        }
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_ready(cx))?;
        match this {
            Self::File(file) => Pin::new(file).poll_read(cx, buf),
            Self::Memory(cursor) => Pin::new(cursor).poll_read(cx, buf),
            Self::Pending(_) => Poll::Ready(Err(std::io::Error::other("the snapshot's export is still pending"))),
        }
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_write(cx, buf),
            Self::Memory(cursor) => Pin::new(cursor).poll_write(cx, buf),
            Self::Pending(_) => Poll::Ready(Err(not_writable())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_flush(cx),
            Self::Memory(cursor) => Pin::new(cursor).poll_flush(cx),
            Self::Pending(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_shutdown(cx),
            Self::Memory(cursor) => Pin::new(cursor).poll_shutdown(cx),
            Self::Pending(_) => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).start_seek(position),
            Self::Memory(cursor) => Pin::new(cursor).start_seek(position),
            Self::Pending(pending) => {
                pending.seek = Some(position);
                Ok(())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_ready(cx))?;
        match this {
            Self::File(file) => Pin::new(file).poll_complete(cx),
            Self::Memory(cursor) => Pin::new(cursor).poll_complete(cx),
            Self::Pending(_) => Poll::Ready(Err(std::io::Error::other("the snapshot's export is still pending"))),
        }
    }
}

/// Writing into a snapshot to send.
fn not_writable() -> std::io::Error {
    std::io::Error::other("a snapshot to send is not written to")
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    use super::*;

    async fn round_trip(spool: Spool) {
        let mut data = spool.into_data();
        // As openraft receives: chunks at offsets, then a shutdown.
        data.write_all(b"hello ").await.expect("writes");
        data.seek(SeekFrom::Start(6)).await.expect("seeks");
        data.write_all(b"world").await.expect("writes");
        data.shutdown().await.expect("shuts down");
        let mut spool = data.into_spool().await.expect("back");
        assert_eq!(spool.rewind_len().expect("len"), 11);
        let mut read = String::new();
        spool.read_to_string(&mut read).expect("reads");
        assert_eq!(read, "hello world");
        // As openraft sends: seek to an offset, read a chunk.
        let mut data = spool.into_data();
        data.seek(SeekFrom::Start(6)).await.expect("seeks");
        let mut chunk = Vec::new();
        data.read_to_end(&mut chunk).await.expect("reads");
        assert_eq!(chunk, b"world");
    }

    #[tokio::test]
    async fn a_file_and_a_buffer_carry_the_same_bytes() {
        round_trip(Spool::memory()).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("spool");
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).expect("creates");
        std::fs::remove_file(&path).expect("unlinks");
        round_trip(Spool::File(file)).await;
    }

    fn written(bytes: &'static [u8]) -> Result<Spool, Error> {
        let mut spool = Spool::memory();
        spool.write_all(bytes).map_err(|source| Error::Stream { what: "write", source })?;
        spool.rewind_len()?;
        Ok(spool)
    }

    #[tokio::test]
    async fn a_pending_export_runs_at_the_first_seek_and_never_if_unread() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        drop(SnapshotData::exported_on_read(move || {
            flag.store(true, Ordering::SeqCst);
            written(b"never")
        }));
        tokio::task::yield_now().await;
        assert!(!ran.load(Ordering::SeqCst), "dropped unread: no export");

        // As openraft sends: its length first, then chunks from offsets.
        let mut data = SnapshotData::exported_on_read(|| written(b"hello world"));
        assert_eq!(data.seek(SeekFrom::End(0)).await.expect("seeks"), 11);
        data.seek(SeekFrom::Start(6)).await.expect("seeks");
        let mut chunk = Vec::new();
        data.read_to_end(&mut chunk).await.expect("reads");
        assert_eq!(chunk, b"world");

        let mut read_first = SnapshotData::exported_on_read(|| written(b"abc"));
        let mut all = Vec::new();
        read_first.read_to_end(&mut all).await.expect("reads");
        assert_eq!(all, b"abc");
    }

    #[tokio::test]
    async fn a_failed_export_is_a_read_error_and_stays_one() {
        let mut data = SnapshotData::exported_on_read(|| Err(Error::Corrupt("disk gone".into())));
        let error = data.seek(SeekFrom::End(0)).await.expect_err("fails");
        assert!(error.to_string().contains("disk gone"), "{error}");
        let mut buf = Vec::new();
        assert!(data.read_to_end(&mut buf).await.is_err(), "and again");
        assert!(data.write_all(b"x").await.is_err(), "it is not written to");
    }
}
