//! A linear model over hashed features: one logistic head per output.
//!
//! A text is scored as a whole and window by window (sentences, and pieces
//! of run-on sentences): a long post with one risky sentence among twenty
//! ordinary ones is judged by that sentence, not diluted by the rest. Every
//! window's features are scaled by `1 / sqrt(n)` (the L2 norm of a binary
//! feature vector), as in training.
//!
//! The binary encoding (`OCLM`, version 1): magic, version, a JSON header
//! ([`ModelMeta`]), the biases, then the non-zero weights as (index, value)
//! pairs, all little-endian. Decoding a 2^18-bucket, two-head model takes
//! well under a millisecond.

use serde::{Deserialize, Serialize};

use crate::LearnError;
use crate::features::{FeatureConfig, Features, Featurizer, SIGN_BIT};

const MAGIC: &[u8; 4] = b"OCLM";
const VERSION: u32 = 1;
/// The compact encoding: weight indices as varint deltas, weights as
/// bfloat16 (the top 16 bits of an `f32`, rounded to nearest even).
const VERSION_COMPACT: u32 = 2;

/// An `f32` rounded to bfloat16 (nearest, ties to even).
fn to_bf16(w: f32) -> u16 {
    let bits = w.to_bits();
    let round = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// What a model is and where it came from (the encoded header).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    /// The features it was trained on.
    pub features: FeatureConfig,
    /// One name per head, e.g. `["level_ge_1", "level_ge_2"]`.
    pub heads: Vec<String>,
    /// SHA-256 (hex) of the training corpus, so a test can tell stale
    /// weights from the corpus they claim to come from.
    pub corpus_sha256: String,
    /// Number of training examples.
    pub examples: usize,
    /// Free-form notes (trainer settings), for people.
    #[serde(default)]
    pub notes: String,
}

/// A trained linear model.
#[derive(Debug, Clone)]
pub struct LinearModel {
    meta: ModelMeta,
    featurizer: Featurizer,
    /// `weights[bucket * heads + head]`.
    weights: Vec<f32>,
    /// Weights of the dense (static embedding) values,
    /// `dense[value * heads + head]`; empty without static embeddings.
    dense: Vec<f32>,
    bias: Vec<f32>,
}

/// The scores of one text: per head, the probability over the whole text
/// and the highest probability over its windows.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// Probability per head for the whole text.
    pub whole: Vec<f32>,
    /// Highest probability per head over the whole text and every window.
    pub max: Vec<f32>,
}

