//! The crisis gate's semantic signal with the real local model: it raises
//! indirect language the deterministic layers miss, never lowers a level,
//! and is skipped when a deterministic override decided. Needs the local
//! all-MiniLM-L6-v2 files (`.ci/run` installs them): without them the tests
//! print a notice and pass, except under `CI=true`, where they fail.

use std::sync::Arc;

use opencouch_memory::embed_local::LocalEmbedder;
use opencouch_runtime::CrisisGate;
use opencouch_runtime::semantic::SemanticSignal;

fn signal() -> Option<Arc<SemanticSignal>> {
    match LocalEmbedder::discover() {
        Ok(Some(e)) => Some(Arc::new(
            SemanticSignal::new(e).expect("exemplar index loads"),
        )),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but the local embedding model is not installed")
        }
        _ => {
            eprintln!("skipping semantic-signal tests: local embedding model not installed");
            None
        }
    }
}

#[tokio::test]
async fn indirect_language_is_raised_and_nothing_is_lowered() {
    let Some(signal) = signal() else { return };
    let plain = CrisisGate::deterministic();
    let gate = CrisisGate::deterministic().with_semantic(signal);
    assert!(gate.has_semantic() && !plain.has_semantic());

    // Final arrangements without any risk vocabulary: only meaning catches it.
    let msg = "i gave my guitar to my brother, i won't need it anymore";
    assert_eq!(plain.assess(&[], msg).await.assessment().level.get(), 0);
    let v = gate.assess(&[], msg).await;
    assert!(
        v.assessment().level.get() >= 1,
        "raised by the semantic signal"
    );
    assert_eq!(v.layer(), "semantic");
    let sem = v.semantic().expect("the signal ran");
    assert!(sem.level >= 1 && !sem.score.construct.is_empty());

    // Ordinary stress stays 0.
    let v = gate
        .assess(&[], "my exam is tomorrow and i'm a bit nervous")
        .await;
    assert_eq!(v.assessment().level.get(), 0);

    // Explicit risk keeps its level (the signal does not even run at 2+).
    let v = gate.assess(&[], "i want to kill myself").await;
    assert_eq!(v.assessment().level.get(), 2);
    assert!(v.semantic().is_none());

    // A deterministic override decides alone.
    let v = gate.assess(&[], "work is killing me lol").await;
    assert_eq!(v.assessment().level.get(), 0);
    assert!(v.semantic().is_none(), "overrides skip the signal");
}
