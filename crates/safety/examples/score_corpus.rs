//! Scores a corpus (jsonl rows with `id`, `text`, `level`, `kind`) with the
//! learned layer and prints, per kind, how many rows the layer raises to at
//! least 1 and to 2 (a development aid for corpus work, not an evaluation).
//!
//! ```sh
//! cargo run -p opencouch-safety --example score_corpus --release -- \
//!     training/corpus.jsonl [--held-out] [--kinds a,b,c] \
//!     [--weights other.bin --settings other.toml]
//! ```
//!
//! `--held-out` keeps the rows the trainer holds out (the same split by a
//! hash of the row's `group`, or of its id when it has none), `--kinds` keeps the listed kinds, and `--weights` /
//! `--settings` score another model instead of the embedded one. The layer's
//! level is the one `LearnedGate::score` gives (0, 1 or 2; level-3 rows count
//! as found when the layer says 2).
use std::collections::BTreeMap;

use opencouch_core::fnv;
use opencouch_safety::learned::LearnedGate;
use opencouch_safety::normalize;
use serde::Deserialize;

#[derive(Deserialize)]
struct Row {
    id: String,
    text: String,
    level: u8,
    kind: String,
    #[serde(default)]
    group: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = None;
    let (mut held_out, mut kinds, mut weights, mut settings) = (false, None, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--held-out" => held_out = true,
            "--kinds" => {
                kinds = it
                    .next()
                    .map(|k| k.split(',').map(str::to_owned).collect::<Vec<_>>());
            }
            "--weights" => weights = it.next().cloned(),
            "--settings" => settings = it.next().cloned(),
            _ => path = Some(a.clone()),
        }
    }
    let path = path.ok_or(
        "usage: score_corpus CORPUS.jsonl [--held-out] [--kinds a,b] [--weights W --settings S]",
    )?;
    let owned;
    let gate: &LearnedGate = match (weights, settings) {
        (Some(w), Some(s)) => {
            owned = LearnedGate::from_parts(&std::fs::read(w)?, &std::fs::read_to_string(s)?)?;
            &owned
        }
        _ => LearnedGate::embedded().map_err(|e| e.to_string())?,
    };
    let t = gate.thresholds();
    println!(
        "thresholds: raise_to_1 {:.2}, raise_to_2 {:.2}",
        t.raise_to_1, t.raise_to_2
    );
    // kind -> (gold level, rows, layer >= 1, layer >= 2)
    let mut per: BTreeMap<String, (u8, usize, usize, usize)> = BTreeMap::new();
    for line in std::fs::read_to_string(&path)?
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        let r: Row = serde_json::from_str(line)?;
        let key = r.group.as_deref().unwrap_or(&r.id);
        if held_out && fnv::hash(key.as_bytes()) % 100 >= 15 {
            continue;
        }
        if kinds.as_ref().is_some_and(|k| !k.contains(&r.kind)) {
            continue;
        }
        let s = gate.score(&normalize(&r.text));
        let e = per.entry(r.kind).or_insert((r.level, 0, 0, 0));
        e.1 += 1;
        e.2 += usize::from(s.level >= 1);
        e.3 += usize::from(s.level >= 2);
    }
    println!(
        "{:<32} {:>5} {:>6} {:>7} {:>7}",
        "kind", "level", "rows", ">=1", ">=2"
    );
    for (kind, (level, n, ge1, ge2)) in &per {
        let pct = |x: usize| 100.0 * x as f64 / (*n).max(1) as f64;
        println!(
            "{kind:<32} {level:>5} {n:>6} {:>6.1}% {:>6.1}%",
            pct(*ge1),
            pct(*ge2)
        );
    }
    Ok(())
}
