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
    /// Back to blocking code once every write reached the file.
    pub async fn into_spool(self) -> Result<Spool, Error> {
        match self {
            Self::File(mut file) => {
                tokio::io::AsyncWriteExt::flush(&mut file)
                    .await
                    .map_err(|source| Error::Stream { what: "write", source })?;
                Ok(Spool::File(file.into_std().await))
            }
            Self::Memory(cursor) => Ok(Spool::Memory(cursor)),
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
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_read(cx, buf),
            Self::Memory(cursor) => Pin::new(cursor).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_write(cx, buf),
            Self::Memory(cursor) => Pin::new(cursor).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_flush(cx),
            Self::Memory(cursor) => Pin::new(cursor).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_shutdown(cx),
            Self::Memory(cursor) => Pin::new(cursor).poll_shutdown(cx),
        }
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).start_seek(position),
            Self::Memory(cursor) => Pin::new(cursor).start_seek(position),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut() {
            Self::File(file) => Pin::new(file).poll_complete(cx),
            Self::Memory(cursor) => Pin::new(cursor).poll_complete(cx),
        }
    }
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
}
