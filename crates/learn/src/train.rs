//! A deterministic trainer: AdaGrad on the logistic loss, one independent
//! logistic head per target, L2 on the weights an example touches, and a
//! seeded shuffle. The same corpus and settings give the same weights, bit
//! for bit, so checked-in weights can be checked against their corpus.

use crate::LearnError;
use crate::features::{FeatureConfig, Features, SIGN_BIT};
use crate::model::{LinearModel, ModelMeta};

/// One training example.
#[derive(Debug, Clone)]
pub struct Example {
    /// Its features (whole text).
    pub features: Features,
    /// One target per head in `[0, 1]`; `NaN` leaves the head out.
    pub targets: Vec<f32>,
    /// How much this example counts.
    pub weight: f32,
}

/// Trainer settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// Passes over the data.
    pub epochs: usize,
    /// AdaGrad's base learning rate.
    pub learning_rate: f32,
    /// L2 penalty on the weights an example touches.
    pub l2: f32,
    /// Seed of the shuffle.
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            epochs: 12,
            learning_rate: 0.5,
            l2: 1e-5,
            seed: 7,
        }
    }
}

/// xorshift64*: a tiny deterministic generator for the shuffle.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Each example's dense values summed over its tokens and scaled to unit
/// length times the gain (as [`LinearModel::logits`] scores them); empty vectors when the
/// features have no dense values.
fn unit_dense(examples: &[Example], width: usize, gain: f32) -> Vec<Vec<f32>> {
    examples
        .iter()
        .map(|ex| {
            if width == 0 || ex.features.dense.is_empty() {
                return Vec::new();
            }
            let mut sum = vec![0f32; width];
            for row in ex.features.dense.chunks_exact(width) {
                for (s, x) in sum.iter_mut().zip(row) {
                    *s += x;
                }
            }
            let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm <= 1e-9 {
                return Vec::new();
            }
            sum.iter_mut().for_each(|x| *x *= gain / norm);
            sum
        })
        .collect()
}

/// Trains a model with one head per name in `heads`.
pub fn train(
    examples: &[Example],
    heads: &[String],
    features: FeatureConfig,
    config: &TrainConfig,
    corpus_sha256: &str,
) -> Result<LinearModel, LearnError> {
    let k = heads.len();
    if k == 0 {
        return Err(LearnError::Config("no heads".into()));
    }
    if let Some(bad) = examples.iter().position(|e| e.targets.len() != k) {
        return Err(LearnError::Config(format!(
            "example {bad} has {} targets for {k} heads",
            examples[bad].targets.len()
        )));
    }
    let buckets = features.buckets();
    let mut w = vec![0f32; buckets * k];
    let mut g2 = vec![0f32; buckets * k];
    let width = features.dense_width();
    let units = unit_dense(examples, width, features.dense_gain());
    let mut wd = vec![0f32; width * k];
    let mut gd2 = vec![0f32; width * k];
    let mut b = vec![0f32; k];
    let mut bg2 = vec![0f32; k];
    let eps = 1e-6f32;
    let lr = config.learning_rate;
    let mut order: Vec<usize> = (0..examples.len()).collect();
    let mut rng = Rng(config.seed.max(1));
    for _ in 0..config.epochs {
        // Fisher–Yates with the seeded generator.
        for i in (1..order.len()).rev() {
            let j = rng.below(i + 1);
            order.swap(i, j);
        }
        for &e in &order {
            let ex = &examples[e];
            let ids = &ex.features.ids;
            let scale = if ids.is_empty() {
                0.0
            } else {
                1.0 / (ids.len() as f32).sqrt()
            };
            for h in 0..k {
                let y = ex.targets[h];
                if y.is_nan() {
                    continue;
                }
                let mut z = b[h];
                for &id in ids {
                    let v = w[(id & !SIGN_BIT) as usize * k + h];
                    z += if id & SIGN_BIT != 0 { -v } else { v } * scale;
                }
                for (d, u) in units[e].iter().enumerate() {
                    z += u * wd[d * k + h];
                }
                let p = 1.0 / (1.0 + (-z).exp());
                let g = (p - y) * ex.weight;
                if g == 0.0 {
                    continue;
                }
                bg2[h] += g * g;
                b[h] -= lr * g / (bg2[h] + eps).sqrt();
                for &id in ids {
                    let slot = (id & !SIGN_BIT) as usize * k + h;
                    let x = if id & SIGN_BIT != 0 { -scale } else { scale };
                    let grad = g * x + config.l2 * w[slot];
                    g2[slot] += grad * grad;
                    w[slot] -= lr * grad / (g2[slot] + eps).sqrt();
                }
                for (d, u) in units[e].iter().enumerate() {
                    let slot = d * k + h;
                    let grad = g * u + config.l2 * wd[slot];
                    gd2[slot] += grad * grad;
                    wd[slot] -= lr * grad / (gd2[slot] + eps).sqrt();
                }
            }
        }
    }
    let meta = ModelMeta {
        features,
        heads: heads.to_vec(),
        corpus_sha256: corpus_sha256.to_owned(),
        examples: examples.len(),
        notes: format!(
            "adagrad epochs={} lr={} l2={} seed={}",
            config.epochs, config.learning_rate, config.l2, config.seed
        ),
    };
    LinearModel::from_parts_dense(meta, w, wd, b)
}

