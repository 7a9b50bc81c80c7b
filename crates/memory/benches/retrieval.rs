//! Retrieval latency (p50 / p95) over 1k / 10k / 100k records, excluding the
//! query embedding: token recall, dense cosine (384-d random unit vectors)
//! and the hybrid RRF search on a prepared [`MemoryIndex`].
//!
//! Run with `cargo bench -p opencouch-memory --bench retrieval`.

use std::time::Instant;

use opencouch_memory::retrieval::{MemoryIndex, SearchMode};
use opencouch_store::Embedding;
use serde_json::{Value, json};

#[path = "support/synthetic.rs"]
mod synthetic;

use synthetic::{Rng, percentile};

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for n in [1_000usize, 10_000, 100_000] {
        let values: Vec<Value> = (0..n)
            .map(|_| json!({"evidence_quote": rng.words(12), "category": "context"}))
            .collect();
        let embeddings: Vec<Embedding> = (0..n)
            .map(|_| Embedding {
                model: "m".into(),
                values: rng.vector(384),
            })
            .collect();
        let built = Instant::now();
        let index = MemoryIndex::build(
            values.iter().zip(embeddings.iter().map(Some)),
            Some(("m", 384)),
        );
        let build_ms = built.elapsed().as_secs_f64() * 1000.0;
        let queries: Vec<(String, Vec<f32>)> = (0..200)
            .map(|_| {
                let q = rng.words(4);
                (q, rng.vector(384))
            })
            .collect();
        for mode in [SearchMode::Token, SearchMode::Embedding, SearchMode::Hybrid] {
            let mut times = Vec::with_capacity(queries.len());
            let mut hits = 0usize;
            for (q, v) in &queries {
                let t = Instant::now();
                hits += index.search(q, Some(v), mode, 20).len();
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            println!(
                "n={n:>6} mode={mode:<9?} p50={:.3} ms p95={:.3} ms (index build {build_ms:.0} ms, avg hits {:.1})",
                percentile(&mut times, 0.5),
                percentile(&mut times, 0.95),
                hits as f64 / queries.len() as f64
            );
        }
    }
}
