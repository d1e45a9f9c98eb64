//! Keys are hashed with a secret, so no raw client identifier is kept and nobody outside can aim
//! hash collisions at a table.

use std::hash::{BuildHasher, Hasher, RandomState};

use siphasher::sip::SipHasher13;

/// A keyed SipHash-1-3. Instances sharing counters (a Redis store) must share the secret.
#[derive(Clone)]
pub struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl KeyHasher {
    /// A hasher with a secret drawn from the OS's randomness, different in every process.
    pub fn random() -> KeyHasher {
        // `RandomState` is seeded from the OS; hashing a constant through two of them yields
        // two random words without another dependency.
        let draw = || RandomState::new().hash_one(0x006f_7062_6f75_6e64_u64);
        KeyHasher { k0: draw(), k1: draw() }
    }

    /// A hasher with a given secret (16 bytes), for instances that share counters.
    pub fn with_secret(secret: [u8; 16]) -> KeyHasher {
        let (a, b) = secret.split_at(8);
        KeyHasher {
            k0: u64::from_le_bytes(a.try_into().expect("8 bytes")),
            k1: u64::from_le_bytes(b.try_into().expect("8 bytes")),
        }
    }

    /// A value that tells hashers apart without showing their secret: two hashers with the same
    /// secret have the same id.
    pub fn id(&self) -> u64 {
        self.hash(b"opbound:hasher-id")
    }

    /// The keyed hash of a caller's key.
    #[inline]
    pub fn hash(&self, bytes: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(bytes);
        h.finish()
    }
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(secret)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_differ_between_hashers_and_agree_when_shared() {
        let (a, b) = (KeyHasher::random(), KeyHasher::random());
        assert_ne!(a.hash(b"203.0.113.9"), b.hash(b"203.0.113.9"));
        let (c, d) = (KeyHasher::with_secret([7; 16]), KeyHasher::with_secret([7; 16]));
        assert_eq!(c.hash(b"user-1"), d.hash(b"user-1"));
        assert_ne!(c.hash(b"user-1"), c.hash(b"user-2"));
    }
}
