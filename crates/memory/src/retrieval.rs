//! Per-turn hybrid retrieval: token recall + embedding cosine fused by
//! Reciprocal Rank Fusion, with a first-turn catch-up arc.
//!
//! The ranking math is pure ([`lexical_score`], [`cosine`], [`rrf_fuse`],
//! [`MemoryIndex`]); [`retrieve`] wires it to a [`MemoryBackend`] and an
//! optional [`Embedder`].

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use opencouch_core::Diagnostics;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::{BackendError, MemoryBackend, MemoryRecord, StoredEmbedding, load_profile};
use crate::text::search_terms;
use crate::types::{MemoryKind, SemanticFact, SessionArc};

/// A record is a lexical hit when this share of the query's meaningful
/// tokens occurs in it.
pub const TOKEN_HIT_THRESHOLD: f64 = 0.33;
/// Short-record path: at least this many shared tokens …
pub const SHORT_RECORD_MIN_SHARED: usize = 2;
/// … making up at least this share of the record's primary text.
pub const SHORT_RECORD_MIN_COVERAGE: f64 = 0.4;
/// Minimum cosine similarity for a dense hit.
pub const COSINE_THRESHOLD: f32 = 0.5;
/// The RRF constant.
pub const RRF_K: f64 = 60.0;
/// Semantic candidates searched per list.
pub const SEMANTIC_SEARCH_LIMIT: usize = 20;
/// Active semantic facts kept.
pub const SEMANTIC_KEEP: usize = 5;
/// Episodic arcs kept.
pub const EPISODIC_LIMIT: usize = 2;
/// Episodic arcs older than this are not searched.
pub const EPISODIC_MAX_AGE_DAYS: i64 = 30;

/// Why an embedding call failed. Never carries the embedded text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("embedding failed: {0}")]
pub struct EmbedError(pub String);

/// A text-embedding provider (remote API or local model).
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Embeds each text; one vector per input, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// The model id stored with each vector.
    fn model_id(&self) -> &str;
    /// The vector dimension.
    fn dimension(&self) -> usize;
    /// How much this provider's ranking counts in the fusion, relative to
    /// the lexical list (weight 1). Providers whose ranking was measured to
    /// be weaker than lexical recall on conversational memory declare less
    /// (see `docs/benchmarks.md`); unmeasured providers count equally.
    fn rrf_weight(&self) -> f64 {
        1.0
    }
}

/// Embeds texts for storage alongside records.
///
/// # Errors
/// The embedder's error, or a count mismatch.
pub async fn embed_for_storage(
    embedder: &dyn Embedder,
    texts: &[String],
) -> Result<Vec<StoredEmbedding>, EmbedError> {
    let vectors = embedder.embed(texts).await?;
    if vectors.len() != texts.len() {
        return Err(EmbedError(
            "embedder returned a different number of vectors".to_owned(),
        ));
    }
    Ok(vectors
        .into_iter()
        .map(|v| StoredEmbedding {
            dim: v.len(),
            vector: v,
            model: embedder.model_id().to_owned(),
        })
        .collect())
}

/// The record's primary text: the first non-empty of `evidence_quote`,
/// `summary`, `text` and `content`.
pub fn primary_text(value: &Value) -> Option<&str> {
    ["evidence_quote", "summary", "text", "content"]
        .iter()
        .filter_map(|k| value.get(k).and_then(Value::as_str))
        .find(|s| !s.trim().is_empty())
}

/// Every string value of the record, joined with spaces.
pub fn haystack(value: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push(' ');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    walk(value, &mut out);
    out
}

/// The lexical verdict for one record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LexicalScore {
    /// Share of the query's distinct meaningful tokens found in the haystack.
    pub recall: f64,
    /// Share of the primary text's distinct meaningful tokens that the query shares.
    pub primary_coverage: f64,
    /// Whether the record counts as a hit (recall path or short-record path).
    pub hit: bool,
}

/// Token recall of `query_tokens` (distinct, meaningful) against a record's
/// haystack and primary-text token sets.
pub fn lexical_score(
    query_tokens: &HashSet<String>,
    haystack_tokens: &HashSet<String>,
    primary_tokens: &HashSet<String>,
) -> LexicalScore {
    if query_tokens.is_empty() {
        return LexicalScore {
            recall: 0.0,
            primary_coverage: 0.0,
            hit: false,
        };
    }
    let found = query_tokens
        .iter()
        .filter(|t| haystack_tokens.contains(*t))
        .count();
    let shared_primary = query_tokens
        .iter()
        .filter(|t| primary_tokens.contains(*t))
        .count();
    score_from_counts(
        query_tokens.len(),
        found,
        shared_primary,
        primary_tokens.len(),
    )
}

fn score_from_counts(
    query_len: usize,
    found: usize,
    shared_primary: usize,
    primary_len: usize,
) -> LexicalScore {
    let recall = if query_len == 0 {
        0.0
    } else {
        found as f64 / query_len as f64
    };
    let primary_coverage = if primary_len == 0 {
        0.0
    } else {
        shared_primary as f64 / primary_len as f64
    };
    let short_path =
        shared_primary >= SHORT_RECORD_MIN_SHARED && primary_coverage >= SHORT_RECORD_MIN_COVERAGE;
    LexicalScore {
        recall,
        primary_coverage,
        hit: recall >= TOKEN_HIT_THRESHOLD || short_path,
    }
}

/// Cosine similarity; `None` for mismatched lengths or a zero vector.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        None
    } else {
        Some(dot / (na.sqrt() * nb.sqrt()))
    }
}

/// Reciprocal Rank Fusion: each item scores Σ 1/(k + rank) (rank from 1)
/// over the lists it appears in. Ties go to the lower `insertion_order`.
/// When exactly one list is non-empty the result is that list, in order.
pub fn rrf_fuse<K: Clone + Eq + Hash>(
    lists: &[Vec<K>],
    k: f64,
    insertion_order: impl Fn(&K) -> usize,
) -> Vec<(K, f64)> {
    let weighted: Vec<(&[K], f64)> = lists.iter().map(|l| (l.as_slice(), 1.0)).collect();
    rrf_fuse_weighted(&weighted, k, insertion_order)
}

/// Weighted Reciprocal Rank Fusion: each item scores Σ w/(k + rank) over
/// the lists it appears in, `w` being its list's weight. With all weights
/// 1 this is [`rrf_fuse`]. Ties go to the lower `insertion_order`; when
/// exactly one list is non-empty the result is that list, in order.
pub fn rrf_fuse_weighted<K: Clone + Eq + Hash>(
    lists: &[(&[K], f64)],
    k: f64,
    insertion_order: impl Fn(&K) -> usize,
) -> Vec<(K, f64)> {
    let non_empty: Vec<&(&[K], f64)> = lists.iter().filter(|(l, _)| !l.is_empty()).collect();
    if let [(only, w)] = non_empty.as_slice() {
        let mut seen = HashSet::new();
        return only
            .iter()
            .filter(|key| seen.insert((*key).clone()))
            .enumerate()
            .map(|(i, key)| (key.clone(), w / (k + (i + 1) as f64)))
            .collect();
    }
    let mut scores: HashMap<K, f64> = HashMap::new();
    for (list, w) in &non_empty {
        let mut seen = HashSet::new();
        for (i, key) in list
            .iter()
            .filter(|key| seen.insert((*key).clone()))
            .enumerate()
        {
            *scores.entry(key.clone()).or_insert(0.0) += w / (k + (i + 1) as f64);
        }
    }
    let mut out: Vec<(K, f64)> = scores.into_iter().collect();
    out.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| insertion_order(&a.0).cmp(&insertion_order(&b.0)))
    });
    out
}

