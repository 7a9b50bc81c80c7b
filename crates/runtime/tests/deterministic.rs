//! Integration tests of the turn runtime in deterministic mode: every
//! route, guided exercises end to end, streaming order and sessions.

mod common;

use common::ThroughService;

use common::{deterministic, digit_runs, shows_resource_number, state, transcript_len, turn};
use futures::StreamExt;
use opencouch_core::{
    AgentInput, MemoryMode, ResponseStyle, ResponseType, Route, RuntimeMode, Stage, StreamEvent,
};
use opencouch_exercises::Catalog;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::FeedbackSource;
use opencouch_store::{EphemeralStores, FeedbackLabel};

// ------------------------------------------------------------------ routes

#[tokio::test]
async fn therapeutic_turns_pick_a_therapeutic_style() {
    let rt = deterministic();
    let cases = [
        "I had a really rough day at work and I feel drained",
        "I keep arguing with my partner and I don't know what to do",
        "this homework is killing me",
    ];
    for (i, msg) in cases.iter().enumerate() {
        let out = turn(&rt, &format!("ther-{i}"), msg).await;
        assert_eq!(out.route, Route::Therapeutic, "{msg}");
        assert_eq!(out.response_type, ResponseType::Therapeutic, "{msg}");
        assert_eq!(out.crisis.level.get(), 0, "{msg}");
        assert!(
            !matches!(
                out.response_style,
                ResponseStyle::CrisisResponse
                    | ResponseStyle::GroundedLookup
                    | ResponseStyle::MemoryControl
                    | ResponseStyle::GuidedExercise
            ),
            "{msg}: {:?}",
            out.response_style
        );
        assert!(!out.response_text.trim().is_empty());
        assert!(out.resources.is_empty(), "{msg}");
        assert_eq!(
            out.diagnostics.get_str("triage_path"),
            Some("deterministic")
        );
    }
}

#[tokio::test]
async fn crisis_levels_route_as_the_ladder_says() {
    let rt = deterministic();
    // (message, level)
    let cases = [
        (
            "i have pills and i'm going to take them all tonight, i'm in the US",
            3,
        ),
        ("I want to kill myself. I live in the UK", 2),
        ("kms, I'm in Canada", 2),
    ];
    for (i, (msg, level)) in cases.iter().enumerate() {
        let thread = format!("crisis-{i}");
        let out = turn(&rt, &thread, msg).await;
        assert_eq!(out.crisis.level.get(), *level, "{msg}");
        assert_eq!(out.response_type, ResponseType::Crisis, "{msg}");
        assert_eq!(out.route, Route::Crisis, "{msg}");
        assert_eq!(out.response_style, ResponseStyle::CrisisResponse, "{msg}");
        assert!(!out.resources.is_empty(), "{msg}: resources");
        assert!(shows_resource_number(&out), "{msg}: {}", out.response_text);
        assert!(
            out.diagnostics.get_str("crisis_log_status").is_some(),
            "{msg}"
        );
        // The turn is committed: both messages are in the transcript.
        assert_eq!(transcript_len(&rt, &thread).await, 2);
    }
}

#[tokio::test]
async fn level_one_asks_a_safety_question_without_hotlines() {
    let rt = deterministic();
    let out = turn(&rt, "lvl1", "i feel hopeless and trapped").await;
    assert_eq!(out.crisis.level.get(), 1);
    assert_eq!(out.route, Route::Therapeutic);
    assert_eq!(out.response_type, ResponseType::Therapeutic);
    assert_eq!(out.response_style, ResponseStyle::Clarifying);
    assert!(out.response_text.contains('?'), "{}", out.response_text);
    assert!(
        digit_runs(&out.response_text).is_empty(),
        "{}",
        out.response_text
    );
    let lower = out.response_text.to_lowercase();
    for banned in ["hotline", "988", "helpline", "lifeline"] {
        assert!(!lower.contains(banned), "{banned}: {}", out.response_text);
    }
    assert!(out.resources.is_empty());
}

