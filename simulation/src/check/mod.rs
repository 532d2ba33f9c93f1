//! Invariant checkers, one module per property. Each returns the
//! violations it finds; a run is ok when none do.

pub mod batches;
pub mod fencing;
pub mod liveness;
pub mod lost;
pub mod one_sender;
pub mod replicas;
pub mod signatures;
pub mod timeline;

/// Whether a violation breaks safety (something wrong happened) or
/// liveness (something right did not happen in time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Safety,
    Liveness,
}

/// One broken property.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The checker (module) that found it.
    pub checker: &'static str,
    pub kind: Kind,
    pub detail: String,
}

impl Violation {
    pub fn safety(checker: &'static str, detail: impl Into<String>) -> Self {
        Self { checker, kind: Kind::Safety, detail: detail.into() }
    }

    pub fn liveness(checker: &'static str, detail: impl Into<String>) -> Self {
        Self { checker, kind: Kind::Liveness, detail: detail.into() }
    }
}
