//! The frozen intent set (tests/data/intent_frozen.md): written before any
//! intent layer was built, by someone given only the intent descriptions,
//! never the phrase rules. It is pinned by SHA-256 and must never be edited;
//! the intent layer is measured on it, never tuned on it.

use sha2::{Digest, Sha256};

const FROZEN: &str = include_str!("data/intent_frozen.jsonl");
const FROZEN_SHA256: &str = "92e20ad703a98953bb309e01f5cdcae626be982887297fec245e838f3749eaf3";

#[test]
fn the_frozen_intent_set_is_unchanged_and_covers_every_intent() {
    assert_eq!(
        hex::encode(Sha256::digest(FROZEN.as_bytes())),
        FROZEN_SHA256,
        "intent_frozen.jsonl changed: it is frozen; add new cases to another file"
    );
    let mut per_intent = std::collections::BTreeMap::new();
    let mut ids = std::collections::HashSet::new();
    for line in FROZEN.lines() {
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
