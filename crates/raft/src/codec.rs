//! The bincode encoding of everything this crate writes to disk, sends as a
//! snapshot, or sends to another node (`crate::rpc`).
//!
//! One configuration (`bincode::config::standard()`) for everything. Decoding
//! insists on consuming the whole value: trailing bytes mean the reader and
//! the writer disagree about the format, which is corruption, not data.
//! Bytes from the network are decoded with a bound on what the lengths they
//! declare may claim ([`decode_untrusted`]): bincode allocates a string or
//! byte buffer at its declared length before reading it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;

/// Encodes `value`; `what` names it in the error.
pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, Error> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|source| Error::Encode { what, source })
}

/// Encodes `value` into `writer` as it goes, without a buffer of the whole;
/// returns the bytes written. `what` names it in the error.
pub(crate) fn encode_into<T: Serialize>(
    what: &'static str,
    value: &T,
    writer: &mut dyn std::io::Write,
) -> Result<usize, Error> {
    bincode::serde::encode_into_std_write(value, &mut { writer }, bincode::config::standard())
        .map_err(|source| Error::Encode { what, source })
}

/// Decodes a whole `T` from `bytes`; `what` names it in the error.
pub(crate) fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, Error> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map_err(|source| Error::Decode { what, source })?;
    if read != bytes.len() {
        return Err(Error::TrailingBytes { what, extra: bytes.len() - read });
    }
    Ok(value)
}

/// Decodes a whole `T` from `bytes` that came from another process: like
/// [`decode`], but what the value's strings and containers may claim while
/// decoding is bounded by [`crate::rpc::RPC_BODY_BYTES_MAX`] in all, so a
/// corrupt or hostile length prefix fails instead of allocating what it
/// declares (bincode allocates a string at its declared length, then reads
/// it). The bound is on the *decoded* size, which can be many times the
/// body's: a container claims its length times its elements' size in
/// memory (an append of thousands of entries is a small body that claims
/// megabytes), so it cannot shrink with the body. Only a peer holding the
/// cluster secret reaches this decoder on a node's routes.
pub(crate) fn decode_untrusted<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, Error> {
    let config = bincode::config::standard().with_limit::<{ crate::rpc::RPC_BODY_BYTES_MAX }>();
    let (value, read) =
        bincode::serde::decode_from_slice(bytes, config).map_err(|source| Error::Decode { what, source })?;
    if read != bytes.len() {
        return Err(Error::TrailingBytes { what, extra: bytes.len() - read });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_of_encode_returns_the_value() {
        let value = (7u64, String::from("seven"), Some(vec![1u8, 2]));
        let bytes = encode("tuple", &value).expect("encodes");
        let back: (u64, String, Option<Vec<u8>>) = decode("tuple", &bytes).expect("decodes");
        assert_eq!(back, value);
    }

    #[test]
    fn encoding_into_a_writer_gives_the_same_bytes_and_counts_them() {
        let value = (7u64, String::from("seven"), vec![String::from("x"); 100]);
        let mut written = Vec::new();
        let count = encode_into("tuple", &value, &mut written).expect("encodes");
        assert_eq!(written, encode("tuple", &value).expect("encodes"));
        assert_eq!(count, written.len());
    }

    #[test]
    fn decode_with_trailing_bytes_is_an_error() {
        let mut bytes = encode("u64", &7u64).expect("encodes");
        bytes.push(0);
        let err = decode::<u64>("u64", &bytes).expect_err("trailing byte is refused");
        assert!(matches!(err, Error::TrailingBytes { extra: 1, .. }), "{err:?}");
    }

    #[test]
    fn a_string_longer_than_the_limit_is_refused_before_it_is_allocated() {
        // 12 bytes that declare a 1 GiB string.
        let mut bytes = vec![253];
        bytes.extend_from_slice(&(1u64 << 30).to_le_bytes());
        bytes.extend_from_slice(b"abc");
        let err = decode_untrusted::<String>("string", &bytes).expect_err("refused");
        assert!(matches!(err, Error::Decode { source: bincode::error::DecodeError::LimitExceeded, .. }), "{err:?}");
        // Within the limit, a short body is an ordinary end of input.
        let mut short = vec![100];
        short.extend_from_slice(b"abc");
        let err = decode_untrusted::<String>("string", &short).expect_err("refused");
        assert!(
            matches!(err, Error::Decode { source: bincode::error::DecodeError::UnexpectedEnd { .. }, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_small_body_of_many_elements_that_claim_more_in_memory_decodes() {
        // One byte each on the wire, 16 in memory: a 100 KB body claims
        // 1.6 MB while it decodes, as an append of many entries does.
        let value: Vec<Option<u64>> = vec![None; 100_000];
        let bytes = encode("options", &value).expect("encodes");
        assert!(bytes.len() < 128 * 1024, "{}", bytes.len());
        assert_eq!(decode_untrusted::<Vec<Option<u64>>>("options", &bytes).expect("decodes"), value);
    }

    #[test]
    fn a_body_of_many_strings_within_its_length_decodes() {
        let value: Vec<String> = (0..2_000).map(|i| "x".repeat(i % 100)).collect();
        let bytes = encode("strings", &value).expect("encodes");
        assert!(bytes.len() > 64 * 1024, "spans two tiers");
        assert_eq!(decode_untrusted::<Vec<String>>("strings", &bytes).expect("decodes"), value);
    }
}
