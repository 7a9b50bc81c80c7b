//! FNV-1a (64 bit): a tiny, stable hash for feature hashing and for keys
//! that are the project's own data (not exposed to hostile input at scale,
//! so DoS resistance does not matter, speed and stability do). The one
//! FNV-1a of the workspace: the learned crisis gate's features
//! (`opencouch-learn`, whose checked-in weights depend on these exact
//! values), the safety crate's lookup tables, the rule-based responder's
//! template choice and the test kit's fake embeddings.

/// The FNV-1a 64-bit offset basis.
pub const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV-1a 64-bit prime.
pub const PRIME: u64 = 0x0100_0000_01b3;

/// Continues an FNV-1a hash `h` over `bytes`.
#[inline]
pub fn extend(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// FNV-1a of `bytes`.
#[inline]
pub fn hash(bytes: &[u8]) -> u64 {
    extend(OFFSET, bytes)
}

/// A [`std::hash::Hasher`] over FNV-1a, for maps keyed by the project's own
/// data (`HashMap<K, V, BuildHasherDefault<Fnv>>`).
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(OFFSET)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = extend(self.0, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(extend(hash(b"foo"), b"bar"), hash(b"foobar"));
    }

    #[test]
    fn pinned_values_and_hasher() {
        use std::hash::Hasher;
        // Pinned outputs (the learned gate's weights and the responder's
        // template choice depend on them).
        assert_eq!(hash(b"hello"), 0xa430_d846_80aa_bd0b);
        assert_eq!(hash("überfordert".as_bytes()), hash_of_str("überfordert"));
        let mut h = Fnv::default();
        assert_eq!(h.finish(), OFFSET);
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.finish(), hash(b"foobar"));
    }

    fn hash_of_str(s: &str) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in s.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }
}
