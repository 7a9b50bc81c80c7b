//! Cost of the crisis gate's semantic signal per message:
//! `cargo bench -p opencouch-runtime --bench semantic`.
//!
//! One message at a time, as on the request path (embedding of its chunks
//! plus scoring against the exemplars), for short and long messages.
//! Skips with a notice when the local embedding model is not installed.

use std::time::Instant;

use opencouch_memory::embed_local::LocalEmbedder;
use opencouch_runtime::semantic::SemanticSignal;

const SHORT: &[&str] = &[
    "everyone would be better off without me",
    "work was long today but fine",
    "i don't see the point anymore",
    "can you suggest a breathing exercise",
    "i gave my guitar to my brother, i won't need it",
    "my exam is tomorrow and i'm nervous",
];

fn long() -> String {
    "I have been feeling really low for weeks now. Work is piling up and I can't keep up. \
     My friends have stopped texting and I don't blame them. Some nights I lie awake and \
     wonder whether anyone would notice if I just stopped showing up. I know I should talk \
     to someone but I don't know where to start."
        .to_owned()
}

fn report(label: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label:<28} n={:>4}  p50 {:>7.2} ms  p90 {:>7.2} ms  max {:>7.2} ms",
        ms.len(),
        p(0.5),
        p(0.9),
        p(1.0)
    );
}

fn main() {
    let Some(embedder) = LocalEmbedder::discover().ok().flatten() else {
        println!("semantic bench skipped: the local embedding model is not installed");
        return;
    };
    let signal = SemanticSignal::new(embedder).expect("exemplar index loads");
    let rounds: usize = std::env::var("SEMANTIC_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    // Warm up.
    for m in SHORT {
        let _ = signal.assess_blocking(m);
    }
    let mut short_ms = Vec::new();
    for _ in 0..rounds {
        for m in SHORT {
            let t = Instant::now();
            let _ = signal.assess_blocking(m);
            short_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    report("short message (1 chunk)", short_ms);
    let text = long();
    let mut long_ms = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let _ = signal.assess_blocking(&text);
        long_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    report("long message (4 chunks)", long_ms);
}
