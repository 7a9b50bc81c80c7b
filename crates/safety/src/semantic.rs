//! The semantic signal: indirect risk language by nearest exemplars over
//! local sentence embeddings.
//!
//! Phrase families and the grammar only see words they know. This layer
//! compares the *meaning* of a message with reviewed exemplar sentences
//! (`data/semantic_exemplars.toml`: burdensomeness, thwarted belonging,
//! hopelessness, entrapment, exhaustion with living, self-hatred,
//! unbearable pain, passive death wishes, farewells, final arrangements,
//! "won't be around", method preparation) and with benign counter-examples
//! (stress, grief, tiredness, idioms, ordinary farewells).
//!
//! The crate stays pure: the caller embeds the texts that [`chunks`]
//! returns with all-MiniLM-L6-v2 and passes the vectors to
//! [`SemanticIndex::score`]. The exemplar vectors are precomputed in
//! `data/semantic_vectors.bin` (the file records a hash of the exemplar
//! texts, and loading fails when they disagree).
//!
//! **Policy** ([`SemanticScore::level`]): the signal may raise a level and
//! never lowers one. It raises to 1 when a chunk is at least
//! [`RAISE_1`] similar to an indirect-risk exemplar and at least [`MARGIN_1`]
//! more similar to it than to any counter-example; to 2 only when the
//! closest exemplar is a level-2 one at [`RAISE_2`] with margin [`MARGIN_2`]
//! (chosen for precision). The thresholds were chosen on the project's own
//! development set (`tests/data/semantic_dev.jsonl`), never on evaluation data.

use std::sync::LazyLock;

use serde::Deserialize;

use crate::error::SafetyError;

const EXEMPLARS_TOML: &str = include_str!("../data/semantic_exemplars.toml");
const VECTORS_BIN: &[u8] = include_bytes!("../data/semantic_vectors.bin");

/// Magic bytes at the start of the vector file.
pub const MAGIC: &[u8; 8] = b"OCSEMV01";
/// The embedding model the vectors were made with.
pub const MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// Similarity to an exemplar that raises a level to 1.
pub const RAISE_1: f32 = 0.56;
/// How much closer than the nearest counter-example a chunk must be to raise to 1.
pub const MARGIN_1: f32 = 0.05;
/// Similarity to a level-2 exemplar that raises a level to 2.
pub const RAISE_2: f32 = 0.70;
/// Margin over the nearest counter-example needed to raise to 2.
pub const MARGIN_2: f32 = 0.08;
/// At most this many texts are embedded per message (the whole message and
/// its longest sentences).
pub const MAX_CHUNKS: usize = 4;

#[derive(Deserialize)]
struct RawFile {
    exemplar: Vec<RawGroup>,
    counter: Vec<RawGroup>,
}

#[derive(Deserialize)]
struct RawGroup {
    construct: String,
    #[serde(default)]
    level: u8,
    texts: Vec<String>,
}

/// One exemplar sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemplar {
    /// Construct name (for counters, the benign kind).
    pub construct: String,
    /// 1 or 2 for exemplars, 0 for counter-examples.
    pub level: u8,
    /// The sentence.
    pub text: String,
}

/// Parses the embedded exemplar file: exemplars first, then counters, in
/// file order (the order of the vectors).
pub fn load_exemplars() -> Result<Vec<Exemplar>, SafetyError> {
    let err = |detail: String| SafetyError::Data {
        file: "semantic_exemplars.toml",
        detail,
    };
    let raw: RawFile = toml::from_str(EXEMPLARS_TOML).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for g in raw.exemplar {
        if !(1..=2).contains(&g.level) {
            return Err(err(format!("{}: level must be 1 or 2", g.construct)));
        }
        for t in g.texts {
            out.push(Exemplar {
                construct: g.construct.clone(),
                level: g.level,
                text: t,
            });
        }
    }
    for g in raw.counter {
        for t in g.texts {
            out.push(Exemplar {
                construct: g.construct.clone(),
                level: 0,
                text: t,
            });
        }
    }
    if out.iter().any(|e| e.text.trim().is_empty()) {
        return Err(err("empty exemplar text".into()));
    }
    Ok(out)
}

/// FNV-1a over the exemplar texts (with their level and construct): the
/// vector file must carry the same value.
pub fn exemplar_hash(exemplars: &[Exemplar]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for e in exemplars {
        feed(e.construct.as_bytes());
        feed(&[0, e.level, 0]);
        feed(e.text.as_bytes());
        feed(b"\n");
    }
    h
}