/// Trains a multi-class model: for each example, one softmax over the heads
/// whose target is not `NaN` (so classes of different contexts never
/// compete), with the target a distribution over them (one-hot for a
/// labelled class). Deterministic like [`train`]. Score it with
/// [`LinearModel::logits_into`] and a softmax over the same heads
/// ([`softmax_over`]).
pub fn train_softmax(
    examples: &[Example],
    heads: &[String],
    features: FeatureConfig,
    config: &TrainConfig,
    corpus_sha256: &str,
) -> Result<LinearModel, LearnError> {
    let k = heads.len();
    if k < 2 {
        return Err(LearnError::Config(
            "a softmax needs two heads or more".into(),
        ));
    }
    if let Some(bad) = examples.iter().position(|e| e.targets.len() != k) {
        return Err(LearnError::Config(format!(
            "example {bad} has {} targets for {k} heads",
            examples[bad].targets.len()
        )));
    }
    let buckets = features.buckets();
    let mut w = vec![0f32; buckets * k];
    let mut g2 = vec![0f32; buckets * k];
    let mut b = vec![0f32; k];
    let mut bg2 = vec![0f32; k];
    let eps = 1e-6f32;
    let lr = config.learning_rate;
    let mut order: Vec<usize> = (0..examples.len()).collect();
    let mut rng = Rng(config.seed.max(1));
    let width = features.dense_width();
    let units = unit_dense(examples, width, features.dense_gain());
    let mut wd = vec![0f32; width * k];
    let mut gd2 = vec![0f32; width * k];
    let mut z = vec![0f32; k];
    let mut active = Vec::with_capacity(k);
    for _ in 0..config.epochs {
        for i in (1..order.len()).rev() {
            let j = rng.below(i + 1);
            order.swap(i, j);
        }
        for &e in &order {
            let ex = &examples[e];
            active.clear();
            active.extend((0..k).filter(|&h| !ex.targets[h].is_nan()));
            if active.len() < 2 {
                continue;
            }
            let ids = &ex.features.ids;
            let scale = if ids.is_empty() {
                0.0
            } else {
                1.0 / (ids.len() as f32).sqrt()
            };
            for &h in &active {
                let mut zh = b[h];
                for &id in ids {
                    let v = w[(id & !SIGN_BIT) as usize * k + h];
                    zh += if id & SIGN_BIT != 0 { -v } else { v } * scale;
                }
                for (d, u) in units[e].iter().enumerate() {
                    zh += u * wd[d * k + h];
                }
                z[h] = zh;
            }
            softmax_over(&mut z, &active);
            for &h in &active {
                let g = (z[h] - ex.targets[h]) * ex.weight;
                if g == 0.0 {
                    continue;
                }
                bg2[h] += g * g;
                b[h] -= lr * g / (bg2[h] + eps).sqrt();
                for &id in ids {
                    let slot = (id & !SIGN_BIT) as usize * k + h;
                    let x = if id & SIGN_BIT != 0 { -scale } else { scale };
                    let grad = g * x + config.l2 * w[slot];
                    g2[slot] += grad * grad;
                    w[slot] -= lr * grad / (g2[slot] + eps).sqrt();
                }
                for (d, u) in units[e].iter().enumerate() {
                    let slot = d * k + h;
                    let grad = g * u + config.l2 * wd[slot];
                    gd2[slot] += grad * grad;
                    wd[slot] -= lr * grad / (gd2[slot] + eps).sqrt();
                }
            }
        }
    }
    let meta = ModelMeta {
        features,
        heads: heads.to_vec(),
        corpus_sha256: corpus_sha256.to_owned(),
        examples: examples.len(),
        notes: format!(
            "softmax adagrad epochs={} lr={} l2={} seed={}",
            config.epochs, config.learning_rate, config.l2, config.seed
        ),
    };
    LinearModel::from_parts_dense(meta, w, wd, b)
}