#[tokio::test]
async fn grounded_lookup_answers_with_sources() {
    let rt = deterministic();
    let out = turn(&rt, "lookup", "can you find research on anxiety treatment").await;
    assert_eq!(out.route, Route::GroundedLookup, "{:?}", out.diagnostics);
    assert_eq!(out.response_style, ResponseStyle::GroundedLookup);
    assert!(
        out.response_text.contains("Sources:"),
        "{}",
        out.response_text
    );
    assert!(
        out.response_text.contains("nimh.nih.gov"),
        "{}",
        out.response_text
    );
}

#[tokio::test]
async fn memory_control_save_list_delete_and_cancel() {
    let rt = deterministic();
    let t = "mem";
    let out = turn(&rt, t, "memory status").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert_eq!(out.response_style, ResponseStyle::MemoryControl);

    let out = turn(&rt, t, "Remember that I prefer short answers.").await;
    assert_eq!(out.route, Route::MemoryControl);
    let out = turn(&rt, t, "show my memory").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(
        out.response_text.contains("short answers"),
        "{}",
        out.response_text
    );

    // Delete, then cancel: still there.
    let out = turn(&rt, t, "forget preference number 1").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(
        state(&rt, t).await.pending_memory_action.is_some(),
        "deletion is staged"
    );
    let out = turn(&rt, t, "cancel").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(state(&rt, t).await.pending_memory_action.is_none());
    let out = turn(&rt, t, "show my memory").await;
    assert!(
        out.response_text.contains("short answers"),
        "{}",
        out.response_text
    );

    // Delete, then confirm: gone.
    let staged = turn(&rt, t, "forget preference number 1").await;
    let out = turn(&rt, t, "yes").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(
        state(&rt, t).await.pending_memory_action.is_none(),
        "{} / {} / {:?}",
        staged.response_text,
        out.response_text,
        out.diagnostics
    );
    let out = turn(&rt, t, "show my memory").await;
    assert!(
        !out.response_text.contains("short answers"),
        "{}",
        out.response_text
    );
}

#[tokio::test]
async fn exercise_starts_only_on_explicit_request() {
    let rt = deterministic();
    let out = turn(&rt, "ex-start", "let's do box breathing").await;
    assert_eq!(out.route, Route::GuidedExercise);
    assert_eq!(out.response_style, ResponseStyle::GuidedExercise);
    let st = state(&rt, "ex-start").await;
    assert_eq!(
        st.exercise_state.as_ref().map(|e| e.exercise_type.as_str()),
        Some("grounding_box_breathing")
    );

    let out = turn(&rt, "ex-offer", "help me calm down").await;
    assert_eq!(out.route, Route::Therapeutic);
    assert!(
        state(&rt, "ex-offer").await.exercise_state.is_none(),
        "an offer is not a start"
    );
}

#[tokio::test]
async fn idiom_stays_level_zero_therapeutic() {
    let rt = deterministic();
    let out = turn(&rt, "idiom", "this homework is killing me").await;
    assert_eq!(out.crisis.level.get(), 0);
    assert_eq!(out.route, Route::Therapeutic);
    assert_eq!(out.response_type, ResponseType::Therapeutic);
    assert!(out.resources.is_empty());
}

#[tokio::test]
async fn invalid_input_is_rejected_without_writing() {
    let rt = deterministic();
    let cases: [(AgentInput, &str); 3] = [
        (AgentInput::new("", "hello"), "invalid_thread_id"),
        (AgentInput::new("t", "   "), "invalid_input"),
        (AgentInput::new("t", "x".repeat(8001)), "message_too_long"),
    ];
    for (input, code) in cases {
        let err = rt.run_turn(input).await.expect_err("rejected");
        assert_eq!(err.code(), code);
    }
    assert_eq!(transcript_len(&rt, "t").await, 0);
}

// --------------------------------------------------------------- exercises

#[path = "../../exercises/tests/support/walks.rs"]
mod walks;
use walks::WALKS;