/// How a retrieval ran (the `retrieval_path` diagnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrievalPath {
    /// Token recall and embeddings fused by RRF.
    HybridRrf,
    /// Token recall only (no embedder configured).
    TokenRecall,
    /// Token recall because the embedding call failed.
    TokenRecallAfterEmbedError,
    /// Both stores empty: nothing searched, no embedding call.
    SkippedEmptyStore,
}

impl RetrievalPath {
    /// The diagnostic spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RetrievalPath::HybridRrf => "hybrid_rrf",
            RetrievalPath::TokenRecall => "token_recall",
            RetrievalPath::TokenRecallAfterEmbedError => "token_recall_after_embed_error",
            RetrievalPath::SkippedEmptyStore => "skipped_empty_store",
        }
    }
}

/// Which lists a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Token recall only.
    Token,
    /// Embedding cosine only.
    Embedding,
    /// Both, fused by RRF.
    Hybrid,
}

struct IndexedDoc {
    /// Distinct retrieval terms of the primary text (short-record path).
    primary_len: u32,
    /// Field-weighted term count (BM25 length normalisation).
    weighted_len: f32,
}

/// One posting: a record holding the term.
#[derive(Clone, Copy)]
struct Posting {
    doc: u32,
    /// Field-weighted term frequency: primary-text occurrences count 1,
    /// occurrences in the record's other fields [`SECONDARY_FIELD_WEIGHT`].
    weighted_tf: f32,
    /// Whether the term occurs in the primary text.
    in_primary: bool,
}

/// BM25 term-frequency saturation.
pub const BM25_K1: f64 = 1.2;
/// BM25 length normalisation.
pub const BM25_B: f64 = 0.75;
/// Weight of a term occurrence outside the primary text (BM25F): a fact's
/// object and category, an arc's themes, a record's context and date count
/// half as much as the person's own words.
pub const SECONDARY_FIELD_WEIGHT: f32 = 0.5;

/// A prepared search index over one namespace's records (term postings and
/// unit-normalised vectors in one flat buffer), so a query costs postings
/// lookups plus one dot product per embedded record.
///
/// Lexical search keeps the original's *hit rule* (token recall ≥ 0.33 of
/// the query's meaningful terms over the whole record, or the short-record
/// path) and ranks the hits by BM25F over stemmed terms
/// ([`crate::text::search_terms`]): rare, specific words ("pottery",
/// "adoption") outrank words found in every record (a name, "feel"), and
/// the primary text outweighs the other fields.
pub struct MemoryIndex {
    docs: Vec<IndexedDoc>,
    postings: HashMap<String, Vec<Posting>>,
    avg_weighted_len: f64,
    /// Unit vectors of the embedded records, `dim` floats each, in order.
    vectors: Vec<f32>,
    /// The same vectors quantized to `i8` (a quarter of the bytes), scanned
    /// first; see [`MemoryIndex::dense_ranking`].
    codes: Vec<i8>,
    /// Per quantized vector: its scale and the L1 norm of its dequantized
    /// form, for the error bound.
    code_meta: Vec<(f32, f32)>,
    /// The record each vector belongs to.
    vector_docs: Vec<u32>,
    model: Option<(String, usize)>,
    dense_weight: f64,
}

/// One search hit: the record's position in the indexed slice and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Insertion position of the record.
    pub index: usize,
    /// RRF score (or the single list's score when only one list ran).
    pub score: f64,
}

/// Slack added to the quantization error bound for the rounding of the
/// float sums themselves (far larger than it needs to be).
const QUANT_SLACK: f32 = 1e-3;

/// Quantizes `v` to `i8` with one scale (`max |v_i| / 127`, rounding to
/// nearest): returns the codes, the scale and the L1 norm of the dequantized
/// vector. Each component's error is at most half the scale.
fn quantize(v: &[f32]) -> (Vec<i8>, f32, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        return (vec![0; v.len()], 0.0, 0.0);
    }
    let scale = max / 127.0;
    let codes: Vec<i8> = v
        .iter()
        // In range by construction: |x / scale| <= 127.
        .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    let l1 = codes.iter().map(|&c| f32::from(c).abs()).sum::<f32>() * scale;
    (codes, scale, l1)
}

/// Integer dot product of two code vectors with 16 independent accumulators
/// (lets the compiler vectorize; |sum| <= dim * 127² fits an `i32` for any
/// embedding size in use).
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: i32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += i32::from(i16::from(x[i]) * i16::from(y[i]));
        }
    }
    acc.iter().sum::<i32>() + tail
}

/// Dot product with 8 independent accumulators (lets the compiler vectorize).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

fn unit(v: &[f32]) -> Option<Vec<f32>> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n == 0.0 || !n.is_finite() {
        None
    } else {
        Some(v.iter().map(|x| x / n).collect())
    }
}

/// Keeps the best `limit` items by `cmp` (best first), sorting only those.
fn top_sorted<T>(mut items: Vec<T>, limit: usize, cmp: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    if limit == 0 {
        return Vec::new();
    }
    if items.len() > limit {
        items.select_nth_unstable_by(limit - 1, &cmp);
        items.truncate(limit);
    }
    items.sort_by(cmp);
    items
}

fn counts(terms: Vec<String>) -> HashMap<String, u32> {
    let mut tf: HashMap<String, u32> = HashMap::new();
    for t in terms {
        *tf.entry(t).or_default() += 1;
    }
    tf
}

