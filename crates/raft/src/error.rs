//! [`Error`]: this crate's one error enum, in its own terms.
//!
//! openraft's storage traits return `openraft::StorageError`; inside those
//! methods an [`Error`] is converted with [`Error::storage`] or one of the
//! `StorageIOError` constructors, so openraft learns which subject (log,
//! vote, snapshot) failed.

use std::path::PathBuf;

use openraft::{ErrorSubject, ErrorVerb, StorageIOError};

use crate::NodeId;

/// What can go wrong opening, reading or writing the Raft store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open the sled database at {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    /// `store` names the disk (see [`crate::disk::Disk::describe`]).
    #[error("the raft store in the {store} has format version {found}; this build reads only version {expected}")]
    UnsupportedFormat { store: String, found: u32, expected: u32 },
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: bincode::error::EncodeError,
    },
    #[error("cannot decode {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: bincode::error::DecodeError,
    },
    #[error("{what} has {extra} unexpected trailing bytes")]
    TrailingBytes { what: &'static str, extra: usize },
    /// A whole file beside the database (the snapshot) could not be read or written.
    #[error("cannot {what} {path}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// sled's data file could not be opened or `fdatasync`ed.
    #[error("cannot sync the database file: {0}")]
    Sync(String),
    /// Stored data decoded but contradicts itself (e.g. a log key that does
    /// not match its entry's index).
    #[error("corrupt raft store: {0}")]
    Corrupt(String),
    /// A handle on a [`crate::MemDisk`] was used after the disk crashed:
    /// the node that opened it is dead and must reopen the disk.
    #[error("{handle} of an in-memory disk was used after the disk crashed")]
    DiskCrashed { handle: String },
    /// The history store's database (redb) failed.
    #[error("history store: {0}")]
    Redb(#[from] redb::Error),
    /// A history record larger than the history store takes, so that every
    /// stored row also fits a history stream
    /// ([`crate::history_store::MAX_RECORD_BYTES`]).
    #[error("a history record of {len} bytes is larger than the {limit} bytes the history store takes")]
    RecordTooLarge { len: usize, limit: usize },
    /// A history stream could not be written or read.
    #[error("cannot {what} the history stream: {source}")]
    Stream {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A history stream that is not one whole, intact export: it ends early,
    /// its checksum or counts do not match, or its frames are out of order.
    #[error("history stream refused: {0}")]
    StreamRefused(String),
    /// The single-node network has no transport to other nodes.
    #[error("no transport to node {target}: this node runs as a single-member cluster")]
    NoTransport { target: NodeId },
}

impl Error {
    /// Wraps this error for openraft, naming what failed and how.
    pub fn storage(&self, subject: ErrorSubject<NodeId>, verb: ErrorVerb) -> openraft::StorageError<NodeId> {
        StorageIOError::new(subject, verb, openraft::AnyError::new(self)).into()
    }
}

/// redb's errors per operation, each one of [`redb::Error`]'s cases.
macro_rules! from_redb {
    ($($error:ty),*) => {
        $(impl From<$error> for Error {
            fn from(error: $error) -> Self {
                Error::Redb(error.into())
            }
        })*
    };
}

from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);
