//! The one error enum of hookraft-delivery, in the crate's own terms.
//!
//! Failures of a single webhook attempt are not errors of this crate: they
//! are outcomes ([`crate::transport::SendError`]) recorded on the delivery's
//! timeline. [`DeliveryError`] is for what stops the delivery machinery itself.

/// What can stop the delivery machinery from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The shared HTTP client could not be built (TLS backend, resolver setup).
    #[error("could not build the webhook HTTP client: {0}")]
    ClientBuild(#[source] reqwest::Error),
}
