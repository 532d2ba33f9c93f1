//! The entropy seam: where signing secrets, cluster secrets and the random
//! part of every id a client sees come from.
//!
//! Production hands the node the operating system's generator (each draw
//! is a `getrandom` call), so no secret depends on another; the simulator
//! hands it a seeded generator, so a seed replays the same ids. Jitter and
//! other draws nobody has to guess stay on the node's seeded generators.

use std::convert::Infallible;
use std::fmt;

use rand_core::{TryCryptoRng, TryRng};

/// A source of bytes nobody can predict.
pub trait Entropy: Send + Sync + 'static {
    /// Fills `dest` entirely.
    fn fill(&self, dest: &mut [u8]);
}

/// An [`Entropy`] borrowed as a generator, for [`crate::ids`] and
/// [`crate::signing::Secret::generate`].
pub struct EntropyRng<'a>(pub &'a dyn Entropy);

impl fmt::Debug for EntropyRng<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EntropyRng")
    }
}

impl TryRng for EntropyRng<'_> {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut bytes = [0u8; 4];
        self.0.fill(&mut bytes);
        Ok(u32::from_le_bytes(bytes))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut bytes = [0u8; 8];
        self.0.fill(&mut bytes);
        Ok(u64::from_le_bytes(bytes))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.0.fill(dst);
        Ok(())
    }
}

/// Only as strong as the [`Entropy`] behind it: the node's is the OS's.
impl TryCryptoRng for EntropyRng<'_> {}

/// Lowercase hex of `bytes`: how generated secrets are written out.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use rand_core::Rng;

    use super::*;

    struct Seeded(Mutex<StdRng>);

    impl Entropy for Seeded {
        fn fill(&self, dest: &mut [u8]) {
            self.0.lock().unwrap().fill_bytes(dest);
        }
    }

    #[test]
    fn draws_come_from_the_entropy_behind_it() {
        let a = Seeded(Mutex::new(StdRng::seed_from_u64(3)));
        let b = Seeded(Mutex::new(StdRng::seed_from_u64(3)));
        let mut first = [0u8; 32];
        let mut second = [0u8; 32];
        EntropyRng(&a).fill_bytes(&mut first);
        EntropyRng(&b).fill_bytes(&mut second);
        assert_eq!(first, second, "the same source gives the same bytes");
        assert_ne!(first, [0u8; 32]);
        assert_ne!(EntropyRng(&a).next_u64(), EntropyRng(&a).next_u64(), "each draw moves the source on");
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(hex(&[]), "");
    }
}
