//! Exercise control that listens (issue 23), deterministic mode: ordinary
//! words leave an exercise warmly and record it as partial, a non-answer to
//! a counting step asks again instead of being counted, a pause keeps the
//! step, "stuck" gets the simpler version, and a real answer is still an
//! answer. The wordings were written for this test (not taken from the
//! intent corpus or the frozen set).

mod common;

use common::{deterministic, state, turn};
use opencouch_core::Route;

const GROUNDING: &str = "let's do the 5-4-3-2-1 grounding exercise";
const BREATHING: &str = "can we do box breathing";

#[tokio::test]
async fn a_stop_or_goodbye_in_ordinary_words_leaves_warmly_and_is_recorded_as_partial() {
    let rt = deterministic();
    let cases = [
        (
            BREATHING,
            "thanks, that actually helped a bit. I think I'll stop there",
        ),
        (
            BREATHING,
            "thanks for listening, I'm going to try to get some sleep",
        ),
        (
            GROUNDING,
            "honestly I'm not feeling this one, can we leave it",
        ),
    ];
    for (i, (start, message)) in cases.into_iter().enumerate() {
        let t = format!("leave-{i}");
        turn(&rt, &t, start).await;
        let started = state(&rt, &t).await.exercise_state.expect("started");
        let out = turn(&rt, &t, message).await;
        assert_eq!(out.route, Route::GuidedExercise, "{message}");
        let st = state(&rt, &t).await;
        assert!(st.exercise_state.is_none(), "{message}: still active");
        assert!(
            out.response_text.contains("Thank you for giving"),
            "{message}: {}",
            out.response_text
        );
        assert!(!out.response_text.contains("stay with this step"));
        let partial = st
            .session_progress
            .extra
            .get("exercises_partial")
            .and_then(|v| v.as_array())
            .expect("partial list");
        assert_eq!(
            partial.last().and_then(|v| v.as_str()),
            Some(started.exercise_type.as_str())
        );
        assert!(st.session_progress.exercises_completed.is_empty());
    }
}

#[tokio::test]
async fn a_non_answer_to_a_counting_step_asks_again_and_is_not_counted() {
    let rt = deterministic();
    let t = "count";
    turn(&rt, t, GROUNDING).await;
    let before = state(&rt, t).await.exercise_state.expect("started");
    for reply in ["ok", "hmm"] {
        let out = turn(&rt, t, reply).await;
        assert_eq!(
            out.diagnostics.get_str("exercise_step_outcome"),
            Some("hold"),
            "{reply}"
        );
        assert!(
            !out.response_text.contains("good start"),
            "{reply}: counted as an item: {} ({:?}/{:?})",
            out.response_text,
            out.diagnostics.get_str("exercise_intent"),
            out.diagnostics.get_str("exercise_intent_layer")
        );
        let now = state(&rt, t).await.exercise_state.expect("still active");
        assert_eq!(now.exercise_step, before.exercise_step);
    }
    // Real items still count.
    let out = turn(&rt, t, "my laptop, a lamp, the window, a mug and my phone").await;
    assert_eq!(
        out.diagnostics.get_str("exercise_step_outcome"),
        Some("complete")
    );
}

#[tokio::test]
async fn a_pause_keeps_the_step_and_stuck_gets_the_simpler_version() {
    let rt = deterministic();
    let t = "pause";
    turn(&rt, t, GROUNDING).await;
    let before = state(&rt, t).await.exercise_state.expect("started");
    let out = turn(
        &rt,
        t,
        "hold on, someone is knocking, can we carry on in a minute",
    )
    .await;
    assert_eq!(
        out.diagnostics.get_str("exercise_intent"),
        Some("exercise_pause")
    );
    assert!(out.response_text.contains("pause"), "{}", out.response_text);
    let now = state(&rt, t).await.exercise_state.expect("kept");
    assert_eq!(now.exercise_step, before.exercise_step);

    let t = "stuck";
    turn(&rt, t, GROUNDING).await;
    let out = turn(
        &rt,
        t,
        "I honestly have no idea what I'm supposed to write here",
    )
    .await;
    assert_eq!(
        out.diagnostics.get_str("exercise_transition"),
        Some("simplify"),
        "{:?}",
        out.diagnostics.get_str("exercise_intent")
    );
    assert!(state(&rt, t).await.exercise_state.is_some());
}
