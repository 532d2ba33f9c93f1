//! The export stream of a history store (its layout is in the parent
//! module's doc): written from a view, read into a fresh file, checked
//! by its counts and its closing SHA-256.

use super::*;

/// The layout of an export stream.
pub(super) const STREAM_VERSION: u32 = 1;
pub(super) const STREAM_MAGIC: [u8; 8] = *b"hookhist";
pub(super) const FRAME_TABLE: u8 = b'T';
pub(super) const FRAME_ROW: u8 = b'R';
pub(super) const FRAME_END: u8 = b'E';

/// What a stream's header says the store holds.
pub(super) type Header = StoreCounts;

/// Bytes of buffer between a stream and its reader or writer.
pub(super) const STREAM_BUFFER_BYTES: usize = 256 << 10;

/// Writes a stream's frames, hashing every byte for the end's checksum.
pub(super) struct StreamWriter<W: Write> {
    out: BufWriter<W>,
    hash: Sha256,
    written: u64,
}

impl<W: Write> StreamWriter<W> {
    pub(super) fn new(out: W) -> Self {
        Self { out: BufWriter::with_capacity(STREAM_BUFFER_BYTES, out), hash: Sha256::new(), written: 0 }
    }

    pub(super) fn put(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.hash.update(bytes);
        self.out.write_all(bytes).map_err(|source| Error::Stream { what: "write", source })?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    pub(super) fn header(&mut self, counts: Header) -> Result<(), Error> {
        self.put(&STREAM_MAGIC)?;
        self.put(&STREAM_VERSION.to_be_bytes())?;
        self.put(&counts.events.to_be_bytes())?;
        self.put(&counts.deliveries.to_be_bytes())?;
        self.put(&counts.bytes.to_be_bytes())
    }

    pub(super) fn table(&mut self, table: Table) -> Result<(), Error> {
        self.put(&[FRAME_TABLE, table.tag()])
    }

    pub(super) fn row(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.put(&[FRAME_ROW])?;
        self.put(&frame_len(key)?.to_be_bytes())?;
        self.put(key)?;
        self.put(&frame_len(value)?.to_be_bytes())?;
        self.put(value)
    }

    /// Writes the end and its checksum, flushes, and returns the bytes
    /// written in all.
    pub(super) fn end(mut self) -> Result<u64, Error> {
        self.put(&[FRAME_END])?;
        let checksum = self.hash.finalize();
        self.out.write_all(&checksum).map_err(|source| Error::Stream { what: "write", source })?;
        self.out.flush().map_err(|source| Error::Stream { what: "write", source })?;
        Ok(self.written + checksum.len() as u64)
    }
}

pub(super) fn frame_len(bytes: &[u8]) -> Result<u32, Error> {
    u32::try_from(bytes.len()).map_err(|_| Error::Corrupt(format!("a history row of {} bytes", bytes.len())))
}

/// One frame of a stream; a row's key and value are in the reader's buffers.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame {
    Table(Table),
    Row,
    End,
}

/// Reads a stream's frames, hashing every byte, refusing what an export
/// never writes before it allocates for it.
pub(super) struct StreamReader<R: Read> {
    input: BufReader<R>,
    hash: Sha256,
    key: Vec<u8>,
    pub(super) value: Vec<u8>,
}

impl<R: Read> StreamReader<R> {
    pub(super) fn new(input: R) -> Self {
        Self {
            input: BufReader::with_capacity(STREAM_BUFFER_BYTES, input),
            hash: Sha256::new(),
            key: Vec::new(),
            value: Vec::new(),
        }
    }

