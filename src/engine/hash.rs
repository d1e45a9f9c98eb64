//! Keys are hashed with a secret, so no raw client identifier is kept and nobody outside can aim
//! hash collisions at a table.

use std::hash::{BuildHasher, RandomState};

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

    /// The keyed hash of a caller's key: SipHash-1-3 of the bytes, as `siphasher` computes it
    /// (the tests hold the two equal, so keys stay the same across versions and instances).
    ///
    /// One pass over whole words, where the streaming hasher buffers every write in case more
    /// follow: a caller's address is one 4- or 8-byte block, hashed on every request.
    #[inline]
    pub fn hash(&self, bytes: &[u8]) -> u64 {
        let mut v = self.start();
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            compress(&mut v, u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        finish(v, tail_word(words.remainder()), bytes.len())
    }

    /// `hash(request::address_key(address).as_bytes())`, from registers: an IPv4 address is one
    /// 4-byte tail, an IPv6 /64 one whole word. Written to memory first, the key's bytes were
    /// read back wider than they were stored, which the CPU cannot forward.
    #[inline]
    pub fn hash_address(&self, address: std::net::IpAddr) -> u64 {
        let v4 = |a: std::net::Ipv4Addr| finish(self.start(), u64::from(a.to_bits().swap_bytes()), 4);
        match address {
            std::net::IpAddr::V4(a) => v4(a),
            std::net::IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(a) => v4(a),
                None => {
                    let mut v = self.start();
                    compress(&mut v, ((a.to_bits() >> 64) as u64).swap_bytes());
                    finish(v, 0, 8)
                }
            },
        }
    }

    #[inline(always)]
    fn start(&self) -> [u64; 4] {
        [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ]
    }
}

/// The last word: the bytes after the whole words (fewer than 8) and the length's low byte.
#[inline(always)]
fn finish(mut v: [u64; 4], tail: u64, len: usize) -> u64 {
    compress(&mut v, tail | ((len as u64) << 56));
    v[2] ^= 0xff;
    for _ in 0..3 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// Fewer than 8 bytes as a little-endian word, read as at most two overlapping loads: copied
/// into a zeroed word instead, they were read back wider than they were stored.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    let n = tail.len();
    let u32_at = |i: usize| u64::from(u32::from_le_bytes(tail[i..i + 4].try_into().expect("4 bytes")));
    match n {
        0 => 0,
        1..=3 => u64::from(tail[0]) | u64::from(tail[n / 2]) << (8 * (n / 2)) | u64::from(tail[n - 1]) << (8 * (n - 1)),
        _ => u32_at(0) | u32_at(n - 4) << (8 * (n - 4)),
    }
}

/// One message word, with SipHash-1-3's one round.
#[inline(always)]
fn compress(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    v[0] ^= m;
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
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
    fn the_hash_is_siphash_1_3_as_the_streaming_hasher_computes_it() {
        use std::hash::Hasher;
        // Every tail length, whole words before it or not, under two secrets: a key hashed here
        // must be the key a store or a journal written by an earlier version holds.
        let bytes: Vec<u8> = (0u8..40).map(|b| b.wrapping_mul(37).wrapping_add(11)).collect();
        for secret in [[0u8; 16], core::array::from_fn(|i| (i as u8).wrapping_mul(17).wrapping_add(3))] {
            let ours = KeyHasher::with_secret(secret);
            for len in 0..=bytes.len() {
                let mut reference = siphasher::sip::SipHasher13::new_with_key(&secret);
                reference.write(&bytes[..len]);
                assert_eq!(ours.hash(&bytes[..len]), reference.finish(), "{len} bytes");
            }
        }
    }

    #[test]
    fn an_address_hashes_as_its_key_bytes_do() {
        let h = KeyHasher::with_secret([9; 16]);
        for a in ["203.0.113.9", "0.0.0.0", "255.255.255.255", "::ffff:198.51.100.7", "2001:db8:1:2:3:4:5:6", "::1"] {
            let a: std::net::IpAddr = a.parse().unwrap();
            assert_eq!(h.hash_address(a), h.hash(crate::request::address_key(a).as_bytes()), "{a}");
        }
    }

    #[test]
    fn secrets_differ_between_hashers_and_agree_when_shared() {
        let (a, b) = (KeyHasher::random(), KeyHasher::random());
        assert_ne!(a.hash(b"203.0.113.9"), b.hash(b"203.0.113.9"));
        let (c, d) = (KeyHasher::with_secret([7; 16]), KeyHasher::with_secret([7; 16]));
        assert_eq!(c.hash(b"user-1"), d.hash(b"user-1"));
        assert_ne!(c.hash(b"user-1"), c.hash(b"user-2"));
    }
}