/// Turns the logits at `heads` into probabilities in place (a numerically
/// stable softmax over those heads only; the others are left as they are).
pub fn softmax_over(logits: &mut [f32], heads: &[usize]) {
    let max = heads
        .iter()
        .map(|&h| logits[h])
        .fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for &h in heads {
        let e = (logits[h] - max).exp();
        logits[h] = e;
        sum += e;
    }
    if sum > 0.0 {
        for &h in heads {
            logits[h] /= sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Featurizer;

    #[test]
    fn training_is_deterministic_and_checks_its_input() {
        let f = Featurizer::new(FeatureConfig {
            buckets_log2: 10,
            ..FeatureConfig::default()
        });
        let ex = |t: &str, y: f32| Example {
            features: f.features(t),
            targets: vec![y],
            weight: 1.0,
        };
        let data = vec![ex("yes please", 1.0), ex("no thanks", 0.0), ex("sure", 1.0)];
        let heads = ["ok".to_owned()];
        let a = train(&data, &heads, *f.config(), &TrainConfig::default(), "x").expect("a");
        let b = train(&data, &heads, *f.config(), &TrainConfig::default(), "x").expect("b");
        assert_eq!(a.encode(0.0), b.encode(0.0));
        assert!(train(&data, &[], *f.config(), &TrainConfig::default(), "x").is_err());
        let two = ["a".to_owned(), "b".to_owned()];
        assert!(train(&data, &two, *f.config(), &TrainConfig::default(), "x").is_err());
    }

    #[test]
    fn the_softmax_trainer_separates_classes_within_their_group_only() {
        let f = Featurizer::new(FeatureConfig {
            buckets_log2: 10,
            ..FeatureConfig::default()
        });
        let nan = f32::NAN;
        // Heads 0-1 are one group ("stop" / "go"), 2-3 another ("hi" / "bye").
        let ex = |t: &str, y: [f32; 4]| Example {
            features: f.features(t),
            targets: y.to_vec(),
            weight: 1.0,
        };
        let data = vec![
            ex("please stop now", [1.0, 0.0, nan, nan]),
            ex("stop it", [1.0, 0.0, nan, nan]),
            ex("keep going", [0.0, 1.0, nan, nan]),
            ex("go on then", [0.0, 1.0, nan, nan]),
            ex("hello there", [nan, nan, 1.0, 0.0]),
            ex("goodbye then", [nan, nan, 0.0, 1.0]),
        ];
        let heads: Vec<String> = ["stop", "go", "hi", "bye"].map(str::to_owned).to_vec();
        let cfg = TrainConfig::default();
        let m = train_softmax(&data, &heads, *f.config(), &cfg, "x").expect("trains");
        let again = train_softmax(&data, &heads, *f.config(), &cfg, "x").expect("trains");
        assert_eq!(m.encode(0.0), again.encode(0.0));
        let probs = |t: &str, group: &[usize]| {
            let mut z = vec![0f32; 4];
            m.logits_into(&f.features(t).ids, &mut z);
            softmax_over(&mut z, group);
            z
        };
        let p = probs("stop please", &[0, 1]);
        assert!(p[0] > 0.5 && (p[0] + p[1] - 1.0).abs() < 1e-5, "{p:?}");
        let p = probs("go on", &[0, 1]);
        assert!(p[1] > 0.5, "{p:?}");
        let p = probs("goodbye", &[2, 3]);
        assert!(p[3] > 0.5, "{p:?}");
        assert!(train_softmax(&data, &heads[..1], *f.config(), &cfg, "x").is_err());
    }
}
