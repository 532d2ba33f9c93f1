//! The bincode encoding of everything this crate writes to disk, sends as a
//! snapshot, or sends to another node (`crate::rpc`).
//!
//! One configuration (`bincode::config::standard()`) for everything. Decoding
//! insists on consuming the whole value: trailing bytes mean the reader and
//! the writer disagree about the format, which is corruption, not data.
//! Bytes from the network are decoded with a bound on the lengths they
//! declare ([`decode_untrusted`]): bincode allocates a string or byte buffer
//! at its declared length before reading it.

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
/// [`decode`], but the strings and byte buffers inside may claim at most
/// [`crate::rpc::RPC_BODY_BYTES_MAX`] bytes in all, so a corrupt or hostile
/// length prefix fails instead of allocating.
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
}