impl MemoryIndex {
    /// Indexes `(value, embedding)` pairs in insertion order. Vectors of
    /// another model or dimension than `model` (id, dim) are ignored.
    pub fn build<'a>(
        items: impl IntoIterator<Item = (&'a Value, Option<&'a StoredEmbedding>)>,
        model: Option<(&str, usize)>,
    ) -> Self {
        let mut docs = Vec::new();
        let mut postings: HashMap<String, Vec<Posting>> = HashMap::new();
        let mut vectors = Vec::new();
        let mut codes = Vec::new();
        let mut code_meta = Vec::new();
        let mut vector_docs = Vec::new();
        let mut total_len = 0f64;
        for (i, (value, emb)) in items.into_iter().enumerate() {
            let doc = u32::try_from(i).unwrap_or(u32::MAX);
            // The haystack holds the primary text once, plus every other field.
            let hay = counts(search_terms(&haystack(value)));
            let primary = counts(primary_text(value).map(search_terms).unwrap_or_default());
            let mut weighted_len = 0f32;
            for (term, n) in hay {
                let p = primary.get(&term).copied().unwrap_or(0).min(n);
                let weighted_tf = p as f32 + SECONDARY_FIELD_WEIGHT * (n - p) as f32;
                weighted_len += weighted_tf;
                postings.entry(term).or_default().push(Posting {
                    doc,
                    weighted_tf,
                    in_primary: p > 0,
                });
            }
            total_len += f64::from(weighted_len);
            if let (Some(e), Some((m, d))) = (emb, model)
                && e.model == m
                && e.dim == d
                && e.vector.len() == d
                && let Some(u) = unit(&e.vector)
            {
                let (c, scale, l1) = quantize(&u);
                codes.extend_from_slice(&c);
                code_meta.push((scale, l1));
                vectors.extend_from_slice(&u);
                vector_docs.push(doc);
            }
            docs.push(IndexedDoc {
                primary_len: u32::try_from(primary.len()).unwrap_or(u32::MAX),
                weighted_len,
            });
        }
        let avg_weighted_len = if docs.is_empty() {
            0.0
        } else {
            total_len / docs.len() as f64
        };
        MemoryIndex {
            docs,
            postings,
            avg_weighted_len,
            vectors,
            codes,
            code_meta,
            vector_docs,
            model: model.map(|(m, d)| (m.to_owned(), d)),
            dense_weight: 1.0,
        }
    }

    /// Sets the RRF weight of the dense list (the lexical list weighs 1);
    /// see [`Embedder::rrf_weight`].
    #[must_use]
    pub fn with_dense_weight(mut self, weight: f64) -> Self {
        self.dense_weight = if weight.is_finite() && weight > 0.0 {
            weight
        } else {
            1.0
        };
        self
    }

    /// Number of indexed records.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Lexical hits (the token-recall hit rule), ranked by BM25F over
    /// stemmed terms, best first (ties by insertion order), at most `limit`.
    /// The score is the BM25F value.
    pub fn token_ranking(&self, query: &str, limit: usize) -> Vec<(usize, f64)> {
        let q: HashSet<String> = search_terms(query).into_iter().collect();
        if q.is_empty() || self.docs.is_empty() {
            return Vec::new();
        }
        let n = self.docs.len() as f64;
        let avg = self.avg_weighted_len.max(1.0);
        // Per record: (query terms found, found in the primary text, BM25F).
        let mut acc = vec![(0u32, 0u32, 0f64); self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        for t in &q {
            let Some(list) = self.postings.get(t) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for p in list {
                let len = f64::from(self.docs[p.doc as usize].weighted_len);
                let tf = f64::from(p.weighted_tf);
                let part = idf * tf * (BM25_K1 + 1.0)
                    / (tf + BM25_K1 * (1.0 - BM25_B + BM25_B * len / avg));
                let e = &mut acc[p.doc as usize];
                if e.0 == 0 {
                    touched.push(p.doc);
                }
                e.0 += 1;
                e.1 += u32::from(p.in_primary);
                e.2 += part;
            }
        }
        let hits: Vec<(usize, f64)> = touched
            .into_iter()
            .filter_map(|d| {
                let (found, shared, bm25) = acc[d as usize];
                let primary_len = self.docs[d as usize].primary_len as usize;
                score_from_counts(q.len(), found as usize, shared as usize, primary_len)
                    .hit
                    .then_some((d as usize, bm25))
            })
            .collect();
        top_sorted(hits, limit, |a, b| {
            b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
        })
    }

    /// Dense hits (cosine ≥ 0.5), best first, at most `limit`. Empty when
    /// the query vector does not match the index's model dimension.
    pub fn dense_ranking(&self, query_vector: &[f32], limit: usize) -> Vec<(usize, f64)> {
        let Some((_, dim)) = &self.model else {
            return Vec::new();
        };
        if query_vector.len() != *dim || *dim == 0 {
            return Vec::new();
        }
        let Some(q) = unit(query_vector) else {
            return Vec::new();
        };
        // Scan the i8 codes (a quarter of the memory traffic of the floats),
        // then compute the exact cosine only where the approximate one plus
        // its worst-case quantization error could reach the threshold. With
        // u = s_u·c_u + e_u and q = s_q·c_q + e_q (|e_i| ≤ s/2):
        // |u·q − s_u·s_q·(c_u·c_q)| ≤ s_q/2·‖s_u·c_u‖₁ + s_u/2·‖s_q·c_q‖₁ + d·s_u·s_q/4.
        // So the kept set and the scores are exactly those of a float scan.
        let dim = *dim;
        let (q_codes, q_scale, q_l1) = quantize(&q);
        let quarter_dim = dim as f32 / 4.0;
        let mut hits: Vec<(usize, f32)> = Vec::new();
        for (k, (code, &(scale, l1))) in self
            .codes
            .chunks_exact(dim)
            .zip(&self.code_meta)
            .enumerate()
        {
            let approx = scale * q_scale * dot_i8(code, &q_codes) as f32;
            let bound = 0.5 * q_scale * l1 + 0.5 * scale * q_l1 + quarter_dim * scale * q_scale;
            if approx + bound + QUANT_SLACK < COSINE_THRESHOLD {
                continue;
            }
            let c = dot(&self.vectors[k * dim..(k + 1) * dim], &q);
            if c >= COSINE_THRESHOLD {
                hits.push((self.vector_docs[k] as usize, c));
            }
        }
        top_sorted(hits, limit, |a, b| {
            b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
        })
        .into_iter()
        .map(|(i, c)| (i, f64::from(c)))
        .collect()
    }

    /// Runs the chosen lists (each cut to `limit`) and fuses them with RRF (k=60).
    pub fn search(
        &self,
        query: &str,
        query_vector: Option<&[f32]>,
        mode: SearchMode,
        limit: usize,
    ) -> Vec<Hit> {
        self.search_pool(query, query_vector, mode, limit, limit)
    }

    /// Like [`MemoryIndex::search`], but each list keeps `pool` candidates
    /// before fusion and the fused result is cut to `limit`.
    pub fn search_pool(
        &self,
        query: &str,
        query_vector: Option<&[f32]>,
        mode: SearchMode,
        pool: usize,
        limit: usize,
    ) -> Vec<Hit> {
        let token = if mode == SearchMode::Embedding {
            Vec::new()
        } else {
            self.token_ranking(query, pool)
        };
        let dense = match (mode, query_vector) {
            (SearchMode::Token, _) | (_, None) => Vec::new(),
            (_, Some(v)) => self.dense_ranking(v, pool),
        };
        let token: Vec<usize> = token.into_iter().map(|(i, _)| i).collect();
        let dense: Vec<usize> = dense.into_iter().map(|(i, _)| i).collect();
        let lists = [
            (token.as_slice(), 1.0),
            (dense.as_slice(), self.dense_weight),
        ];
        rrf_fuse_weighted(&lists, RRF_K, |i| *i)
            .into_iter()
            .take(limit)
            .map(|(index, score)| Hit { index, score })
            .collect()
    }
}

/// One retrieved memory, ready for the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkingMemoryEntry {
    /// Layer (semantic or episodic).
    pub kind: MemoryKind,
    /// Record key.
    pub key: String,
    /// The record's primary text (evidence quote or arc summary).
    pub text: String,
    /// Fusion score (0 for a catch-up that did not match the query).
    pub score: f64,
    /// True for the first-turn "last time we talked" arc.
    pub is_catch_up: bool,
    /// The full typed record as JSON.
    pub value: Value,
}

/// What retrieval hands to the specialist for one turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TurnMemory {
    /// Semantic then episodic entries (catch-up arc first among episodic).
    pub working_memory: Vec<WorkingMemoryEntry>,
    /// Active procedural rules, always applied.
    pub procedural_rules: Vec<String>,
    /// Whether past sessions may be brought up unprompted.
    pub proactive_recall_enabled: bool,
    /// A one-line human-readable summary of what was retrieved (no content).
    pub summary: String,
    /// Retrieval diagnostics.
    pub diagnostics: Diagnostics,
}

/// One retrieval request.
#[derive(Debug, Clone)]
pub struct RetrievalRequest<'a> {
    /// Namespace owner.
    pub owner_id: &'a str,
    /// The user's message.
    pub query: &'a str,
    /// True on the session's first turn (transcript length 1): adds the catch-up arc.
    pub first_turn_of_session: bool,
    /// The current time (arc age filter).
    pub now: DateTime<Utc>,
}

/// A retrieval failure (the store failed; embedding failures degrade instead).
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// The store failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Semantic + episodic search results before the procedural profile.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerHits {
    /// Semantic entries (active facts only).
    pub semantic: Vec<WorkingMemoryEntry>,
    /// Episodic entries (arcs ≤30 days old; catch-up first when requested).
    pub episodic: Vec<WorkingMemoryEntry>,
    /// How the search ran.
    pub path: RetrievalPath,
    /// Semantic store size.
    pub semantic_store_size: usize,
    /// Episodic store size.
    pub episodic_store_size: usize,
    /// Whether the semantic index came from the cache.
    pub semantic_index_cache: CacheOutcome,
}