impl Scores {
    /// The highest probability of head `h`.
    pub fn best(&self, h: usize) -> f32 {
        self.max.get(h).copied().unwrap_or(0.0)
    }
}

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl LinearModel {
    /// A model from its parts (used by the trainer).
    pub fn from_parts(
        meta: ModelMeta,
        weights: Vec<f32>,
        bias: Vec<f32>,
    ) -> Result<Self, LearnError> {
        let dense = vec![0f32; meta.features.dense_width() * meta.heads.len()];
        Self::from_parts_dense(meta, weights, dense, bias)
    }

    /// A model from its parts, with the weights of its dense values
    /// (`dense[value * heads + head]`, `FeatureConfig::dense_width` values).
    pub fn from_parts_dense(
        meta: ModelMeta,
        weights: Vec<f32>,
        dense: Vec<f32>,
        bias: Vec<f32>,
    ) -> Result<Self, LearnError> {
        let heads = meta.heads.len();
        if dense.len() != meta.features.dense_width() * heads {
            return Err(LearnError::Header(format!(
                "{} dense weights for {} dense values and {heads} heads",
                dense.len(),
                meta.features.dense_width()
            )));
        }
        if heads == 0 || bias.len() != heads || weights.len() != meta.features.buckets() * heads {
            return Err(LearnError::Header(format!(
                "{heads} heads, {} biases, {} weights for {} buckets",
                bias.len(),
                weights.len(),
                meta.features.buckets()
            )));
        }
        Ok(LinearModel {
            featurizer: Featurizer::checked(meta.features)?,
            meta,
            weights,
            dense,
            bias,
        })
    }

    /// The header.
    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }

    /// The featurizer this model was trained with.
    pub fn featurizer(&self) -> &Featurizer {
        &self.featurizer
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.bias.len()
    }

    /// Index of the head called `name`.
    pub fn head(&self, name: &str) -> Option<usize> {
        self.meta.heads.iter().position(|h| h == name)
    }

    /// The dense weights (`dense[value * heads + head]`), for a trainer
    /// that starts from this model.
    pub fn dense_weights(&self) -> &[f32] {
        &self.dense
    }

    /// Raw weight of `head` for one feature id (sign applied).
    #[inline]
    fn weight(&self, id: u32, head: usize) -> f32 {
        let heads = self.bias.len();
        let w = self.weights[(id & !SIGN_BIT) as usize * heads + head];
        if id & SIGN_BIT != 0 { -w } else { w }
    }

    /// Logits of `ids` (scaled by `1/sqrt(n)`), added into `out`.
    pub fn logits_into(&self, ids: &[u32], out: &mut [f32]) {
        let heads = self.bias.len();
        out[..heads].copy_from_slice(&self.bias);
        if ids.is_empty() {
            return;
        }
        let scale = 1.0 / (ids.len() as f32).sqrt();
        for &id in ids {
            let base = (id & !SIGN_BIT) as usize * heads;
            let sign = if id & SIGN_BIT != 0 { -scale } else { scale };
            for (h, o) in out.iter_mut().enumerate().take(heads) {
                *o += sign * self.weights[base + h];
            }
        }
    }

    /// Logits of a whole text's features (sparse and dense), into `out`.
    pub fn logits(&self, f: &Features, out: &mut [f32]) {
        self.logits_into(&f.ids, out);
        let width = self.meta.features.dense_width();
        if width == 0 || f.dense.is_empty() {
            return;
        }
        let mut sum = vec![0f32; width];
        for row in f.dense.chunks_exact(width) {
            for (s, x) in sum.iter_mut().zip(row) {
                *s += x;
            }
        }
        self.add_dense(&sum, out);
    }

    /// Adds the dense part of the logits for a window whose dense values
    /// sum to `sum`: the sum is scaled to unit length first, so long and
    /// short texts weigh alike (as the sparse part's `1/sqrt(n)`).
    fn add_dense(&self, sum: &[f32], out: &mut [f32]) {
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm <= 1e-9 {
            return;
        }
        let heads = self.bias.len();
        let scale = self.meta.features.dense_gain() / norm;
        for (d, x) in sum.iter().enumerate() {
            let u = x * scale;
            let row = &self.dense[d * heads..(d + 1) * heads];
            for (o, w) in out.iter_mut().zip(row) {
                *o += u * w;
            }
        }
    }

    /// Scores already computed features: the whole text, and every window
    /// (and pair of neighbouring windows) of at least `min_window` tokens.
    pub fn score_features(&self, f: &Features, min_window: usize) -> Scores {
        let heads = self.bias.len();
        let n = f.tokens();
        // Prefix sums of each token's weight per head, and of feature counts.
        let mut sums = vec![0f32; (n + 1) * heads];
        let mut counts = vec![0u32; n + 1];
        for t in 0..n {
            let ids = f.range(t, t + 1);
            counts[t + 1] = counts[t] + ids.len() as u32;
            for h in 0..heads {
                let mut s = 0f32;
                for &id in ids {
                    s += self.weight(id, h);
                }
                sums[(t + 1) * heads + h] = sums[t * heads + h] + s;
            }
        }
        // Prefix sums of the dense values, and each window's dense logits.
        let width = self.meta.features.dense_width();
        let dense_on = width > 0 && f.dense.len() == n * width;
        let mut dsums = Vec::new();
        if dense_on {
            dsums = vec![0f32; (n + 1) * width];
            for t in 0..n {
                for d in 0..width {
                    dsums[(t + 1) * width + d] = dsums[t * width + d] + f.dense[t * width + d];
                }
            }
        }
        // Without dense values every window adds nothing: no allocation per
        // window on the gate's path.
        let no_dense = vec![0f32; heads];
        let dense_logits = |a: usize, b: usize| -> std::borrow::Cow<'_, [f32]> {
            if !dense_on {
                return std::borrow::Cow::Borrowed(&no_dense);
            }
            let mut z = vec![0f32; heads];
            let sum: Vec<f32> = (0..width)
                .map(|d| dsums[b * width + d] - dsums[a * width + d])
                .collect();
            self.add_dense(&sum, &mut z);
            std::borrow::Cow::Owned(z)
        };
        let window = |a: usize, b: usize, h: usize, dz: &[f32]| {
            let c = counts[b] - counts[a];
            let s = sums[b * heads + h] - sums[a * heads + h];
            let z = if c == 0 {
                self.bias[h]
            } else {
                self.bias[h] + s / (c as f32).sqrt()
            };
            sigmoid(z + dz[h])
        };
        let dz = dense_logits(0, n);
        let whole: Vec<f32> = (0..heads).map(|h| window(0, n, h, &dz)).collect();
        let mut max = whole.clone();
        if f.windows.len() > 1 {
            for &(a, b) in &f.windows {
                if ((b - a) as usize) < min_window {
                    continue;
                }
                let dz = dense_logits(a as usize, b as usize);
                for (h, m) in max.iter_mut().enumerate() {
                    *m = m.max(window(a as usize, b as usize, h, &dz));
                }
            }
            // Pairs of neighbouring windows ("i have the pills. tonight.").
            for pair in f.windows.windows(2) {
                let (a, b) = (pair[0].0 as usize, pair[1].1 as usize);
                if b - a < min_window {
                    continue;
                }
                let dz = dense_logits(a, b);
                for (h, m) in max.iter_mut().enumerate() {
                    *m = m.max(window(a, b, h, &dz));
                }
            }
        }
        Scores { whole, max }
    }

    /// Featurizes and scores `text` (already normalized), windows of any
    /// length.
    pub fn score(&self, text: &str) -> Scores {
        self.score_features(&self.featurizer.features(text), 1)
    }

    /// Encodes the model (pruning weights smaller than `prune` in magnitude).
    pub fn encode(&self, prune: f32) -> Vec<u8> {
        let header = serde_json::to_vec(&self.meta).unwrap_or_default();
        let nonzero: Vec<(u32, f32)> = self
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| w.abs() > prune)
            .map(|(i, w)| (i as u32, *w))
            .collect();
        let mut out = Vec::with_capacity(16 + header.len() + nonzero.len() * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        for b in &self.bias {
            out.extend_from_slice(&b.to_le_bytes());
        }
        out.extend_from_slice(&(nonzero.len() as u32).to_le_bytes());
        for (i, w) in nonzero {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&w.to_le_bytes());
        }
        self.encode_dense(&mut out);
        out
    }

    /// The dense weights, in full (`f32` each), after the sparse ones.
    fn encode_dense(&self, out: &mut Vec<u8>) {
        for w in &self.dense {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Encodes the model compactly: as [`LinearModel::encode`], with each
    /// weight's index as a varint delta from the previous one and the weight
    /// as bfloat16 (about 3 bytes a weight instead of 8). Scores move by the
    /// rounding of the weights (relative error under 0.4%).
    pub fn encode_compact(&self, prune: f32) -> Vec<u8> {
        let header = serde_json::to_vec(&self.meta).unwrap_or_default();
        let mut out = Vec::with_capacity(16 + header.len() + self.weights.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION_COMPACT.to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        for b in &self.bias {
            out.extend_from_slice(&b.to_le_bytes());
        }
        let kept: Vec<(u32, u16)> = self
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| w.abs() > prune)
            .map(|(i, w)| (i as u32, to_bf16(*w)))
            .filter(|(_, h)| *h & 0x7FFF != 0)
            .collect();
        out.extend_from_slice(&(kept.len() as u32).to_le_bytes());
        let mut prev = 0u32;
        for (i, h) in kept {
            let mut delta = i - prev;
            prev = i;
            loop {
                let byte = (delta & 0x7F) as u8;
                delta >>= 7;
                if delta == 0 {
                    out.push(byte);
                    break;
                }
                out.push(byte | 0x80);
            }
            out.extend_from_slice(&h.to_le_bytes());
        }
        self.encode_dense(&mut out);
        out
    }

    /// Decodes a model written by [`LinearModel::encode`] or
    /// [`LinearModel::encode_compact`].
    pub fn decode(bytes: &[u8]) -> Result<Self, LearnError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4, "magic")? != MAGIC {
            return Err(LearnError::BadMagic);
        }
        let version = r.u32("version")?;
        if version != VERSION && version != VERSION_COMPACT {
            return Err(LearnError::BadMagic);
        }
        let len = r.u32("header length")? as usize;
        let meta: ModelMeta = serde_json::from_slice(r.take(len, "header")?)
            .map_err(|e| LearnError::Header(e.to_string()))?;
        if !(8..=26).contains(&meta.features.buckets_log2) || meta.heads.is_empty() {
            return Err(LearnError::Header(
                "bucket count or heads out of range".into(),
            ));
        }
        let heads = meta.heads.len();
        let mut bias = Vec::with_capacity(heads);
        for _ in 0..heads {
            bias.push(r.f32("bias")?);
        }
        let total = meta.features.buckets() * heads;
        let mut weights = vec![0f32; total];
        let nnz = r.u32("weight count")? as usize;
        let mut prev = 0usize;
        for _ in 0..nnz {
            let (i, w) = if version == VERSION {
                (r.u32("weight index")? as usize, r.f32("weight")?)
            } else {
                prev += r.varint("weight index")?;
                let b = r.take(2, "weight")?;
                (prev, from_bf16(u16::from_le_bytes([b[0], b[1]])))
            };
            let slot = weights
                .get_mut(i)
                .ok_or_else(|| LearnError::Header(format!("weight index {i} out of range")))?;
            *slot = w;
        }
        let mut dense = Vec::with_capacity(meta.features.dense_width() * heads);
        for _ in 0..meta.features.dense_width() * heads {
            dense.push(r.f32("dense weight")?);
        }
        if r.at != bytes.len() {
            return Err(LearnError::Header(
                "trailing bytes after the weights".into(),
            ));
        }
        LinearModel::from_parts_dense(meta, weights, dense, bias)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], LearnError> {
        let end = self.at.checked_add(n).ok_or(LearnError::Truncated(what))?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or(LearnError::Truncated(what))?;
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, LearnError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn f32(&mut self, what: &'static str) -> Result<f32, LearnError> {
        Ok(f32::from_bits(self.u32(what)?))
    }
    fn varint(&mut self, what: &'static str) -> Result<usize, LearnError> {
        let mut v = 0usize;
        for shift in (0..35).step_by(7) {
            let b = self.take(1, what)?[0];
            v |= usize::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(LearnError::Header(format!("{what}: varint too long")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compact_encoding_round_trips_within_bf16_rounding() {
        let m = toy();
        let compact = LinearModel::decode(&m.encode_compact(0.0)).expect("decodes");
        let exact = LinearModel::decode(&m.encode(0.0)).expect("decodes");
        assert!(m.encode_compact(0.0).len() < m.encode(0.0).len());
        for text in ["the cat sat on the mat", "a dog in the fog", "mat"] {
            let (a, b) = (compact.score(text), exact.score(text));
            for (x, y) in a.whole.iter().zip(&b.whole) {
                assert!((x - y).abs() < 0.01, "{text}: {x} vs {y}");
            }
        }
        assert_eq!(from_bf16(to_bf16(1.5)), 1.5);
        assert_eq!(from_bf16(to_bf16(-0.25)), -0.25);
    }
    use crate::train::{Example, TrainConfig, train};

    fn toy() -> LinearModel {
        let f = Featurizer::new(FeatureConfig {
            buckets_log2: 12,
            ..FeatureConfig::default()
        });
        let data = [
            ("the cat sat on the mat", [1.0, 0.0]),
            ("a cat was here", [1.0, 0.0]),
            ("dogs bark loudly", [0.0, 1.0]),
            ("the dog ran away", [0.0, 1.0]),
            ("nothing to see", [0.0, 0.0]),
            ("it rained all day", [0.0, 0.0]),
        ];
        let examples: Vec<Example> = data
            .iter()
            .map(|(t, y)| Example {
                features: f.features(t),
                targets: y.to_vec(),
                weight: 1.0,
            })
            .collect();
        train(
            &examples,
            &["cat".to_owned(), "dog".to_owned()],
            *f.config(),
            &TrainConfig::default(),
            "toy",
        )
        .expect("trains")
    }

    #[test]
    fn learns_a_toy_task_and_scores_windows() {
        let m = toy();
        assert!(m.score("my cat").best(0) > 0.5);
        assert!(m.score("my dog").best(1) > 0.5);
        // The second sentence decides the window maximum, not the whole.
        let s = m.score("it rained all day. nothing to see. my cat");
        assert!(s.best(0) > s.whole[0]);
    }

    #[test]
    fn round_trips_and_rejects_bad_bytes() {
        let m = toy();
        let bytes = m.encode(0.0);
        let back = LinearModel::decode(&bytes).expect("decodes");
        assert_eq!(back.meta(), m.meta());
        assert_eq!(back.score("my cat"), m.score("my cat"));
        assert_eq!(
            LinearModel::decode(b"OC").unwrap_err(),
            LearnError::Truncated("magic")
        );
        assert_eq!(
            LinearModel::decode(b"nope").unwrap_err(),
            LearnError::BadMagic
        );
        assert_eq!(
            LinearModel::decode(b"XXXX\x01\0\0\0").unwrap_err(),
            LearnError::BadMagic
        );
        for cut in [5, 12, bytes.len() - 1] {
            assert!(LinearModel::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(LinearModel::decode(&extra).is_err());
    }
}

#[cfg(all(test, feature = "static-embeddings"))]
mod static_embedding_tests {
    #[test]
    fn a_model_with_static_embeddings_trains_scores_and_round_trips() {
        use crate::{Example, FeatureConfig, Featurizer, LinearModel, TrainConfig, train};
        // (the table itself is `crate::embed`'s; this checks the model's use of it)
        let f = Featurizer::checked(FeatureConfig {
            buckets_log2: 10,
            static_dims: 64,
            ..FeatureConfig::default()
        })
        .expect("the table is built in");
        let ex = |t: &str, y: f32| Example {
            features: f.features(t),
            targets: vec![y],
            weight: 1.0,
        };
        let data = vec![
            ex("i feel furious", 1.0),
            ex("so angry right now", 1.0),
            ex("the weather is lovely", 0.0),
            ex("we had pasta for dinner", 0.0),
        ];
        assert_eq!(data[0].features.dense.len(), 3 * 128);
        let m = train(
            &data,
            &["anger".to_owned()],
            *f.config(),
            &TrainConfig::default(),
            "x",
        )
        .expect("trains");
        assert!(m.dense_weights().iter().any(|w| *w != 0.0));
        for bytes in [m.encode(0.0), m.encode_compact(0.0)] {
            let back = LinearModel::decode(&bytes).expect("decodes");
            assert_eq!(back.dense_weights(), m.dense_weights());
            let (a, b) = (back.score("i am angry"), m.score("i am angry"));
            assert!((a.whole[0] - b.whole[0]).abs() < 0.01);
        }
        // Negated words fill the second half of a token's values.
        let neg = f.features("not angry");
        assert!(neg.dense[128 + 64..].iter().any(|x| *x != 0.0));
        assert!(neg.dense[128..128 + 64].iter().all(|x| *x == 0.0));
    }
}

#[cfg(all(test, not(feature = "static-embeddings")))]
mod tests_without_the_table {
    use crate::StaticEmbeddings;

    #[test]
    fn a_build_without_the_table_says_so() {
        let e = StaticEmbeddings::builtin().unwrap_err();
        assert!(e.to_string().contains("static-embeddings"), "{e}");
        let f = crate::FeatureConfig {
            static_dims: 64,
            ..crate::FeatureConfig::default()
        };
        assert!(crate::Featurizer::checked(f).is_err());
    }
}
