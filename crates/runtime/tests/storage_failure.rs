//! A crisis reply never depends on storage: with the store failing at load
//! or at commit (fault-injecting stores, `opencouch_store::faults`), a
//! level ≥ 2 message still gets the crisis reply with verified resources,
//! flagged `saved: false`; any other message still fails with the storage
//! error. Through `run_turn` and `run_turn_stream`, deterministic and
//! hybrid (with the model down too).

mod common;

use common::ThroughService;

use std::time::Duration;

use common::{shows_resource_number, transcript_len};
use futures::StreamExt;
use opencouch_core::{AgentInput, AgentOutput, ResponseType, Route, RuntimeMode, StreamEvent};
use opencouch_llm::{LlmConfig, OpenAiCompatClient};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::Stores;
use opencouch_store::faults::{Fault, FaultSwitch, with_faults};

const IMMINENT: &str = "I am going to kill myself tonight, I have the pills ready";
const ORDINARY: &str = "I feel stressed about my exams";

fn faulty() -> (Runtime, FaultSwitch) {
    let (stores, faults) = with_faults(Stores::in_memory());
    (
        Runtime::persistent(stores, None, RuntimeOptions::default()),
        faults,
    )
}

fn assert_unsaved_crisis(out: &AgentOutput, status: &str) {
    assert!(!out.saved, "flagged not saved");
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert_eq!(out.route, Route::Crisis);
    assert_eq!(out.crisis.level.get(), 3);
    assert!(
        shows_resource_number(out) || !out.resources.is_empty(),
        "{out:?}"
    );
    assert!(
        out.response_text.contains("emergency"),
        "{}",
        out.response_text
    );
    assert_eq!(out.diagnostics.get_str("storage_status"), Some(status));
}

async fn stream(rt: &Runtime, thread: &str, message: &str) -> Vec<StreamEvent> {
    rt.run_turn_stream(AgentInput::new(thread, message))
        .collect()
        .await
}

#[tokio::test]
async fn load_failure_still_answers_a_crisis_and_refuses_the_rest() {
    let (rt, faults) = faulty();
    faults.set(Fault::Load, true);
    let out = rt
        .run_turn(AgentInput::new("sf-load", IMMINENT))
        .await
        .expect("a crisis reply despite the store");
    assert_unsaved_crisis(&out, "load_failed");
    assert_eq!(
        out.diagnostics.get_str("crisis_log_status"),
        Some("captured")
    );

    let err = rt
        .run_turn(AgentInput::new("sf-load", ORDINARY))
        .await
        .expect_err("non-crisis turns still fail");
    assert_eq!(
        err.code(),
        opencouch_runtime::service::ErrorCode::StorageUnavailable
    );
    assert_eq!(err.code(), "storage_unavailable");

    faults.set(Fault::Load, false);
    assert_eq!(transcript_len(&rt, "sf-load").await, 0, "nothing was saved");
}

#[tokio::test]
async fn commit_failure_still_delivers_the_crisis_reply() {
    let (rt, faults) = faulty();
    faults.set(Fault::Commit, true);
    let out = rt
        .run_turn(AgentInput::new("sf-commit", IMMINENT))
        .await
        .expect("delivered");
    assert_unsaved_crisis(&out, "commit_failed");
    let err = rt
        .run_turn(AgentInput::new("sf-commit", ORDINARY))
        .await
        .expect_err("fails as before");
    assert_eq!(err.code(), "storage_unavailable");
    faults.set(Fault::Commit, false);
    assert_eq!(transcript_len(&rt, "sf-commit").await, 0);
    // Storage back: the next turn is saved as usual.
    let ok = rt
        .run_turn(AgentInput::new("sf-commit", ORDINARY))
        .await
        .expect("saved again");
    assert!(ok.saved);
    assert_eq!(transcript_len(&rt, "sf-commit").await, 2);
}

#[tokio::test]
async fn with_everything_down_the_crisis_reply_still_arrives() {
    let (rt, faults) = faulty();
    faults.set_all(true);
    let out = rt
        .run_turn(AgentInput::new("sf-all", IMMINENT))
        .await
        .expect("delivered");
    assert_unsaved_crisis(&out, "load_failed");
    assert_eq!(out.diagnostics.get_str("crisis_log_status"), Some("failed"));
}