/// Serializes exemplar vectors in the format [`SemanticIndex::from_bytes`]
/// reads (used by the generator example).
pub fn encode_vectors(hash: u64, dim: usize, vectors: &[Vec<f32>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + vectors.len() * dim * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(dim as u32).to_le_bytes());
    out.extend_from_slice(&(vectors.len() as u32).to_le_bytes());
    out.extend_from_slice(&hash.to_le_bytes());
    out.extend_from_slice(&(MODEL_ID.len() as u16).to_le_bytes());
    out.extend_from_slice(MODEL_ID.as_bytes());
    for v in vectors {
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// The exemplars with their vectors, ready to score.
pub struct SemanticIndex {
    dim: usize,
    /// Row-major, L2-normalized.
    vectors: Vec<f32>,
    exemplars: Vec<Exemplar>,
}

/// The result of scoring one message.
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticScore {
    /// Best similarity to an indirect-risk exemplar (over all chunks).
    pub similarity: f32,
    /// Best similarity to a counter-example, in the same chunk.
    pub counter_similarity: f32,
    /// Construct of the closest exemplar.
    pub construct: String,
    /// Level of the closest exemplar (1 or 2).
    pub exemplar_level: u8,
}

impl SemanticScore {
    /// The level this score supports (0, 1 or 2); the gate takes the
    /// maximum with the other layers.
    pub fn level(&self) -> u8 {
        let margin = self.similarity - self.counter_similarity;
        if self.exemplar_level >= 2 && self.similarity >= RAISE_2 && margin >= MARGIN_2 {
            2
        } else if self.similarity >= RAISE_1 && margin >= MARGIN_1 {
            1
        } else {
            0
        }
    }
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl SemanticIndex {
    /// Parses a vector file and checks it against the exemplar texts.
    pub fn from_bytes(bytes: &[u8], exemplars: Vec<Exemplar>) -> Result<Self, SafetyError> {
        let err = |detail: &str| SafetyError::Data {
            file: "semantic_vectors.bin",
            detail: detail.into(),
        };
        if bytes.get(..8) != Some(MAGIC.as_slice()) {
            return Err(err("bad magic"));
        }
        let dim = read_u32(bytes, 8).ok_or_else(|| err("truncated header"))? as usize;
        let count = read_u32(bytes, 12).ok_or_else(|| err("truncated header"))? as usize;
        let hash = u64::from_le_bytes(
            bytes
                .get(16..24)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| err("truncated header"))?,
        );
        let id_len = u16::from_le_bytes(
            bytes
                .get(24..26)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| err("truncated header"))?,
        ) as usize;
        let id = bytes
            .get(26..26 + id_len)
            .ok_or_else(|| err("truncated header"))?;
        if id != MODEL_ID.as_bytes() {
            return Err(err("vectors were made with another model"));
        }
        if count != exemplars.len() || hash != exemplar_hash(&exemplars) {
            return Err(err(
                "vectors do not match semantic_exemplars.toml (regenerate them)",
            ));
        }
        let data = &bytes[26 + id_len..];
        if dim == 0 || data.len() != count * dim * 4 {
            return Err(err("wrong vector data length"));
        }
        let mut vectors: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        for row in vectors.chunks_exact_mut(dim) {
            normalize(row);
        }
        Ok(SemanticIndex {
            dim,
            vectors,
            exemplars,
        })
    }

    /// The embedded index (exemplar file plus precomputed vectors).
    pub fn embedded() -> Result<&'static SemanticIndex, &'static SafetyError> {
        static INDEX: LazyLock<Result<SemanticIndex, SafetyError>> =
            LazyLock::new(|| SemanticIndex::from_bytes(VECTORS_BIN, load_exemplars()?));
        INDEX.as_ref()
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of exemplars and counter-examples.
    pub fn len(&self) -> usize {
        self.exemplars.len()
    }

    /// Whether the index is empty (never, for the embedded one).
    pub fn is_empty(&self) -> bool {
        self.exemplars.is_empty()
    }

    /// Scores the vectors of a message's chunks (see [`chunks`]). Vectors of
    /// the wrong dimension are ignored; no vectors give a zero score.
    pub fn score(&self, chunk_vectors: &[Vec<f32>]) -> SemanticScore {
        let mut best = SemanticScore {
            similarity: 0.0,
            counter_similarity: 0.0,
            construct: String::new(),
            exemplar_level: 0,
        };
        let mut best_rank = f32::MIN;
        for v in chunk_vectors {
            if v.len() != self.dim {
                continue;
            }
            let mut q = v.clone();
            normalize(&mut q);
            let mut pos = (f32::MIN, 0usize);
            let mut neg = f32::MIN;
            for (i, row) in self.vectors.chunks_exact(self.dim).enumerate() {
                let sim: f32 = row.iter().zip(&q).map(|(a, b)| a * b).sum();
                if self.exemplars[i].level == 0 {
                    neg = neg.max(sim);
                } else if sim > pos.0 {
                    pos = (sim, i);
                }
            }
            if pos.0 == f32::MIN {
                continue;
            }
            let neg = neg.max(0.0);
            // The chunk that argues most for risk decides.
            let rank = pos.0 + (pos.0 - neg);
            if rank > best_rank {
                best_rank = rank;
                let e = &self.exemplars[pos.1];
                best = SemanticScore {
                    similarity: pos.0,
                    counter_similarity: neg,
                    construct: e.construct.clone(),
                    exemplar_level: e.level,
                };
            }
        }
        best
    }
}

fn normalize(v: &mut [f32]) {
    let n: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        for x in v {
            *x /= n;
        }
    }
}

/// The texts to embed for one message: the whole message, then its
/// sentences of four words or more, longest first, at most [`MAX_CHUNKS`]
/// in all. A short message is one chunk.
pub fn chunks(message: &str) -> Vec<String> {
    let whole = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = vec![whole.clone()];
    let mut sentences: Vec<String> = message
        .split(['.', '!', '?', '\n', ';'])
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| s.split(' ').count() >= 4 && *s != whole)
        .collect();
    sentences.sort_by_key(|s| std::cmp::Reverse(s.len()));
    sentences.dedup();
    out.extend(sentences.into_iter().take(MAX_CHUNKS - 1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exemplars_load_and_cover_both_sides() {
        let ex = load_exemplars().expect("exemplars parse");
        assert!(ex.iter().filter(|e| e.level > 0).count() >= 100);
        assert!(ex.iter().filter(|e| e.level == 0).count() >= 50);
        for level in [1, 2] {
            assert!(ex.iter().any(|e| e.level == level));
        }
        let mut seen = std::collections::HashSet::new();
        for e in &ex {
            assert!(
                seen.insert(e.text.as_str()),
                "duplicate exemplar {:?}",
                e.text
            );
        }
    }

    #[test]
    fn vector_file_matches_the_exemplars() {
        let index = SemanticIndex::embedded().expect(
            "semantic_vectors.bin matches semantic_exemplars.toml; regenerate with \
             `cargo run --release -p opencouch-runtime --example semantic_vectors`",
        );
        assert_eq!(index.dim(), 384);
        assert_eq!(index.len(), load_exemplars().unwrap().len());
    }

    #[test]
    fn encode_round_trips_and_rejects_mismatches() {
        let ex = vec![
            Exemplar {
                construct: "a".into(),
                level: 2,
                text: "x".into(),
            },
            Exemplar {
                construct: "b".into(),
                level: 0,
                text: "y".into(),
            },
        ];
        let bytes = encode_vectors(exemplar_hash(&ex), 2, &[vec![1.0, 0.0], vec![0.0, 1.0]]);
        let index = SemanticIndex::from_bytes(&bytes, ex.clone()).unwrap();
        let s = index.score(&[vec![0.9, 0.1]]);
        assert_eq!(s.construct, "a");
        assert!(s.similarity > 0.9 && s.counter_similarity < 0.2);
        assert_eq!(s.level(), 2);
        let s = index.score(&[vec![0.1, 0.9]]);
        assert_eq!(s.level(), 0, "closer to the counter-example");
        assert_eq!(index.score(&[]).level(), 0);
        assert_eq!(
            index.score(&[vec![1.0, 0.0, 0.0]]).level(),
            0,
            "wrong dimension ignored"
        );
        let mut other = ex.clone();
        other[0].text = "changed".into();
        assert!(SemanticIndex::from_bytes(&bytes, other).is_err());
        assert!(SemanticIndex::from_bytes(b"nonsense", ex).is_err());
    }

    #[test]
    fn chunks_are_the_message_and_its_longer_sentences() {
        assert_eq!(chunks("i feel fine"), ["i feel fine"]);
        let c = chunks(
            "Short one. This sentence has enough words in it! And this one also has five words?",
        );
        assert_eq!(c.len(), 3);
        assert!(c[1].starts_with("This sentence"));
        let long: String = (0..20)
            .map(|i| format!("sentence number {i} is here. "))
            .collect();
        assert_eq!(chunks(&long).len(), MAX_CHUNKS);
    }
}
