//! The bincode encoding of everything this crate writes to disk, sends as a
//! snapshot, or sends to another node (`crate::rpc`).
//!
//! One configuration (`bincode::config::standard()`) for everything. Decoding
//! insists on consuming the whole value: trailing bytes mean the reader and
//! the writer disagree about the format, which is corruption, not data.
//! Bytes from the network are decoded with a bound on the lengths they
//! declare, scaled to their own length ([`decode_untrusted`]): bincode
//! allocates a string or byte buffer at its declared length before reading it.

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
/// [`decode`], but the strings and byte buffers inside may claim no more
/// bytes in all than [`claim_limit`] allows for a body of this size, so a
/// corrupt or hostile length prefix fails before bincode allocates the
/// buffer it declares (it allocates a string at its declared length, then
/// reads it).
pub(crate) fn decode_untrusted<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, Error> {
    use bincode::config::standard;
    let decoded = match claim_limit(bytes.len()) {
        CLAIM_LIMIT_SMALL => bincode::serde::decode_from_slice(bytes, standard().with_limit::<CLAIM_LIMIT_SMALL>()),
        CLAIM_LIMIT_MEDIUM => bincode::serde::decode_from_slice(bytes, standard().with_limit::<CLAIM_LIMIT_MEDIUM>()),
        CLAIM_LIMIT_LARGE => bincode::serde::decode_from_slice(bytes, standard().with_limit::<CLAIM_LIMIT_LARGE>()),
        _ => bincode::serde::decode_from_slice(bytes, standard().with_limit::<{ crate::rpc::RPC_BODY_BYTES_MAX }>()),
    };
    let (value, read) = decoded.map_err(|source| Error::Decode { what, source })?;
    if read != bytes.len() {
        return Err(Error::TrailingBytes { what, extra: bytes.len() - read });
    }
    Ok(value)
}

/// Tiers of the bound on what one decode's strings and byte buffers may
/// claim. bincode takes the bound as a constant, so the body's length picks
/// the smallest tier that holds it: the strings of a well-formed body never
/// claim more than the body's length, and a hostile body makes the decoder
/// allocate at most 64 KiB or 16 times its own length.
const CLAIM_LIMIT_SMALL: usize = 64 * 1024;
const CLAIM_LIMIT_MEDIUM: usize = 1024 * 1024;
const CLAIM_LIMIT_LARGE: usize = 16 * 1024 * 1024;

/// The claim bound for a body of `body_len` bytes (see the tiers above).
pub(crate) fn claim_limit(body_len: usize) -> usize {
    [CLAIM_LIMIT_SMALL, CLAIM_LIMIT_MEDIUM, CLAIM_LIMIT_LARGE]
        .into_iter()
        .find(|&limit| body_len <= limit)
        .unwrap_or(crate::rpc::RPC_BODY_BYTES_MAX)
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
    fn the_claim_limit_holds_the_body_and_grows_in_tiers() {
        assert_eq!(claim_limit(0), 64 * 1024);
        assert_eq!(claim_limit(64 * 1024), 64 * 1024);
        assert_eq!(claim_limit(64 * 1024 + 1), 1024 * 1024);
        assert_eq!(claim_limit(16 * 1024 * 1024 + 1), crate::rpc::RPC_BODY_BYTES_MAX);
        for len in [0, 1, 70_000, 2_000_000, 20_000_000, crate::rpc::RPC_BODY_BYTES_MAX] {
            assert!(claim_limit(len) >= len, "a body of {len} bytes must be decodable");
        }
    }

    #[test]
    fn a_string_longer_than_the_limit_of_a_small_body_is_refused_before_it_is_allocated() {
        // 12 bytes that declare a 60 MiB string: under the largest tier,
        // over the small body's.
        let mut bytes = vec![253];
        bytes.extend_from_slice(&(60u64 << 20).to_le_bytes());
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
    fn a_body_of_many_strings_within_its_length_decodes() {
        let value: Vec<String> = (0..2_000).map(|i| "x".repeat(i % 100)).collect();
        let bytes = encode("strings", &value).expect("encodes");
        assert!(bytes.len() > 64 * 1024, "spans two tiers");
        assert_eq!(decode_untrusted::<Vec<String>>("strings", &bytes).expect("decodes"), value);
    }
}
