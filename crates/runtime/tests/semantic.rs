//! The crisis gate's semantic signal with the real local model: it raises
//! indirect language the deterministic layers miss, never lowers a level,
//! and is skipped when a deterministic override decided. Needs the local
//! all-MiniLM-L6-v2 files (`.ci/run` installs them): without them the tests
//! print a notice and pass, except under `CI=true`, where they fail.

use std::sync::Arc;

use opencouch_config::Settings;
use opencouch_core::{AgentInput, MemoryMode, RuntimeMode};
use opencouch_memory::embed_local::LocalEmbedder;
use opencouch_runtime::semantic::{SemanticSignal, SemanticStatus};
use opencouch_runtime::{CrisisGate, Runtime};

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

/// A fresh, not yet loaded handle on the installed model (other tests of
/// this binary load their own).
fn lazy_signal() -> Option<Arc<SemanticSignal>> {
    let dir = opencouch_memory::embed_local::find_model_dir()?;
    let e = LocalEmbedder::open(&dir).expect("model files pass their check");
    Some(Arc::new(SemanticSignal::lazy(e)))
}

const MESSAGES: [&str; 5] = [
    "i gave my guitar to my brother, i won't need it anymore",
    "my exam is tomorrow and i'm a bit nervous",
    "Thanks, that helps a bit. I think I just needed to say it out loud.",
    "everyone would be better off without me. I have thought about it a lot. It would be easier.",
    "hello",
];

#[tokio::test]
async fn a_lazy_signal_loads_with_the_first_message_and_scores_as_an_eager_one() {
    let (Some(eager), Some(lazy)) = (signal(), lazy_signal()) else {
        return;
    };
    assert!(matches!(lazy.status(), SemanticStatus::NotLoaded(_)));
    assert!(lazy.status().is_on());
    assert_eq!(lazy.status().label(), "not_loaded");
    for m in MESSAGES {
        let a = eager.assess(m).await.expect("eager signal scores");
        let b = lazy.assess(m).await.expect("lazy signal scores");
        assert_eq!((a.level, &a.score), (b.level, &b.score), "{m}");
    }
    assert!(matches!(lazy.status(), SemanticStatus::On(_)));
    assert_eq!(lazy.status().label(), "loaded");
}

/// A model directory whose files pass the start-up check but whose
/// tokenizer does not parse: the load on the first message fails.
fn unloadable_model(dir: &std::path::Path) {
    const CONFIG: &str = r#"{"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02,
        "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
        "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 6,
        "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
        "vocab_size": 30522}"#;
    let header = r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let mut weights = (header.len() as u64).to_le_bytes().to_vec();
    weights.extend(header.as_bytes());
    weights.extend(1f32.to_le_bytes());
    std::fs::create_dir_all(dir).expect("model dir");
    std::fs::write(dir.join("config.json"), CONFIG).expect("config");
    std::fs::write(dir.join("tokenizer.json"), b"{ not json").expect("tokenizer");
    std::fs::write(dir.join("model.safetensors"), weights).expect("weights");
}

#[tokio::test]
async fn a_model_that_fails_to_load_leaves_the_gate_as_without_the_signal() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path().join("model");
    unloadable_model(&dir);
    let signal = Arc::new(SemanticSignal::lazy(
        LocalEmbedder::open(&dir).expect("files pass the check"),
    ));
    let plain = CrisisGate::deterministic();
    let gate = CrisisGate::deterministic().with_semantic(signal.clone());
    for m in MESSAGES
        .iter()
        .chain(&["i want to kill myself", "work is killing me lol"])
    {
        let (a, b) = (plain.assess(&[], m).await, gate.assess(&[], m).await);
        assert_eq!(a.assessment(), b.assessment(), "{m}");
        assert_eq!((a.layer(), a.path()), (b.layer(), b.path()), "{m}");
        assert!(b.semantic().is_none(), "{m}");
    }
    let status = signal.status();
    assert!(
        matches!(&status, SemanticStatus::Failed(why) if why.contains("tokenizer")),
        "{status:?}"
    );
    assert!(!status.is_on());
    assert_eq!(status.label(), "failed");
}

fn incognito(thread: &str, message: &str) -> AgentInput {
    AgentInput {
        memory_mode: MemoryMode::Incognito,
        ..AgentInput::new(thread, message)
    }
}