#[tokio::test]
async fn an_episode_follow_up_commit_failure_is_delivered_unsaved() {
    let (rt, faults) = faulty();
    let first = rt
        .run_turn(AgentInput::new("sf-ep", "I want to kill myself"))
        .await
        .expect("saved");
    assert!(first.saved);
    faults.set(Fault::Commit, true);
    let uk = rt
        .run_turn(AgentInput::new("sf-ep", "I'm in the UK"))
        .await
        .expect("delivered");
    assert!(!uk.saved);
    assert_eq!(uk.response_type, ResponseType::Crisis);
    assert!(uk.response_text.contains("116 123"), "{}", uk.response_text);
}

#[tokio::test]
async fn the_stream_ends_with_done_not_error() {
    for fault in [Fault::Load, Fault::Commit] {
        let (rt, faults) = faulty();
        faults.set(fault, true);
        let events = stream(&rt, "sf-stream", IMMINENT).await;
        let names: Vec<&str> = events.iter().map(StreamEvent::name).collect();
        assert_eq!(names.first(), Some(&"status"), "{fault:?}: {names:?}");
        assert_eq!(names.last(), Some(&"done"), "{fault:?}: {names:?}");
        assert!(!names.contains(&"error"), "{fault:?}: {names:?}");
        assert!(names.contains(&"chunk") && names.contains(&"response_ready"));
        let Some(StreamEvent::Done { output }) = events.last() else {
            panic!("done last");
        };
        assert!(!output.saved);
        assert_eq!(output.response_type, ResponseType::Crisis);

        let events = stream(&rt, "sf-stream", ORDINARY).await;
        assert!(
            matches!(events.last(), Some(StreamEvent::Error { code, .. }) if code == "storage_unavailable"),
            "{fault:?}: {events:?}"
        );
    }
}

#[tokio::test]
async fn hybrid_with_the_model_and_the_store_down_still_answers() {
    // Nothing listens on port 9: every model call fails fast.
    let mut config = LlmConfig::local("http://127.0.0.1:9/v1", "down");
    config.max_attempts = 1;
    config.timeout = Duration::from_millis(500);
    let model = std::sync::Arc::new(OpenAiCompatClient::new(config).expect("client"));
    let (stores, faults) = with_faults(Stores::in_memory());
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let rt = Runtime::persistent(stores, Some(model), opts);
    assert_eq!(rt.mode(), RuntimeMode::Hybrid);
    for fault in [Fault::Load, Fault::Commit] {
        faults.set_all(false);
        faults.set(fault, true);
        let out = rt
            .run_turn(AgentInput::new("sf-hybrid", "I want to kill myself"))
            .await
            .expect("delivered");
        assert!(!out.saved, "{fault:?}");
        assert_eq!(out.response_type, ResponseType::Crisis, "{fault:?}");
        assert!(!out.resources.is_empty(), "{fault:?}");
    }
}

/// The retry policy (`opencouch_runtime::retry`): one transient store
/// failure (a dropped connection the next attempt no longer sees) no longer
/// fails the turn: the load is read again, the commit is made again once
/// the store shows it was not applied, the crisis log is appended again.
/// Two failures in a row still fail an ordinary turn, as before.
#[tokio::test]
async fn a_single_transient_store_failure_no_longer_fails_the_turn() {
    for fault in [Fault::Load, Fault::Commit] {
        let (rt, faults) = faulty();
        faults.fail_times(fault, 1);
        let out = rt
            .run_turn(AgentInput::new("sf-once", ORDINARY))
            .await
            .unwrap_or_else(|e| panic!("{fault:?} once: {e}"));
        assert!(out.saved, "{fault:?}");
        assert_eq!(
            transcript_len(&rt, "sf-once").await,
            2,
            "{fault:?}: committed exactly once"
        );
    }

    let (rt, faults) = faulty();
    faults.fail_times(Fault::CrisisLog, 1);
    let out = rt
        .run_turn(AgentInput::new("sf-log", IMMINENT))
        .await
        .expect("a crisis reply");
    assert!(out.saved);
    assert_eq!(
        out.diagnostics.get_str("crisis_log_status"),
        Some("captured")
    );

    let (rt, faults) = faulty();
    faults.fail_times(Fault::Commit, 2);
    assert!(
        rt.run_turn(AgentInput::new("sf-twice", ORDINARY))
            .await
            .is_err()
    );
    assert_eq!(
        transcript_len(&rt, "sf-twice").await,
        0,
        "nothing half-saved"
    );
}
