//! Retrieval latency (p50 / p95) over 1k / 10k / 100k records, excluding the
//! query embedding: token recall, dense cosine (384-d random unit vectors)
//! and the hybrid RRF search on a prepared [`MemoryIndex`].
//!
//! Run with `cargo bench -p opencouch-memory --bench retrieval`.

use std::time::Instant;

use opencouch_memory::StoredEmbedding;
use opencouch_memory::retrieval::{MemoryIndex, SearchMode};
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "work",
    "stress",
    "sleep",
    "sister",
    "brother",
    "exam",
    "running",
    "walk",
    "anxious",
    "tired",
    "job",
    "boss",
    "friend",
    "panic",
    "breathing",
    "music",
    "family",
    "move",
    "city",
    "school",
    "money",
    "rent",
    "partner",
    "dog",
    "cat",
    "garden",
    "cooking",
    "therapy",
    "doctor",
    "health",
    "grief",
    "loss",
    "birthday",
    "holiday",
    "weekend",
    "morning",
    "night",
    "coffee",
    "reading",
    "painting",
    "guitar",
    "meeting",
    "deadline",
    "project",
    "team",
    "lonely",
    "calm",
    "hope",
    "goal",
    "habit",
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn word(&mut self) -> &'static str {
        WORDS[(self.next() % WORDS.len() as u64) as usize]
    }
    fn unit(&mut self) -> f32 {
        (self.next() % 10_000) as f32 / 5_000.0 - 1.0
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for n in [1_000usize, 10_000, 100_000] {
        let values: Vec<Value> = (0..n)
            .map(|_| {
                let text: Vec<&str> = (0..12).map(|_| rng.word()).collect();
                json!({"evidence_quote": text.join(" "), "category": "context"})
            })
            .collect();
        let embeddings: Vec<StoredEmbedding> = (0..n)
            .map(|_| StoredEmbedding {
                vector: (0..384).map(|_| rng.unit()).collect(),
                model: "m".into(),
                dim: 384,
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
                let q: Vec<&str> = (0..4).map(|_| rng.word()).collect();
                (q.join(" "), (0..384).map(|_| rng.unit()).collect())
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
