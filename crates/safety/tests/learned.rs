//! The learned layer's data: the embedded weights come from the checked-in
//! corpus (their header records its SHA-256; retrain with `cargo run -p
//! opencouch-safety --example train_learned --release` after changing
//! `training/`), they load quickly, and the layer behaves as the gate needs:
//! it raises indirect language, reads negation, and leaves short replies to
//! the rules.

use opencouch_safety::learned::{LearnedGate, MIN_TOKENS};
use opencouch_safety::{GateOptions, Layer, classify_with, normalize};
use sha2::{Digest, Sha256};

const CORPUS: &str = include_str!("../training/corpus.jsonl");

#[test]
fn the_weights_were_trained_on_the_checked_in_corpus() {
    let gate = LearnedGate::embedded().expect("the learned layer loads");
    let digest = hex::encode(Sha256::digest(CORPUS.as_bytes()));
    assert_eq!(
        gate.model().meta().corpus_sha256,
        digest,
        "training/corpus.jsonl changed since the weights were trained: retrain them"
    );
    assert!(gate.model().meta().examples >= 5_000);
}

#[test]
fn the_corpus_is_large_and_covers_every_level_and_language() {
    let mut levels = [0usize; 4];
    let mut langs = std::collections::BTreeMap::new();
    for line in CORPUS.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("corpus line parses");
        let level = v["level"].as_u64().expect("level") as usize;
        levels[level] += 1;
        *langs
            .entry(v["lang"].as_str().unwrap_or("?").to_owned())
            .or_insert(0usize) += 1;
    }
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