fn entry(kind: MemoryKind, r: &MemoryRecord, score: f64, is_catch_up: bool) -> WorkingMemoryEntry {
    WorkingMemoryEntry {
        kind,
        key: r.id.clone(),
        text: primary_text(&r.value).unwrap_or_default().to_owned(),
        score,
        is_catch_up,
        value: r.value.clone(),
    }
}

/// The records of one semantic namespace with their prepared index.
pub struct IndexedLayer {
    /// The records, in insertion order (hit indexes point here).
    pub records: Vec<MemoryRecord>,
    /// The index over them.
    pub index: MemoryIndex,
}

impl IndexedLayer {
    fn build(records: Vec<MemoryRecord>, model: Option<(&str, usize)>, dense_weight: f64) -> Self {
        let index = MemoryIndex::build(
            records.iter().map(|r| (&r.value, r.embedding.as_ref())),
            model,
        )
        .with_dense_weight(dense_weight);
        IndexedLayer { records, index }
    }
}

/// How the semantic index of a turn was obtained (the
/// `semantic_index_cache` diagnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// The cached index matched the namespace revision.
    Hit,
    /// Built from the store and cached.
    Miss,
    /// Built from the store, not cached (no cache, or no revision).
    Off,
}

impl CacheOutcome {
    /// The diagnostic spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Off => "off",
        }
    }
}

struct CacheEntry {
    revision: u64,
    model: Option<(String, usize)>,
    dense_weight: f64,
    layer: Arc<IndexedLayer>,
    last_used: u64,
}

#[derive(Default)]
struct CacheInner {
    entries: HashMap<String, CacheEntry>,
    records: usize,
    tick: u64,
}

/// Prepared semantic-layer indexes per owner, kept between turns so a turn
/// costs one revision read plus the search instead of loading and indexing
/// every fact. An entry is used only while the namespace revision
/// ([`MemoryBackend::revision`]) is unchanged, so any write or deletion, by
/// any process sharing the store, is seen on the next turn. Bounded by a
/// total record count; the least recently used owners go first.
pub struct IndexCache {
    inner: Mutex<CacheInner>,
    max_records: usize,
}

/// Default bound of [`IndexCache`]: records held across all owners.
pub const INDEX_CACHE_MAX_RECORDS: usize = 200_000;

/// Namespaces at least this large are indexed on the blocking pool.
const BLOCKING_BUILD_MIN_RECORDS: usize = 256;

impl Default for IndexCache {
    fn default() -> Self {
        Self::new(INDEX_CACHE_MAX_RECORDS)
    }
}

impl IndexCache {
    /// A cache holding at most `max_records` records over all owners.
    pub fn new(max_records: usize) -> Self {
        IndexCache {
            inner: Mutex::new(CacheInner::default()),
            max_records,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // Entries are replaced whole; a poisoned lock holds no half-written entry.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Owners currently cached.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops an owner's entry (e.g. after a bulk clear).
    pub fn invalidate(&self, owner_id: &str) {
        let mut inner = self.lock();
        if let Some(e) = inner.entries.remove(owner_id) {
            inner.records -= e.layer.records.len();
        }
    }

    fn get(
        &self,
        owner_id: &str,
        revision: u64,
        model: Option<(&str, usize)>,
        dense_weight: f64,
    ) -> Option<Arc<IndexedLayer>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.entries.get_mut(owner_id)?;
        let same_model = e.model.as_ref().map(|(m, d)| (m.as_str(), *d)) == model;
        if e.revision != revision || !same_model || e.dense_weight != dense_weight {
            return None;
        }
        e.last_used = tick;
        Some(e.layer.clone())
    }

    fn insert(
        &self,
        owner_id: &str,
        revision: u64,
        model: Option<(&str, usize)>,
        dense_weight: f64,
        layer: Arc<IndexedLayer>,
    ) {
        let size = layer.records.len();
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(owner_id) {
            inner.records -= old.layer.records.len();
        }
        if size > self.max_records {
            return;
        }
        while inner.records + size > self.max_records {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.records -= e.layer.records.len();
            }
        }
        inner.tick += 1;
        let last_used = inner.tick;
        inner.records += size;
        inner.entries.insert(
            owner_id.to_owned(),
            CacheEntry {
                revision,
                model: model.map(|(m, d)| (m.to_owned(), d)),
                dense_weight,
                layer,
                last_used,
            },
        );
    }
}

async fn build_layer(
    records: Vec<MemoryRecord>,
    model: Option<(&str, usize)>,
    dense_weight: f64,
) -> IndexedLayer {
    if records.len() < BLOCKING_BUILD_MIN_RECORDS {
        return IndexedLayer::build(records, model, dense_weight);
    }
    let owned = model.map(|(m, d)| (m.to_owned(), d));
    tokio::task::spawn_blocking(move || {
        IndexedLayer::build(
            records,
            owned.as_ref().map(|(m, d)| (m.as_str(), *d)),
            dense_weight,
        )
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "semantic index build task failed; searching no facts this turn");
        IndexedLayer::build(Vec::new(), None, 1.0)
    })
}

/// The semantic layer of an owner, from the cache when it is current.
async fn semantic_layer(
    backend: &dyn MemoryBackend,
    cache: Option<&IndexCache>,
    owner_id: &str,
    model: Option<(&str, usize)>,
    dense_weight: f64,
) -> Result<(Arc<IndexedLayer>, CacheOutcome), BackendError> {
    // The revision is read before the records: a write in between makes
    // the cached entry look stale next time, never current when it is not.
    let revision = match cache {
        Some(_) => backend.revision(owner_id, MemoryKind::Semantic).await?,
        None => None,
    };
    let (Some(cache), Some(revision)) = (cache, revision) else {
        // No cache, or a backend that keeps no revisions: index afresh.
        let records = backend.list(owner_id, MemoryKind::Semantic).await?;
        let layer = build_layer(records, model, dense_weight).await;
        return Ok((Arc::new(layer), CacheOutcome::Off));
    };
    if let Some(layer) = cache.get(owner_id, revision, model, dense_weight) {
        return Ok((layer, CacheOutcome::Hit));
    }
    let records = backend.list(owner_id, MemoryKind::Semantic).await?;
    let layer = Arc::new(build_layer(records, model, dense_weight).await);
    cache.insert(owner_id, revision, model, dense_weight, layer.clone());
    Ok((layer, CacheOutcome::Miss))
}

/// Searches the semantic and episodic layers of an owner (no index cache).
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails.
pub async fn search_layers(
    backend: &dyn MemoryBackend,
    embedder: Option<&dyn Embedder>,
    req: &RetrievalRequest<'_>,
    semantic_keep: usize,
    episodic_keep: usize,
) -> Result<LayerHits, RetrievalError> {
    search_layers_cached(backend, embedder, None, req, semantic_keep, episodic_keep).await
}

