//! [`MemoryIndex`]: a prepared search index over one namespace's records,
//! BM25F over stemmed term postings plus unit vectors scanned through an
//! `i8`-quantized copy, fused by RRF.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::scoring::{
    COSINE_THRESHOLD, RRF_K, haystack, primary_text, rrf_fuse_weighted, score_from_counts,
};
use crate::text::search_terms;
use opencouch_store::Embedding;

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
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
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

pub(super) fn unit(v: &[f32]) -> Option<Vec<f32>> {
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
        items: impl IntoIterator<Item = (&'a Value, Option<&'a Embedding>)>,
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
                && e.dim() == d
                && let Some(u) = unit(&e.values)
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
    /// see [`Embedder::rrf_weight`](super::Embedder::rrf_weight).
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
