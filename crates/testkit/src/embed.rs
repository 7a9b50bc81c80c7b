//! Deterministic bag-of-words embeddings used by the fake embeddings endpoint.

use opencouch_core::fnv;

/// Lower-cased alphanumeric tokens of `text`. Deliberately simpler than
/// `opencouch_core::text::words` (apostrophes split words): the fake
/// embeddings only need to be deterministic and to stay stable for the
/// tests built on their similarities.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

/// A deterministic, L2-normalised embedding of `text` with `dimension` components.
///
/// Every lower-cased alphanumeric token is hashed (FNV-1a) to one component
/// and a sign, so texts that share words get a high cosine similarity and
/// unrelated texts land near zero. Text without any token maps to the first
/// unit vector, so the result is always a unit vector. `dimension` 0 is
/// treated as 1.
pub fn hash_embedding(text: &str, dimension: usize) -> Vec<f32> {
    let dim = dimension.max(1);
    let mut v = vec![0.0_f32; dim];
    for token in tokens(text) {
        let h = fnv::hash(token.as_bytes());
        let idx = usize::try_from(h % dim as u64).unwrap_or(0);
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        v[idx] += sign;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        v[0] = 1.0;
    } else {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// Cosine similarity of two equally long vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn similar_texts_are_closer_than_unrelated_ones() {
        let a = hash_embedding("I feel anxious about work tomorrow", 256);
        let b = hash_embedding("feeling anxious about my work", 256);
        let c = hash_embedding("the recipe needs two eggs and flour", 256);
        assert!(cosine(&a, &b) > 0.4, "similar: {}", cosine(&a, &b));
        assert!(cosine(&a, &b) > cosine(&a, &c) + 0.3);
    }

    #[test]
    fn deterministic_and_case_insensitive() {
        assert_eq!(
            hash_embedding("Hello World", 32),
            hash_embedding("hello, world!", 32)
        );
        assert_eq!(hash_embedding("", 8)[0], 1.0);
        assert_eq!(hash_embedding("x", 0).len(), 1);
    }

    proptest! {
        #[test]
        fn always_unit_length(text in ".{0,80}", dim in 1usize..300) {
            let v = hash_embedding(&text, dim);
            prop_assert_eq!(v.len(), dim);
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            prop_assert!((norm - 1.0).abs() < 1e-4);
        }
    }
}