/// Searches the semantic and episodic layers of an owner.
///
/// `semantic_keep` bounds the kept active facts, `episodic_keep` the arcs.
/// Store loads run in parallel; the semantic index comes from `cache` when
/// it is current; the query is embedded at most once, and not at all when
/// both stores are empty.
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails.
pub async fn search_layers_cached(
    backend: &dyn MemoryBackend,
    embedder: Option<&dyn Embedder>,
    cache: Option<&IndexCache>,
    req: &RetrievalRequest<'_>,
    semantic_keep: usize,
    episodic_keep: usize,
) -> Result<LayerHits, RetrievalError> {
    let model = embedder.map(|e| (e.model_id(), e.dimension()));
    let dense_weight = embedder.map_or(1.0, |e| e.rrf_weight());
    let (semantic, episodic) = tokio::join!(
        semantic_layer(backend, cache, req.owner_id, model, dense_weight),
        backend.list(req.owner_id, MemoryKind::Episodic)
    );
    let ((semantic, cache_outcome), episodic) = (semantic?, episodic?);
    let (semantic_store_size, episodic_store_size) = (semantic.records.len(), episodic.len());
    if semantic.records.is_empty() && episodic.is_empty() {
        return Ok(LayerHits {
            semantic: Vec::new(),
            episodic: Vec::new(),
            path: RetrievalPath::SkippedEmptyStore,
            semantic_store_size,
            episodic_store_size,
            semantic_index_cache: cache_outcome,
        });
    }

    let (query_vector, path) = match embedder {
        None => (None, RetrievalPath::TokenRecall),
        Some(e) => match e.embed(&[req.query.to_owned()]).await {
            Ok(mut v) if v.len() == 1 => (v.pop(), RetrievalPath::HybridRrf),
            Ok(_) => {
                tracing::warn!("embedder returned the wrong number of vectors; using token recall");
                (None, RetrievalPath::TokenRecallAfterEmbedError)
            }
            Err(err) => {
                tracing::warn!(error = %err, "query embedding failed; using token recall");
                (None, RetrievalPath::TokenRecallAfterEmbedError)
            }
        },
    };
    let mode = if query_vector.is_some() {
        SearchMode::Hybrid
    } else {
        SearchMode::Token
    };

    // Semantic: search 20, keep the first `semantic_keep` active facts.
    let sem_hits = semantic.index.search(
        req.query,
        query_vector.as_deref(),
        mode,
        SEMANTIC_SEARCH_LIMIT,
    );
    let semantic_entries: Vec<WorkingMemoryEntry> = sem_hits
        .into_iter()
        .filter(|h| {
            semantic.records[h.index]
                .as_fact()
                .is_ok_and(|f: SemanticFact| f.is_active())
        })
        .take(semantic_keep)
        .map(|h| {
            entry(
                MemoryKind::Semantic,
                &semantic.records[h.index],
                h.score,
                false,
            )
        })
        .collect();

    // Episodic: only visible arcs at most 30 days old are searched.
    let cutoff = req.now - Duration::days(EPISODIC_MAX_AGE_DAYS);
    let arcs: Vec<(&MemoryRecord, SessionArc)> = episodic
        .iter()
        .filter_map(|r| r.as_arc().ok().map(|a| (r, a)))
        .filter(|(_, a)| a.user_visible)
        .collect();
    let recent: Vec<&(&MemoryRecord, SessionArc)> =
        arcs.iter().filter(|(_, a)| a.ended_at >= cutoff).collect();
    let epi_index = MemoryIndex::build(
        recent.iter().map(|(r, _)| (&r.value, r.embedding.as_ref())),
        model,
    )
    .with_dense_weight(dense_weight);
    let epi_hits = epi_index.search(req.query, query_vector.as_deref(), mode, episodic_keep);
    let mut episodic_entries: Vec<WorkingMemoryEntry> = epi_hits
        .iter()
        .map(|h| entry(MemoryKind::Episodic, recent[h.index].0, h.score, false))
        .collect();

    if req.first_turn_of_session {
        let latest = arcs
            .iter()
            .enumerate()
            .max_by(|(ia, (_, a)), (ib, (_, b))| {
                a.ended_at
                    .cmp(&b.ended_at)
                    .then_with(|| a.created_at.cmp(&b.created_at))
                    .then_with(|| ia.cmp(ib))
            });
        if let Some((_, (record, arc))) = latest {
            let same = |e: &WorkingMemoryEntry| {
                e.value.get("summary").and_then(Value::as_str) == Some(arc.summary.as_str())
                    && e.value.get("primary_themes")
                        == serde_json::to_value(&arc.primary_themes).ok().as_ref()
            };
            match episodic_entries.iter().position(same) {
                Some(pos) => {
                    let mut e = episodic_entries.remove(pos);
                    e.is_catch_up = true;
                    episodic_entries.insert(0, e);
                }
                None => episodic_entries.insert(0, entry(MemoryKind::Episodic, record, 0.0, true)),
            }
        }
    }

    Ok(LayerHits {
        semantic: semantic_entries,
        episodic: episodic_entries,
        path,
        semantic_store_size,
        episodic_store_size,
        semantic_index_cache: cache_outcome,
    })
}

/// The per-turn memory context: semantic and episodic search (in parallel),
/// then the procedural profile, with diagnostics.
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails. Embedding failures
/// degrade to token recall.
pub async fn retrieve(
    backend: &dyn MemoryBackend,
    embedder: Option<&dyn Embedder>,
    req: &RetrievalRequest<'_>,
) -> Result<TurnMemory, RetrievalError> {
    retrieve_cached(backend, embedder, None, req).await
}

