//! Per-turn memory retrieval latency on a real store, for one owner holding
//! 1k / 10k / 100k semantic facts (384-d vectors), excluding the query
//! embedding (the embedder returns a precomputed vector instantly).
//!
//! Three ways a turn can run:
//! - **warm**: the per-owner index is cached and current (one revision read,
//!   the episodic list, the profile, the search) — every turn after the first
//!   while nothing was written;
//! - **cold**: first turn after a write (load every fact, index, search);
//! - **uncached**: the same without any cache (how every turn ran before).
//!
//! ```sh
//! cargo bench -p opencouch-runtime --bench memory_retrieval
//! OPENCOUCH_BENCH_SIZES=1000,10000 OPENCOUCH_BENCH_BACKENDS=sqlite,postgres cargo bench -p opencouch-runtime --bench memory_retrieval
//! ```
//! PostgreSQL runs against a fresh database on the test server
//! (`OPENCOUCH_TEST_DATABASE_URL`); it is skipped with a notice when
//! unreachable.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use chrono::Utc;
use opencouch_memory::backend::fact_record;
use opencouch_memory::retrieval::{
    EmbedError, Embedder, IndexCache, RetrievalRequest, retrieve_cached,
};
use opencouch_memory::types::{
    EntityRef, EntityType, FactCategory, NewFact, Predicate, SemanticFact, WriteTiming,
};
use opencouch_store::{Embedding, MemoryStore, Stores};

#[path = "../../memory/benches/support/synthetic.rs"]
mod synthetic;

use synthetic::{Rng, percentile};

const DIM: usize = 384;

/// Returns the vector it was given for the next query, instantly.
struct Precomputed(std::sync::Mutex<Vec<f32>>);

#[async_trait]
impl Embedder for Precomputed {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let v = self
            .0
            .lock()
            .map_err(|_| EmbedError("poisoned".into()))?
            .clone();
        Ok(texts.iter().map(|_| v.clone()).collect())
    }
    fn model_id(&self) -> &str {
        "bench"
    }
    fn dimension(&self) -> usize {
        DIM
    }
}

/// One retrieval; returns (milliseconds, entries kept).
async fn one_query(
    store: &dyn MemoryStore,
    embedder: &Arc<Precomputed>,
    owner: &str,
    q: &(String, Vec<f32>),
    cache: Option<&IndexCache>,
) -> (f64, usize) {
    *embedder.0.lock().expect("lock") = q.1.clone();
    let req = RetrievalRequest {
        owner_id: owner,
        query: &q.0,
        first_turn_of_session: false,
        now: Utc::now(),
    };
    let t = Instant::now();
    let m = retrieve_cached(store, Some(embedder.as_ref()), cache, &req)
        .await
        .expect("retrieve");
    (t.elapsed().as_secs_f64() * 1000.0, m.working_memory.len())
}

async fn fill(store: &dyn MemoryStore, owner: &str, n: usize, rng: &mut Rng) {
    let started = Instant::now();
    let mut pending = Vec::new();
    for i in 0..n {
        let fact = SemanticFact::new(
            NewFact {
                category: FactCategory::Context,
                subject: EntityRef::user(),
                predicate: Predicate::Experienced,
                object: EntityRef::new(EntityType::Event, rng.word()).expect("entity"),
                evidence_quote: format!("{} ({i})", rng.words(12)),
                confidence: 0.8,
                source_session_id: None,
                source_turn_index: None,
                write_timing: WriteTiming::Promotion,
                write_reason: "bench".into(),
            },
            Utc::now(),
        )
        .expect("fact");
        let emb = Embedding {
            model: "bench".into(),
            values: rng.vector(DIM),
        };
        pending.push(fact_record(owner, &fact, Some(emb)));
        if pending.len() == 64 || i + 1 == n {
            let batch = std::mem::take(&mut pending);
            futures::future::join_all(batch.iter().map(|r| store.put(r)))
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .expect("put");
        }
    }
    eprintln!(
        "  inserted {n} facts in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

async fn bench(label: &str, stores: &Stores, sizes: &[usize]) {
    let store = stores.memory.as_ref();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let embedder = Arc::new(Precomputed(std::sync::Mutex::new(rng.vector(DIM))));
    let mut have = 0usize;
    let owner = "bench-owner";
    for &n in sizes {
        fill(store, owner, n - have, &mut rng).await;
        have = n;
        let queries: Vec<(String, Vec<f32>)> = (0..200)
            .map(|_| {
                let q = rng.words(4);
                (q, rng.vector(DIM))
            })
            .collect();
        let cache = IndexCache::default();
        let (cold, _) = one_query(store, &embedder, owner, &queries[0], Some(&cache)).await;
        let mut warm = Vec::new();
        let mut hits = 0;
        for q in &queries {
            let (ms, h) = one_query(store, &embedder, owner, q, Some(&cache)).await;
            warm.push(ms);
            hits += h;
        }
        let uncached_runs = if n >= 100_000 { 3 } else { 20 };
        let mut uncached = Vec::new();
        for q in queries.iter().take(uncached_runs) {
            uncached.push(one_query(store, &embedder, owner, q, None).await.0);
        }
        println!(
            "{label:<10} n={n:>6}  warm p50 {:.3} ms p95 {:.3} ms  cold {:.1} ms  uncached p50 {:.1} ms  (avg kept {:.1})",
            percentile(&mut warm, 0.5),
            percentile(&mut warm, 0.95),
            cold,
            percentile(&mut uncached, 0.5),
            hits as f64 / queries.len() as f64
        );
    }
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn main() {
    let sizes: Vec<usize> = env_list("OPENCOUCH_BENCH_SIZES", "1000,10000,100000")
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    let backends = env_list("OPENCOUCH_BENCH_BACKENDS", "sqlite,postgres");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        for b in &backends {
            match b.as_str() {
                "sqlite" => {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let s = opencouch_store::SqliteStores::open(dir.path().join("bench.db"))
                        .await
                        .expect("sqlite");
                    bench("sqlite", &s.into_stores(), &sizes).await;
                }
                "postgres" => match opencouch_store::testing::try_pg_test_db().await {
                    Ok(db) => {
                        let pg = opencouch_store::PgStores::connect(db.url())
                            .await
                            .expect("connect");
                        bench("postgres", &pg.clone().into_stores(), &sizes).await;
                        pg.close().await;
                        drop(db);
                    }
                    Err(reason) => eprintln!("NOTICE: skipping PostgreSQL: {reason}"),
                },
                other => eprintln!("unknown backend {other:?} (sqlite, postgres)"),
            }
        }
    });
}
