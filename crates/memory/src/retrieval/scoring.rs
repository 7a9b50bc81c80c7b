//! The pure ranking math: primary text and haystack of a record, the
//! token-recall hit rule ([`lexical_score`]), [`cosine`] and Reciprocal
//! Rank Fusion ([`rrf_fuse`], [`rrf_fuse_weighted`]).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use serde_json::Value;

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

pub(super) fn score_from_counts(
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