fn settings(model_dir: &std::path::Path, data_dir: &std::path::Path) -> Settings {
    Settings {
        mode: RuntimeMode::Deterministic,
        data_dir: Some(data_dir.to_path_buf()),
        embedding_model_dir: Some(model_dir.to_path_buf()),
        ..Settings::default()
    }
}

#[tokio::test]
async fn a_runtime_starts_without_loading_the_model_and_reports_its_state() {
    let scratch = tempfile::tempdir().expect("scratch");

    // Files that fail to load: on until the first message, then off, and
    // the turn goes on without the signal.
    let broken = scratch.path().join("broken");
    unloadable_model(&broken);
    let rt = Runtime::from_settings(&settings(&broken, scratch.path()), MemoryMode::Incognito)
        .await
        .expect("runtime");
    assert_eq!(rt.semantic_status().map(|s| s.label()), Some("not_loaded"));
    assert!(rt.semantic_on() && rt.service().semantic_signal());
    let out = rt
        .run_turn(incognito("t1", "i gave my guitar away, i won't need it"))
        .await
        .expect("turn");
    assert!(!out.response_text.is_empty());
    assert_eq!(rt.semantic_status().map(|s| s.label()), Some("failed"));
    assert!(!rt.semantic_on() && !rt.service().semantic_signal());

    // Files that fail their check at start-up: no signal at all, as when
    // the model is not installed.
    std::fs::write(broken.join("model.safetensors"), b"short").expect("weights");
    let other = scratch.path().join("other");
    std::fs::create_dir_all(&other).expect("dir");
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(broken.join(f), other.join(f)).expect("copy");
    }
    let rt = Runtime::from_settings(&settings(&other, scratch.path()), MemoryMode::Incognito)
        .await
        .expect("runtime");
    assert!(rt.semantic_status().is_none() && !rt.semantic_on());

    // The installed model: not loaded at start, loaded by the first message.
    let Some(dir) = opencouch_memory::embed_local::find_model_dir() else {
        return;
    };
    let rt = Runtime::from_settings(&settings(&dir, scratch.path()), MemoryMode::Incognito)
        .await
        .expect("runtime");
    assert!(rt.semantic_on());
    let label = rt.semantic_status().map(|s| s.label());
    // Another test of this binary may have loaded the shared copy already.
    assert!(matches!(label, Some("not_loaded" | "loaded")), "{label:?}");
    rt.run_turn(incognito(
        "t2",
        "i gave my guitar to my brother, i won't need it anymore",
    ))
    .await
    .expect("turn");
    assert_eq!(rt.semantic_status().map(|s| s.label()), Some("loaded"));
}

#[tokio::test]
async fn memory_retrieval_reuses_the_gates_embedding_of_the_message() {
    use opencouch_memory::types::{NewFact, WriteTiming};
    use opencouch_memory::{EntityRef, EntityType, FactCategory, Predicate, SemanticFact};
    let Some(dir) = opencouch_memory::embed_local::find_model_dir() else {
        return;
    };
    let scratch = tempfile::tempdir().expect("scratch");
    // A path of its own, so no other test shares (and counts on) this handle.
    let link = scratch.path().join("model");
    std::os::unix::fs::symlink(&dir, &link).expect("symlink");
    let dir = link;
    let rt = Runtime::from_settings(&settings(&dir, scratch.path()), MemoryMode::Persistent)
        .await
        .expect("runtime");
    let fact = SemanticFact::new(
        NewFact {
            category: FactCategory::Relationship,
            subject: EntityRef::user(),
            predicate: Predicate::Knows,
            object: EntityRef::new(EntityType::Person, "Sam").expect("entity"),
            evidence_quote: "my friend Sam".into(),
            confidence: 0.9,
            source_session_id: None,
            source_turn_index: None,
            write_timing: WriteTiming::Promotion,
            write_reason: "test".into(),
        },
        chrono::Utc::now(),
    )
    .expect("fact");
    rt.stores()
        .memory
        .put(&opencouch_memory::backend::fact_record("t3", &fact, None))
        .await
        .expect("put");
    let model = opencouch_runtime::embeddings::shared_local(&dir).expect("model handle");
    let before = model.batches();
    let out = rt
        .run_turn(AgentInput::new(
            "t3",
            "I had a long talk with Sam about work today",
        ))
        .await
        .expect("turn");
    assert_eq!(
        out.diagnostics.get_str("retrieval_path"),
        Some("hybrid_rrf"),
        "{:?}",
        out.diagnostics
    );
    assert_eq!(
        model.batches() - before,
        1,
        "the message is embedded once: by the gate, then reused by retrieval"
    );
}
