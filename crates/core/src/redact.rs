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

    /// Refuses a secret too weak to hold: fewer than `min_chars`
    /// characters, fewer than [`DISTINCT_CHARS_MIN`] distinct ones (an
    /// unset variable, `aaaa…`, `changeme`), or characters that are no
    /// visible ASCII (they could not travel in a header). `what` names the
    /// setting in the message, which never quotes the secret.
    pub fn check_strength(&self, what: &str, min_chars: usize) -> Result<(), String> {
        let text = self.0.as_str();
        let advice = "draw one with `openssl rand -hex 32`";
        if text.is_empty() {
            return Err(format!("{what} is empty (an unset variable?): {advice}"));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("{what} must be visible ASCII without spaces: {advice}"));
        }
        if text.len() < min_chars {
            return Err(format!("{what} has {} characters, fewer than the {min_chars} required: {advice}", text.len()));
        }
        let distinct = text.bytes().collect::<std::collections::BTreeSet<u8>>().len();
        if distinct < DISTINCT_CHARS_MIN {
            return Err(format!(
                "{what} repeats too few characters ({distinct} distinct, at least {DISTINCT_CHARS_MIN} required): {advice}"
            ));
        }
        Ok(())
    }
}

/// Fewest characters of a bearer token (API, admin, read and named tokens).
pub const TOKEN_CHARS_MIN: usize = 16;
/// Fewest characters of the cluster secret, from which the node links'
/// keys are derived.
pub const CLUSTER_SECRET_CHARS_MIN: usize = 32;
/// Fewest distinct characters of any secret.
pub const DISTINCT_CHARS_MIN: usize = 6;

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

    #[test]
    fn weak_secrets_are_refused_with_a_message_that_never_quotes_them() {
        let check = |text: &str| SecretString::new(text).check_strength("--api-token", TOKEN_CHARS_MIN);
        assert!(check("3f9a1c77e0b24d58").is_ok());
        for weak in [
            "",
            "short-token",
            "aaaaaaaaaaaaaaaaaaaaaaaa",
            "abababababababababab",
            "with a space inside it",
            "tab\tinside-the-token-x",
        ] {
            let error = check(weak).expect_err(weak);
            assert!(error.contains("--api-token"), "{error}");
            assert!(weak.is_empty() || !error.contains(weak), "the message quotes the secret: {error}");
        }
        let cluster =
            SecretString::new("3f9a1c77e0b24d58").check_strength("--cluster-secret", CLUSTER_SECRET_CHARS_MIN);
        assert!(cluster.unwrap_err().contains("32 required"));
    }
}
