//! Developer loop for the semantic signal's thresholds:
//! `cargo run --release -p opencouch-runtime --example semantic_eval -- FILE FORMAT [CACHE]`
//! classifies every case deterministically, scores it with the semantic
//! signal and prints the report without and with it, plus how often the
//! signal raised positives and negatives. Chunk vectors are cached in CACHE
//! (a file path) so threshold experiments (`SEM_R1`, `SEM_M1`, `SEM_R2`,
//! `SEM_M2` environment variables) are instant. Thresholds are chosen on the
//! project's own development set only (tests/data/semantic_dev.jsonl).

use opencouch_memory::embed_local::LocalEmbedder;
use opencouch_safety::eval::{DataFormat, EvalReport, Gold, MissReport, parse_cases};
use opencouch_safety::semantic::{self, SemanticIndex, chunks};

fn env_f(name: &str, default: f32) -> f32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(format)) = (args.first(), args.get(1)) else {
        eprintln!("usage: semantic_eval FILE FORMAT [CACHE]");
        std::process::exit(2);
    };
    let format: DataFormat = format.parse()?;
    let cases = parse_cases(format, &std::fs::read_to_string(path)?)?;
    let index = SemanticIndex::embedded().map_err(|e| e.to_string())?;
    let mut texts = Vec::new();
    let mut spans = Vec::new();
    for c in &cases {
        let ch = chunks(&c.message);
        spans.push((texts.len(), ch.len()));
        texts.extend(ch);
    }
    let dim = index.dim();
    let cache = args.get(2);
    let vectors: Vec<Vec<f32>> = match cache.and_then(|p| std::fs::read(p).ok()) {
        Some(bytes) if bytes.len() == texts.len() * dim * 4 => bytes
            .chunks_exact(dim * 4)
            .map(|row| {
                row.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            })
            .collect(),
        _ => {
            let embedder = LocalEmbedder::discover()?.ok_or("local embedding model not found")?;
            let started = std::time::Instant::now();
            let mut out = Vec::with_capacity(texts.len());
            for (i, batch) in texts.chunks(1024).enumerate() {
                out.extend(opencouch_runtime::semantic::embed_by_length(
                    &embedder, batch,
                )?);
                eprint!(
                    "\rembedded {}/{}",
                    ((i + 1) * 1024).min(texts.len()),
                    texts.len()
                );
            }
            eprintln!(" in {:.1} s", started.elapsed().as_secs_f64());
            if let Some(p) = cache {
                let bytes: Vec<u8> = out.iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
                std::fs::write(p, bytes)?;
            }
            out
        }
    };
    let (r1, m1, r2, m2) = (
        env_f("SEM_R1", semantic::RAISE_1),
        env_f("SEM_M1", semantic::MARGIN_1),
        env_f("SEM_R2", semantic::RAISE_2),
        env_f("SEM_M2", semantic::MARGIN_2),
    );
    let levels = cases
        .iter()
        .any(|c| matches!(c.gold, Gold::Level(_) | Gold::LevelIn(_)));
    let mut without = EvalReport::new(levels);
    let mut with = EvalReport::new(levels);
    let mut misses = MissReport::default();
    let mut raised = [[0usize; 3]; 2];
    for (case, (start, len)) in cases.iter().zip(&spans) {
        let det = opencouch_safety::classify(&case.history, &case.message);
        let d = det.assessment.level.get();
        let s = index.score(&vectors[*start..start + len]);
        let margin = s.similarity - s.counter_similarity;
        let sem = if s.exemplar_level >= 2 && s.similarity >= r2 && margin >= m2 {
            2
        } else if s.similarity >= r1 && margin >= m1 {
            1
        } else {
            0
        };
        let level = d.max(sem);
        let positive = match case.gold {
            Gold::Level(g) => g >= 1,
            Gold::LevelIn(m) => m & 1 == 0,
            Gold::Binary(p) => p,
            Gold::Unlabeled => false,
        };
        if level > d {
            raised[usize::from(positive)][usize::from(level)] += 1;
        }
        without.add(case.gold, d);
        with.add(case.gold, level);
        let layer = if level > d {
            "semantic"
        } else {
            det.layer.as_str()
        };
        let mut signals: Vec<&str> = det
            .matched_families
            .iter()
            .chain(det.constructs.iter())
            .copied()
            .collect();
        if level > d {
            signals.push("semantic");
        }
        misses.record(case, level, layer, &signals);
    }
    println!("thresholds: raise1 {r1} margin1 {m1} raise2 {r2} margin2 {m2}");
    println!(
        "raised by the semantic signal: negatives to 1: {}, to 2: {}; positives to 1: {}, to 2: {}",
        raised[0][1], raised[0][2], raised[1][1], raised[1][2]
    );
    println!("--- without the semantic signal");
    print!("{}", without.render());
    println!("--- with the semantic signal");
    print!("{}", with.render());
    print!("{}", misses.render());
    Ok(())
}
