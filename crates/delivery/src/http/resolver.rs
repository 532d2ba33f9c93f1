//! The DNS half of the SSRF guard: names resolve through the system
//! resolver, and only addresses the guard allows reach the client.

use std::error::Error as StdError;
use std::fmt;
use std::net::SocketAddr;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::ssrf::is_forbidden_ip;

/// Resolves names with the system resolver and keeps only addresses the SSRF
/// guard allows.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver;

/// A name resolved only to forbidden addresses.
#[derive(Debug)]
pub struct RefusedByGuard {
    host: String,
    /// The first forbidden address, to show the operator where it pointed.
    example: Option<SocketAddr>,
}

impl fmt::Display for RefusedByGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.example {
            Some(addr) => write!(
                f,
                "{} resolves only to private, loopback or reserved addresses (e.g. {}); \
                 start the server with --allow-private-targets to allow them",
                self.host,
                addr.ip()
            ),
            None => write!(f, "{} resolves to no address", self.host),
        }
    }
}

impl StdError for RefusedByGuard {}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port (or the scheme's) back.
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (allowed, forbidden): (Vec<_>, Vec<_>) =
                resolved.into_iter().partition(|addr| !is_forbidden_ip(addr.ip()));
            if allowed.is_empty() {
                let example = forbidden.first().copied();
                return Err(Box::new(RefusedByGuard { host, example }) as Box<dyn StdError + Send + Sync>);
            }
            if !forbidden.is_empty() {
                tracing::debug!(%host, dropped = forbidden.len(), "SSRF guard dropped forbidden addresses");
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn guarded_resolver_refuses_a_name_that_resolves_only_to_loopback() {
        let name: Name = "localhost".parse().expect("valid name");
        let error = match GuardedResolver.resolve(name).await {
            Ok(addrs) => panic!("expected a refusal, got {:?}", addrs.collect::<Vec<_>>()),
            Err(error) => error,
        };
        let refused = error.downcast_ref::<RefusedByGuard>().expect("a guard refusal");
        assert!(refused.to_string().starts_with("localhost resolves only to"), "{refused}");
    }
}