#[tokio::test]
async fn every_exercise_walks_to_completion_through_the_runtime() {
    let catalog = Catalog::builtin();
    let mut ids: Vec<&str> = WALKS.iter().map(|w| w.0).collect();
    ids.sort_unstable();
    let mut all: Vec<&str> = catalog.all().iter().map(|e| e.id.as_str()).collect();
    all.sort_unstable();
    assert_eq!(ids, all, "one walk per catalog exercise");

    let rt = deterministic();
    for (id, request, replies) in WALKS {
        let ex = catalog.get(id).expect("in catalog");
        assert_eq!(replies.len(), ex.steps.len(), "{id}");
        let thread = format!("walk-{id}");
        let out = turn(&rt, &thread, request).await;
        assert_eq!(out.route, Route::GuidedExercise, "{id}: start");
        let started = state(&rt, &thread).await.exercise_state.expect("started");
        assert_eq!(started.exercise_type, *id);
        let approach = started.exercise_therapeutic_approach;

        for (i, reply) in replies.iter().enumerate() {
            let st = state(&rt, &thread).await;
            let ex_state = st
                .exercise_state
                .as_ref()
                .unwrap_or_else(|| panic!("{id}: active before step {i}"));
            assert_eq!(ex_state.exercise_step as usize, i, "{id}");
            assert_eq!(
                ex_state.exercise_therapeutic_approach, approach,
                "{id}: approach stays pinned"
            );
            let out = turn(&rt, &thread, reply).await;
            assert_eq!(out.route, Route::GuidedExercise, "{id} step {i}: {reply:?}");
            assert_eq!(
                out.diagnostics.get_str("exercise_step_outcome"),
                Some("complete"),
                "{id} step {i}: {reply:?}"
            );
            if i + 1 == replies.len() {
                assert_eq!(out.response_text, ex.closing, "{id}: closing reflection");
            }
        }
        let st = state(&rt, &thread).await;
        assert!(
            st.exercise_state.is_none(),
            "{id}: cleared after completion"
        );
        assert!(
            st.session_progress
                .exercises_completed
                .iter()
                .any(|e| e == id),
            "{id}: recorded as completed"
        );
    }
}

#[tokio::test]
async fn stuck_reply_gets_a_simpler_explanation_on_the_same_step() {
    let rt = deterministic();
    let t = "stuck";
    let start = turn(&rt, t, "can we try a thought record").await;
    let before = state(&rt, t).await.exercise_state.expect("started");
    let out = turn(&rt, t, "I don't get it").await;
    assert_eq!(out.route, Route::GuidedExercise);
    assert_eq!(
        out.diagnostics.get_str("exercise_transition"),
        Some("simplify"),
        "{:?}",
        out.diagnostics
    );
    assert_ne!(
        out.response_text, start.response_text,
        "a re-explanation, not a repeat"
    );
    let after = state(&rt, t).await.exercise_state.expect("still active");
    assert_eq!(after.exercise_step, before.exercise_step);
    assert_eq!(after.exercise_step_id, before.exercise_step_id);
}

#[tokio::test]
async fn exit_mid_exercise_clears_it() {
    let rt = deterministic();
    let t = "exit";
    turn(&rt, t, "let's do box breathing").await;
    turn(&rt, t, "done").await;
    let out = turn(&rt, t, "stop the exercise").await;
    assert_eq!(out.response_type, ResponseType::Therapeutic);
    let st = state(&rt, t).await;
    assert!(st.exercise_state.is_none());
    assert!(st.session_progress.exercises_completed.is_empty());
}

#[tokio::test]
async fn unsafe_reply_mid_exercise_gets_crisis_reply_and_clears_it() {
    let rt = deterministic();
    let t = "unsafe";
    turn(&rt, t, "let's do box breathing").await;
    let out = turn(&rt, t, "I want to kill myself").await;
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert_eq!(out.route, Route::Crisis);
    assert!(!out.resources.is_empty());
    assert!(state(&rt, t).await.exercise_state.is_none());
}

