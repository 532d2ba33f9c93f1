//! The crate's one error type: what can go wrong with an inbox's store.
//!
//! A request that fails verification is not an error but a verdict
//! ([`crate::Verdict::Rejected`]); errors here mean the receiver could not
//! decide or record, so it should answer a status that makes the sender retry.

use std::path::PathBuf;

/// Why a store could not read, record or prune.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not open the inbox store at {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error("the inbox store failed: {0}")]
    Sled(#[from] sled::Error),
    #[error("could not sync the inbox store to disk: {0}")]
    Sync(#[from] std::io::Error),
    #[error("the inbox store holds an entry this version cannot read: {0}")]
    Corrupt(String),
    /// A store implemented outside this crate (a service's own database).
    #[error("the inbox store failed: {0}")]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}
