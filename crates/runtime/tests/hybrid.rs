//! Integration tests of the turn runtime in hybrid mode against the fake
//! OpenAI-compatible server (real HTTP on loopback): tool calls, fallbacks,
//! model faults, exercise progress validation, and the crisis-routing
//! property (no model output can move a crisis message elsewhere).

mod common;

use std::time::Duration;

use common::ThroughService;
use common::{fake_model, hybrid, shows_resource_number, state, transcript_len, turn};
use opencouch_core::{ResponseStyle, ResponseType, Route, RuntimeMode};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::Stores;
use opencouch_testkit::canned::{gate_reply, gate_request, triage_request};
use opencouch_testkit::{FakeOpenAi, Match, Reply, canned};
use serde_json::{Value, json};

const SKILL_TOOL: &str = "load_therapeutic_response_skill";
const CRISIS_TOOL: &str = "lookup_crisis_resources";
const GROUNDED_TOOL: &str = "answer_grounded_lookup";
const RECORD_TOOL: &str = "record_guided_exercise_progress";

fn triage_reply(route: &str, flow: &str, basis: &str, exercise: Option<&str>) -> Reply {
    Reply::json(canned::triage_json(route, flow, basis, exercise))
}

/// A fake whose gate says level 0 and whose triage says `route`.
async fn fake_with(route: &str) -> FakeOpenAi {
    let fake = FakeOpenAi::start().await;
    fake.always_when(gate_request(), gate_reply(0));
    fake.always_when(
        triage_request(),
        triage_reply(route, "none", "ambiguous_or_none", None),
    );
    fake
}

fn tool_calls(out: &opencouch_core::AgentOutput, key: &str) -> Vec<String> {
    out.diagnostics
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn therapeutic_turn_loads_a_skill_then_answers() {
    let fake = fake_with("therapeutic").await;
    fake.push_when(
        Match::tool_offered(SKILL_TOOL),
        Reply::tool_call(
            SKILL_TOOL,
            json!({"style": "reflective", "approach": "cbt"}),
        ),
    );
    let reply = "It sounds like the week has worn you down, and that makes sense.";
    fake.push_when(Match::tool_offered(SKILL_TOOL), Reply::text(reply));
    let rt = hybrid(&fake);
    assert_eq!(rt.mode(), RuntimeMode::Hybrid);
    let out = turn(&rt, "h-ther", "this week has been exhausting").await;
    assert_eq!(out.route, Route::Therapeutic);
    assert_eq!(out.response_text, reply);
    assert_eq!(out.response_style, ResponseStyle::Reflective);
    assert_eq!(
        out.therapeutic_approach,
        Some(opencouch_core::Approach::Cbt)
    );
    assert_eq!(
        tool_calls(&out, "openai_therapeutic_tool_calls"),
        vec![SKILL_TOOL.to_owned()]
    );
    assert_eq!(out.diagnostics.get_str("triage_path"), Some("model"));
    assert_eq!(
        out.diagnostics.get_str("crisis_classifier_path"),
        Some("llm_primary")
    );
    assert_eq!(transcript_len(&rt, "h-ther").await, 2);
}

#[tokio::test]
async fn crisis_turn_with_lookup_uses_the_model_reply() {
    let fake = fake_with("therapeutic").await;
    fake.push_when(
        Match::tool_offered(CRISIS_TOOL),
        Reply::tool_call(CRISIS_TOOL, json!({"location_hint": null})),
    );
    let reply = "I'm really glad you told me. You deserve support right now, and you don't have to hold this alone.";
    fake.push_when(
        Match::tool_offered("get_crisis_support_template"),
        Reply::text(reply),
    );
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-crisis", "I want to kill myself, I'm in the US").await;
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert_eq!(out.route, Route::Crisis);
    assert!(
        out.response_text.starts_with(reply),
        "{}",
        out.response_text
    );
    assert!(
        shows_resource_number(&out),
        "verified resources appended: {}",
        out.response_text
    );
    assert_eq!(
        tool_calls(&out, "openai_crisis_tool_calls"),
        vec![CRISIS_TOOL.to_owned()]
    );
    assert_eq!(
        out.diagnostics.get_bool("openai_crisis_tool_fallback"),
        None
    );
    assert_eq!(
        out.diagnostics.get_bool("crisis_model_reply_rejected"),
        None
    );
}

#[tokio::test]
async fn crisis_turn_without_lookup_falls_back_to_the_runtime_lookup() {
    let fake = fake_with("therapeutic").await;
    fake.set_default(Reply::text(
        "I'm so sorry you're feeling this way. Please reach out to one of these lines now.",
    ));
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-crisis-skip", "I want to kill myself, I'm in the US").await;
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert_eq!(
        out.diagnostics.get_bool("openai_crisis_tool_fallback"),
        Some(true)
    );
    assert!(!out.resources.is_empty());
    assert!(shows_resource_number(&out), "{}", out.response_text);
    // The rerun must not offer the lookup tool again.
    let specialist: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.tool_names()
                .iter()
                .any(|t| t == "get_crisis_support_template")
        })
        .collect();
    assert!(specialist.len() >= 2);
    assert!(
        specialist
            .last()
            .is_some_and(|r| !r.tool_names().iter().any(|t| t == CRISIS_TOOL))
    );
}

