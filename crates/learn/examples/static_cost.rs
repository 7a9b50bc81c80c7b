//! What the static token embeddings cost per message: features with and
//! without them, for a short message and a ~2,000-character post, and the
//! table's decode time.
//!
//! ```sh
//! cargo run --release -p opencouch-learn --features static-embeddings --example static_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use opencouch_learn::{FeatureConfig, Featurizer, StaticEmbeddings};

fn per_call(f: &Featurizer, text: &str) -> f64 {
    let n = if text.len() > 200 { 2_000 } else { 50_000 };
    let started = Instant::now();
    let mut sink = 0usize;
    for _ in 0..n {
        sink += black_box(f.features(black_box(text))).ids.len();
    }
    black_box(sink);
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let table = StaticEmbeddings::builtin()?;
    println!(
        "table: {} entries x {} dims, decoded in {:.1} ms",
        table.len(),
        table.dims(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let short = "thanks, that actually helped a bit. i think i'll stop there";
    let long =
        "i have been feeling really low for weeks and i do not know who to talk to. ".repeat(27);
    let plain = Featurizer::new(FeatureConfig::default());
    let with = Featurizer::checked(FeatureConfig {
        static_dims: 64,
        ..FeatureConfig::default()
    })?;
    for (name, text) in [("short", short), ("~2,000 characters", long.as_str())] {
        println!(
            "{name}: n-grams {:.2} us, n-grams + static embeddings {:.2} us",
            per_call(&plain, text),
            per_call(&with, text)
        );
    }
    Ok(())
}
