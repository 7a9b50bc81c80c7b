//! Unit tests of retrieval: the ranking math, the index (BM25F, the
//! quantized dense scan), the layer search, the catch-up arc and the index
//! cache.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

use std::collections::HashSet;

use async_trait::async_trait;
use chrono::{Duration, Utc};
use opencouch_store::{Embedding, MemoryBackend as InMemoryStore, MemoryStore};
use serde_json::Value;

use super::index::{dot, unit};
use super::*;
use crate::backend::{arc_record, fact_record, save_profile};
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

async fn put_fact(b: &InMemoryStore, f: &SemanticFact) {
    let e = Embedding {
        model: "fake".into(),
        values: fake_vec(&f.evidence_quote),
    };
    b.put(&fact_record("u", f, Some(e))).await.unwrap();
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
    let b = InMemoryStore::new();
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
    let b = InMemoryStore::new();
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
    let b = InMemoryStore::new();
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
    let b = InMemoryStore::new();
    let old = arc("Talked about exam stress and sleep", &["exams"], 3);
    let latest = arc("Talked about a fight with my brother", &["family"], 1);
    let stale = arc("Talked about exam results long ago", &["exams"], 45);
    for a in [&old, &latest, &stale] {
        b.put(&arc_record("u", a, None)).await.unwrap();
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
    let b = InMemoryStore::new();
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

async fn cached(b: &dyn MemoryStore, cache: &IndexCache, q: &str) -> TurnMemory {
    retrieve_cached(b, None, Some(cache), &req(q, false))
        .await
        .unwrap()
}

fn cache_state(m: &TurnMemory) -> Option<&str> {
    m.diagnostics.get_str("semantic_index_cache")
}

#[tokio::test]
async fn index_cache_follows_every_write() {
    let b = InMemoryStore::new();
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
    // Without the cache nothing is cached.
    let m = retrieve(&b, None, &req("job", false)).await.unwrap();
    assert_eq!(cache_state(&m), Some("off"));
}

#[tokio::test]
async fn index_cache_is_per_owner_and_bounded() {
    let b = InMemoryStore::new();
    let cache = IndexCache::new(3);
    for owner in ["a", "b"] {
        for i in 0..2 {
            let f = fact(&format!("work stress {owner} {i}"));
            b.put(&fact_record(owner, &f, None)).await.unwrap();
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
    let e_ok = Embedding {
        model: "m".into(),
        values: vec![1.0, 0.0],
    };
    let e_other = Embedding {
        model: "other".into(),
        values: vec![1.0, 0.0],
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
    let embs: Vec<Embedding> = vectors
        .iter()
        .map(|v| Embedding {
            model: "m".into(),
            values: v.clone(),
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