#[tokio::test]
async fn invented_phone_number_is_replaced_by_the_verified_reply() {
    let fake = fake_with("therapeutic").await;
    fake.push_when(
        Match::tool_offered(CRISIS_TOOL),
        Reply::tool_call(CRISIS_TOOL, json!({"location_hint": null})),
    );
    fake.set_default(Reply::text(
        "Please call the support line at 555 0199 4321 right away.",
    ));
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-invented", "I want to kill myself, I'm in the US").await;
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert_eq!(
        out.diagnostics.get_bool("crisis_model_reply_rejected"),
        Some(true)
    );
    assert!(!out.response_text.contains("0199"), "{}", out.response_text);
    assert!(shows_resource_number(&out), "{}", out.response_text);
    // Same text as the deterministic runtime gives for this message.
    let det = Runtime::persistent(Stores::in_memory(), None, RuntimeOptions::default());
    let det_out = turn(&det, "d", "I want to kill myself, I'm in the US").await;
    assert_eq!(out.response_text, det_out.response_text);
}

#[tokio::test]
async fn grounded_lookup_without_tool_call_falls_back() {
    let fake = fake_with("grounded_lookup").await;
    fake.set_default(Reply::text(
        "Here is what reputable sources say about anxiety treatment.",
    ));
    let rt = hybrid(&fake);
    let out = turn(
        &rt,
        "h-grounded",
        "can you find research on anxiety treatment",
    )
    .await;
    assert_eq!(out.route, Route::GroundedLookup);
    assert_eq!(
        out.diagnostics.get_bool("openai_grounded_tool_fallback"),
        Some(true)
    );
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.tool_names().iter().any(|t| t == GROUNDED_TOOL)),
        "the grounded tool was offered"
    );
    assert!(
        out.response_text.contains("Sources:"),
        "{}",
        out.response_text
    );
}

#[tokio::test]
async fn specialist_server_error_falls_back_and_commits() {
    let fake = fake_with("therapeutic").await;
    fake.always_when(Match::tool_offered(SKILL_TOOL), Reply::server_error());
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-500", "I had a rough day at work").await;
    assert_eq!(out.route, Route::Therapeutic);
    assert!(!out.response_text.trim().is_empty());
    assert!(
        out.diagnostics
            .get_str("openai_sdk_fallback_reason")
            .is_some(),
        "{:?}",
        out.diagnostics
    );
    assert_eq!(transcript_len(&rt, "h-500").await, 2);
}