/// [`retrieve`] with the semantic index taken from `cache` when current.
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails. Embedding failures
/// degrade to token recall.
pub async fn retrieve_cached(
    backend: &dyn MemoryBackend,
    embedder: Option<&dyn Embedder>,
    cache: Option<&IndexCache>,
    req: &RetrievalRequest<'_>,
) -> Result<TurnMemory, RetrievalError> {
    let started = Instant::now();
    let hits =
        search_layers_cached(backend, embedder, cache, req, SEMANTIC_KEEP, EPISODIC_LIMIT).await?;
    let profile = load_profile(backend, req.owner_id).await?;
    let procedural_rules: Vec<String> = profile.active_rules().map(|r| r.rule.clone()).collect();

    let mut diagnostics = Diagnostics::new();
    diagnostics.set("load_memory_ms", started.elapsed().as_secs_f64() * 1000.0);
    diagnostics.set("semantic_hits", hits.semantic.len());
    diagnostics.set("semantic_store_size", hits.semantic_store_size);
    diagnostics.set("episodic_hits", hits.episodic.len());
    diagnostics.set("episodic_store_size", hits.episodic_store_size);
    diagnostics.set("procedural_count", procedural_rules.len());
    diagnostics.set("proactive_recall", profile.proactive_recall_enabled);
    diagnostics.set("retrieval_path", hits.path.as_str());
    diagnostics.set("semantic_index_cache", hits.semantic_index_cache.as_str());

    let catch_up = hits.episodic.iter().any(|e| e.is_catch_up);
    let summary = summary_line(
        hits.semantic.len(),
        hits.episodic.len(),
        procedural_rules.len(),
        catch_up,
    );
    let mut working_memory = hits.semantic;
    working_memory.extend(hits.episodic);
    Ok(TurnMemory {
        working_memory,
        procedural_rules,
        proactive_recall_enabled: profile.proactive_recall_enabled,
        summary,
        diagnostics,
    })
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// "Recalled 2 saved facts, 1 past-session summary (catch-up) and 1 style rule."
pub fn summary_line(facts: usize, arcs: usize, rules: usize, catch_up: bool) -> String {
    if facts + arcs + rules == 0 {
        return "No saved memory was relevant to this turn.".to_owned();
    }
    format!(
        "Recalled {}, {}{} and {}.",
        plural(facts, "saved fact", "saved facts"),
        plural(arcs, "past-session summary", "past-session summaries"),
        if catch_up {
            " (including a catch-up on the last session)"
        } else {
            ""
        },
        plural(rules, "style rule", "style rules"),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;

    use super::*;
    use crate::backend::{InMemoryBackend, save_profile};
    use crate::text::meaningful_tokens;
    use crate::types::*;

    fn set(s: &str) -> HashSet<String> {
        meaningful_tokens(s).into_iter().collect()
    }

    #[test]
    fn lexical_score_table() {
        // (query, haystack, primary, hit)
        let cases = [
            (
                "worried about my job interview",
                "I am worried about the job",
                "I am worried about the job",
                true,
            ),
            ("job", "job stress", "job stress", true),
            (
                "sister birthday party plans",
                "Sarah sister",
                "Sarah sister",
                false,
            ),
            // short-record path: 2 shared tokens covering ≥0.4 of a short primary text.
            (
                "running helps calm anxiety before exams and meetings at work and school daily",
                "running calm",
                "running calm",
                true,
            ),
            ("", "anything", "anything", false),
            ("the and of", "the and of", "the and of", false),
        ];
        for (q, h, p, hit) in cases {
            let s = lexical_score(&set(q), &set(h), &set(p));
            assert_eq!(s.hit, hit, "{q} vs {h}: {s:?}");
            assert!((0.0..=1.0).contains(&s.recall));
        }
    }

    #[test]
    fn primary_text_order() {
        let v = serde_json::json!({"summary": "", "text": "t", "content": "c"});
        assert_eq!(primary_text(&v), Some("t"));
        let v = serde_json::json!({"evidence_quote": "q", "summary": "s"});
        assert_eq!(primary_text(&v), Some("q"));
        assert_eq!(primary_text(&serde_json::json!({"x": 1})), None);
        assert!(haystack(&serde_json::json!({"a": "x", "b": ["y", {"c": "z"}]})).contains('z'));
    }

    #[test]
    fn cosine_table() {
        assert_eq!(cosine(&[1.0, 0.0], &[1.0, 0.0]), Some(1.0));
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), Some(0.0));
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
    }

    #[test]
    fn rrf_table() {
        let order = |k: &&str| "abcdef".find(*k).unwrap_or(99);
        // b is 2nd in one list and 1st in the other: it wins.
        let out = rrf_fuse(&[vec!["a", "b"], vec!["b", "c"]], 60.0, order);
        assert_eq!(
            out.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec!["b", "a", "c"]
        );
        assert!((out[0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        // a and c tie (both rank 1 in one list): insertion order decides.
        let out = rrf_fuse(&[vec!["c"], vec!["a"]], 60.0, order);
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec!["a", "c"]);
        // One empty list: the other, as is.
        let out = rrf_fuse(&[vec!["d", "a"], vec![]], 60.0, order);
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec!["d", "a"]);
        assert!(rrf_fuse::<&str>(&[vec![], vec![]], 60.0, order).is_empty());
    }

    #[test]
    fn weighted_rrf_table() {
        let order = |k: &&str| "abcdef".find(*k).unwrap_or(99);
        let lex = ["a", "b", "c"];
        let dense = ["c", "d"];
        // Equal weights: c (3rd + 1st) beats a (1st only).
        let eq = rrf_fuse_weighted(&[(&lex[..], 1.0), (&dense[..], 1.0)], 60.0, order);
        assert_eq!(eq[0].0, "c");
        assert_eq!(
            eq,
            rrf_fuse(&[lex.to_vec(), dense.to_vec()], 60.0, order),
            "weights of 1 are plain RRF"
        );
        // Half-weight dense list: the lexical top hit keeps its place,
        // the dense-only hit comes last.
        let half = rrf_fuse_weighted(&[(&lex[..], 1.0), (&dense[..], 0.5)], 60.0, order);
        assert_eq!(
            half.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec!["c", "a", "b", "d"]
        );
        assert!((half[0].1 - (1.0 / 63.0 + 0.5 / 61.0)).abs() < 1e-12);
        // One list only: that list in order, whatever its weight.
        let only = rrf_fuse_weighted(&[(&[][..], 1.0), (&dense[..], 0.5)], 60.0, order);
        assert_eq!(only.iter().map(|x| x.0).collect::<Vec<_>>(), vec!["c", "d"]);
    }

    #[test]
    fn bm25_ranks_rare_terms_and_the_primary_text_first() {
        let records = [
            // 0: shares only the common word "work".
            serde_json::json!({"evidence_quote": "Work was long today", "object": "work"}),
            // 1: the rare word in a secondary field only.
            serde_json::json!({"evidence_quote": "I started something new at work", "object": "pottery"}),
            // 2: the rare word in the person's own words.
            serde_json::json!({"evidence_quote": "Pottery class after work calms me", "object": "class"}),
            serde_json::json!({"evidence_quote": "Work stress again", "object": "work"}),
            serde_json::json!({"evidence_quote": "My boss at work", "object": "boss"}),
        ];
        let idx = MemoryIndex::build(records.iter().map(|v| (v, None)), None);
        let ranked: Vec<usize> = idx
            .token_ranking("pottery after work", 10)
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(ranked[..2], [2, 1], "{ranked:?}");
        // Stemming: another form of the word still meets the memory.
        let ranked = idx.token_ranking("potteries", 10);
        assert_eq!(ranked.first().map(|x| x.0), Some(2));
        // The hit rule still applies: one common word of four is no hit.
        assert!(
            idx.token_ranking("work holiday beach sunshine", 10)
                .is_empty()
        );
    }

    proptest! {
        #[test]
        fn rrf_is_symmetric_and_stable(a in proptest::collection::vec(0usize..30, 0..15), b in proptest::collection::vec(0usize..30, 0..15)) {
            let ab = rrf_fuse(&[a.clone(), b.clone()], RRF_K, |k| *k);
            let ba = rrf_fuse(&[b.clone(), a.clone()], RRF_K, |k| *k);
            prop_assert_eq!(&ab, &ba);
            prop_assert_eq!(&ab, &rrf_fuse(&[a.clone(), b.clone()], RRF_K, |k| *k));
            let ids: HashSet<usize> = ab.iter().map(|x| x.0).collect();
            prop_assert_eq!(ids.len(), ab.len());
            let expected: HashSet<usize> = a.iter().chain(b.iter()).copied().collect();
            prop_assert_eq!(ids, expected);
            for w in ab.windows(2) {
                prop_assert!(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0));
            }
        }

        #[test]
        fn token_recall_is_a_share(q in "[a-z ]{0,40}", h in "[a-z ]{0,60}") {
            let s = lexical_score(&set(&q), &set(&h), &set(&h));
            prop_assert!((0.0..=1.0).contains(&s.recall));
            prop_assert!((0.0..=1.0).contains(&s.primary_coverage));
        }
    }

    /// A deterministic fake embedder: bag of hashed meaningful tokens.
    struct FakeEmbedder {
        calls: AtomicUsize,
        fail: bool,
    }

    const FAKE_DIM: usize = 64;

    fn fake_vec(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; FAKE_DIM];
        for t in meaningful_tokens(text) {
            let h = t
                .bytes()
                .fold(7usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize));
            v[h % FAKE_DIM] += 1.0;
        }
        v
    }

    #[async_trait]
    impl Embedder for FakeEmbedder {
        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.fail {
                return Err(EmbedError("provider down".into()));
            }
            Ok(texts.iter().map(|t| fake_vec(t)).collect())
        }
        fn model_id(&self) -> &str {
            "fake"
        }
        fn dimension(&self) -> usize {
            FAKE_DIM
        }
    }

    fn fact(q: &str) -> SemanticFact {
        SemanticFact::new(
            NewFact {
                category: FactCategory::Context,
                subject: EntityRef::user(),
                predicate: Predicate::Experienced,
                object: EntityRef::new(EntityType::Event, q).unwrap(),
                evidence_quote: q.into(),
                confidence: 0.9,
                source_session_id: None,
                source_turn_index: None,
                write_timing: WriteTiming::Promotion,
                write_reason: "test".into(),
            },
            Utc::now(),
        )
        .unwrap()
    }

    fn arc(summary: &str, themes: &[&str], days_ago: i64) -> SessionArc {
        let end = Utc::now() - Duration::days(days_ago);
        SessionArc::new(
            NewSessionArc {
                session_id: format!("s-{days_ago}"),
                started_at: end - Duration::minutes(5),
                ended_at: end,
                turn_count: 3,
                primary_themes: themes.iter().map(|s| s.to_string()).collect(),
                summary: summary.into(),
                mood_arc: MoodArc::default(),
                open_loops: vec![],
                resolved_threads: vec![],
                approach_used: None,
                approach_context: None,
                crisis_level_max: 0,
            },
            end,
        )
        .unwrap()
    }

    async fn put_fact(b: &InMemoryBackend, f: &SemanticFact) {
        let e = StoredEmbedding {
            vector: fake_vec(&f.evidence_quote),
            model: "fake".into(),
            dim: FAKE_DIM,
        };
        b.put(MemoryRecord::from_fact("u", f, Some(e)))
            .await
            .unwrap();
    }

    fn req(q: &str, first: bool) -> RetrievalRequest<'_> {
        RetrievalRequest {
            owner_id: "u",
            query: q,
            first_turn_of_session: first,
            now: Utc::now(),
        }
    }

    #[tokio::test]
    async fn empty_store_skips_without_embedding() {
        let b = InMemoryBackend::new();
        let e = FakeEmbedder {
            calls: AtomicUsize::new(0),
            fail: false,
        };
        let m = retrieve(&b, Some(&e), &req("anything at all", true))
            .await
            .unwrap();
        assert_eq!(
            m.diagnostics.get_str("retrieval_path"),
            Some("skipped_empty_store")
        );
        assert_eq!(e.calls.load(Ordering::SeqCst), 0);
        assert!(m.working_memory.is_empty());
        assert!(!m.proactive_recall_enabled);
    }

    #[tokio::test]
    async fn paths_and_diagnostics() {
        let b = InMemoryBackend::new();
        put_fact(&b, &fact("I get anxious before job interviews")).await;
        put_fact(&b, &fact("My sister Sarah lives in Leeds")).await;
        let ok = FakeEmbedder {
            calls: AtomicUsize::new(0),
            fail: false,
        };
        let bad = FakeEmbedder {
            calls: AtomicUsize::new(0),
            fail: true,
        };
        let cases: [(Option<&dyn Embedder>, &str); 3] = [
            (Some(&ok), "hybrid_rrf"),
            (None, "token_recall"),
            (Some(&bad), "token_recall_after_embed_error"),
        ];
        for (emb, path) in cases {
            let m = retrieve(&b, emb, &req("job interviews make me anxious", false))
                .await
                .unwrap();
            assert_eq!(m.diagnostics.get_str("retrieval_path"), Some(path));
            assert_eq!(m.working_memory.len(), 1, "{path}");
            assert!(m.working_memory[0].text.contains("interviews"));
            for key in [
                "load_memory_ms",
                "semantic_hits",
                "semantic_store_size",
                "episodic_hits",
                "episodic_store_size",
                "procedural_count",
                "proactive_recall",
            ] {
                assert!(m.diagnostics.get(key).is_some(), "{key}");
            }
            assert_eq!(
                m.diagnostics.get("semantic_store_size"),
                Some(&Value::from(2))
            );
        }
        assert_eq!(
            ok.calls.load(Ordering::SeqCst),
            1,
            "one query embedding per turn"
        );
    }

    #[tokio::test]
    async fn keeps_five_active_facts_and_skips_inactive() {
        let b = InMemoryBackend::new();
        for i in 0..8 {
            let mut f = fact(&format!("work stress deadline number {i}"));
            if i == 0 {
                f.dormant_at = Some(Utc::now());
            }
            put_fact(&b, &f).await;
        }
        let m = retrieve(&b, None, &req("work stress deadline", false))
            .await
            .unwrap();
        assert_eq!(m.working_memory.len(), SEMANTIC_KEEP);
        assert!(
            m.working_memory.iter().all(|e| !e.text.ends_with(" 0")),
            "dormant fact skipped"
        );
        // ties go to insertion order
        assert!(m.working_memory[0].text.ends_with(" 1"));
    }

    #[tokio::test]
    async fn first_turn_catch_up_without_duplicates() {
        let b = InMemoryBackend::new();
        let old = arc("Talked about exam stress and sleep", &["exams"], 3);
        let latest = arc("Talked about a fight with my brother", &["family"], 1);
        let stale = arc("Talked about exam results long ago", &["exams"], 45);
        for a in [&old, &latest, &stale] {
            b.put(MemoryRecord::from_arc("u", a, None)).await.unwrap();
        }
        // Not matching the query: catch-up is still injected, first.
        let m = retrieve(&b, None, &req("exam stress again", true))
            .await
            .unwrap();
        let epi: Vec<&WorkingMemoryEntry> = m
            .working_memory
            .iter()
            .filter(|e| e.kind == MemoryKind::Episodic)
            .collect();
        assert_eq!(epi.len(), 2);
        assert!(epi[0].is_catch_up && epi[0].text.contains("brother"));
        assert!(
            epi[1].text.contains("sleep"),
            "old arc found, stale arc (45 days) not searched"
        );
        // Matching the query: no duplicate entry.
        let m = retrieve(&b, None, &req("fight with my brother", true))
            .await
            .unwrap();
        let brother = m
            .working_memory
            .iter()
            .filter(|e| e.text.contains("brother"))
            .count();
        assert_eq!(brother, 1);
        assert!(m.working_memory.iter().any(|e| e.is_catch_up));
        // Not the first turn: no catch-up.
        let m = retrieve(&b, None, &req("exam stress", false))
            .await
            .unwrap();
        assert!(m.working_memory.iter().all(|e| !e.is_catch_up));
        assert!(m.summary.starts_with("Recalled"));
    }

    #[tokio::test]
    async fn procedural_profile_always_loaded() {
        let b = InMemoryBackend::new();
        put_fact(&b, &fact("unrelated")).await;
        let rule = ProceduralRule::new(
            "You prefer short answers.",
            vec![],
            RuleSource::ExplicitUser,
            WriteTiming::Immediate,
            "t",
            Utc::now(),
        )
        .unwrap();
        let p = ProceduralProfile {
            proactive_recall_enabled: true,
            rules: vec![rule],
            ..Default::default()
        };
        save_profile(&b, "u", &p, Utc::now()).await.unwrap();
        let m = retrieve(&b, None, &req("hello there friend", false))
            .await
            .unwrap();
        assert_eq!(
            m.procedural_rules,
            vec!["You prefer short answers.".to_owned()]
        );
        assert!(m.proactive_recall_enabled);
        assert_eq!(m.diagnostics.get_bool("proactive_recall"), Some(true));
        assert_eq!(m.diagnostics.get("procedural_count"), Some(&Value::from(1)));
    }

    /// A backend that keeps no revision (nothing may be cached).
    struct NoRevision(InMemoryBackend);

    #[async_trait]
    impl MemoryBackend for NoRevision {
        async fn list(
            &self,
            owner_id: &str,
            kind: MemoryKind,
        ) -> Result<Vec<MemoryRecord>, BackendError> {
            self.0.list(owner_id, kind).await
        }
        async fn put(&self, record: MemoryRecord) -> Result<(), BackendError> {
            self.0.put(record).await
        }
        async fn update(&self, record: MemoryRecord) -> Result<bool, BackendError> {
            self.0.update(record).await
        }
        async fn delete(
            &self,
            owner_id: &str,
            kind: MemoryKind,
            id: &str,
        ) -> Result<bool, BackendError> {
            self.0.delete(owner_id, kind, id).await
        }
    }

    async fn cached(b: &dyn MemoryBackend, cache: &IndexCache, q: &str) -> TurnMemory {
        retrieve_cached(b, None, Some(cache), &req(q, false))
            .await
            .unwrap()
    }

    fn cache_state(m: &TurnMemory) -> Option<&str> {
        m.diagnostics.get_str("semantic_index_cache")
    }

    #[tokio::test]
    async fn index_cache_follows_every_write() {
        let b = InMemoryBackend::new();
        let cache = IndexCache::default();
        let anxious = fact("I get anxious before job interviews");
        put_fact(&b, &anxious).await;
        let m = cached(&b, &cache, "job interviews").await;
        assert_eq!(cache_state(&m), Some("miss"));
        assert_eq!(m.working_memory.len(), 1);
        let m = cached(&b, &cache, "job interviews").await;
        assert_eq!(cache_state(&m), Some("hit"));
        assert_eq!(m.working_memory.len(), 1);
        // A new fact is found on the next turn.
        put_fact(&b, &fact("Another job interview went fine")).await;
        let m = cached(&b, &cache, "job interviews").await;
        assert_eq!(cache_state(&m), Some("miss"));
        assert_eq!(m.working_memory.len(), 2);
        // A deletion the person asked for is honoured on the very next turn.
        assert!(
            b.delete("u", MemoryKind::Semantic, &anxious.id)
                .await
                .unwrap()
        );
        let m = cached(&b, &cache, "job interviews").await;
        assert_eq!(cache_state(&m), Some("miss"));
        assert!(m.working_memory.iter().all(|e| e.key != anxious.id));
        // Without the cache, or without a revision, nothing is cached.
        let m = retrieve(&b, None, &req("job", false)).await.unwrap();
        assert_eq!(cache_state(&m), Some("off"));
        let plain = NoRevision(InMemoryBackend::new());
        put_fact(&plain.0, &fact("job interviews")).await;
        let fresh = IndexCache::default();
        let m = cached(&plain, &fresh, "job interviews").await;
        assert_eq!(cache_state(&m), Some("off"));
        assert!(fresh.is_empty());
    }

    #[tokio::test]
    async fn index_cache_is_per_owner_and_bounded() {
        let b = InMemoryBackend::new();
        let cache = IndexCache::new(3);
        for owner in ["a", "b"] {
            for i in 0..2 {
                let f = fact(&format!("work stress {owner} {i}"));
                b.put(MemoryRecord::from_fact(owner, &f, None))
                    .await
                    .unwrap();
            }
        }
        let ask = |owner: &'static str| {
            let b = &b;
            let cache = &cache;
            async move {
                retrieve_cached(
                    b,
                    None,
                    Some(cache),
                    &RetrievalRequest {
                        owner_id: owner,
                        query: "work stress",
                        first_turn_of_session: false,
                        now: Utc::now(),
                    },
                )
                .await
                .unwrap()
            }
        };
        let m = ask("a").await;
        assert!(m.working_memory.iter().all(|e| e.text.contains(" a ")));
        assert_eq!(cache.len(), 1);
        // b does not fit beside a (2 + 2 > 3): a, the least recently used, goes.
        let m = ask("b").await;
        assert!(m.working_memory.iter().all(|e| e.text.contains(" b ")));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache_state(&ask("b").await), Some("hit"));
        assert_eq!(cache_state(&ask("a").await), Some("miss"));
        cache.invalidate("a");
        assert!(cache.is_empty());
    }

    #[test]
    fn index_skips_vectors_of_other_models() {
        let v1 = serde_json::json!({"text": "alpha beta"});
        let v2 = serde_json::json!({"text": "gamma delta"});
        let e_ok = StoredEmbedding {
            vector: vec![1.0, 0.0],
            model: "m".into(),
            dim: 2,
        };
        let e_other = StoredEmbedding {
            vector: vec![1.0, 0.0],
            model: "other".into(),
            dim: 2,
        };
        let idx = MemoryIndex::build([(&v1, Some(&e_other)), (&v2, Some(&e_ok))], Some(("m", 2)));
        let dense = idx.dense_ranking(&[1.0, 0.1], 10);
        assert_eq!(dense.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1]);
        assert!(
            idx.dense_ranking(&[1.0, 0.0, 0.0], 10).is_empty(),
            "dimension mismatch"
        );
        assert!(
            idx.dense_ranking(&[-1.0, 0.0], 10).is_empty(),
            "below the 0.5 cosine threshold"
        );
    }

    /// The float scan the quantized prefilter must reproduce exactly.
    fn exact_dense(vectors: &[Vec<f32>], query: &[f32], limit: usize) -> Vec<(usize, f64)> {
        let q = unit(query).expect("non-zero query");
        let mut hits: Vec<(usize, f32)> = vectors
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let c = dot(&unit(v)?, &q);
                (c >= COSINE_THRESHOLD).then_some((i, c))
            })
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits.truncate(limit);
        hits.into_iter().map(|(i, c)| (i, f64::from(c))).collect()
    }

    fn dense_index(vectors: &[Vec<f32>]) -> MemoryIndex {
        let dim = vectors[0].len();
        let values: Vec<Value> = (0..vectors.len())
            .map(|i| serde_json::json!({"text": format!("record {i}")}))
            .collect();
        let embs: Vec<StoredEmbedding> = vectors
            .iter()
            .map(|v| StoredEmbedding {
                vector: v.clone(),
                model: "m".into(),
                dim,
            })
            .collect();
        MemoryIndex::build(values.iter().zip(embs.iter().map(Some)), Some(("m", dim)))
    }

    #[test]
    fn quantized_scan_keeps_exactly_the_float_results_at_the_threshold() {
        // Vectors whose cosine with the query sits just above and just
        // below 0.5, plus spiky ones (one large component: the coarsest
        // quantization) and an odd dimension (the scalar tail).
        for dim in [2usize, 7, 384] {
            let query: Vec<f32> = (0..dim).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
            let q = unit(&query).unwrap();
            let noise: Vec<f32> = {
                // A unit vector orthogonal to q (Gram–Schmidt on a fixed one).
                let base: Vec<f32> = (0..dim).map(|i| ((i * 5 + 1) % 13) as f32 - 6.0).collect();
                let along = dot(&base, &q);
                let o: Vec<f32> = base.iter().zip(&q).map(|(b, x)| b - along * x).collect();
                unit(&o).unwrap_or_else(|| vec![0.0; dim])
            };
            let mut vectors = Vec::new();
            for target in [
                0.4999f32, 0.5, 0.5001, 0.501, 0.499, 0.52, 0.48, 0.9, 0.1, -0.6,
            ] {
                let ortho = (1.0 - target * target).max(0.0).sqrt();
                vectors.push(
                    q.iter()
                        .zip(&noise)
                        .map(|(a, b)| target * a + ortho * b)
                        .collect(),
                );
            }
            let mut spike = vec![0.001f32; dim];
            spike[0] = 1.0;
            vectors.push(spike);
            vectors.push(q.iter().map(|x| -x).collect());
            let idx = dense_index(&vectors);
            assert_eq!(
                idx.dense_ranking(&query, 50),
                exact_dense(&vectors, &query, 50),
                "dim {dim}"
            );
        }
    }

    proptest! {
        #[test]
        fn quantized_scan_matches_a_float_scan(
            vectors in prop::collection::vec(prop::collection::vec(-1.0f32..1.0, 16), 1..40),
            query in prop::collection::vec(-1.0f32..1.0, 16),
            scale in prop::sample::select(vec![1e-3f32, 1.0, 1e3]),
        ) {
            prop_assume!(query.iter().any(|x| x.abs() > 1e-3));
            prop_assume!(vectors.iter().all(|v| v.iter().any(|x| x.abs() > 1e-3)));
            // Pull half the vectors towards the query so the threshold is
            // crossed often.
            let vectors: Vec<Vec<f32>> = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.iter()
                        .zip(&query)
                        .map(|(x, q)| scale * if i % 2 == 0 { 0.6 * q + 0.4 * x } else { *x })
                        .collect()
                })
                .collect();
            let idx = dense_index(&vectors);
            prop_assert_eq!(idx.dense_ranking(&query, 20), exact_dense(&vectors, &query, 20));
        }
    }
}
