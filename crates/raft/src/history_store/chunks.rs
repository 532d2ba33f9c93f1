//! [`ChunkWriter`]: the encoded state written into a flush's transaction
//! a chunk at a time.

use super::*;

/// Writes an encoded state into the `state` table as chunks of
/// [`STATE_CHUNK_BYTES`], numbered from 0, holding one chunk at a time.
pub(super) struct ChunkWriter<'a, 'txn> {
    table: &'a mut WriteRows<'txn>,
    chunk: Vec<u8>,
    number: u64,
    written: u64,
}

impl<'a, 'txn> ChunkWriter<'a, 'txn> {
    pub(super) fn new(table: &'a mut WriteRows<'txn>) -> Self {
        Self { table, chunk: Vec::with_capacity(STATE_CHUNK_BYTES), number: 0, written: 0 }
    }

    /// The state's bytes written so far.
    pub(super) fn written(&self) -> u64 {
        self.written
    }

    fn put_chunk(&mut self) -> Result<(), Error> {
        self.table.insert(chunk_key(self.number).as_slice(), self.chunk.as_slice())?;
        self.number += 1;
        self.chunk.clear();
        Ok(())
    }

    /// Writes the last chunk; returns the number after it.
    pub(super) fn finish(mut self) -> Result<u64, Error> {
        if !self.chunk.is_empty() {
            self.put_chunk()?;
        }
        Ok(self.number)
    }
}

impl Write for ChunkWriter<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let room = STATE_CHUNK_BYTES - self.chunk.len();
        let taken = bytes.len().min(room);
        self.chunk.extend_from_slice(&bytes[..taken]);
        self.written += taken as u64;
        if self.chunk.len() == STATE_CHUNK_BYTES {
            self.put_chunk().map_err(std::io::Error::other)?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