#[tokio::test]
async fn specialist_timeout_falls_back_and_commits() {
    let fake = fake_with("therapeutic").await;
    fake.always_when(
        Match::tool_offered(SKILL_TOOL),
        Reply::hang(Duration::from_secs(10)),
    );
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let rt = Runtime::persistent(
        Stores::in_memory(),
        Some(fake_model(&fake, Duration::from_millis(300))),
        opts,
    );
    let out = turn(&rt, "h-hang", "I had a rough day at work").await;
    assert!(!out.response_text.trim().is_empty());
    assert!(
        out.diagnostics
            .get_str("openai_sdk_fallback_reason")
            .is_some(),
        "{:?}",
        out.diagnostics
    );
    assert_eq!(transcript_len(&rt, "h-hang").await, 2);
}

#[tokio::test]
async fn gate_model_failure_uses_the_deterministic_ladder() {
    let fake = FakeOpenAi::start().await;
    fake.always_when(gate_request(), Reply::server_error());
    fake.always_when(
        triage_request(),
        triage_reply("therapeutic", "none", "ambiguous_or_none", None),
    );
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-gate", "I want to kill myself, I'm in the US").await;
    assert_eq!(
        out.diagnostics.get_bool("crisis_llm_failure_occurred"),
        Some(true)
    );
    assert_eq!(
        out.diagnostics.get_str("crisis_classifier_path"),
        Some("deterministic")
    );
    assert_eq!(out.crisis.level.get(), 2);
    assert_eq!(out.response_type, ResponseType::Crisis);

    let out = turn(&rt, "h-gate-0", "I had a quiet day").await;
    assert_eq!(
        out.diagnostics.get_bool("crisis_llm_failure_occurred"),
        Some(true)
    );
    assert_eq!(out.crisis.level.get(), 0);
    assert_eq!(out.route, Route::Therapeutic);
}

#[tokio::test]
async fn model_cannot_lower_the_gate_level() {
    let fake = fake_with("therapeutic").await;
    let rt = hybrid(&fake);
    let out = turn(
        &rt,
        "h-lower",
        "i have pills and i'm going to take them all tonight",
    )
    .await;
    assert_eq!(out.crisis.level.get(), 3);
    assert_eq!(out.response_type, ResponseType::Crisis);
}

#[tokio::test]
async fn exercise_progress_for_another_exercise_or_step_is_refused() {
    // (what the model reports, why it must be refused)
    let cases = [
        json!({"outcome": "complete", "expected_skill_id": "thought_work_simple_record", "expected_step_id": "situation"}),
        json!({"outcome": "complete", "expected_skill_id": "grounding_box_breathing", "expected_step_id": "no_such_step"}),
    ];
    for (i, report) in cases.into_iter().enumerate() {
        let fake = FakeOpenAi::start().await;
        fake.always_when(gate_request(), gate_reply(0));
        fake.push_when(
            triage_request(),
            triage_reply(
                "guided_exercise",
                "start",
                "explicit_user_request",
                Some("grounding_box_breathing"),
            ),
        );
        fake.always_when(
            triage_request(),
            triage_reply("guided_exercise", "continue", "ambiguous_or_none", None),
        );
        let rt = hybrid(&fake);
        let t = format!("h-ex-{i}");
        let out = turn(&rt, &t, "let's do box breathing").await;
        assert_eq!(out.route, Route::GuidedExercise);
        let before = state(&rt, &t).await.exercise_state.expect("started");

        fake.push_when(
            Match::tool_offered(RECORD_TOOL),
            Reply::tool_call(RECORD_TOOL, report.clone()),
        );
        fake.push_when(
            Match::tool_offered(RECORD_TOOL),
            Reply::text("Great, let's move on to the next part."),
        );
        // Step classification (if asked) says hold: nothing should move.
        fake.always_when(
            Match::has_response_format(),
            Reply::json(json!({"outcome": "hold"})),
        );
        let out = turn(&rt, &t, "hmm").await;
        assert_eq!(
            out.diagnostics.get_bool("exercise_progress_refused"),
            Some(true),
            "{report}"
        );
        assert_eq!(
            out.diagnostics.get_str("exercise_progress_source"),
            Some("runtime_fallback"),
            "{report}"
        );
        assert_ne!(out.response_text, "Great, let's move on to the next part.");
        let after = state(&rt, &t).await.exercise_state.expect("still active");
        assert_eq!(after.exercise_type, before.exercise_type);
        assert_eq!(after.exercise_step, before.exercise_step, "{report}");
    }
}

