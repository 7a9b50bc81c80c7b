//! The frozen intent set (tests/data/intent_frozen.md): written before any
//! intent layer was built, by someone given only the intent descriptions,
//! never the phrase rules. It is pinned by SHA-256 and must never be edited;
//! the intent layer is measured on it, never tuned on it.
//!
//! The second frozen set (tests/data/intent_frozen_2.md) was written the
//! same way during round 10 and first read after that round's last change;
//! pinned and measured only (its figures are in docs/benchmarks.md).
//!
//! The third (tests/data/intent_frozen_3.md) was written the same way during
//! round 11 and first read after that round's last change; pinned and
//! measured only.

use opencouch_runtime::intent::eval::{Layers, evaluate, parse_set, render};
use sha2::{Digest, Sha256};

const FROZEN: &str = include_str!("data/intent_frozen.jsonl");
const FROZEN_SHA256: &str = "92e20ad703a98953bb309e01f5cdcae626be982887297fec245e838f3749eaf3";
const FROZEN_2: &str = include_str!("data/intent_frozen_2.jsonl");
const FROZEN_2_SHA256: &str = "886a395b6439525d029d99b8e9e7d6dee3acc7d5c47333776e6362e68e1ef68f";
const FROZEN_3: &str = include_str!("data/intent_frozen_3.jsonl");
const FROZEN_3_SHA256: &str = "36e4a186eaa74dfe58e28d4cb222c07de2838caea17d707ffde130b910fa61f6";

#[test]
fn the_frozen_intent_set_is_unchanged_and_covers_every_intent() {
    is_unchanged_and_covers_every_intent("intent_frozen.jsonl", FROZEN, FROZEN_SHA256);
}

#[test]
fn the_second_frozen_intent_set_is_unchanged_and_measured() {
    is_unchanged_and_measured("second", "intent_frozen_2.jsonl", FROZEN_2, FROZEN_2_SHA256);
}

#[test]
fn the_third_frozen_intent_set_is_unchanged_and_measured() {
    is_unchanged_and_measured("third", "intent_frozen_3.jsonl", FROZEN_3, FROZEN_3_SHA256);
}

/// A later frozen set (810 rows) is unchanged and covers every intent; its
/// report is printed, never asserted on.
fn is_unchanged_and_measured(which: &str, name: &str, text: &str, sha: &str) {
    is_unchanged_and_covers_every_intent(name, text, sha);
    let rows = parse_set(text).expect("frozen set parses");
    assert_eq!(rows.len(), 810);
    println!(
        "{which} frozen intent set, rules then learned layer:\n{}",
        render(&evaluate(&rows, Layers::RulesThenLearned))
    );
}

fn is_unchanged_and_covers_every_intent(name: &str, text: &str, sha: &str) {
    assert_eq!(
        hex::encode(Sha256::digest(text.as_bytes())),
        sha,
        "{name} changed: it is frozen; add new cases to another file"
    );
    let mut per_intent = std::collections::BTreeMap::new();
    let mut ids = std::collections::HashSet::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("line parses");
        assert!(
            ids.insert(v["id"].as_str().expect("id").to_owned()),
            "duplicate id"
        );
        let context = v["context"].as_str().expect("context");
        assert!(matches!(context, "exercise" | "chat"), "{context}");
        *per_intent
            .entry(v["intent"].as_str().expect("intent").to_owned())
            .or_insert(0usize) += 1;
    }
    assert_eq!(per_intent.len(), 26, "{per_intent:?}");
    assert!(per_intent.values().all(|&n| n >= 30), "{per_intent:?}");
}