    pub(super) fn read_raw(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        self.input.read_exact(buf).map_err(|source| match source.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::StreamRefused("it ends before its end".into()),
            _ => Error::Stream { what: "read", source },
        })
    }

    pub(super) fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut bytes = [0; N];
        self.read_raw(&mut bytes)?;
        self.hash.update(bytes);
        Ok(bytes)
    }

    pub(super) fn take_u64(&mut self) -> Result<u64, Error> {
        self.take().map(u64::from_be_bytes)
    }

    /// Reads a length-prefixed field of at most `limit` bytes into `field`.
    pub(super) fn take_field(&mut self, limit: usize, field: Field) -> Result<(), Error> {
        let len = u32::from_be_bytes(self.take()?) as usize;
        if len > limit {
            return Err(Error::StreamRefused(format!("a row's {field:?} of {len} bytes, past the {limit} allowed")));
        }
        let mut buf = std::mem::take(match field {
            Field::Key => &mut self.key,
            Field::Value => &mut self.value,
        });
        buf.resize(len, 0);
        let read = self.read_raw(&mut buf);
        self.hash.update(&buf);
        match field {
            Field::Key => self.key = buf,
            Field::Value => self.value = buf,
        }
        read
    }

    pub(super) fn header(&mut self) -> Result<Header, Error> {
        if self.take::<8>()? != STREAM_MAGIC {
            return Err(Error::StreamRefused("it is not a history stream".into()));
        }
        let version = u32::from_be_bytes(self.take()?);
        if version != STREAM_VERSION {
            return Err(Error::UnsupportedFormat {
                store: "history stream".into(),
                found: version,
                expected: STREAM_VERSION,
            });
        }
        Ok(StoreCounts { events: self.take_u64()?, deliveries: self.take_u64()?, bytes: self.take_u64()? })
    }

    /// The next frame; a row of `table` is checked against its limits.
    pub(super) fn next(&mut self, table: Option<Table>) -> Result<Frame, Error> {
        let [kind] = self.take()?;
        match kind {
            FRAME_TABLE => {
                let [tag] = self.take()?;
                let table = Table::ALL
                    .into_iter()
                    .find(|table| table.tag() == tag)
                    .ok_or_else(|| Error::StreamRefused(format!("an unknown table {tag}")))?;
                Ok(Frame::Table(table))
            }
            FRAME_ROW => {
                let table = table.ok_or_else(|| Error::StreamRefused("a row before any table".into()))?;
                self.take_field(MAX_KEY_BYTES, Field::Key)?;
                self.take_field(table.value_limit(), Field::Value)?;
                Ok(Frame::Row)
            }
            FRAME_END => {
                let expected = self.hash.clone().finalize();
                let mut checksum = [0; 32];
                self.read_raw(&mut checksum)?;
                if checksum[..] != expected[..] {
                    return Err(Error::StreamRefused("its checksum does not match".into()));
                }
                let mut after = [0; 1];
                match self.input.read(&mut after) {
                    Ok(0) => Ok(Frame::End),
                    Ok(_) => Err(Error::StreamRefused("bytes follow its end".into())),
                    Err(source) => Err(Error::Stream { what: "read", source }),
                }
            }
            other => Err(Error::StreamRefused(format!("an unknown frame {other:#04x}"))),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Field {
    Key,
    Value,
}

/// Where an import is in its stream: checks that tables come once each,
/// in order, with their rows in strictly increasing key order.
#[derive(Default)]
pub(super) struct Progress {
    /// The table whose rows are being read.
    table: Option<Table>,
    /// How many tables have begun.
    tables: usize,
    last_key: Option<Vec<u8>>,
    /// Bytes of the records read, against the header's count.
    pub(super) record_bytes: u64,
    /// Bytes written since the last commit.
    uncommitted: u64,
}

impl Progress {
    pub(super) fn begin_table(&mut self, table: Table) -> Result<(), Error> {
        if Table::ALL.get(self.tables) != Some(&table) {
            return Err(Error::StreamRefused(format!("table {} out of order", table.name())));
        }
        self.tables += 1;
        self.table = Some(table);
        self.last_key = None;
        Ok(())
    }

    /// Checks a row of the current table and counts it.
    pub(super) fn row(&mut self, key: &[u8], value: &[u8]) -> Result<Table, Error> {
        let table = self.table.ok_or_else(|| Error::StreamRefused("a row before any table".into()))?;
        if table.key_len().is_some_and(|len| len != key.len()) {
            return Err(Error::StreamRefused(format!("a key of {} bytes in table {}", key.len(), table.name())));
        }
        if self.last_key.as_deref().is_some_and(|last| last >= key) {
            return Err(Error::StreamRefused(format!("keys out of order in table {}", table.name())));
        }
        match &mut self.last_key {
            Some(last) => {
                last.clear();
                last.extend_from_slice(key);
            }
            None => self.last_key = Some(key.to_vec()),
        }
        if table.holds_records() {
            self.record_bytes += value.len() as u64;
        }
        self.uncommitted += (key.len() + value.len()) as u64;
        Ok(table)
    }

    pub(super) fn all_tables(&self) -> bool {
        self.tables == Table::ALL.len()
    }
}

/// Loads a stream into the fresh database `db`: rows in transactions of
/// about [`IMPORT_COMMIT_BYTES`] committed without a sync, then, once the
/// end's checksum and the counts are right, the last one durably.
pub(super) fn load(db: &redb::Database, input: &mut (impl Read + ?Sized)) -> Result<(), Error> {
    let mut stream = StreamReader::new(input);
    let header = stream.header()?;
    let mut progress = Progress::default();
    loop {
        let tx = begin_write(db, Durability::None)?;
        let ended = load_some(&tx, &mut stream, &mut progress)?;
        if ended {
            check_loaded(&tx, &header, &progress)?;
            let mut tx = tx;
            tx.set_durability(Durability::Immediate)?;
            tx.commit()?;
            return Ok(());
        }
        tx.commit()?;
        progress.uncommitted = 0;
    }
}

/// Writes rows into `tx` until the stream ends (true) or about
/// [`IMPORT_COMMIT_BYTES`] are written (false).
pub(super) fn load_some<R: Read>(
    tx: &redb::WriteTransaction,
    stream: &mut StreamReader<R>,
    progress: &mut Progress,
) -> Result<bool, Error> {
    let mut rows = progress.table.map(|table| tx.open_table(table.definition())).transpose()?;
    while progress.uncommitted < IMPORT_COMMIT_BYTES {
        match stream.next(progress.table)? {
            Frame::Table(table) => {
                progress.begin_table(table)?;
                rows = Some(tx.open_table(table.definition())?);
            }
            Frame::Row => {
                progress.row(&stream.key, &stream.value)?;
                let rows = rows.as_mut().ok_or_else(|| Error::StreamRefused("a row before any table".into()))?;
                rows.insert(stream.key.as_slice(), stream.value.as_slice())?;
            }
            Frame::End if progress.all_tables() => return Ok(true),
            Frame::End => return Err(Error::StreamRefused("it ends before its last table".into())),
        }
    }
    Ok(false)
}

/// Checks the loaded store against the stream's header before the last
/// commit: the counts stored in `meta`, the tables' lengths and the bytes
/// of the records read must all say the same.
pub(super) fn check_loaded(tx: &redb::WriteTransaction, header: &Header, progress: &Progress) -> Result<(), Error> {
    let meta = tx.open_table(Table::Meta.definition())?;
    match read_format(&meta)? {
        Some(FORMAT_VERSION) => {}
        found => {
            return Err(Error::StreamRefused(format!(
                "its store has format {found:?}, this build reads {FORMAT_VERSION}"
            )));
        }
    }
    let stored = read_counts(&meta)?;
    let loaded = StoreCounts {
        events: tx.open_table(Table::Events.definition())?.len()?,
        deliveries: tx.open_table(Table::Deliveries.definition())?.len()?,
        bytes: progress.record_bytes,
    };
    if stored != *header || loaded != *header {
        return Err(Error::StreamRefused(format!(
            "its header counts {header:?}, its meta {stored:?}, its rows {loaded:?}"
        )));
    }
    Ok(())
}