// ---------------------------------------------------------------- property

mod crisis_property {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    const PHRASES: &[&str] = &[
        "I want to kill myself",
        "i want to die",
        "kms",
        "I'm going to end my life",
        "I have been cutting myself again",
        "i have pills and i'm going to take them all tonight",
    ];
    const PREFIXES: &[&str] = &[
        "",
        "honestly ",
        "ok so after work today ",
        "I don't know, ",
        "my exams went badly and ",
    ];
    const SUFFIXES: &[&str] = &[
        "",
        " tonight",
        " and nobody would notice",
        ". the weather is nice though",
        "...",
    ];

    #[test]
    fn crisis_messages_never_reach_the_therapeutic_specialist() {
        let tokio_rt = tokio::runtime::Runtime::new().expect("tokio");
        let fake = tokio_rt.block_on(FakeOpenAi::start());
        // The model tries to route everything elsewhere.
        fake.always_when(gate_request(), gate_reply(0));
        fake.always_when(
            triage_request(),
            triage_reply("therapeutic", "none", "ambiguous_or_none", None),
        );
        fake.set_default(Reply::text(
            "You seem fine; let's just talk about your day.",
        ));
        let rt = tokio_rt.block_on(async { hybrid(&fake) });

        let strategy = (
            proptest::sample::select(PREFIXES),
            proptest::sample::select(PHRASES),
            proptest::sample::select(SUFFIXES),
        )
            .prop_map(|(p, m, s)| format!("{p}{m}{s}"))
            .prop_filter("gate scores >= 2", |msg| {
                opencouch_safety::classify(&[], msg).assessment.level.get() >= 2
            });
        let mut runner = TestRunner::new(Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        });
        let n = std::sync::atomic::AtomicU64::new(0);
        runner
            .run(&strategy, |msg| {
                let n = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                fake.clear_requests();
                let out = tokio_rt.block_on(turn(&rt, &format!("prop-{n}"), &msg));
                prop_assert_eq!(out.response_type, ResponseType::Crisis, "{}", msg);
                prop_assert_eq!(out.route, Route::Crisis, "{}", msg);
                prop_assert!(!out.resources.is_empty(), "{}", msg);
                let offered_skill = fake
                    .requests()
                    .iter()
                    .any(|r| r.tool_names().iter().any(|t| t == SKILL_TOOL));
                prop_assert!(!offered_skill, "therapeutic specialist ran for {}", msg);
                Ok(())
            })
            .expect("property holds");
    }
}

const LIST_TOOL: &str = "list_guided_exercise_skills";

