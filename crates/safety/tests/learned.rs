//! The learned layer's data: the embedded weights come from the corpus that
//! `training/generate_corpus.py` generates from the checked-in data (their
//! header records its SHA-256; retrain with `cargo run -p opencouch-safety
//! --example train_learned --release` after changing `training/`), they load quickly, and the layer behaves as the gate needs:
//! it raises indirect language, reads negation, and leaves short replies to
//! the rules.

use opencouch_safety::learned::{LearnedGate, MIN_TOKENS};
use opencouch_safety::{GateOptions, Layer, classify_with, normalize};
use sha2::{Digest, Sha256};

/// The frozen paraphrase sets (never trained on).
const FROZEN: [&str; 6] = [
    include_str!("data/paraphrase_frozen.jsonl"),
    include_str!("data/paraphrase_frozen_2.jsonl"),
    include_str!("data/paraphrase_frozen_3.jsonl"),
    include_str!("data/paraphrase_frozen_4.jsonl"),
    include_str!("data/paraphrase_frozen_5.jsonl"),
    include_str!("data/paraphrase_frozen_6.jsonl"),
];

/// The corpus, regenerated from `training/` (it is not kept in git: the
/// generator is deterministic, and the file is several megabytes). `None`
/// with a notice when python3 is missing, a failure under `CI=true`.
fn corpus() -> Option<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("training");
    let out = std::env::temp_dir().join(format!("opencouch-corpus-{}.jsonl", std::process::id()));
    let status = std::process::Command::new("python3")
        .arg(dir.join("generate_corpus.py"))
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but the corpus generator did not run: {other:?}"
            );
            eprintln!("NOTICE: skipping corpus checks: python3 generate_corpus.py did not run");
            return None;
        }
    }
    let text = std::fs::read_to_string(&out).expect("generated corpus");
    let _ = std::fs::remove_file(&out);
    Some(text)
}

#[test]
fn the_weights_were_trained_on_the_generated_corpus_and_it_covers_every_level_and_language() {
    let Some(corpus) = corpus() else { return };
    let gate = LearnedGate::embedded().expect("the learned layer loads");
    let digest = hex::encode(Sha256::digest(corpus.as_bytes()));
    assert_eq!(
        gate.model().meta().corpus_sha256,
        digest,
        "the corpus generated from training/ changed since the weights were trained: retrain them"
    );
    assert!(gate.model().meta().examples >= 5_000);
    let mut levels = [0usize; 4];
    let mut langs = std::collections::BTreeMap::new();
    for line in corpus.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("corpus line parses");
        let level = v["level"].as_u64().expect("level") as usize;
        levels[level] += 1;
        *langs
            .entry(v["lang"].as_str().unwrap_or("?").to_owned())
            .or_insert(0usize) += 1;
    }
    // No hand-written sentence of four words or more is a frozen-set
    // message: the frozen sets measure wordings the layer has not seen.
    // (Blind authors do write the same common sentences; round seven
    // removed 78 such lines from training/data.)
    let frozen: std::collections::HashSet<String> = FROZEN
        .iter()
        .flat_map(|set| set.lines())
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("frozen row parses");
            v["message"]
                .as_str()
                .expect("message")
                .trim()
                .to_lowercase()
        })
        .collect();
    let copied = corpus
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["source"] == "hand")
        .filter_map(|v| v["text"].as_str().map(|t| t.trim().to_lowercase()))
        .filter(|t| t.split_whitespace().count() >= 4 && frozen.contains(t))
        .count();
    assert_eq!(
        copied, 0,
        "hand-written corpus rows equal to frozen-set messages"
    );
    assert!(levels.iter().sum::<usize>() >= 5_000, "{levels:?}");
    assert!(levels.iter().all(|&n| n >= 500), "{levels:?}");
    for lang in ["en", "es", "fr", "de", "pt", "it"] {
        assert!(
            langs.get(lang).copied().unwrap_or(0) >= 200,
            "{lang}: {langs:?}"
        );
    }
}

#[test]
fn indirect_language_is_raised_and_short_replies_are_left_alone() {
    // Wordings the rules do not list (written for this test, not taken from
    // the corpus or any evaluation set).
    for text in [
        "honestly i don't see the point of anything anymore",
        "everyone would honestly be better off if i just wasn't around",
    ] {
        let rules = classify_with(&[], text, GateOptions { learned: false });
        let full = classify_with(&[], text, GateOptions::default());
        assert!(full.assessment.level >= rules.assessment.level, "{text}");
        assert!(
            full.assessment.level.get() >= 1,
            "{text}: {:?}",
            full.learned
        );
    }
    let gate = LearnedGate::embedded().expect("loads");
    for short in ["ok", "idk", "goodbye", "yes please"] {
        assert!(short.split_whitespace().count() < MIN_TOKENS);
        assert_eq!(gate.score(&normalize(short)).level, 0, "{short}");
    }
}

#[test]
fn the_layer_is_named_when_it_decides_and_can_be_turned_off() {
    let text = "honestly i don't see the point of anything anymore";
    let on = classify_with(&[], text, GateOptions::default());
    let off = classify_with(&[], text, GateOptions { learned: false });
    assert!(off.learned.is_none());
    if on.assessment.level > off.assessment.level {
        assert_eq!(on.layer, Layer::Learned);
    }
}