#[tokio::test]
async fn side_request_then_resume_keeps_step_and_approach() {
    let rt = deterministic();
    let t = "side";
    turn(&rt, t, "can we try a thought record").await;
    turn(&rt, t, "my friend didn't text back all day").await;
    let before = state(&rt, t).await.exercise_state.expect("active");
    assert_eq!(before.exercise_step, 1);

    let out = turn(&rt, t, "memory status").await;
    assert_eq!(out.route, Route::MemoryControl);
    let during = state(&rt, t)
        .await
        .exercise_state
        .expect("kept during side turn");
    assert_eq!(during.exercise_step, before.exercise_step);

    let out = turn(&rt, t, "back to the exercise").await;
    assert_eq!(out.route, Route::GuidedExercise);
    let after = state(&rt, t).await.exercise_state.expect("resumed");
    assert_eq!(after.exercise_step, before.exercise_step);
    assert_eq!(after.exercise_step_id, before.exercise_step_id);
    assert_eq!(
        after.exercise_therapeutic_approach,
        before.exercise_therapeutic_approach
    );
}

// --------------------------------------------------------------- streaming

#[tokio::test]
async fn stream_events_arrive_in_order() {
    let rt = deterministic();
    for (i, msg) in [
        "I had a long day and feel flat",
        "I want to kill myself",
        "memory status",
    ]
    .iter()
    .enumerate()
    {
        let events: Vec<StreamEvent> = rt
            .run_turn_stream(AgentInput::new(format!("stream-{i}"), *msg))
            .collect()
            .await;
        assert!(
            matches!(
                events.first(),
                Some(StreamEvent::Status {
                    stage: Stage::CrisisGate,
                    ..
                })
            ),
            "{msg}: first event"
        );
        let done: Vec<usize> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, StreamEvent::Done { .. }))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            done,
            vec![events.len() - 1],
            "{msg}: exactly one done, last"
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Error { .. }))
        );
        let ready = events
            .iter()
            .position(|e| matches!(e, StreamEvent::ResponseReady { .. }))
            .expect("response_ready");
        let first_chunk = events
            .iter()
            .position(|e| matches!(e, StreamEvent::Chunk { .. }))
            .expect("chunks");
        let last_status = events
            .iter()
            .rposition(|e| matches!(e, StreamEvent::Status { .. }))
            .expect("statuses");
        assert!(
            last_status < first_chunk && first_chunk < ready && ready < events.len() - 1,
            "{msg}: order"
        );
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Chunk { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let Some(StreamEvent::Done { output }) = events.last() else {
            unreachable!()
        };
        assert_eq!(
            text, output.response_text,
            "{msg}: chunks rejoin to the reply"
        );
    }
}

#[tokio::test]
async fn invalid_input_is_refused_before_any_stream_starts() {
    let rt = deterministic();
    let err = rt
        .service()
        .stream(AgentInput::new("s", " ").into())
        .err()
        .expect("refused");
    assert_eq!(err.code(), "invalid_input");
    assert_eq!(transcript_len(&rt, "s").await, 0);
}

// ---------------------------------------------------------------- sessions

#[tokio::test]
async fn end_session_after_substantive_turns_writes_a_summary() {
    let rt = deterministic();
    let t = "sess-long";
    for msg in [
        "I've been really stressed about my exams and can't sleep",
        "My parents keep putting pressure on me about grades",
        "I think I need a better plan for studying and some rest",
    ] {
        turn(&rt, t, msg).await;
    }
    let before = rt.stores().feedback.count().await.expect("count");
    let end = rt
        .end_session(
            t,
            None,
            Some(FeedbackLabel::Positive),
            FeedbackSource::CliEnd,
        )
        .await
        .expect("end");
    assert!(end.finalized);
    let summary = end.summary.expect("summary after three substantive turns");
    assert!(!summary.themes.is_empty(), "{summary:?}");
    assert!(!summary.summary.is_empty());
    assert!(end.feedback_recorded);
    assert_eq!(
        rt.stores().feedback.count().await.expect("count"),
        before + 1
    );
}

