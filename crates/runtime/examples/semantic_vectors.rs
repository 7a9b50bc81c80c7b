//! Regenerates `crates/safety/data/semantic_vectors.bin` from
//! `crates/safety/data/semantic_exemplars.toml` with the local
//! all-MiniLM-L6-v2 model (found like memory retrieval finds it):
//! `cargo run --release -p opencouch-runtime --example semantic_vectors`.

use opencouch_memory::embed_local::LocalEmbedder;
use opencouch_safety::semantic::{encode_vectors, exemplar_hash, load_exemplars};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let embedder = LocalEmbedder::discover()?.ok_or(
        "local embedding model not found: run `opencouch models install` or set OPENCOUCH_EMBEDDING_MODEL_DIR",
    )?;
    let exemplars = load_exemplars()?;
    let texts: Vec<String> = exemplars.iter().map(|e| e.text.clone()).collect();
    let vectors = embedder.embed_sync(&texts)?;
    let dim = vectors.first().map(Vec::len).unwrap_or(0);
    let bytes = encode_vectors(exemplar_hash(&exemplars), dim, &vectors);
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../safety/data/semantic_vectors.bin");
    std::fs::write(&out, bytes)?;
    println!(
        "wrote {} vectors of dimension {dim} to {}",
        vectors.len(),
        out.display()
    );
    Ok(())
}
