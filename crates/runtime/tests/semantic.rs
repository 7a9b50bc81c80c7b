//! The crisis gate's semantic signal, now the safety crate's built-in
//! learned layer: it raises indirect language the rules miss, never lowers a
//! level, is skipped when a deterministic override decided, needs no model
//! files, and is reported by the runtime and the service. Memory retrieval
//! keeps its own embedder, used only on turns that retrieve.

mod common;

use common::ThroughService;
use opencouch_config::Settings;
use opencouch_core::{AgentInput, MemoryMode, RuntimeMode};
use opencouch_runtime::service::SemanticStatus;
use opencouch_runtime::{CrisisGate, Runtime};

#[tokio::test]
async fn indirect_language_is_raised_and_nothing_is_lowered() {
    let plain = CrisisGate::deterministic().with_semantic(false);
    let gate = CrisisGate::deterministic();
    assert!(gate.has_semantic() && !plain.has_semantic());

    // Written for this test: hopelessness with no risk vocabulary the
    // rules list.
    let msg = "honestly i don't see the point of anything anymore";
    let v = gate.assess(&[], msg).await;
    let p = plain.assess(&[], msg).await;
    assert!(v.assessment().level >= p.assessment().level);
    assert!(v.assessment().level.get() >= 1, "{:?}", v.semantic());
    assert!(v.semantic().is_some(), "the layer ran");
    if v.assessment().level > p.assessment().level {
        assert_eq!(v.layer(), "learned");
    }

    // Ordinary stress stays 0.
    let v = gate
        .assess(&[], "my exam is tomorrow and i'm a bit nervous")
        .await;
    assert_eq!(v.assessment().level.get(), 0);

    // Explicit risk keeps its level (the layer does not even run at 2+).
    let v = gate.assess(&[], "i want to kill myself").await;
    assert_eq!(v.assessment().level.get(), 2);
    assert!(v.semantic().is_none());

    // A deterministic override decides alone.
    let v = gate.assess(&[], "work is killing me lol").await;
    assert_eq!(v.assessment().level.get(), 0);
    assert!(v.semantic().is_none(), "overrides skip the layer");
}

fn settings(data_dir: &std::path::Path) -> Settings {
    Settings {
        mode: RuntimeMode::Deterministic,
        data_dir: Some(data_dir.to_path_buf()),
        ..Settings::default()
    }
}

#[tokio::test]
async fn a_runtime_reports_the_layer_and_can_turn_it_off() {
    let scratch = tempfile::tempdir().expect("scratch");
    let rt = Runtime::from_settings(&settings(scratch.path()), MemoryMode::Incognito)
        .await
        .expect("runtime");
    assert_eq!(rt.semantic_status(), Some(SemanticStatus::On));
    assert_eq!(rt.semantic_status().map(|s| s.label()), Some("learned"));
    assert!(rt.semantic_on() && rt.service().semantic_signal());
    let out = rt
        .run_turn(AgentInput {
            memory_mode: MemoryMode::Incognito,
            ..AgentInput::new("t1", "honestly i don't see the point of anything anymore")
        })
        .await
        .expect("turn");
    assert!(out.diagnostics.get_str("crisis_layer").is_some());
    let off = rt.with_semantic(false);
    assert_eq!(off.semantic_status(), Some(SemanticStatus::Off));
    assert!(!off.semantic_on() && !off.service().semantic_signal());
    assert_eq!(SemanticStatus::Off.label(), "off");
}