/// The tools the therapeutic specialist's last request offered, sorted (as
/// the fake model received them).
fn therapeutic_tools_offered(fake: &FakeOpenAi) -> Vec<String> {
    let mut names = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.tool_names().iter().any(|t| t == SKILL_TOOL))
        .map(|r| r.tool_names())
        .unwrap_or_default();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn a_therapeutic_turn_offers_the_five_read_and_offer_tools() {
    let fake = fake_with("therapeutic").await;
    fake.set_default(Reply::text("That sounds like a lot to carry."));
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-five", "this week has been exhausting").await;
    assert_eq!(out.route, Route::Therapeutic);
    assert_eq!(
        therapeutic_tools_offered(&fake),
        [
            GROUNDED_TOOL,
            LIST_TOOL,
            SKILL_TOOL,
            "show_memory_status",
            "show_saved_memory",
        ]
    );
    assert_eq!(out.mode_source, opencouch_core::ModeSource::Llm);
    // The first turn of a session is its opening: stored, shown, and its
    // stage guidance is in the therapeutic prompt (the context table says so).
    assert_eq!(out.diagnostics.get_str("session_stage"), Some("opening"));
    assert_eq!(
        state(&rt, "h-five").await.session_progress.stage,
        Some(opencouch_core::state::SessionStage::Opening)
    );
    let system = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.tool_names().iter().any(|t| t == SKILL_TOOL))
        .and_then(|r| r.messages().first().cloned())
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert!(system.contains("Current stage: opening."), "{system}");

    // Incognito: the persistent-only tool is hidden.
    let fake = fake_with("therapeutic").await;
    fake.set_default(Reply::text("That sounds like a lot to carry."));
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let rt = Runtime::incognito(
        opencouch_store::EphemeralStores::new(),
        Some(fake_model(&fake, Duration::from_secs(2))),
        opts,
    );
    let out = rt
        .run_turn(opencouch_core::AgentInput {
            memory_mode: opencouch_core::MemoryMode::Incognito,
            ..opencouch_core::AgentInput::new("h-five-incognito", "this week has been exhausting")
        })
        .await
        .unwrap();
    assert_eq!(out.route, Route::Therapeutic);
    assert!(!out.should_persist_memory, "incognito keeps nothing");
    assert_eq!(
        therapeutic_tools_offered(&fake),
        [GROUNDED_TOOL, LIST_TOOL, SKILL_TOOL, "show_memory_status"]
    );
}

#[tokio::test]
async fn an_exercise_offered_after_listing_starts_only_when_accepted_next_turn() {
    let fake = fake_with("therapeutic").await;
    fake.push_when(
        Match::tool_offered(LIST_TOOL),
        Reply::tool_call(LIST_TOOL, json!({"approach": null})),
    );
    let offer = "That sounds really unsettling. Would you like to try box breathing together?";
    fake.push_when(Match::tool_offered(LIST_TOOL), Reply::text(offer));
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-offer", "I can't settle tonight").await;
    assert_eq!(out.route, Route::Therapeutic);
    assert_eq!(out.response_text, offer);
    assert_eq!(
        tool_calls(&out, "openai_therapeutic_tool_calls"),
        vec![LIST_TOOL.to_owned()]
    );
    assert!(
        state(&rt, "h-offer").await.exercise_state.is_none(),
        "the model offers; it never starts an exercise"
    );
    // The list's result reached the model with its side-effect flags.
    let result = fake
        .requests()
        .into_iter()
        .flat_map(|r| r.messages().to_vec())
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .expect("a tool result was sent back");
    let result: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(result["side_effect"], false);
    assert_eq!(result["retry_safe"], true);
    assert!(
        result["exercises"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );

    // The person accepts on the next message: the app starts it.
    fake.push_when(
        triage_request(),
        triage_reply(
            "guided_exercise",
            "start",
            "accepted_assistant_offer",
            Some("grounding_box_breathing"),
        ),
    );
    fake.set_default(Reply::text(
        "Let's begin. Breathe in slowly for a count of four.",
    ));
    let out = turn(&rt, "h-offer", "yes please").await;
    assert_eq!(out.route, Route::GuidedExercise);
    assert_eq!(
        state(&rt, "h-offer")
            .await
            .exercise_state
            .map(|e| e.exercise_type),
        Some("grounding_box_breathing".to_owned())
    );
}

#[tokio::test]
async fn a_claimed_acceptance_without_an_offer_starts_nothing() {
    let fake = fake_with("therapeutic").await;
    fake.push_when(
        triage_request(),
        triage_reply(
            "guided_exercise",
            "start",
            "accepted_assistant_offer",
            Some("grounding_box_breathing"),
        ),
    );
    fake.set_default(Reply::text("I'm here with you."));
    let rt = hybrid(&fake);
    let out = turn(&rt, "h-no-offer", "yes").await;
    assert_eq!(out.route, Route::Therapeutic);
    assert!(state(&rt, "h-no-offer").await.exercise_state.is_none());
}
