//! [`SecretString`]: tokens and shared secrets that never show in `Debug`,
//! logs or panics.

use std::fmt;
use std::str::FromStr;

/// A token or shared secret (API and admin tokens, the cluster secret).
/// `Debug` prints `<redacted>` and there is no `Display`: the text comes
/// out only through [`SecretString::expose`], where it is sent or compared.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret itself, to send it or compare it (in constant time).
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl FromStr for SecretString {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(text))
    }
}

impl From<String> for SecretString {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for SecretString {
    fn from(text: &str) -> Self {
        Self(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_text() {
        let secret = SecretString::new("hunter2-very-secret");
        let shown = format!("{secret:?} {:?} {:#?}", Some(&secret), vec![secret.clone()]);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"));
        assert_eq!(secret.expose(), "hunter2-very-secret");
    }
}