#[tokio::test]
async fn a_completed_exercise_is_kept_on_the_session_arc() {
    let rt = deterministic();
    let t = "sess-exercise";
    let (id, request, replies) = WALKS[0];
    turn(
        &rt,
        t,
        "Work has been overwhelming and I keep worrying at night",
    )
    .await;
    turn(&rt, t, request).await;
    for reply in replies.iter() {
        turn(&rt, t, reply).await;
    }
    turn(
        &rt,
        t,
        "That helped a bit, I feel calmer about tomorrow now",
    )
    .await;
    let end = rt
        .end_session(t, None, None, FeedbackSource::CliEnd)
        .await
        .expect("end");
    assert!(end.summary.is_some(), "substantive session gets an arc");
    let arcs = opencouch_memory::backend::visible_arcs(rt.stores().memory.as_ref(), t)
        .await
        .expect("arcs");
    assert_eq!(arcs.len(), 1);
    assert_eq!(arcs[0].exercises_completed, vec![id.to_owned()]);
    assert!(
        state(&rt, t)
            .await
            .session_progress
            .exercises_completed
            .is_empty(),
        "live progress cleared at session end"
    );
}

#[tokio::test]
async fn end_session_after_few_turns_has_no_summary() {
    let rt = deterministic();
    turn(&rt, "sess-short", "hi, long day").await;
    let end = rt
        .end_session("sess-short", None, None, FeedbackSource::CliEnd)
        .await
        .expect("end");
    assert!(end.summary.is_none());
    assert!(!end.feedback_recorded);
}

#[tokio::test]
async fn incognito_end_writes_no_arc() {
    let rt = Runtime::incognito(EphemeralStores::new(), None, RuntimeOptions::default());
    assert_eq!(rt.mode(), RuntimeMode::Deterministic);
    let t = "incog";
    for msg in [
        "I've been really stressed about my exams and can't sleep",
        "My parents keep putting pressure on me about grades",
        "I think I need a better plan for studying and some rest",
    ] {
        let mut input = AgentInput::new(t, msg);
        input.memory_mode = MemoryMode::Incognito;
        rt.run_turn(input).await.expect("turn");
    }
    let end = rt
        .end_session(
            t,
            None,
            Some(FeedbackLabel::Negative),
            FeedbackSource::CliEnd,
        )
        .await
        .expect("end");
    assert!(
        end.summary.is_none(),
        "incognito never writes a session arc"
    );
}

#[tokio::test]
async fn the_request_names_the_runtime_its_turn_runs_in() {
    // The service decides the memory mode once: an incognito request on a
    // host whose default is persistent runs in the incognito runtime and
    // writes nothing to the persistent one.
    let rt = deterministic();
    let mut input = AgentInput::new("mm", "hello");
    input.memory_mode = MemoryMode::Incognito;
    rt.run_turn(input).await.expect("turn");
    assert_eq!(transcript_len(&rt, "mm").await, 0);
}

/// Session-stage inference through the real turn driver: a scripted
/// conversation's stages are stored in the session progress turn by turn
/// and named in the diagnostics.
#[tokio::test]
async fn a_scripted_conversation_moves_through_the_session_stages() {
    use opencouch_core::state::SessionStage as S;
    let rt = deterministic();
    let script = [
        ("hi", S::Opening),
        ("I'm panicking and I can't breathe properly", S::Stabilizing),
        (
            "it is a bit better now, work has just been a lot",
            S::Deepening,
        ),
        ("ok, that's all for today, thanks for listening", S::Closing),
    ];
    for (message, want) in script {
        let out = turn(&rt, "stages", message).await;
        assert_eq!(
            out.diagnostics.get_str("session_stage"),
            Some(want.as_str()),
            "{message}: cue {:?}",
            out.diagnostics.get_str("session_stage_cue")
        );
        assert_eq!(
            state(&rt, "stages").await.session_progress.stage,
            Some(want),
            "{message}"
        );
    }
}
